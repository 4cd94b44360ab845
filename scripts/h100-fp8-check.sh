#!/usr/bin/env bash
# How the cost model prices dense Llama 3 runs that NVIDIA publishes for H100 in FP8: the
# Megatron-Bridge performance summary (NeMo 25.11 container, DGX-H100, FP8 with current
# scaling), whose layouts are given in the table and whose recomputation is given by the recipe
# file behind it (scripts/performance/configs/llama/llama3_workload_base_configs.py):
#
# - Llama 3 8B on 8 GPUs: FSDP over the 8 (ZeRO-3), TP 1, PP 1, micro-batch 1, global batch 128
#   (16 accumulation steps), sequence 8,192, 5 layers recomputed in full; 14,451 tokens/s/GPU.
# - Llama 3 70B on 64 GPUs: TP 4, PP 8, interleaved with 5 chunks per device, DP 2, micro-batch
#   1, global batch 128, sequence 8,192, no recomputation; 1,602 tokens/s/GPU.
#
# Each is simulated under STACK (default megatron-core-fp8) or CALIBRATION with no fit, on DGX
# H100 nodes (NVLink 450 GB/s per direction, 8 x 400 Gb/s NDR per node), the distributed
# optimizer on and sequence parallelism for TP > 1; the script prints the published and
# predicted tokens/s per GPU and the error of the iteration time. A benchmark, not a test.
#
# Usage: scripts/h100-fp8-check.sh [BUILD_DIR]   (default: build)
set -euo pipefail

BUILD=${1:-build}
MOTLEY="$(cd "$BUILD" && pwd)/motley"
HERE=$(cd "$(dirname "$0")" && pwd)
STACK=${STACK:-megatron-core-fp8}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

if [[ -n "${CALIBRATION:-}" ]]; then
  PRICE=(--calibration "$CALIBRATION")
else
  PRICE=(--stack "$STACK")
fi

python3 - "$DIR" "$HERE" <<'PY'
import os, sys
out_dir, here = sys.argv[1:]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, here)
from published_runs import dgx_cluster
for nodes in (1, 8):
    with open(os.path.join(out_dir, f"dgx-h100-x{nodes}.yaml"), "w") as f:
        f.write(dgx_cluster(f"dgx-h100-x{nodes}", nodes, "H100-SXM", 450, 50, [
            "DGX H100: 8 x H100 SXM on NVLink 4 (900 GB/s both ways, 450 each), 8 x 400 Gb/s",
            "ConnectX-7 NDR InfiniBand per node (50 GB/s per NIC)."]))
PY

"$MOTLEY" simulate --model llama-3-8b --cluster "$DIR/dgx-h100-x1.yaml" --seq-len 8192 \
  --stages 1 --schedule 1f1b --data-parallel 8 --micro-batches 16 --zero-stage 3 \
  --partition megatron --recompute-layers 5 "${PRICE[@]}" --json > "$DIR/8b.json"
"$MOTLEY" simulate --model llama-3-70b --cluster "$DIR/dgx-h100-x8.yaml" --seq-len 8192 \
  --tensor-parallel 4 --stages 8 --virtual-stages 5 --schedule interleaved --data-parallel 2 \
  --micro-batches 64 --zero-stage 1 --sequence-parallel --partition megatron "${PRICE[@]}" \
  --json > "$DIR/70b.json"

python3 - "$DIR" <<'PY'
import json, os, sys
out_dir = sys.argv[1]
rows = [("llama-3-8b, 8 GPUs, FSDP", "8b.json", 8, 14451),
        ("llama-3-70b, 64 GPUs, TP4 PP8 VP5", "70b.json", 64, 1602)]
print(f"{'run':36} {'published':>10} {'predicted':>10} {'time error':>11}")
errors = []
for name, path, gpus, published in rows:
    with open(os.path.join(out_dir, path)) as f:
        sim = json.load(f)
    predicted = sim["throughput_tokens_per_s"] / gpus
    error = published / predicted - 1  # predicted time over published time, minus one
    errors.append(abs(error))
    print(f"{name:36} {published:>10,} {predicted:>10,.0f} {100 * error:>+10.1f}%")
print(f"mean |error| {100 * sum(errors) / len(errors):.1f}%, max {100 * max(errors):.1f}%")
PY
