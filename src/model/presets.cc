#include "motley/model/presets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "motley/core/json.h"
#include "motley/model/hf_config.h"
#include "motley/model/model_json.h"

namespace motley {
namespace {

// Published models are kept as their Hugging Face config.json (abridged to the keys that shape
// the model) and go through import_hf_config, so a preset and the same checkpoint's config.json
// give the same ModelSpec. Sources and published parameter counts are in docs/presets.md.

// meta-llama/Meta-Llama-3-8B config.json. 8,030,261,248 parameters (safetensors metadata).
constexpr const char* kLlama3_8b = R"json({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "attention_bias": false,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256
})json";

// meta-llama/Meta-Llama-3-70B config.json. 70,553,706,496 parameters.
constexpr const char* kLlama3_70b = R"json({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "attention_bias": false,
  "hidden_act": "silu",
  "hidden_size": 8192,
  "intermediate_size": 28672,
  "max_position_embeddings": 8192,
  "num_attention_heads": 64,
  "num_hidden_layers": 80,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256
})json";

// mistralai/Mixtral-8x7B-v0.1 config.json. 46,702,792,704 parameters, 12,879,925,248 active.
constexpr const char* kMixtral8x7b = R"json({
  "architectures": ["MixtralForCausalLM"],
  "model_type": "mixtral",
  "hidden_act": "silu",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "num_attention_heads": 32,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 32000
})json";

// deepseek-ai/DeepSeek-V2-Lite config.json: MLA without a query bottleneck (q_lora_rank null),
// 64 routed experts (top 6) + 2 shared, the first layer dense. 15.7B total, 2.4B active (model
// card; the active figure there leaves out the embedding table).
constexpr const char* kDeepSeekV2Lite = R"json({
  "architectures": ["DeepseekV2ForCausalLM"],
  "model_type": "deepseek_v2",
  "attention_bias": false,
  "first_k_dense_replace": 1,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "intermediate_size": 10944,
  "kv_lora_rank": 512,
  "max_position_embeddings": 163840,
  "moe_intermediate_size": 1408,
  "moe_layer_freq": 1,
  "n_group": 1,
  "n_routed_experts": 64,
  "n_shared_experts": 2,
  "norm_topk_prob": false,
  "num_attention_heads": 16,
  "num_experts_per_tok": 6,
  "num_hidden_layers": 27,
  "num_key_value_heads": 16,
  "q_lora_rank": null,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000,
  "routed_scaling_factor": 1.0,
  "scoring_func": "softmax",
  "tie_word_embeddings": false,
  "topk_group": 1,
  "topk_method": "greedy",
  "torch_dtype": "bfloat16",
  "v_head_dim": 128,
  "vocab_size": 102400
})json";

// google/gemma-2-9b config.json: local (4096-token window) and global attention alternate,
// 256k vocabulary, tied embeddings (transformers' default for Gemma 2, written out here), four
// norms per block, GeGLU. 9,241,705,984 parameters.
constexpr const char* kGemma2_9b = R"json({
  "architectures": ["Gemma2ForCausalLM"],
  "model_type": "gemma2",
  "attention_bias": false,
  "attn_logit_softcapping": 50.0,
  "final_logit_softcapping": 30.0,
  "head_dim": 256,
  "hidden_act": "gelu_pytorch_tanh",
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 3584,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "num_attention_heads": 16,
  "num_hidden_layers": 42,
  "num_key_value_heads": 8,
  "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": true,
  "torch_dtype": "float32",
  "vocab_size": 256000
})json";

// nvidia/Nemotron-H-8B-Base-8K config.json: Mamba-2 (M), attention (*) and squared-ReLU MLP (-)
// layers in the order of hybrid_override_pattern. 8,100,852,736 parameters.
constexpr const char* kNemotronH8b = R"json({
  "architectures": ["NemotronHForCausalLM"],
  "model_type": "nemotron_h",
  "attention_bias": false,
  "attention_head_dim": 128,
  "chunk_size": 128,
  "conv_kernel": 4,
  "expand": 2,
  "hidden_size": 4096,
  "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
  "intermediate_size": 21504,
  "layer_norm_epsilon": 1e-05,
  "mamba_head_dim": 64,
  "mamba_hidden_act": "silu",
  "mamba_num_heads": 128,
  "mamba_proj_bias": false,
  "max_position_embeddings": 8192,
  "mlp_bias": false,
  "mlp_hidden_act": "relu2",
  "n_groups": 8,
  "num_attention_heads": 32,
  "num_hidden_layers": 52,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "ssm_state_size": 128,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "use_bias": false,
  "use_conv_bias": true,
  "vocab_size": 131072
})json";

// ai21labs/Jamba-v0.1 config.json (AI21-Jamba-1.5-Mini has the same shape): Mamba-1 and
// attention 7:1 (attention at layer 4 of every 8), MoE with 16 experts (top 2) on every other
// layer. 52B total, 12B active (AI21's announcement).
constexpr const char* kJamba = R"json({
  "architectures": ["JambaForCausalLM"],
  "model_type": "jamba",
  "attn_layer_offset": 4,
  "attn_layer_period": 8,
  "expert_layer_offset": 1,
  "expert_layer_period": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "mamba_conv_bias": true,
  "mamba_d_conv": 4,
  "mamba_d_state": 16,
  "mamba_dt_rank": 256,
  "mamba_expand": 2,
  "mamba_proj_bias": false,
  "max_position_embeddings": 262144,
  "num_attention_heads": 32,
  "num_experts": 16,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 65536
})json";

Result<ModelSpec> from_hf_config(const std::string& name, const char* config_text,
                                 int64_t seq_len) {
  std::string source = fmt::format("preset '{}'", name);
  MOTLEY_ASSIGN_OR_RETURN(Json config, parse_json(config_text, source));
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec model, import_hf_config(config, source));
  model.name = name;
  model.default_seq_len = seq_len;
  // Trained in bf16 whatever dtype the checkpoint was saved in.
  model.dtype = DType::kBFloat16;
  return model;
}

// ---------------------------------------------------------------------------------------------
// Builders for the presets that are not a single Hugging Face config. Layer names follow the
// importer's ("embed", "layers.<i>", "layers.<i>.<part>", "head") so reports read alike.

AttentionShape attention_shape(int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  AttentionShape a;
  a.hidden = hidden;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = head_dim;
  return a;
}

FeedForwardShape ffn_shape(int64_t hidden, int64_t ffn_size, Activation activation) {
  FeedForwardShape f;
  f.hidden = hidden;
  f.ffn_size = ffn_size;
  f.activation = activation;
  return f;
}

Layer head_layer(int64_t vocab, int64_t hidden, bool tied) {
  Layer l;
  l.name = "head";
  l.kind = LayerKind::kHead;
  l.head = HeadShape{vocab, hidden, tied};
  l.num_norms = 1;  // the final norm
  return l;
}

Layer decoder_block(int index, const AttentionShape& attention, const FeedForwardShape& ffn) {
  Layer l;
  l.name = "layers." + std::to_string(index);
  l.kind = LayerKind::kDecoderBlock;
  l.attention = attention;
  l.ffn = ffn;
  l.num_norms = 2;
  return l;
}

ModelSpec tiny_model(const std::string& name) {
  ModelSpec m;
  m.name = name;
  m.family = "preset";
  m.default_seq_len = 64;
  // Small enough to train on a CPU, where fp32 is the natural type.
  m.dtype = DType::kFloat32;
  return m;
}

// Byte-level vocabulary and width shared by the tiny models.
constexpr int64_t kTinyVocab = 256;
constexpr int64_t kTinyHidden = 64;

AttentionShape tiny_attention() { return attention_shape(kTinyHidden, 4, 2, 16); }

Result<ModelSpec> tiny_llama() {
  ModelSpec m = tiny_model("tiny-llama");
  m.family = "llama";
  m.layers.push_back(embedding_layer(kTinyVocab, kTinyHidden));
  for (int i = 0; i < 4; ++i) {
    m.layers.push_back(
        decoder_block(i, tiny_attention(), ffn_shape(kTinyHidden, 176, Activation::kSwiGlu)));
  }
  m.layers.push_back(head_layer(kTinyVocab, kTinyHidden, /*tied=*/false));
  return m;
}

Result<ModelSpec> tiny_moe() {
  ModelSpec m = tiny_model("tiny-moe");
  m.family = "moe";
  m.layers.push_back(embedding_layer(kTinyVocab, kTinyHidden));
  MoeShape moe;
  moe.hidden = kTinyHidden;
  moe.num_experts = 4;
  moe.top_k = 2;
  moe.expert_ffn_size = 64;
  moe.num_shared_experts = 1;
  moe.shared_ffn_size = 64;
  moe.activation = Activation::kSwiGlu;
  for (int i = 0; i < 4; ++i) {
    Layer l;
    l.name = "layers." + std::to_string(i);
    l.kind = LayerKind::kDecoderBlock;
    l.attention = tiny_attention();
    l.moe = moe;
    l.num_norms = 2;
    m.layers.push_back(std::move(l));
  }
  m.layers.push_back(head_layer(kTinyVocab, kTinyHidden, /*tied=*/false));
  return m;
}

// Nemotron-H's split form in miniature: "M-*-M-" (Mamba-2, MLP, attention, MLP, Mamba-2, MLP).
Result<ModelSpec> tiny_hybrid() {
  ModelSpec m = tiny_model("tiny-hybrid");
  m.family = "hybrid";
  m.layers.push_back(embedding_layer(kTinyVocab, kTinyHidden));
  MambaShape mamba;
  mamba.version = 2;
  mamba.hidden = kTinyHidden;
  mamba.d_inner = 128;
  mamba.d_state = 16;
  mamba.n_groups = 1;
  mamba.n_heads = 8;
  mamba.head_dim = 16;
  mamba.conv_kernel = 4;
  mamba.chunk_size = 16;
  const std::string pattern = "M-*-M-";
  for (size_t i = 0; i < pattern.size(); ++i) {
    Layer l;
    l.num_norms = 1;
    switch (pattern[i]) {
      case 'M':
        l.name = "layers." + std::to_string(i) + ".mamba";
        l.kind = LayerKind::kMamba;
        l.mamba = mamba;
        break;
      case '*':
        l.name = "layers." + std::to_string(i) + ".attention";
        l.kind = LayerKind::kAttention;
        l.attention = tiny_attention();
        break;
      default:
        l.name = "layers." + std::to_string(i) + ".ffn";
        l.kind = LayerKind::kFeedForward;
        l.ffn = ffn_shape(kTinyHidden, 256, Activation::kRelu2);
        break;
    }
    m.layers.push_back(std::move(l));
  }
  m.layers.push_back(head_layer(kTinyVocab, kTinyHidden, /*tied=*/false));
  return m;
}

// Gemma 2 in miniature: even blocks see a 16-token window, odd blocks the whole sequence.
Result<ModelSpec> tiny_gemma() {
  ModelSpec m = tiny_model("tiny-gemma");
  m.family = "gemma2";
  m.layers.push_back(embedding_layer(kTinyVocab, kTinyHidden));
  for (int i = 0; i < 4; ++i) {
    AttentionShape a = tiny_attention();
    a.sliding_window = (i % 2 == 0) ? 16 : 0;
    Layer l = decoder_block(i, a, ffn_shape(kTinyHidden, 128, Activation::kGeGlu));
    l.num_norms = 4;  // pre- and post-norm around both sub-layers
    m.layers.push_back(std::move(l));
  }
  m.layers.push_back(head_layer(kTinyVocab, kTinyHidden, /*tied=*/true));
  return m;
}

// LLaVA-1.5-7B's shape: CLIP ViT-L/14 at 336 px (24 blocks, width 1024, 16 heads, MLP 4096,
// 576 patches + a class token) -> 2-layer GELU projector -> Vicuna-7B (Llama-2-7B shape).
Result<ModelSpec> llava_style_vlm() {
  ModelSpec m;
  m.name = "llava-style-vlm";
  m.family = "llava";
  m.default_seq_len = 2048;
  m.dtype = DType::kBFloat16;

  constexpr int64_t kVisionHidden = 1024;
  constexpr int64_t kPatches = int64_t{336 / 14} * (336 / 14);  // 576
  constexpr int64_t kVisionTokens = kPatches + 1;               // plus the class token

  Layer patches;
  patches.name = "vision.patch_embedding";
  patches.kind = LayerKind::kPatchEmbedding;
  patches.patch_embedding = PatchEmbeddingShape{3, 14, kVisionHidden, kVisionTokens};
  patches.num_norms = 1;  // CLIP's LayerNorm before the first block
  patches.norm_bias = true;
  patches.tokens_per_sample = kVisionTokens;
  m.layers.push_back(std::move(patches));

  for (int i = 0; i < 24; ++i) {
    Layer l;
    l.name = "vision.layers." + std::to_string(i);
    l.kind = LayerKind::kVisionBlock;
    AttentionShape a = attention_shape(kVisionHidden, 16, 16, 64);
    a.qkv_bias = true;
    a.output_bias = true;
    a.causal = false;
    l.attention = a;
    FeedForwardShape f = ffn_shape(kVisionHidden, 4096, Activation::kGelu);
    f.bias = true;
    l.ffn = f;
    l.num_norms = 2;
    l.norm_bias = true;
    l.tokens_per_sample = kVisionTokens;
    m.layers.push_back(std::move(l));
  }

  Layer projector;
  projector.name = "projector";
  projector.kind = LayerKind::kProjector;
  projector.projector = ProjectorShape{kVisionHidden, 4096, 4096};
  projector.tokens_per_sample = kPatches;  // the class token is dropped
  m.layers.push_back(std::move(projector));

  constexpr int64_t kVocab = 32000;
  constexpr int64_t kHidden = 4096;
  m.layers.push_back(embedding_layer(kVocab, kHidden));
  for (int i = 0; i < 32; ++i) {
    m.layers.push_back(decoder_block(i, attention_shape(kHidden, 32, 32, 128),
                                     ffn_shape(kHidden, 11008, Activation::kSwiGlu)));
  }
  m.layers.push_back(head_layer(kVocab, kHidden, /*tied=*/false));
  return m;
}

// A published model is its embedded config.json; the others have a builder.
struct Preset {
  const char* name;
  const char* hf_config;         // or nullptr
  Result<ModelSpec> (*build)();  // when hf_config is nullptr
};

// In the order `model_preset_names` lists them.
constexpr Preset kPresets[] = {
    {"llama-3-8b", kLlama3_8b, nullptr},
    {"llama-3-70b", kLlama3_70b, nullptr},
    {"mixtral-8x7b", kMixtral8x7b, nullptr},
    {"deepseek-v2-lite", kDeepSeekV2Lite, nullptr},
    {"gemma-2-9b", kGemma2_9b, nullptr},
    {"nemotron-h-8b", kNemotronH8b, nullptr},
    {"jamba-v0.1", kJamba, nullptr},
    {"jamba-mini", kJamba, nullptr},
    {"llava-style-vlm", nullptr, llava_style_vlm},
    {"tiny-llama", nullptr, tiny_llama},
    {"tiny-moe", nullptr, tiny_moe},
    {"tiny-hybrid", nullptr, tiny_hybrid},
    {"tiny-gemma", nullptr, tiny_gemma},
};

// Published models are trained here at this length unless the user asks for another.
constexpr int64_t kPublishedSeqLen = 4096;

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

Result<ModelSpec> model_preset(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const Preset& p : kPresets) {
    if (lower != p.name) continue;
    MOTLEY_ASSIGN_OR_RETURN(
        ModelSpec model,
        p.hf_config != nullptr ? from_hf_config(p.name, p.hf_config, kPublishedSeqLen) : p.build());
    MOTLEY_RETURN_IF_ERROR(validate_model(model, fmt::format("preset '{}'", p.name)));
    return model;
  }
  std::vector<std::string_view> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return not_found(
      fmt::format("no model preset named '{}'; presets: {}", name, fmt::join(names, ", ")));
}

}  // namespace motley
