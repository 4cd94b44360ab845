#!/usr/bin/env bash
# The report_browser_check test: motley's HTML reports loaded in Debian's headless Chromium
# (check.mjs, through playwright-core from npm, which scripts/setup.sh --tests installs here):
# a comparison on mixed spot nodes (strategies, cost, folded replicas, stages not in device-id
# order), a plan file's report, and a measured 2-rank run drawn beside its simulation. Each page
# must load with no console error and no request, and a screenshot of each is kept in OUT_DIR.
# Usage: check-report.sh MOTLEY_BINARY OUT_DIR
set -euo pipefail
MOTLEY=$1
OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [[ ! -d "$HERE/node_modules/playwright-core" ]]; then
  echo "report_browser_check: $HERE/node_modules/playwright-core is missing; run scripts/setup.sh --tests" >&2
  exit 1
fi
if [[ ! -x "${CHROMIUM:-/usr/bin/chromium}" ]]; then
  echo "report_browser_check: no ${CHROMIUM:-/usr/bin/chromium}; run scripts/setup.sh --tests (Debian's chromium)" >&2
  exit 1
fi
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$MOTLEY" compare --model tiny-llama --cluster spot-fleet --max-plans 100 --quiet \
  --html "$WORK/compare.html" > /dev/null
node "$HERE/check.mjs" "$WORK/compare.html" "$OUT/compare.png" --strategies --cost --folded

"$MOTLEY" report --plan "$ROOT/examples/plans/interleaved-nemotron-h-8b-h100-a100.json" \
  --html "$WORK/plan.html" > /dev/null
node "$HERE/check.mjs" "$WORK/plan.html" "$OUT/plan.png" --cost

fid="$ROOT/tests/data/fidelity"
# The same 2-stage plan with its two devices swapped: stage 0 on device 1. Its rows must still
# read stage 0 first.
node -e 'const fs = require("fs"); const p = JSON.parse(fs.readFileSync(process.argv[1]));
  const g = p.replicas[0].groups; [g[0].devices, g[1].devices] = [g[1].devices, g[0].devices];
  fs.writeFileSync(process.argv[2], JSON.stringify(p));' "$fid/pp2-1f1b-tiny-llama.json" "$WORK/swapped.json"
"$MOTLEY" report --plan "$WORK/swapped.json" --html "$WORK/swapped.html" > /dev/null
node "$HERE/check.mjs" "$WORK/swapped.html" "$OUT/swapped.png" --not-device-order
"$MOTLEY" fidelity --plan "$fid/pp2-1f1b-tiny-llama.json" --profile "$fid/tiny-llama-cpu-profile.json" \
  --steps 4 --trace "$WORK/trace.json" > /dev/null
"$MOTLEY" report --plan "$fid/pp2-1f1b-tiny-llama.json" --profile "$fid/tiny-llama-cpu-profile.json" \
  --trace "$WORK/trace.json" --html "$WORK/measured.html" > /dev/null
node "$HERE/check.mjs" "$WORK/measured.html" "$OUT/measured.png" --measured

# A page broken on purpose must fail the check, so that passing means something: a script error
# after the summary is drawn.
sed 's/^  drawTimeline();$/  drawTimeline(); notDefinedAnywhere();/' "$WORK/plan.html" > "$WORK/broken.html"
grep -q notDefinedAnywhere "$WORK/broken.html"
if node "$HERE/check.mjs" "$WORK/broken.html" "$WORK/broken.png" 2> "$WORK/broken.err"; then
  echo "report_browser_check: a page with a script error passed" >&2
  exit 1
fi
grep -q "notDefinedAnywhere" "$WORK/broken.err"
echo "refused as it should be: $(head -c 300 "$WORK/broken.err")"
