#!/usr/bin/env bash
# How the cost model prices Meta's BF16 pre-training of Llama 3.1 405B on H100s (Dubey et al.
# 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, Table 4): TP 8, PP 16, sequences of
# 8,192, 16M tokens (2,048 sequences) per step, on 8,192 GPUs (DP 64, 430 TFLOP/s per GPU) and on
# 16,384 GPUs (DP 128, 400 TFLOP/s per GPU). A benchmark of runs no parameter was fitted to,
# not a test.
#
# The table does not give the schedule beyond "interleaved" with a tuned number of micro-batches
# in the warm-up, so each run is priced with 2 and with 4 chunks per device. Assumed where it is
# silent: micro-batch 1, selective recomputation with sequence parallelism, Megatron's
# distributed optimizer, and the paper's balancing of the first and last stages (one layer fewer
# each, for the embedding and the head) written as a uniform split of 126 layers with the
# embedding and the head counted as layers. The published time is the step's FLOPs, counted as
# 6N + 12 l h s per token, over the published TFLOP/s times the GPUs. `motley calibrate` prices
# a run whether or not motley's memory model lets it fit.
#
# Usage: [STACK=NAME | CALIBRATION=FILE] [KEEP=DIR] scripts/llama-405b-check.sh [BUILD_DIR]
set -euo pipefail

STACK=${STACK:-megatron-core}
# shellcheck source=published_runs.sh
source "$(dirname "$0")/published_runs.sh"

python3 - "$DIR" "$HERE" "$MOTLEY" <<'PY'
import json, os, subprocess, sys
out_dir, here, motley = sys.argv[1:]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, here)
from published_runs import dgx_h100_cluster, llama_405b_config
config = llama_405b_config()
with open(os.path.join(out_dir, "llama-3.1-405b.json"), "w") as f:
    json.dump(config, f)
SEQ, BATCH = 8192, 2048
h, l = config["hidden_size"], config["num_hidden_layers"]
model = os.path.join(out_dir, "llama-3.1-405b.json")
PARAMS = json.loads(subprocess.run([motley, "model", "show", model, "--json"], check=True,
                                   capture_output=True, text=True).stdout)["total_params"]
flops = (6 * PARAMS + 12 * l * h * SEQ) * BATCH * SEQ
cases = []
for gpus, dp, tflops in ((8192, 64, 430), (16384, 128, 400)):
    with open(os.path.join(out_dir, f"dgx-h100-x{gpus // 8}.yaml"), "w") as f:
        f.write(dgx_h100_cluster(gpus // 8))
    for chunks in (2, 4):
        cases.append({
            "id": f"llama-3.1-405b-{gpus}gpu-v{chunks}", "model": "llama-3.1-405b.json",
            "cluster": f"dgx-h100-x{gpus // 8}.yaml", "tp": 8, "pp": 16, "dp": dp,
            "global_batch": BATCH, "micro_batch_size": 1, "seq_len": SEQ,
            "schedule": "interleaved", "virtual_stages": chunks, "recompute": "selective",
            "sequence_parallel": True, "partition": "uniform", "rank_order": "megatron",
            "zero_stage": 1, "published": flops / (tflops * 1e12 * gpus),
            "note": f"{tflops} TFLOP/s per GPU on {gpus} GPUs",
            "source": "Dubey et al. 2024, arXiv 2407.21783, Table 4"})
with open(os.path.join(out_dir, "llama-405b.json"), "w") as f:
    json.dump({"format": "calibration-cases/1",
               "about": "Llama 3.1 405B pre-training in BF16 on H100s (Meta)", "cases": cases},
              f, indent=1)
PY
echo "== Llama 3.1 405B (Meta, BF16, H100), priced under ${PRICE[*]}, no fit"
"$MOTLEY" calibrate --cases "$DIR/llama-405b.json" "${PRICE[@]}"
