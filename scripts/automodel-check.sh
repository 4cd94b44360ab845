#!/usr/bin/env bash
# How the cost model prices the BF16 pre-training runs of NVIDIA's NeMo Automodel performance
# summary (PyTorch backend: FSDP2, Transformer Engine, DeepEP; DGX-H100; docs.nvidia.com/nemo/
# automodel/nightly/performance-summary.html) under the pytorch-fsdp stack, no fit. A benchmark
# of a software stack no run here was fitted to, not a test.
#
# The table gives GPUs, global batch, micro-batch, accumulation steps, sequence, TP, PP, CP, EP
# and the FSDP size, and the time per global step. It gives neither the recomputation nor, for
# gpt-oss, the expert split (its EP column is "-" while DeepEP runs): the cases below assume
# none for the MoE runs and the experts split over all GPUs for gpt-oss; the dense Llama 3 70B
# run is priced both without recomputation and with every layer recomputed (at 4,096 tokens a
# GPU its 80 layers' activations alone would exceed 80 GB).
#
# - gpt-oss-20b on 8 GPUs: global batch 256, micro-batch 2, sequence 4,096, FSDP 8; 10.04 s.
# - gpt-oss-120b on 64 GPUs: global batch 512, micro-batch 2, FSDP 64; 4.30 s (its config is
#   gpt-oss-20b's with 36 layers and 128 experts, as scripts/h100-fp8-check.sh writes it).
# - Qwen3-30B-A3B on 8 GPUs: global batch 512, micro-batch 4, EP 8, FSDP 8; 21.773 s.
# - Llama 3.1 70B on 64 GPUs: global batch 128, micro-batch 1, sequence 8,192, CP 2, FSDP 32;
#   18.90 s.
#
# FSDP is ZeRO-3 over the data-parallel ranks (motley's zero_stage 3). Needs the Hugging Face
# configs of ../shared/data/hf (gpt-oss-20b.json, Qwen3-30B-A3B.json, Meta-Llama-3.1-70B.json;
# HF_DIR overrides the folder).
#
# Usage: [STACK=NAME | CALIBRATION=FILE] [KEEP=DIR] scripts/automodel-check.sh [BUILD_DIR]
set -euo pipefail

STACK=${STACK:-pytorch-fsdp}
# shellcheck source=published_runs.sh
source "$(dirname "$0")/published_runs.sh"
HF_DIR=${HF_DIR:-$HERE/../../shared/data/hf}
for f in gpt-oss-20b.json Qwen3-30B-A3B.json Meta-Llama-3.1-70B.json; do
  if [[ ! -f "$HF_DIR/$f" ]]; then
    echo "automodel-check: $HF_DIR/$f is missing (set HF_DIR to the folder of the configs)" >&2
    exit 2
  fi
done

python3 - "$DIR" "$HERE" "$HF_DIR" <<'PY'
import json, os, shutil, sys
out_dir, here, hf = sys.argv[1:]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, here)
from published_runs import dgx_h100_cluster
for nodes in (1, 8):
    with open(os.path.join(out_dir, f"dgx-h100-x{nodes}.yaml"), "w") as f:
        f.write(dgx_h100_cluster(nodes))
shutil.copy(os.path.join(hf, "gpt-oss-20b.json"), os.path.join(out_dir, "gpt-oss-20b.json"))
shutil.copy(os.path.join(hf, "Qwen3-30B-A3B.json"), os.path.join(out_dir, "qwen3-30b-a3b.json"))
shutil.copy(os.path.join(hf, "Meta-Llama-3.1-70B.json"), os.path.join(out_dir, "llama-3.1-70b.json"))
config = json.load(open(os.path.join(hf, "gpt-oss-20b.json")))
config.update(num_hidden_layers=36, num_local_experts=128,
              layer_types=["sliding_attention", "full_attention"] * 18)
with open(os.path.join(out_dir, "gpt-oss-120b.json"), "w") as f:
    json.dump(config, f)
source = "NeMo Automodel performance summary, DGX-H100, BF16"
def case(id_, model, nodes, global_batch, micro_batch, seq_len, seconds, **layout):
    c = {"id": id_, "model": model, "cluster": f"dgx-h100-x{nodes}.yaml", "tp": 1, "pp": 1,
         "global_batch": global_batch, "micro_batch_size": micro_batch, "seq_len": seq_len,
         "schedule": "1f1b", "recompute": "none", "partition": "megatron", "zero_stage": 3,
         "published": seconds, "source": source}
    c.update(layout)
    return c
cases = [
    case("gpt-oss-20b", "gpt-oss-20b.json", 1, 256, 2, 4096, 10.04, dp=8, ep=8),
    case("gpt-oss-120b", "gpt-oss-120b.json", 8, 512, 2, 4096, 4.30, dp=64, ep=64),
    case("qwen3-30b-a3b", "qwen3-30b-a3b.json", 1, 512, 4, 4096, 21.773, dp=8, ep=8),
    case("llama-3.1-70b", "llama-3.1-70b.json", 8, 128, 1, 8192, 18.90, dp=32, cp=2),
    case("llama-3.1-70b-full-recompute", "llama-3.1-70b.json", 8, 128, 1, 8192, 18.90, dp=32,
         cp=2, recompute="full"),
]
with open(os.path.join(out_dir, "automodel.json"), "w") as f:
    json.dump({"format": "calibration-cases/1", "about": "NeMo Automodel, BF16, DGX H100",
               "cases": cases}, f, indent=1)
PY
echo "== NeMo Automodel (BF16, DGX H100), priced under ${PRICE[*]}, no fit"
"$MOTLEY" calibrate --cases "$DIR/automodel.json" "${PRICE[@]}"
