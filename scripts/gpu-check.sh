#!/usr/bin/env bash
# The executor's GPU path, checked on a machine with an NVIDIA (or ROCm) GPU and a PyTorch built
# with CUDA (docs/executor.md, "GPUs"). Builds motley against PyTorch's libtorch into BUILD
# (default build-cuda) unless a build with CUDA is there, then, printing every figure:
#   1. one rank on the GPU against the CPU's sequential reference, fp32 and bf16;
#   2. two ranks on the one GPU over Gloo (NCCL refuses two ranks on one device), against the
#      sequential reference;
#   3. F / B / W of the distinct layers of Llama 3 8B and Nemotron-H 8B (a Mamba-2 hybrid) at
#      4,096 tokens on the GPU, and the analytic model's error on each (motley calibrate, no fit).
# Exit 1 when a comparison is off by more than its bound. Usage: scripts/gpu-check.sh [BUILD]
# Needs cmake, a C++20 compiler, motley's build dependencies (scripts/setup.sh) and python3 with
# torch. STEPS (default 5) sets the steps of each run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-cuda}
STEPS=${STEPS:-5}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if [[ ! -x "$BUILD/motley-run" ]] || ! grep -q "MOTLEY_WITH_CUDA:INTERNAL=ON" "$BUILD/CMakeCache.txt" 2>/dev/null; then
  prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  python3 -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cxx11 ABI", torch.compiled_with_cxx11_abi(), torch.cuda.get_device_name(0))'
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
    -DMOTLEY_BUILD_TESTS=OFF -DMOTLEY_BUILD_BENCH=OFF > "$WORK/cmake.log" || { cat "$WORK/cmake.log"; exit 1; }
  grep "motley:" "$WORK/cmake.log"
  cmake --build "$BUILD" -j "$(nproc)" --target motley motley-run motley-profile
fi
M="$BUILD/motley"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

# A cluster of this GPU's catalog type (motley detect names it).
type=$("$M" detect --json | python3 -c 'import json, sys
types = [d["type"] for d in json.load(sys.stdin)["devices"] if d.get("type")]
print(types[0] if types else "")')
if [[ -z "$type" ]]; then echo "gpu-check: motley detect names no catalog GPU here" >&2; exit 1; fi
printf 'name: gpu\nnodes:\n  - name: n\n    devices: {type: %s, count: 2}\n' "$type" > "$WORK/gpu.yaml"
echo "device type: $type"

losses() { python3 -c 'import json, sys; print(" ".join("%.6f" % x for x in json.load(open(sys.argv[1]))["losses"]))' "$1"; }
# Largest relative difference of two runs' losses; fails above $3.
compare() {
  python3 - "$1" "$2" "$3" "$4" <<'PY'
import json, sys
a, b = (json.load(open(p))["losses"] for p in sys.argv[1:3])
bound, what = float(sys.argv[3]), sys.argv[4]
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if len(a) == len(b) and a else float("inf")
print(f"{what}: {len(a)} steps, largest relative loss difference {worst:.2e} (bound {bound:g})")
sys.exit(0 if worst <= bound else 1)
PY
}

status=0
"$M" plan --model tiny-llama --cluster "$WORK/gpu.yaml" --pipeline-parallel 1 --data-parallel 1 \
  --tensor-parallel 1 --global-batch 8 --quiet --out "$WORK/one.json" > /dev/null
"$M" plan --model tiny-llama --cluster "$WORK/gpu.yaml" --pipeline-parallel 2 --data-parallel 1 \
  --tensor-parallel 1 --global-batch 8 --quiet --out "$WORK/two.json" > /dev/null
run() { "$M" run --steps "$STEPS" --json --threads 1 "$@"; }

# 1. One rank: the GPU against the CPU reference.
run --plan "$WORK/one.json" --sequential > "$WORK/ref.json"
run --plan "$WORK/one.json" --device cuda > "$WORK/gpu32.json"
run --plan "$WORK/one.json" --device cuda --precision bf16 > "$WORK/gpu16.json"
echo "reference (CPU): $(losses "$WORK/ref.json")"
echo "cuda fp32:       $(losses "$WORK/gpu32.json")"
echo "cuda bf16:       $(losses "$WORK/gpu16.json")"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print("peak GPU memory (one rank, fp32):", j.get("peak_device_memory_bytes"), "bytes")' "$WORK/gpu32.json"
compare "$WORK/gpu32.json" "$WORK/ref.json" 1e-4 "one rank, cuda fp32 vs CPU" || status=1
compare "$WORK/gpu16.json" "$WORK/ref.json" 2e-2 "one rank, cuda bf16 vs CPU fp32" || status=1

# 2. Two ranks on the one GPU over Gloo (CUDA tensors staged through host memory).
run --plan "$WORK/two.json" --sequential > "$WORK/ref2.json"
"$M" launch --nproc 2 -- run --plan "$WORK/two.json" --steps "$STEPS" --json --threads 1 \
  --device cuda --transport gloo > "$WORK/gloo.out"
python3 - "$WORK/gloo.out" "$WORK/gloo.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
decoder, i, found = json.JSONDecoder(), 0, None
while i < len(text):
    j = text.find("{", i)
    if j < 0:
        break
    try:
        obj, i = decoder.raw_decode(text, j)
    except ValueError:
        i = j + 1
        continue
    if obj.get("losses"):
        found = obj
json.dump(found or {"losses": []}, open(sys.argv[2], "w"))
PY
compare "$WORK/gloo.json" "$WORK/ref2.json" 1e-4 "two ranks on one GPU over Gloo vs sequential" || status=1

# 3. Layers at 4,096 tokens on the GPU, and the analytic model's error on each.
for model in llama-3-8b nemotron-h-8b; do
  "$M" profile layers --model "$model" --seq-len 4096 --device cuda --precision bf16 \
    --out "$WORK/$model.profile.json"
done
for model in llama-3-8b nemotron-h-8b; do "$M" model show "$model" --json > "$WORK/$model.model.json"; done
python3 - "$WORK" "$WORK/gpu.yaml" llama-3-8b nemotron-h-8b > "$WORK/cases.json" <<'PY'
import json, sys
work, cluster, models = sys.argv[1], sys.argv[2], sys.argv[3:]
cases = []
for model in models:
    profile = json.load(open(f"{work}/{model}.profile.json"))
    names = [l["name"] for l in json.load(open(f"{work}/{model}.model.json"))["layers"]]
    at = 0  # a profile entry stands for `repeat` consecutive layers alike: one case each
    for entry in profile["layers"]:
        layer = names[at]
        at += entry.get("repeat", 1)
        backward = entry["backward_input_s"] + entry["backward_weight_s"]
        for metric, value in (("layer_forward_s", entry["forward_s"]), ("layer_backward_s", backward)):
            if value > 0:
                cases.append({"id": f"{model} {layer} {metric[6:-2]}", "model": model,
                              "cluster": cluster, "layer": layer, "tp": 1,
                              "micro_batch_size": 1, "seq_len": 4096, "recompute": "none",
                              "metric": metric, "published": value})
json.dump({"format": "calibration-cases/1", "cases": cases}, sys.stdout, indent=1)
PY
"$M" calibrate --cases "$WORK/cases.json" --stack megatron-core
exit $status
