"""Motley model and cluster files for published training runs, shared by the checks in
scripts/ that price them (h100-range.sh, a100-published-check.sh, h100-fp8-check.sh,
h100-nemo-fp8-check.sh, llama-405b-check.sh)."""


def llama_405b_config():
    """Llama 3.1 405B as a Hugging Face config.json, from its published shape: hidden 16,384,
    FFN 53,248, 126 layers, 128 query and 8 key/value heads, vocabulary 128,256."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126,
        "num_attention_heads": 128, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16"}


def gpt_model(name, heads, hidden, layers, *, vocab, seq, dtype, dropout, tied,
              learned_positions):
    """A GPT of `layers` decoder blocks as Megatron-LM builds it: LayerNorm, multi-head
    attention and a 4h GeLU MLP, all with biases; an embedding (with a learned position table
    of `seq` rows when `learned_positions`) and a head, tied to it or not."""
    block = {"kind": "decoder_block", "norm_bias": True,
             "attention": {"hidden": hidden, "num_heads": heads, "qkv_bias": True,
                           "output_bias": True},
             "ffn": {"hidden": hidden, "ffn_size": 4 * hidden, "activation": "gelu",
                     "bias": True}}
    embedding = {"vocab": vocab, "hidden": hidden}
    if learned_positions:
        embedding["learned_positions"] = seq
    ls = [{"name": "embed", "kind": "embedding", "embedding": embedding}]
    ls += [dict(block, name=f"layers.{i}") for i in range(layers)]
    ls.append({"name": "head", "kind": "head", "norm_bias": True,
               "head": {"vocab": vocab, "hidden": hidden, "tied": tied}})
    return {"format": "motley.model/1", "name": f"gpt-{name}", "family": "gpt",
            "default_seq_len": seq, "dtype": dtype, "dropout": dropout, "layers": ls}


def dgx_h100_cluster(nodes):
    """`nodes` DGX H100 nodes, named dgx-h100-x<nodes>, as YAML."""
    return dgx_cluster(f"dgx-h100-x{nodes}", nodes, "H100-SXM", 450, 50, [
        "DGX H100: 8 x H100 SXM on NVLink 4 (900 GB/s both ways, 450 each), 8 x 400 Gb/s",
        "ConnectX-7 NDR InfiniBand per node (50 GB/s per NIC)."])


def dgx_cluster(name, nodes, device, nvlink_gbps, nic_gbps, comment, per_pcie_switch=None):
    """`nodes` DGX-style nodes of eight `device`s on NVLink/NVSwitch (`nvlink_gbps` per
    direction) with a NIC of `nic_gbps` per device, on one InfiniBand fabric, as YAML;
    `per_pcie_switch` devices share a PCIe switch where given."""
    lines = [f"# {line}" for line in comment]
    lines += [
        f"name: {name}",
        f"network: {{kind: infiniband, bandwidth_GBps: {nic_gbps}, latency_us: 2}}",
        "nodes:",
        "  - name: dgx",
        f"    count: {nodes}",
        f"    devices: {{type: {device}, count: 8}}",
        f"    interconnect: {{kind: nvlink, bandwidth_GBps: {nvlink_gbps}, latency_us: 2}}"]
    if per_pcie_switch is not None:
        lines.append(f"    devices_per_pcie_switch: {per_pcie_switch}")
    lines += [f"    nic: {{bandwidth_GBps: {nic_gbps}, latency_us: 1, count: 8}}", ""]
    return "\n".join(lines)
