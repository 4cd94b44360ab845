#!/usr/bin/env python3
"""A motley profile from one of OctoPipe's published SimPipe profiles, made the way
../shared/data/octopipe/'s Nemotron-Nano-v2-9B profile is: the per-layer F / B / W times are
SimPipe's, the bytes are worked out from the model's shape.

SimPipe (guojihu-hana/SimPipe, `profiles/<model>.json`) gives a layer pattern, one symbol per
layer (E embedding, T dense decoder block, * attention, - MLP, # MoE, M Mamba, L head and loss),
and forward / backward / weight milliseconds per symbol for micro-batches of 1 x 4096 tokens.
SHAPE is the model's Hugging Face style config.json (SimPipe keeps its own in
`simpipe/models/hf_configs/`): hidden_size, intermediate_size, num_attention_heads,
num_key_value_heads, vocab_size, and where the pattern needs them attention_head_dim,
mamba_num_heads, mamba_head_dim, n_groups, ssm_state_size, num_experts, moe_ffn_hidden_size and
moe_router_topk (or num_experts_per_tok). An MLP is gated (three matrices) unless
mlp_hidden_act is relu2 (two, as Nemotron-H's).

Bytes:
- parameters: bf16 (2 bytes each) of the layer's matrices and norms;
- activations per micro-batch: for attention, Mamba and MLP layers the bytes per token and
  hidden unit of the same kind of layer in REFERENCE (the Nemotron-Nano profile, whose
  activation bytes are estimates of their own), an MLP's scaled by its width over the
  reference's and by 3/2 when gated; a dense block is an attention layer and a gated MLP; an
  MoE layer is top-k gated MLPs of the expert width plus 4 bytes per hidden unit and token for
  the router's input (an estimate); the head keeps fp32 logits and its input, 4(V + h) bytes a
  token, as the reference's does; the embedding its token ids;
- the hidden state between layers: 2h bytes per token.

Usage: scripts/simpipe_profile.py PROFILE SHAPE REFERENCE OUT
"""
import json
import sys

SEQ = 4096


def main(profile_path, shape_path, reference_path, out_path):
    with open(profile_path) as f:
        prof = json.load(f)
    with open(shape_path) as f:
        c = json.load(f)
    with open(reference_path) as f:
        ref = json.load(f)

    # The reference's bytes per token and hidden unit, by layer kind, and its MLP width.
    ref_hidden = ref["layers"][0]["output_bytes"] / (2 * ref["seq_len"])
    per_hidden = {}
    for layer in ref["layers"]:
        per_hidden[layer["name"]] = layer["activation_bytes"] / (ref["seq_len"] * ref_hidden)
    ref_mlp = next(l for l in ref["layers"] if l["name"] == "mlp")
    ref_ffn = ref_mlp["param_bytes"] / (2 * 2 * ref_hidden)  # two matrices, bf16

    h = c["hidden_size"]
    vocab = c["vocab_size"]
    ffn = c.get("intermediate_size", 4 * h)
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads)
    head_dim = c.get("attention_head_dim", c.get("head_dim", h // heads))
    mlp_mats = 2 if c.get("mlp_hidden_act") == "relu2" else 3
    experts = c.get("num_experts", 0)
    expert_ffn = c.get("moe_ffn_hidden_size", ffn)
    top_k = c.get("moe_router_topk", c.get("num_experts_per_tok", 2))
    m_heads = c.get("mamba_num_heads", 0)
    d_inner = m_heads * c.get("mamba_head_dim", 64)
    groups = c.get("n_groups", 8)
    state = c.get("ssm_state_size", 128)

    attention_params = 2 * h * heads * head_dim + 2 * h * kv * head_dim + h
    params = {
        "E": vocab * h,
        "L": vocab * h + h,
        "*": attention_params,
        "-": mlp_mats * h * ffn + h,
        "#": experts * 3 * h * expert_ffn + h * experts + h,
        "M": h * (2 * d_inner + 2 * groups * state + m_heads) + d_inner * h
             + (d_inner + 2 * groups * state) * 4 + h,
        "T": attention_params + 3 * h * ffn + h,
    }

    def mlp_per_token(width, gated):
        return per_hidden["mlp"] * h * (width / h) / (ref_ffn / ref_hidden) * (1.5 if gated else 1)

    per_token = {
        "E": 8,
        "L": 4 * (vocab + h),
        "*": per_hidden["attention"] * h,
        "-": mlp_per_token(ffn, mlp_mats == 3),
        "M": per_hidden["mamba"] * h,
        "#": top_k * mlp_per_token(expert_ffn, True) + 4 * h,
        "T": per_hidden["attention"] * h + mlp_per_token(ffn, True),
    }
    names = {"E": "embedding", "L": "head", "*": "attention", "-": "mlp", "#": "moe",
             "M": "mamba", "T": "decoder"}
    unknown = sorted(set(prof["pattern"]) - set(names))
    if unknown:
        sys.stderr.write(f"{profile_path}: pattern: unknown symbols {unknown}; allowed: "
                         f"{''.join(names)}\n")
        sys.exit(2)
    layers = []
    for symbol in prof["pattern"]:
        layers.append({
            "name": names[symbol],
            "forward_s": prof["forward_ms"][symbol] / 1e3,
            "backward_input_s": prof["backward_ms"][symbol] / 1e3,
            "backward_weight_s": prof["weight_ms"][symbol] / 1e3 if symbol != "E" else 0.0,
            "param_bytes": int(2 * params[symbol]),
            "activation_bytes": int(per_token[symbol] * SEQ),
            "output_bytes": 4 if symbol == "L" else 2 * h * SEQ,
        })
    name = out_path.rsplit("/", 1)[-1].split(".")[0]
    with open(out_path, "w") as f:
        json.dump({"format": "motley.profile/1", "name": name, "measured_on": "H100-SXM",
                   "seq_len": SEQ, "micro_batch_size": 1, "dtype": "bf16", "layers": layers},
                  f, indent=1)
    total = sum(l["param_bytes"] for l in layers) / 2
    print(f"{out_path}: {len(layers)} layers, {total / 1e9:.2f} B parameters")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.stderr.write(__doc__.strip().splitlines()[-1] + "\n")
        sys.exit(2)
    try:
        main(*sys.argv[1:])
    except KeyError as e:
        sys.stderr.write(f"simpipe_profile.py: a field is missing from the profile or SHAPE: {e}\n")
        sys.exit(2)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"simpipe_profile.py: {e}\n")
        sys.exit(2)
