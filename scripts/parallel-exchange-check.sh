#!/usr/bin/env bash
# Expert and context parallelism through the real binary, one process per rank over Gloo
# (`motley launch`), against the sequential reference of the same plan (`run --sequential`):
# prints each run's losses beside the reference's and the largest relative difference, in fp32
# and bf16. Then an expert-parallel checkpoint resumed under the same plan without expert
# parallelism, against the uninterrupted run. A measurement script, not a test (ctest runs the
# in-process equivalents: expert_parallel_test.cc, context_parallel_test.cc).
#
# Usage: scripts/parallel-exchange-check.sh [BUILD_DIR]   (default: build)
# Environment: STEPS (default 4).
set -euo pipefail

BUILD=${1:-build}
MOTLEY="$(cd "$BUILD" && pwd)/motley"
STEPS=${STEPS:-4}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

plan() { # NAME ARGS...: a plan file from the simulator
  local name=$1
  shift
  "$MOTLEY" simulate --cluster h100x8 "$@" --out "$WORK/$name.json" >/dev/null
}
plan ep --model tiny-moe --schedule zb-h1 --stages 2 --tensor-parallel 2 --data-parallel 2 \
  --expert-parallel 2 --micro-batches 4 --seq-len 32
plan ep-whole --model tiny-moe --schedule zb-h1 --stages 2 --tensor-parallel 2 --data-parallel 2 \
  --micro-batches 4 --seq-len 32
plan cp --model tiny-llama --schedule 1f1b --stages 2 --data-parallel 2 --context-parallel 2 \
  --micro-batches 4 --seq-len 64

compare() { # LABEL RANKS PLAN PRECISION
  local label=$1 ranks=$2 file=$3 precision=$4
  "$MOTLEY" launch --nproc "$ranks" -- run --plan "$file" --steps "$STEPS" --precision "$precision" \
    --json >"$WORK/run.json" 2>"$WORK/run.err" || { cat "$WORK/run.err" >&2; exit 1; }
  "$MOTLEY" run --plan "$file" --steps "$STEPS" --precision "$precision" --sequential --json \
    >"$WORK/reference.json"
  python3 - "$label" "$WORK/run.json" "$WORK/reference.json" <<'PY'
import json, sys
label, run, ref = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
a, b = run["losses"], ref["losses"]
worst = max(abs(x - y) / y for x, y in zip(a, b))
print(f"{label}: losses {' '.join(f'{x:.8f}' for x in a)}")
print(f"{' ' * len(label)}  reference {' '.join(f'{y:.8f}' for y in b)}; "
      f"largest relative difference {worst:.2e}")
PY
  if grep -q "runs here with every" "$WORK/run.err"; then
    echo "  (the executor fell back: $(grep -m1 'runs here' "$WORK/run.err"))"
  fi
}

# The expert-parallel plan's layout without the split beside it: under bf16 the tensor-parallel
# sums already part from the reference by rounding.
for precision in fp32 bf16; do
  compare "EP 2, ZB-H1, TP 2, 8 ranks, $precision" 8 "$WORK/ep.json" "$precision"
  compare "the same without EP, $precision" 8 "$WORK/ep-whole.json" "$precision"
  compare "CP 2, 1F1B, 4 ranks, $precision" 4 "$WORK/cp.json" "$precision"
done

# A checkpoint of the expert-parallel run after STEPS - 2 steps, resumed without the split.
half=$((STEPS - 2))
"$MOTLEY" launch --nproc 8 -- run --plan "$WORK/ep.json" --steps "$STEPS" --json \
  >"$WORK/straight.json" 2>/dev/null
"$MOTLEY" launch --nproc 8 -- run --plan "$WORK/ep.json" --steps "$half" \
  --checkpoint-dir "$WORK/ck" --json >/dev/null 2>&1
"$MOTLEY" launch --nproc 8 -- run --plan "$WORK/ep-whole.json" --steps 2 \
  --checkpoint-dir "$WORK/ck" --resume --json >"$WORK/resumed.json" 2>/dev/null
python3 - "$WORK/straight.json" "$WORK/resumed.json" "$half" <<'PY'
import json, sys
straight, resumed, half = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
a, b = resumed["losses"], straight["losses"][half:]
worst = max(abs(x - y) / y for x, y in zip(a, b))
print(f"EP 2 checkpoint at step {half} resumed without EP: losses {' '.join(f'{x:.8f}' for x in a)}")
print(f"  uninterrupted {' '.join(f'{y:.8f}' for y in b)}; largest relative difference {worst:.2e}")
PY
