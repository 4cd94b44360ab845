#!/usr/bin/env bash
# How the cost model prices BLOOM-176B's training run (BigScience, Megatron-DeepSpeed, on Jean
# Zay), a published run that nothing in motley was fitted to. Everything below is from the run's
# own record, bigscience-workshop/bigscience train/tr11-176B-ml/README.md:
#
# - 384 A100 80GB (48 nodes of 8 on NVLink, four 100 Gb/s Omni-Path links per node);
# - TP 4, PP 12, DP 8, micro-batch 2, global batch 2,048, sequence 2,048, bf16, ZeRO-1 (the
#   BF16 optimizer's own), activation checkpointing of every layer (full recomputation), the
#   inherited Megatron-LM dropout of 0.1;
# - 70 layers, hidden 14,336, 112 heads, vocabulary 250,880 (the tied embedding counted as a
#   block in the pipeline split: embedding + 5 layers, 10 x 6 layers, 5 layers + head), ALiBi,
#   GeLU;
# - "elapsed time per iteration (s): 104.70 | global batch size: 2048 | ... TFLOPs: 149.77",
#   the log line the README quotes at the end of the first epoch.
#
# The model is motley's GPT of that shape (scripts/published_runs.py: LayerNorm, 4h GeLU MLP
# with biases, no position table for ALiBi; the embedding's extra LayerNorm and ALiBi's bias on
# the scores are not modelled). Megatron-DeepSpeed's pipeline engine is not a stack motley
# names: the run is priced under STACK (default megatron-lm-2022, the Megatron-LM of the same
# year) or CALIBRATION. A benchmark, not a test.
#
# Usage: scripts/bloom-check.sh [BUILD_DIR]   (default: build)
# Environment: STACK or CALIBRATION; KEEP (a directory to keep the generated files in).
set -euo pipefail

STACK=${STACK:-megatron-lm-2022}
# shellcheck source=published_runs.sh
source "$(dirname "$0")/published_runs.sh"

python3 - "$DIR" "$HERE" <<'PY'
import json, os, sys

out_dir, here = sys.argv[1:]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, here)
from published_runs import gpt_model

model = gpt_model("bloom-176b", 112, 14336, 70, vocab=250880, seq=2048, dtype="bf16",
                  dropout=True, tied=True, learned_positions=False)
with open(os.path.join(out_dir, "bloom-176b.json"), "w") as f:
    json.dump(model, f)
with open(os.path.join(out_dir, "jean-zay-a100-x48.yaml"), "w") as f:
    f.write("\n".join([
        "# Jean Zay's gpu_p5 partition as BLOOM used it: 48 nodes of 8 A100 80GB SXM4 on NVLink,",
        "# four 100 Gb/s Omni-Path links per node (12.5 GB/s each, two devices to a link).",
        "name: jean-zay-a100-x48",
        "network: {kind: infiniband, bandwidth_GBps: 12.5, latency_us: 2}",
        "nodes:",
        "  - name: apollo",
        "    count: 48",
        "    devices: {type: A100-80GB, count: 8}",
        "    interconnect: {kind: nvlink, bandwidth_GBps: 300, latency_us: 2}",
        "    devices_per_pcie_switch: 2",
        "    nic: {bandwidth_GBps: 12.5, latency_us: 1, count: 4}",
        ""]))
cases = [{
    "id": "bloom-176b-384gpu", "model": "bloom-176b.json", "cluster": "jean-zay-a100-x48.yaml",
    "tp": 4, "pp": 12, "dp": 8, "global_batch": 2048, "micro_batch_size": 2, "seq_len": 2048,
    "schedule": "1f1b", "virtual_stages": 1, "recompute": "full",
    # 72 blocks (the embedding, 70 layers, the head) over 12 stages: BLOOM's split.
    "partition": "uniform", "rank_order": "megatron", "zero_stage": 1,
    "metric": "iteration_time_s", "published": 104.70,
    "note": "149.77 TFLOP/s/GPU as Megatron-DeepSpeed counts it (with the recomputed forward)",
    "source": "bigscience-workshop/bigscience train/tr11-176B-ml/README.md"}]
with open(os.path.join(out_dir, "bloom.json"), "w") as f:
    json.dump({"format": "calibration-cases/1", "about": "BLOOM-176B, held out",
               "cases": cases}, f, indent=1)
PY

echo "== BLOOM-176B on 384 A100s, ${PRICE[*]}"
"$MOTLEY" calibrate --cases "$DIR/bloom.json" "${PRICE[@]}" --json > "$DIR/bloom.result"
python3 - "$DIR/bloom.result" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["cases"]:
    print(f"{c['id']:20} published {c['measured_s']:.2f} s, predicted {c['predicted_s']:.2f} s, "
          f"error {c['error_pct']:+.1f}%")
PY
