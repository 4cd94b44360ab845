#!/usr/bin/env bash
# How the cost model places Megatron-Core's published H100 weak-scaling table (NVIDIA/Megatron-LM
# README, release 0.8, images/model_table.png): GPT models of 1.7B to 462B on 48 to 6,144 H100s,
# vocabulary 131,072, sequence 4,096, DP/TP/PP communication overlapped, reported at 41-49 % MFU.
# The table gives TP, PP, DP, GPUs, global batch and TFLOP/s per GPU; it does not give the
# micro-batch size, recomputation, FFN type or attention variant, so the published figures are a
# range to land in, not exact cases. A benchmark, not a test.
#
# For each row and each assumed micro-batch size (MBS, default "1 2") and recomputation
# (RECOMPUTE, default "none selective") it writes a motley model (GPT: learned-free embedding,
# LayerNorm, 4h GeLU MLP with biases, multi-head attention, untied head; bf16, no dropout), a
# cluster of DGX H100 nodes, and a calibration-cases/1 file whose "published" time is the
# table's TFLOP/s turned back into seconds with Megatron's own FLOP count (72 B s l h^2 (1 +
# s/(6h) + V/(12 l h)), Korthikanti et al. Eq. 7, which is what Megatron-LM's
# num_floating_point_operations gives for this architecture). `motley calibrate` then prices
# every case under STACK (default megatron-core) or CALIBRATION (a calibration file), and the
# script prints the predicted MFU next to the published one for each assumption.
#
# Usage: scripts/h100-range.sh [BUILD_DIR]   (default: build)
# Environment: MBS, RECOMPUTE, STACK, CALIBRATION, SCHEDULE (pipeline schedule for PP > 1,
# default 1f1b), CHUNKS (with CHUNKS=2, rows whose stages hold an even number of layers run
# Megatron's interleaved schedule with two chunks per device, as NVIDIA's H100 recipes do where
# the layers split evenly; the others keep SCHEDULE), KEEP (a directory to keep the generated
# files in).
set -euo pipefail

MBS=${MBS:-"1 2"}
RECOMPUTE=${RECOMPUTE:-"none selective"}
STACK=${STACK:-megatron-core}
SCHEDULE=${SCHEDULE:-1f1b}
CHUNKS=${CHUNKS:-1}
# shellcheck source=published_runs.sh
source "$(dirname "$0")/published_runs.sh"

for mbs in $MBS; do
  for recompute in $RECOMPUTE; do
    cases="$DIR/h100-mbs$mbs-$recompute.json"
    python3 - "$DIR" "$mbs" "$recompute" "$SCHEDULE" "$cases" "$HERE" "$CHUNKS" <<'PY'
import json, os, sys

out_dir, mbs, recompute, schedule, cases_path, here, chunks = sys.argv[1:]
chunks = int(chunks)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, here)
from published_runs import dgx_h100_cluster, gpt_model
mbs = int(mbs)
VOCAB, SEQ = 131072, 4096
PEAK_BF16 = 989.4  # H100 SXM dense bf16 TFLOP/s (NVIDIA H100 datasheet)
# name, heads, hidden, layers, TP, PP, DP, GPUs, global batch, TFLOP/s per GPU (the table)
ROWS = [
    ("1.7b", 16, 2048, 24, 1, 1, 48, 48, 192, 408.8),
    ("7.1b", 32, 4096, 30, 2, 1, 48, 96, 192, 465.9),
    ("16b", 48, 6144, 32, 4, 1, 48, 192, 192, 489.1),
    ("32b", 56, 7168, 48, 8, 1, 48, 384, 192, 459.6),
    ("70b", 64, 8192, 84, 8, 2, 48, 768, 384, 419.7),
    ("119b", 80, 10240, 92, 8, 4, 48, 1536, 768, 420.5),
    ("177b", 96, 12288, 96, 8, 6, 48, 2304, 1152, 432.8),
    ("314b", 128, 16384, 96, 8, 8, 48, 3072, 1536, 474.4),
    ("462b", 144, 18432, 112, 8, 16, 48, 6144, 3072, 459.9),
]

def model(name, heads, hidden, layers):
    return gpt_model(name, heads, hidden, layers, vocab=VOCAB, seq=SEQ, dtype="bf16",
                     dropout=False, tied=False, learned_positions=False)


cases = []
for name, heads, hidden, layers, tp, pp, dp, gpus, batch, tflops in ROWS:
    model_file = f"gpt-{name}.json"
    with open(os.path.join(out_dir, model_file), "w") as f:
        json.dump(model(name, heads, hidden, layers), f)
    cluster_file = f"dgx-h100-x{gpus // 8}.yaml"
    with open(os.path.join(out_dir, cluster_file), "w") as f:
        f.write(dgx_h100_cluster(gpus // 8))
    flops = 72 * batch * SEQ * layers * hidden**2 * (
        1 + SEQ / (6 * hidden) + VOCAB / (12 * layers * hidden))
    seconds = flops / (tflops * 1e12 * gpus)
    interleaved = pp > 1 and chunks > 1 and (layers // pp) % chunks == 0 and layers % pp == 0
    cases.append({
        "id": f"mcore-h100-{name}", "model": model_file, "cluster": cluster_file,
        "tp": tp, "pp": pp, "dp": dp, "global_batch": batch, "micro_batch_size": mbs,
        "seq_len": SEQ,
        "schedule": "interleaved" if interleaved else schedule if pp > 1 else "1f1b",
        "virtual_stages": chunks if interleaved else 1,
        "recompute": recompute, "partition": "megatron", "rank_order": "megatron", "zero1": True,
        "sequence_parallel": tp > 1, "metric": "iteration_time_s", "published": seconds,
        "note": f"published {tflops} TFLOP/s/GPU, MFU {tflops / PEAK_BF16:.3f}",
        "source": "NVIDIA/Megatron-LM README, release 0.8, images/model_table.png"})
with open(cases_path, "w") as f:
    json.dump({"format": "calibration-cases/1",
               "about": "Megatron-Core H100 weak scaling under assumed micro-batch and "
                        "recomputation", "cases": cases}, f, indent=1)
PY
    echo "== micro-batch $mbs, recompute $recompute, schedule $SCHEDULE, chunks $CHUNKS, ${PRICE[*]}"
    "$MOTLEY" calibrate --cases "$cases" "${PRICE[@]}" --json > "$DIR/result-mbs$mbs-$recompute.json"
    python3 - "$DIR/result-mbs$mbs-$recompute.json" "$cases" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
published_mfu = {c["id"]: float(c["note"].split("MFU ")[1])
                 for c in json.load(open(sys.argv[2]))["cases"]}
print(f"{'case':18} {'published':>10} {'predicted':>10} {'MFU pub':>8} {'MFU pred':>9} {'error':>7}")
mfus = []
for c in r["cases"]:
    pub, pred = c["measured_s"], c["predicted_s"]
    mfu_pub = published_mfu[c["id"]]
    mfu_pred = mfu_pub * pub / pred
    mfus.append(mfu_pred)
    print(f"{c['id']:18} {pub:9.3f}s {pred:9.3f}s {100*mfu_pub:7.1f}% {100*mfu_pred:8.1f}% "
          f"{c['error_pct']:+6.1f}%")
print(f"predicted MFU {100*min(mfus):.1f}-{100*max(mfus):.1f}% (published 41-49%); "
      f"mean |error| {r['mean_abs_error_pct']:.1f}%, max {r['max_abs_error_pct']:.1f}%")
PY
  done
done
