#!/usr/bin/env bash
# Goodput of `motley launch --elastic` under 0, 1, 2 and 3 injected losses, on this machine:
# tiny-llama planned on four one-device nodes (ranks as local processes over Gloo), STEPS steps
# with a checkpoint after each, ranks killed (SIGKILL, through the MOTLEY_TEST_FAULT hook of a
# build with tests) at chosen steps of successive attempts. Prints, per case, the supervisor's
# summary: steps done, attempts, steps computed again, replanning time and goodput (the time of
# the steps kept over the wall time; on this tiny model most of the wall time is starting
# processes, so goodput is low even without a loss). A measurement script, not a test.
#
# Usage: scripts/elastic-goodput.sh [BUILD_DIR]   (default: build). Environment: STEPS (8).
set -euo pipefail
BUILD=${1:-build}
MOTLEY="$(cd "$BUILD" && pwd)/motley"
STEPS=${STEPS:-8}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/cluster.yaml" <<'YAML'
name: four-nodes
nodes:
  - name: node
    count: 4
    devices: {type: H100-SXM, count: 1}
network: {kind: ethernet, bandwidth_GBps: 10, latency_us: 5}
YAML
"$MOTLEY" plan --model tiny-llama --cluster "$WORK/cluster.yaml" --global-batch 12 \
  --max-plans 100 --quiet --out "$WORK/plan.json" > /dev/null
# One fault per attempt: RANK:STEP (the rank dies after its first action of that step).
declare -A faults=([0]="" [1]="3:2:exit" [2]="3:2:exit,1:4:exit" [3]="3:2:exit,1:4:exit,0:6:exit")
for losses in 0 1 2 3; do
  dir="$WORK/ckpt-$losses"
  echo "== $losses injected loss(es): MOTLEY_TEST_FAULT='${faults[$losses]}'"
  MOTLEY_TEST_FAULT="${faults[$losses]}" "$MOTLEY" launch --elastic -- run --plan "$WORK/plan.json" \
    --steps "$STEPS" --checkpoint-every 1 --checkpoint-dir "$dir" 2>&1 | grep '^elastic:' || true
done
