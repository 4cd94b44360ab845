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
# Both are written as a calibration-cases file and priced by `motley calibrate` under STACK
# (default megatron-core-fp8) or CALIBRATION with no fit, on DGX H100 nodes (NVLink 450 GB/s per
# direction, 8 x 400 Gb/s NDR per node), the distributed optimizer on and sequence parallelism
# for TP > 1; the script prints the published and predicted tokens/s per GPU and the error of
# the iteration time. With FIT=1 it also fits fp8_gemm_efficiency to each run alone and prices
# the other with it, then fits it to both (the built-in megatron-core-fp8 value). A benchmark,
# not a test.
#
# Usage: [FIT=1] scripts/h100-fp8-check.sh [BUILD_DIR]   (default: build)
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

# The two runs as a calibration-cases file: the published iteration time is the step's tokens
# over the published tokens/s/GPU times the GPUs.
python3 - "$DIR/cases.json" <<'PY'
import json, sys
SEQ, BATCH = 8192, 128
def seconds(tokens_per_gpu_s, gpus):
    return BATCH * SEQ / (tokens_per_gpu_s * gpus)
source = "NVIDIA Megatron-Bridge performance summary, NeMo 25.11, DGX-H100, FP8 current scaling"
cases = [
    {"id": "llama-3-8b-fsdp8", "model": "llama-3-8b", "cluster": "dgx-h100-x1.yaml",
     "gpus": 8, "tp": 1, "pp": 1, "dp": 8, "global_batch": BATCH, "micro_batch_size": 1, "seq_len": SEQ,
     "schedule": "1f1b", "recompute": "none", "recompute_layers": 5, "partition": "megatron",
     "zero_stage": 3, "published": seconds(14451, 8),
     "note": "14,451 tokens/s/GPU on 8 GPUs", "source": source},
    {"id": "llama-3-70b-tp4-pp8-vp5", "model": "llama-3-70b", "cluster": "dgx-h100-x8.yaml",
     "gpus": 64, "tp": 4, "pp": 8, "dp": 2, "global_batch": BATCH, "micro_batch_size": 1, "seq_len": SEQ,
     "schedule": "interleaved", "virtual_stages": 5, "recompute": "none",
     "partition": "megatron", "zero_stage": 1, "sequence_parallel": True,
     "published": seconds(1602, 64), "note": "1,602 tokens/s/GPU on 64 GPUs",
     "source": source}]
with open(sys.argv[1], "w") as f:
    json.dump({"format": "calibration-cases/1",
               "about": "Llama 3 in FP8 on DGX H100 (Megatron-Bridge)", "cases": cases}, f,
              indent=1)
PY

# Prints each run's published and predicted tokens/s per GPU and the error of the time.
table() {
  python3 - "$1" "$2" "$DIR/cases.json" <<'PY'
import json, sys
result, title = json.load(open(sys.argv[1])), sys.argv[2]
gpus = {c["id"]: c["gpus"] for c in json.load(open(sys.argv[3]))["cases"]}
print(f"== {title}")
print(f"{'run':26} {'published':>10} {'predicted':>10} {'time error':>11}")
for c in result["cases"]:
    published = 128 * 8192 / c["measured_s"] / gpus[c["id"]]
    predicted = published * c["measured_s"] / c["predicted_s"]
    print(f"{c['id']:26} {published:>10,.0f} {predicted:>10,.0f} {c['error_pct']:>+10.1f}%")
print(f"mean |error| {result['mean_abs_error_pct']:.1f}%, max {result['max_abs_error_pct']:.1f}%")
PY
}

"$MOTLEY" calibrate --cases "$DIR/cases.json" "${PRICE[@]}" --json > "$DIR/priced.json"
table "$DIR/priced.json" "priced under ${PRICE[*]}, no fit"

# FIT=1: fit fp8_gemm_efficiency to each run alone and price the other with it (leave one out),
# then to both.
if [[ -n "${FIT:-}" ]]; then
  for held in 0 1; do
    python3 - "$DIR/cases.json" "$held" "$DIR/train.json" "$DIR/test.json" <<'PY'
import json, sys
doc, held = json.load(open(sys.argv[1])), int(sys.argv[2])
for path, keep in ((sys.argv[3], lambda i: i != held), (sys.argv[4], lambda i: i == held)):
    with open(path, "w") as f:
        json.dump(dict(doc, cases=[c for i, c in enumerate(doc["cases"]) if keep(i)]), f)
PY
    "$MOTLEY" calibrate --cases "$DIR/train.json" "${PRICE[@]}" --fit fp8_gemm_efficiency \
      --json --out "$DIR/fit.json" > /dev/null
    "$MOTLEY" calibrate --cases "$DIR/test.json" --calibration "$DIR/fit.json" --json \
      > "$DIR/held.json"
    value=$(python3 -c 'import json,sys; print("%.3f" % json.load(open(sys.argv[1]))["stack"]["fp8_gemm_efficiency"])' "$DIR/fit.json")
    table "$DIR/held.json" "held out, fp8_gemm_efficiency $value fitted to the other run"
  done
  "$MOTLEY" calibrate --cases "$DIR/cases.json" "${PRICE[@]}" --fit fp8_gemm_efficiency --json \
    --out "$DIR/fit.json" > "$DIR/both.json"
  value=$(python3 -c 'import json,sys; print("%.3f" % json.load(open(sys.argv[1]))["stack"]["fp8_gemm_efficiency"])' "$DIR/fit.json")
  table "$DIR/both.json" "fp8_gemm_efficiency $value fitted to both"
fi
