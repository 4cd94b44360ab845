#!/usr/bin/env bash
# How the cost model prices dense Llama 3 runs that NVIDIA publishes for H100 in FP8: the
# Megatron-Bridge performance summary (NeMo 25.11 container, DGX-H100, FP8 with current
# scaling), whose layouts are given in the table and whose recomputation is given by the recipe
# files behind it:
#
# - Llama 3 8B on 8 GPUs: FSDP over the 8 (ZeRO-3), TP 1, PP 1, micro-batch 1, global batch 128
#   (16 accumulation steps), sequence 8,192, 5 layers recomputed in full; 14,451 tokens/s/GPU.
# - Llama 3 70B on 64 GPUs: TP 4, PP 8, interleaved with 5 chunks per device, DP 2, micro-batch
#   1, global batch 128, sequence 8,192, no recomputation; 1,602 tokens/s/GPU.
# - Llama 3.1 405B on 1,024 GPUs: TP 8, PP 8, CP 2, interleaved with 8 chunks per device, DP 8,
#   micro-batch 1, global batch 512, sequence 8,192, no recomputation, the embedding and the
#   loss counted as layers in the pipeline split (126 + 2 = 128 over 64 chunks);
#   292 tokens/s/GPU. Never fitted: held out.
# - Qwen3-30B-A3B (MoE, 128 experts, top 8) on 16 GPUs, also held out: NeMo 25.11, PP 2,
#   interleaved with 24 chunks, EP 8, DP 8, micro-batch 2, global batch 512, sequence 4,096,
#   5,275 tokens/s/GPU; NeMo 26.06, EP 16 over both nodes, DP 16, micro-batch 1, global batch
#   1,024, 8,826 tokens/s/GPU; no recomputation (the H100 FP8 recipe). Each is also priced
#   without its all-to-alls ("ep": 1) to show what the exchanges take. Needs the model's
#   Hugging Face config.json: QWEN3_MOE_CONFIG, by default ../shared/data/hf/Qwen3-30B-A3B.json
#   beside the repository; skipped without it.
# - gpt-oss-120b (MoE, 128 experts of width 2,880, top 4) in BF16 on 64 GPUs, held out and
#   priced under megatron-core (the BF16 stack) whatever STACK says: NeMo 26.04.01, TP 1, PP 4,
#   EP 8, DP 16, micro-batch 1, global batch 1,280, sequence 4,096, 5,824 tokens/s/GPU;
#   recomputation is not published (none assumed). Its config is gpt-oss-20b's
#   (GPT_OSS_CONFIG, by default ../shared/data/hf/gpt-oss-20b.json) with the 120b's published
#   36 layers and 128 experts (OpenAI's config.json; every other field is the same), which
#   gives its published 116.8 B parameters.
#
# The runs are written as calibration-cases files and priced by `motley calibrate` under STACK
# (default megatron-core-fp8) or CALIBRATION with no fit, on DGX H100 nodes (NVLink 450 GB/s per
# direction, 8 x 400 Gb/s NDR per node), the distributed optimizer on and sequence parallelism
# for TP > 1; the script prints the published and predicted tokens/s per GPU and the error of
# the iteration time. With FIT=1 it also fits fp8_gemm_efficiency to each of the 8B and 70B runs
# alone and prices the other and the 405B run with it, then fits it to both (the built-in
# megatron-core-fp8 value) and prices the 405B run. A benchmark, not a test.
#
# Usage: [FIT=1] [QWEN3_MOE_CONFIG=FILE] [KEEP=DIR] scripts/h100-fp8-check.sh [BUILD_DIR]
#   (default: build; KEEP: a directory to keep the generated files in)
set -euo pipefail

STACK=${STACK:-megatron-core-fp8}
# shellcheck source=published_runs.sh
source "$(dirname "$0")/published_runs.sh"

# Clusters, the 405B model (Llama 3.1 405B's published config.json shape: hidden 16,384, FFN
# 53,248, 126 layers, 128 query and 8 key/value heads, vocabulary 128,256) and the cases: the
# published iteration time is the step's tokens over the published tokens/s/GPU times the GPUs.
python3 - "$DIR" "$HERE" <<'PY'
import json, os, sys
out_dir, here = sys.argv[1:]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, here)
from published_runs import dgx_h100_cluster, llama_405b_config
for nodes in (1, 2, 8, 128):
    with open(os.path.join(out_dir, f"dgx-h100-x{nodes}.yaml"), "w") as f:
        f.write(dgx_h100_cluster(nodes))
with open(os.path.join(out_dir, "llama-3.1-405b.json"), "w") as f:
    json.dump(llama_405b_config(), f)

SEQ = 8192
def seconds(batch, tokens_per_gpu_s, gpus):
    return batch * SEQ / (tokens_per_gpu_s * gpus)
source = "NVIDIA Megatron-Bridge performance summary, NeMo 25.11, DGX-H100, FP8 current scaling"
fitted = [
    {"id": "llama-3-8b-fsdp8", "model": "llama-3-8b", "cluster": "dgx-h100-x1.yaml",
     "gpus": 8, "tp": 1, "pp": 1, "dp": 8, "global_batch": 128, "micro_batch_size": 1,
     "seq_len": SEQ, "schedule": "1f1b", "recompute": "none", "recompute_layers": 5,
     "partition": "megatron", "rank_order": "megatron", "zero_stage": 3, "published": seconds(128, 14451, 8),
     "note": "14,451 tokens/s/GPU on 8 GPUs", "source": source},
    {"id": "llama-3-70b-tp4-pp8-vp5", "model": "llama-3-70b", "cluster": "dgx-h100-x8.yaml",
     "gpus": 64, "tp": 4, "pp": 8, "dp": 2, "global_batch": 128, "micro_batch_size": 1,
     "seq_len": SEQ, "schedule": "interleaved", "virtual_stages": 5, "recompute": "none",
     "partition": "megatron", "rank_order": "megatron", "zero_stage": 1, "sequence_parallel": True,
     "published": seconds(128, 1602, 64), "note": "1,602 tokens/s/GPU on 64 GPUs",
     "source": source}]
held_out = [
    {"id": "llama-3.1-405b-cp2-vp8", "model": "llama-3.1-405b.json",
     "cluster": "dgx-h100-x128.yaml", "gpus": 1024, "tp": 8, "pp": 8, "cp": 2, "dp": 8,
     "global_batch": 512, "micro_batch_size": 1, "seq_len": SEQ, "schedule": "interleaved",
     "virtual_stages": 8, "recompute": "none", "partition": "uniform", "rank_order": "megatron", "zero_stage": 1,
     "sequence_parallel": True, "published": seconds(512, 292, 1024),
     "note": "292 tokens/s/GPU on 1,024 GPUs", "source": source}]
def write(name, cases):
    with open(os.path.join(out_dir, name), "w") as f:
        json.dump({"format": "calibration-cases/1",
                   "about": "Llama 3 in FP8 on DGX H100 (Megatron-Bridge)", "cases": cases}, f,
                  indent=1)
write("fitted.json", fitted)
write("held-out.json", held_out)
write("all.json", fitted + held_out)
for i, case in enumerate(fitted):
    write(f"fit-{i}.json", [case])
    write(f"check-{i}.json", [c for j, c in enumerate(fitted) if j != i] + held_out)
PY

# Prints each run's published and predicted tokens/s per GPU and the error of the time.
table() {
  python3 - "$1" "$2" "$DIR/all.json" <<'PY'
import json, sys
result, title = json.load(open(sys.argv[1])), sys.argv[2]
cases = {c["id"]: c for c in json.load(open(sys.argv[3]))["cases"]}
print(f"== {title}")
print(f"{'run':26} {'published':>10} {'predicted':>10} {'time error':>11}")
for c in result["cases"]:
    case = cases[c["id"]]
    published = case["global_batch"] * case["seq_len"] / c["measured_s"] / case["gpus"]
    predicted = published * c["measured_s"] / c["predicted_s"]
    print(f"{c['id']:26} {published:>10,.0f} {predicted:>10,.0f} {c['error_pct']:>+10.1f}%")
print(f"mean |error| {result['mean_abs_error_pct']:.1f}%, max {result['max_abs_error_pct']:.1f}%")
PY
}
fitted_value() {
  python3 -c 'import json,sys; print("%.3f" % json.load(open(sys.argv[1]))["stack"]["fp8_gemm_efficiency"])' "$1"
}

"$MOTLEY" calibrate --cases "$DIR/all.json" "${PRICE[@]}" --json > "$DIR/priced.json"
table "$DIR/priced.json" "priced under ${PRICE[*]}, no fit"

if [[ -n "${FIT:-}" ]]; then
  for i in 0 1; do
    "$MOTLEY" calibrate --cases "$DIR/fit-$i.json" "${PRICE[@]}" --fit fp8_gemm_efficiency \
      --json --out "$DIR/fit.json" > /dev/null
    "$MOTLEY" calibrate --cases "$DIR/check-$i.json" --calibration "$DIR/fit.json" --json \
      > "$DIR/checked.json"
    table "$DIR/checked.json" \
      "fp8_gemm_efficiency $(fitted_value "$DIR/fit.json") fitted to $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cases"][0]["id"])' "$DIR/fit-$i.json") alone"
  done
  "$MOTLEY" calibrate --cases "$DIR/fitted.json" "${PRICE[@]}" --fit fp8_gemm_efficiency --json \
    --out "$DIR/fit.json" > "$DIR/both.json"
  table "$DIR/both.json" "fp8_gemm_efficiency $(fitted_value "$DIR/fit.json") fitted to both"
  "$MOTLEY" calibrate --cases "$DIR/held-out.json" --calibration "$DIR/fit.json" --json \
    > "$DIR/checked.json"
  table "$DIR/checked.json" "held out, priced with the fit to both"
fi

# The MoE runs, held out, with and without their all-to-alls.
QWEN3_MOE_CONFIG=${QWEN3_MOE_CONFIG:-$HERE/../../shared/data/hf/Qwen3-30B-A3B.json}
if [[ -f "$QWEN3_MOE_CONFIG" ]]; then
  cp "$QWEN3_MOE_CONFIG" "$DIR/qwen3-30b-a3b.json"
  python3 - "$DIR" <<'PY'
import json, os, sys
out_dir = sys.argv[1]
def case(id_, ep, published, source, **layout):
    c = {"id": id_, "model": "qwen3-30b-a3b.json", "cluster": "dgx-h100-x2.yaml", "gpus": 16,
         "tp": 1, "ep": ep, "seq_len": 4096, "recompute": "none", "partition": "megatron", "rank_order": "megatron",
         "zero_stage": 1, "published": published, "source": source}
    c.update(layout)
    return c
runs = []
# Each run as published, and with one expert group ("ep": 1): no all-to-alls.
for suffix, exchanges in (("", True), ("-no-a2a", False)):
    runs.append(case(f"qwen3-30b-25.11{suffix}", 8 if exchanges else 1, 512 * 4096 / (5275 * 16),
                     "Megatron-Bridge performance summary, NeMo 25.11, DGX-H100, FP8-CS",
                     pp=2, dp=8, global_batch=512, micro_batch_size=2, schedule="interleaved",
                     virtual_stages=24))
    runs.append(case(f"qwen3-30b-26.06{suffix}", 16 if exchanges else 1, 1024 * 4096 / (8826 * 16),
                     "Megatron-Bridge performance summary, NeMo 26.06, DGX-H100, FP8",
                     pp=1, dp=16, global_batch=1024, micro_batch_size=1, schedule="1f1b"))
with open(os.path.join(out_dir, "moe.json"), "w") as f:
    json.dump({"format": "calibration-cases/1", "about": "Qwen3-30B-A3B in FP8 on DGX H100",
               "cases": runs}, f, indent=1)
PY
  echo "== held out: Qwen3-30B-A3B (MoE), priced under ${PRICE[*]}; -no-a2a: without the all-to-alls"
  # (Without the summary line: the -no-a2a rows are not predictions of the runs.)
  "$MOTLEY" calibrate --cases "$DIR/moe.json" "${PRICE[@]}" | sed '1d;$d'
else
  echo "(no $QWEN3_MOE_CONFIG: the MoE runs are skipped)"
fi

GPT_OSS_CONFIG=${GPT_OSS_CONFIG:-$HERE/../../shared/data/hf/gpt-oss-20b.json}
if [[ -f "$GPT_OSS_CONFIG" ]]; then
  python3 - "$DIR" "$GPT_OSS_CONFIG" <<'PY'
import json, os, sys
out_dir, config = sys.argv[1:]
c = json.load(open(config))
c.update(num_hidden_layers=36, num_local_experts=128,
         layer_types=["sliding_attention", "full_attention"] * 18)
with open(os.path.join(out_dir, "gpt-oss-120b.json"), "w") as f:
    json.dump(c, f)
def case(id_, ep):
    return {"id": id_, "model": "gpt-oss-120b.json", "cluster": "dgx-h100-x8.yaml", "gpus": 64,
            "tp": 1, "pp": 4, "dp": 16, "ep": ep, "global_batch": 1280, "micro_batch_size": 1,
            "seq_len": 4096, "schedule": "1f1b", "recompute": "none", "partition": "megatron",
            "rank_order": "megatron", "zero_stage": 1, "published": 1280 * 4096 / (5824 * 64),
            "source": "Megatron-Bridge performance summary, NeMo 26.04.01, DGX-H100, BF16"}
with open(os.path.join(out_dir, "oss.json"), "w") as f:
    json.dump({"format": "calibration-cases/1", "about": "gpt-oss-120b in BF16 on DGX H100",
               "cases": [case("gpt-oss-120b-26.04.01", 8), case("gpt-oss-120b-no-a2a", 1)]},
              f, indent=1)
PY
  echo "== held out: gpt-oss-120b (MoE, BF16; $("$MOTLEY" model show "$DIR/gpt-oss-120b.json" |
    sed -n 's/^total parameters [0-9]* (\(.*\)), active.*/\1/p') parameters), priced under --stack megatron-core"
  "$MOTLEY" calibrate --cases "$DIR/oss.json" --stack megatron-core | sed '1d;$d'
else
  echo "(no $GPT_OSS_CONFIG: the gpt-oss run is skipped)"
fi
