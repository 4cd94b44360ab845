#!/usr/bin/env bash
# How the cost model prices the runs Narayanan et al. 2021 ("Efficient Large-Scale Language Model
# Training on GPU Clusters Using Megatron-LM", arXiv 2104.04473) measured on Selene (DGX A100
# 80GB, NVSwitch, 8 x 200 Gb/s HDR InfiniBand per node): GPT models with V = 51,200 and
# s = 2,048, fp16, activation recomputation, Megatron-LM of 2021. None of these runs is among the
# ones the built-in megatron-lm-2022 stack was fitted to (Korthikanti et al. 2022), so this is a
# held-out check of that stack. A benchmark, not a test.
#
# - Table 2, PTD-P rows: GPT-3 175B (TP 8 x PP 12) on 384 / 768 / 1,536 GPUs, global batch
#   1,536, and 530B (TP 8 x PP 35) on 560 / 1,120 / 2,240 GPUs, global batch 2,240, micro-batch
#   1 -- the whole layout is published.
# - Table 1, weak scaling from 1.7B to 1T: TP, PP, GPUs and global batch are published, the
#   micro-batch size is not, so every row is priced under each size in MBS (default "1 2").
# - Table 2, ZeRO-3 rows: the same two models data-parallel only under DeepSpeed's ZeRO-3
#   (micro-batch 4 / 2 / 1). DeepSpeed is not the stack priced here; the rows show how far a
#   Megatron-priced ZeRO-3 is from what DeepSpeed measured then.
# - Megatron-Turing NLG 530B (Smith et al. 2022, arXiv 2201.11990, Sec. 2.4): the same model
#   and TP 8 x PP 35 on 280 / 350 / 420 DGX A100 servers of Selene, global batch 1,920,
#   126 / 121 / 113 TFLOP/s per GPU (60.1 / 50.2 / 44.4 s per iteration), trained with
#   Megatron-DeepSpeed (DeepSpeed's pipeline engine around Megatron-LM's tensor slicing),
#   another stack than the one priced. The micro-batch size is not published: each size in MBS.
#
# The "published" time of each run is its TFLOP/s per GPU turned back into seconds with the
# paper's own FLOP count, which includes the recomputed forward (their Eq. 3):
# 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
#
# Usage: scripts/a100-published-check.sh [BUILD_DIR]   (default: build)
# Environment: STACK (default megatron-lm-2022) or CALIBRATION (a calibration file); MBS;
# SCHEDULE (pipeline schedule for PP > 1: 1f1b, the default, or interleaved with two chunks where
# a stage's layers split evenly); KEEP (a directory to keep the generated files in).
set -euo pipefail

MBS=${MBS:-"1 2"}
STACK=${STACK:-megatron-lm-2022}
SCHEDULE=${SCHEDULE:-1f1b}
# shellcheck source=published_runs.sh
source "$(dirname "$0")/published_runs.sh"

# write_cases TABLE MBS OUT: the runs of TABLE (t1, t2, zero3 or mtnlg) as a calibration-cases/1
# file, with their models and clusters next to it.
write_cases() {
  python3 - "$DIR" "$1" "$2" "$SCHEDULE" "$3" "$HERE" <<'PY'
import json, os, sys

out_dir, table, mbs, schedule, cases_path, here = sys.argv[1:]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, here)
from published_runs import dgx_cluster, gpt_model
mbs = int(mbs)
VOCAB, SEQ = 51200, 2048
PEAK_FP16 = 312.0  # A100 dense fp16 TFLOP/s (NVIDIA A100 datasheet)
SOURCE = "Narayanan et al. 2021, arXiv 2104.04473"
# name, heads, hidden, layers, TP, PP, GPUs, global batch, TFLOP/s per GPU (Table 1)
TABLE1 = [
    ("1.7b", 24, 2304, 24, 1, 1, 32, 512, 137),
    ("3.6b", 32, 3072, 30, 2, 1, 64, 512, 138),
    ("7.5b", 32, 4096, 36, 4, 1, 128, 512, 142),
    ("18b", 48, 6144, 40, 8, 1, 256, 1024, 135),
    ("39b", 64, 8192, 48, 8, 2, 512, 1536, 138),
    ("76b", 80, 10240, 60, 8, 4, 1024, 1792, 140),
    ("146b", 96, 12288, 80, 8, 8, 1536, 2304, 148),
    ("310b", 128, 16384, 96, 8, 16, 1920, 2160, 155),
    ("530b", 128, 20480, 105, 8, 35, 2520, 2520, 163),
    ("1t", 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
GPT3 = ("175b", 96, 12288, 96)
MT530 = ("530b", 128, 20480, 105)
# model, TP, PP, GPUs, global batch, micro-batch, TFLOP/s per GPU (Table 2)
PTDP = [
    (GPT3, 8, 12, 384, 1536, 1, 153), (GPT3, 8, 12, 768, 1536, 1, 149),
    (GPT3, 8, 12, 1536, 1536, 1, 141), (MT530, 8, 35, 560, 2240, 1, 171),
    (MT530, 8, 35, 1120, 2240, 1, 167), (MT530, 8, 35, 2240, 2240, 1, 159),
]
# The same for Smith et al. 2022 (MT-NLG); the micro-batch is not published (MBS)
MTNLG = [
    (MT530, 8, 35, 2240, 1920, 1, 126), (MT530, 8, 35, 2800, 1920, 1, 121),
    (MT530, 8, 35, 3360, 1920, 1, 113),
]
ZERO3 = [
    (GPT3, 1, 1, 384, 1536, 4, 144), (GPT3, 1, 1, 768, 1536, 2, 88),
    (GPT3, 1, 1, 1536, 1536, 1, 44), (MT530, 1, 1, 640, 2560, 4, 138),
    (MT530, 1, 1, 1120, 2240, 2, 98), (MT530, 1, 1, 2240, 2240, 1, 48),
]

def model(name, heads, hidden, layers):
    return gpt_model(name, heads, hidden, layers, vocab=VOCAB, seq=SEQ, dtype="fp16",
                     dropout=True, tied=True, learned_positions=True)

def cluster(nodes):
    return dgx_cluster(f"dgx-a100-x{nodes}", nodes, "A100-80GB", 300, 25, [
        "DGX A100 80GB on Selene: NVSwitch inside a node, 8 x 200 Gb/s HDR InfiniBand."],
        per_pcie_switch=2)

if table == "t1":
    runs = [((n, a, h, l), tp, pp, g, b, mbs, tf) for n, a, h, l, tp, pp, g, b, tf in TABLE1]
else:
    runs = {"t2": PTDP, "zero3": ZERO3,
            "mtnlg": [(m, tp, pp, g, b, mbs, tf) for m, tp, pp, g, b, _, tf in MTNLG]}[table]
    if table == "mtnlg":
        SOURCE = "Smith et al. 2022, arXiv 2201.11990"
cases = []
for (name, heads, hidden, layers), tp, pp, gpus, batch, m, tflops in runs:
    model_file = f"gpt-{name}.json"
    with open(os.path.join(out_dir, model_file), "w") as f:
        json.dump(model(name, heads, hidden, layers), f)
    cluster_file = f"dgx-a100-x{gpus // 8}.yaml"
    with open(os.path.join(out_dir, cluster_file), "w") as f:
        f.write(cluster(gpus // 8))
    dp = gpus // (tp * pp)
    while (batch // dp) % m:  # the largest size up to MBS that divides a replica's batch
        m -= 1
    # Megatron-LM interleaves only where a stage's layers split into two equal chunks and the
    # micro-batches are a multiple of the pipeline's depth; elsewhere the run is priced as 1F1B.
    chunks = 1
    if (schedule == "interleaved" and pp > 1 and layers % (2 * pp) == 0
            and (batch // dp // m) % pp == 0):
        chunks = 2
    flops = 96 * batch * SEQ * layers * hidden**2 * (
        1 + SEQ / (6 * hidden) + VOCAB / (16 * layers * hidden))
    cases.append({
        "id": f"{table}-{name}-{gpus}gpu-mbs{m}", "model": model_file, "cluster": cluster_file,
        "tp": tp, "pp": pp, "dp": dp, "global_batch": batch, "micro_batch_size": m,
        "seq_len": SEQ, "schedule": "interleaved" if chunks > 1 else "1f1b",
        "virtual_stages": chunks, "recompute": "full", "partition": "megatron", "rank_order": "megatron",
        "zero_stage": 3 if table == "zero3" else 0, "metric": "iteration_time_s",
        "published": flops / (tflops * 1e12 * gpus),
        "note": f"published {tflops} TFLOP/s/GPU ({tflops / PEAK_FP16:.0%} of peak)",
        "source": SOURCE})
with open(cases_path, "w") as f:
    json.dump({"format": "calibration-cases/1", "about": f"{SOURCE}, {table}", "cases": cases},
              f, indent=1)
PY
}

# price CASES: the cases under the stack, one row each, then the mean and max error.
price() {
  "$MOTLEY" calibrate --cases "$1" "${PRICE[@]}" --json > "$1.result"
  python3 - "$1.result" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{'case':26} {'published':>10} {'predicted':>10} {'error':>7}")
for c in r["cases"]:
    print(f"{c['id']:26} {c['measured_s']:9.2f}s {c['predicted_s']:9.2f}s {c['error_pct']:+6.1f}%")
print(f"mean |error| {r['mean_abs_error_pct']:.1f}%, max {r['max_abs_error_pct']:.1f}%")
PY
}

echo "== Table 2, PTD-P (micro-batch 1, published), schedule $SCHEDULE, ${PRICE[*]}"
write_cases t2 1 "$DIR/t2.json"
price "$DIR/t2.json"
for mbs in $MBS; do
  echo "== Table 1, weak scaling, micro-batch $mbs (assumed), schedule $SCHEDULE, ${PRICE[*]}"
  write_cases t1 "$mbs" "$DIR/t1-mbs$mbs.json"
  price "$DIR/t1-mbs$mbs.json"
done
echo "== Table 2, DeepSpeed ZeRO-3 rows (not the stack priced), ${PRICE[*]}"
write_cases zero3 1 "$DIR/zero3.json"
price "$DIR/zero3.json"
for mbs in $MBS; do
  echo "== MT-NLG 530B, Megatron-DeepSpeed (not the stack priced), micro-batch $mbs (assumed)," \
    "${PRICE[*]}"
  write_cases mtnlg "$mbs" "$DIR/mtnlg-mbs$mbs.json"
  price "$DIR/mtnlg-mbs$mbs.json"
done
