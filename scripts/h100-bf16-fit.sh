#!/usr/bin/env bash
# The fit behind megatron-core's gemm_efficiency (and the same value in megatron-core-fp8 and
# pytorch-fsdp): the BF16 H100 runs published with their layouts, priced under megatron-core and
# fitted together, then each held out from a fit to the others. A benchmark, not a test.
#
# The runs (each script named here states its sources and assumptions):
# - the nine rows of Megatron-Core's H100 weak-scaling table (scripts/h100-range.sh with
#   micro-batch 1, no recomputation, and two interleaved chunks per device where a stage's
#   layers split evenly in two, CHUNKS=2);
# - Llama 3.1 405B on 8,192 and on 16,384 H100s (scripts/llama-405b-check.sh, two chunks per
#   device);
# - gpt-oss-120b on 64 H100s (Megatron-Bridge, BF16; written by scripts/h100-fp8-check.sh, which
#   needs gpt-oss-20b's config.json, GPT_OSS_CONFIG; without it the fit runs on the others).
#
# Prints each run's error under the built-in stack, the fitted gemm_efficiency (least squares on
# the log of the iteration time, as `motley calibrate --fit` does) with its errors, and each run
# priced by a fit to the other runs alone.
#
# Usage: [FIT_PARAMETERS=LIST] [KEEP=DIR] scripts/h100-bf16-fit.sh [BUILD_DIR]
#   FIT_PARAMETERS: what to fit (default gemm_efficiency), as motley calibrate --fit takes it.
set -euo pipefail

STACK=megatron-core
FIT_PARAMETERS=${FIT_PARAMETERS:-gemm_efficiency}
# shellcheck source=published_runs.sh
source "$(dirname "$0")/published_runs.sh"

KEEP="$DIR/range" MBS=1 RECOMPUTE=none CHUNKS=2 "$HERE/h100-range.sh" "$BUILD" > /dev/null
KEEP="$DIR/l405" "$HERE/llama-405b-check.sh" "$BUILD" > /dev/null
KEEP="$DIR/moe" "$HERE/h100-fp8-check.sh" "$BUILD" > /dev/null

python3 - "$DIR" <<'PY'
import json, os, sys
out_dir = sys.argv[1]
cases = []
def take(sub, name, keep):
    path = os.path.join(out_dir, sub, name)
    if not os.path.exists(path):
        print(f"({sub}/{name} not written: its runs are left out)")
        return
    for c in json.load(open(path))["cases"]:
        if keep(c):
            c["model"] = os.path.join(sub, c["model"])
            c["cluster"] = os.path.join(sub, c["cluster"])
            cases.append(c)
take("range", "h100-mbs1-none.json", lambda c: True)
take("l405", "llama-405b.json", lambda c: c["virtual_stages"] == 2)
take("moe", "oss.json", lambda c: c.get("ep", 1) > 1)
def write(name, chosen):
    with open(os.path.join(out_dir, name), "w") as f:
        json.dump({"format": "calibration-cases/1", "about": "BF16 runs on DGX H100",
                   "cases": chosen}, f, indent=1)
write("all.json", cases)
for i, c in enumerate(cases):
    write(f"without-{i}.json", cases[:i] + cases[i + 1:])
    write(f"only-{i}.json", [c])
print(len(cases), file=open(os.path.join(out_dir, "count"), "w"))
PY

cd "$DIR"
echo "== priced under the built-in megatron-core"
"$MOTLEY" calibrate --cases all.json --stack megatron-core | sed '1d'
echo "== fitted to all: $FIT_PARAMETERS"
"$MOTLEY" calibrate --cases all.json --stack megatron-core --fit "$FIT_PARAMETERS" \
  --out fitted.json | sed '1d'
echo "== each run priced by a fit to the others"
printf '%-30s %10s %11s %8s  %s\n' case measured_s predicted_s error fitted
count=$(cat count)
for ((i = 0; i < count; i++)); do
  "$MOTLEY" calibrate --cases "without-$i.json" --stack megatron-core --fit "$FIT_PARAMETERS" \
    --json --out "fit-$i.json" > /dev/null
  "$MOTLEY" calibrate --cases "only-$i.json" --calibration "fit-$i.json" --json > "held-$i.json"
done
python3 - "$count" "$FIT_PARAMETERS" <<'PY'
import json, sys
count, names = int(sys.argv[1]), sys.argv[2].split(",")
errors = []
for i in range(count):
    c = json.load(open(f"held-{i}.json"))["cases"][0]
    stack = json.load(open(f"fit-{i}.json"))["stack"]
    fitted = " ".join(f"{n} {stack[n]:.3f}" for n in names if n in stack)
    errors.append(abs(c["error_pct"]))
    print(f"{c['id']:30} {c['measured_s']:10.4g} {c['predicted_s']:11.4g} "
          f"{c['error_pct']:+7.1f}%  {fitted}")
print(f"held out: mean |error| {sum(errors) / count:.1f}%, max {max(errors):.1f}%")
PY
