#!/usr/bin/env bash
# How the FP8 stack prices the dense pre-training runs of NVIDIA's NeMo 24.07 performance
# summary (NVIDIA/NeMo, docs/source/performance/performance_summary.md; DGX-H100, FP8, NeMo 24.07
# container): twelve runs of GPT-3 5B to 175B, Llama 2 7B to 70B, Nemotron 8B to 340B and Llama 3
# 8B and 70B on 8 to 512 H100s, each with its published GPUs, global batch, micro-batch size,
# sequence length, TP, PP, CP and virtual stages. None of them is among the runs the built-in
# megatron-core-fp8 stack was fitted to (two Megatron-Bridge runs of NeMo 25.11, see
# scripts/h100-fp8-check.sh), so this is a held-out check of that stack. It is not like for like:
# 24.07 is an older software release, with delayed rather than current FP8 scaling. A benchmark,
# not a test.
#
# Assumed where the table is silent: no recomputation, the distributed optimizer, sequence
# parallelism for TP > 1, Megatron-LM's layer split and rank order, an interleaved schedule where
# VP > 1 (else 1F1B). The models are written from their published shapes: GPT-3 as Megatron-LM
# builds it (LayerNorm, 4h GeLU MLP with biases, learned positions, head tied to the embedding,
# GPT-2's vocabulary padded to 50,304; no dropout); Llama 2 (SwiGLU, RMSNorm, 32,000 tokens; 70B
# with 8 key/value heads); Nemotron (squared-ReLU MLP of 4h, 256,000 tokens, untied head, no
# biases, its LayerNorm's bias left out; 340B with 8 key/value heads); Llama 3 from the presets.
# The parameter counts come out as published (Llama 2: 6,738,415,616, 13,015,864,320,
# 68,976,648,192; Nemotron-4 340B: 341.0 B). The published iteration
# time is the step's tokens over the published tokens/s/GPU times the GPUs.
#
# Usage: scripts/h100-nemo-fp8-check.sh [BUILD_DIR]   (default: build)
# Environment: STACK (default megatron-core-fp8) or CALIBRATION (a calibration file); KEEP (a
# directory to keep the generated files in).
set -euo pipefail

STACK=${STACK:-megatron-core-fp8}
# shellcheck source=published_runs.sh
source "$(dirname "$0")/published_runs.sh"

python3 - "$DIR" "$HERE" <<'PY'
import json, os, sys

out_dir, here = sys.argv[1:]
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, here)
from published_runs import dgx_h100_cluster, gpt_model

for nodes in (1, 2, 8, 16, 64):
    with open(os.path.join(out_dir, f"dgx-h100-x{nodes}.yaml"), "w") as f:
        f.write(dgx_h100_cluster(nodes))


def decoder(name, layers, hidden, ffn, heads, kv_heads, vocab, seq, activation):
    """Pre-norm decoder blocks without biases (RMSNorm), an embedding and an untied head."""
    block = {"kind": "decoder_block",
             "attention": {"hidden": hidden, "num_heads": heads, "num_kv_heads": kv_heads},
             "ffn": {"hidden": hidden, "ffn_size": ffn, "activation": activation}}
    ls = [{"name": "embed", "kind": "embedding", "embedding": {"vocab": vocab, "hidden": hidden}}]
    ls += [dict(block, name=f"layers.{i}") for i in range(layers)]
    ls.append({"name": "head", "kind": "head",
               "head": {"vocab": vocab, "hidden": hidden, "tied": False}})
    return {"format": "motley.model/1", "name": name, "family": name.split("-")[0],
            "default_seq_len": seq, "dtype": "bf16", "layers": ls}


def gpt3(size, heads, hidden, layers):
    return gpt_model(size, heads, hidden, layers, vocab=50304, seq=2048, dtype="bf16",
                     dropout=False, tied=True, learned_positions=True)


models = {
    "gpt3-5b": gpt3("5b", 32, 4096, 24),
    "gpt3-20b": gpt3("20b", 48, 6144, 44),
    "gpt3-175b": gpt3("175b", 96, 12288, 96),
    "llama2-7b": decoder("llama2-7b", 32, 4096, 11008, 32, 32, 32000, 4096, "swiglu"),
    "llama2-13b": decoder("llama2-13b", 40, 5120, 13824, 40, 40, 32000, 4096, "swiglu"),
    "llama2-70b": decoder("llama2-70b", 80, 8192, 28672, 64, 8, 32000, 4096, "swiglu"),
    "nemotron-8b": decoder("nemotron-8b", 32, 4096, 16384, 32, 32, 256000, 4096, "relu2"),
    "nemotron-22b": decoder("nemotron-22b", 40, 6144, 24576, 48, 48, 256000, 4096, "relu2"),
    "nemotron-340b": decoder("nemotron-340b", 96, 18432, 73728, 96, 8, 256000, 4096, "relu2"),
}
for name, model in models.items():
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(model, f)

# model, GPUs, global batch, micro-batch size, sequence, TP, PP, CP, VP, tokens/s/GPU (the table)
ROWS = [
    ("gpt3-5b", 64, 2048, 4, 2048, 1, 1, 1, 1, 22521),
    ("gpt3-20b", 64, 256, 2, 2048, 2, 1, 1, 1, 5851),
    ("gpt3-175b", 128, 256, 1, 2048, 4, 8, 1, 6, 726),
    ("gpt3-175b", 512, 2048, 2, 2048, 4, 8, 1, 6, 782),
    ("llama2-7b", 8, 128, 1, 4096, 1, 1, 1, 1, 16847),
    ("llama2-13b", 16, 128, 1, 4096, 1, 4, 1, 10, 8646),
    ("llama2-70b", 64, 128, 1, 4096, 4, 4, 1, 20, 1707),
    ("nemotron-8b", 64, 256, 4, 4096, 2, 1, 1, 1, 12701),
    ("nemotron-22b", 64, 256, 2, 4096, 2, 4, 1, 10, 4256),
    ("nemotron-340b", 128, 32, 1, 4096, 8, 8, 1, 12, 322),
    ("llama-3-8b", 8, 128, 1, 8192, 1, 1, 2, 1, 12036),
    ("llama-3-70b", 64, 128, 1, 8192, 4, 4, 2, 5, 1533),
]
cases = []
for model, gpus, batch, mbs, seq, tp, pp, cp, vp, tokens in ROWS:
    case = {"id": f"{model}-{gpus}gpu", "model": model if model in ("llama-3-8b", "llama-3-70b")
            else f"{model}.json", "cluster": f"dgx-h100-x{gpus // 8}.yaml", "gpus": gpus,
            "tp": tp, "pp": pp, "dp": gpus // (tp * pp * cp), "global_batch": batch,
            "micro_batch_size": mbs, "seq_len": seq,
            "schedule": "interleaved" if vp > 1 else "1f1b", "recompute": "none",
            "partition": "megatron", "rank_order": "megatron", "zero_stage": 1,
            "published": batch * seq / (tokens * gpus),
            "note": f"{tokens:,} tokens/s/GPU on {gpus} GPUs",
            "source": "NeMo 24.07 performance summary, DGX-H100, FP8"}
    if cp > 1:
        case["cp"] = cp
    if vp > 1:
        case["virtual_stages"] = vp
    if tp > 1:
        case["sequence_parallel"] = True
    cases.append(case)
with open(os.path.join(out_dir, "cases.json"), "w") as f:
    json.dump({"format": "calibration-cases/1",
               "about": "NeMo 24.07 dense pre-training in FP8 on DGX H100", "cases": cases}, f,
              indent=1)
PY

echo "== NeMo 24.07, DGX-H100, FP8 (held out), priced under ${PRICE[*]}"
"$MOTLEY" calibrate --cases "$DIR/cases.json" "${PRICE[@]}" | sed '1d'
