#include "motley/model/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "motley/model/limits.h"
#include "motley/model/model_json.h"

// One rule set per model_type. Every default below is the one transformers'
// configuration_<family>.py applies when the key is absent; docs/hf-import.md lists them per
// family with the layer layout each family produces.

namespace motley {
namespace {

// Sequences longer than this are rarely what pre-training runs at, and a model's
// max_position_embeddings (often 128K) would make every default plan a long-context plan.
constexpr int64_t kMaxDefaultSeqLen = 4096;

using Keys = std::initializer_list<std::string_view>;

// ---------------------------------------------------------------------------------------------
// Field helpers. JsonField treats a null value as absent; a few keys need the difference
// (null means "none", absent means the family default).

bool key_present(const JsonField& c, std::string_view key) {
  return c.json().is_object() && c.json().find(key) != c.json().end();
}

bool key_null(const JsonField& c, std::string_view key) {
  if (!c.json().is_object()) return false;
  auto it = c.json().find(key);
  return it != c.json().end() && it->is_null();
}

// Every size and count the import reads is at most the largest of motley's size limits, so
// that the import's own arithmetic (expand x hidden_size, heads x head_dim) cannot overflow;
// validate_model then holds each field of the model to its own limit.
constexpr IntRange kSizes{1, kMaxVocab};
constexpr IntRange kOptionalSizes{0, kMaxVocab};

// The first of `keys` that is present and not null, read as a positive integer; `fallback` when
// none is, and an error naming the first key when there is no fallback either.
Result<int64_t> positive_from(const JsonField& c, Keys keys, std::optional<int64_t> fallback) {
  for (std::string_view key : keys) {
    if (c.has(key)) return c.get_int_in(key, kSizes);
  }
  if (fallback.has_value()) return *fallback;
  return c.child_error(*keys.begin(), "is missing");
}

Result<int64_t> required(const JsonField& c, std::string_view key) {
  return c.get_int_in(key, kSizes);
}

Result<int64_t> nonnegative_from(const JsonField& c, Keys keys, int64_t fallback) {
  for (std::string_view key : keys) {
    if (c.has(key)) return c.get_int_in(key, kOptionalSizes);
  }
  return fallback;
}

// A count of layers that the import turns into `per_layer` motley layers each, next to `fixed`
// others (the embedding and the head): read only up to what keeps the model within kMaxLayers,
// before any list is sized by it.
Result<int64_t> layer_count(const JsonField& c, std::string_view key, int64_t per_layer,
                            int64_t fixed) {
  return c.get_int_in(key, IntRange{1, (kMaxLayers - fixed) / per_layer});
}

Result<bool> bool_from(const JsonField& c, Keys keys, bool fallback) {
  for (std::string_view key : keys) {
    if (c.has(key)) return c.get_bool(key);
  }
  return fallback;
}

// A sliding-window size: `absent` when the key is missing, 0 (full attention) when null.
Result<int64_t> window_size(const JsonField& c, std::string_view key, int64_t absent) {
  if (!key_present(c, key)) return absent;
  if (key_null(c, key)) return 0;
  return c.get_nonnegative_int(key);
}

// An integer, or the string "auto" standing for `automatic`.
Result<int64_t> positive_or_auto(const JsonField& c, std::string_view key, int64_t automatic) {
  if (!c.has(key)) return automatic;
  MOTLEY_ASSIGN_OR_RETURN(JsonField f, c.get(key));
  if (f.json().is_string()) {
    if (f.json().get<std::string>() == "auto") return automatic;
    return f.error(fmt::format("expected a positive integer or \"auto\", got {}",
                               describe_json_value(f.json())));
  }
  return c.get_positive_int(key);
}

// Layer indices listed in an array (mlp_only_layers).
Result<std::vector<int64_t>> index_list(const JsonField& c, std::string_view key) {
  std::vector<int64_t> out;
  std::optional<JsonField> f = c.find(key);
  if (!f.has_value()) return out;
  MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> items, f->items());
  for (const JsonField& item : items) {
    MOTLEY_ASSIGN_OR_RETURN(int64_t v, item.as_int());
    if (v < 0) return item.error(fmt::format("expected a layer index >= 0, got {}", v));
    out.push_back(v);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Activations. transformers names them in ACT2FN; the gated families (SwiGLU, GeGLU) multiply
// the activated gate projection with an up projection.

const std::vector<std::string>& known_activation_names() {
  static const std::vector<std::string> kNames = {
      "silu",      "swish",       "gelu",          "gelu_new", "gelu_pytorch_tanh",
      "gelu_fast", "gelu_python", "gelu_accurate", "relu",     "relu2"};
  return kNames;
}

Result<Activation> activation_from(const JsonField& c, Keys keys, std::string fallback,
                                   bool gated) {
  std::string name = std::move(fallback);
  std::string field(*keys.begin());
  for (std::string_view key : keys) {
    if (c.has(key)) {
      MOTLEY_ASSIGN_OR_RETURN(name, c.get_string(key));
      field = std::string(key);
      break;
    }
  }
  const bool silu = name == "silu" || name == "swish";
  const bool gelu = name.rfind("gelu", 0) == 0 &&
                    std::find(known_activation_names().begin(), known_activation_names().end(),
                              name) != known_activation_names().end();
  if (gated) {
    if (silu) return Activation::kSwiGlu;
    if (gelu) return Activation::kGeGlu;
    if (name == "relu" || name == "relu2") {
      return c.child_error(
          field, fmt::format("a gated feed-forward needs silu, swish or a gelu variant, got \"{}\"",
                             name));
    }
  } else {
    if (silu) return Activation::kSilu;
    if (gelu) return Activation::kGelu;
    if (name == "relu") return Activation::kRelu;
    if (name == "relu2") return Activation::kRelu2;
  }
  return c.child_error(field, fmt::format("unsupported activation \"{}\"; allowed: {}", name,
                                          join_alternatives(known_activation_names())));
}

// ---------------------------------------------------------------------------------------------
// Shapes shared by the decoder-only families.

struct Dims {
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

// Attention head counts: `kv_default` when num_key_value_heads is absent (nullopt: the number
// of attention heads, as transformers does for a null value), `head_dim_default` when none of
// `head_dim_keys` is present (nullopt: hidden_size / num_attention_heads).
Result<Dims> attention_dims(const JsonField& c, int64_t hidden, std::optional<int64_t> kv_default,
                            std::optional<int64_t> head_dim_default,
                            Keys head_dim_keys = {"head_dim"}) {
  Dims d;
  d.hidden = hidden;
  MOTLEY_ASSIGN_OR_RETURN(d.heads, required(c, "num_attention_heads"));
  if (c.has("num_key_value_heads")) {
    MOTLEY_ASSIGN_OR_RETURN(d.kv_heads, c.get_positive_int("num_key_value_heads"));
  } else if (key_null(c, "num_key_value_heads") || !kv_default.has_value()) {
    d.kv_heads = d.heads;
  } else {
    d.kv_heads = *kv_default;
  }
  if (d.heads % d.kv_heads != 0) {
    const std::string why = c.has("num_key_value_heads")
                                ? std::string()
                                : std::string(" (the family's default for an absent key)");
    return c.child_error(
        "num_key_value_heads",
        fmt::format("must divide num_attention_heads ({}), got {}{}", d.heads, d.kv_heads, why));
  }
  std::optional<int64_t> fallback = head_dim_default;
  if (!fallback.has_value() && hidden % d.heads == 0) fallback = hidden / d.heads;
  if (!fallback.has_value()) {
    bool given = false;
    for (std::string_view key : head_dim_keys) given = given || c.has(key);
    if (!given) {
      return c.child_error("num_attention_heads",
                           fmt::format("hidden_size ({}) is not a multiple of {} heads; the "
                                       "config needs a head_dim",
                                       hidden, d.heads));
    }
  }
  MOTLEY_ASSIGN_OR_RETURN(d.head_dim, positive_from(c, head_dim_keys, fallback));
  return d;
}

Result<Dims> decoder_dims(const JsonField& c, std::optional<int64_t> kv_default,
                          std::optional<int64_t> head_dim_default) {
  MOTLEY_ASSIGN_OR_RETURN(int64_t vocab, required(c, "vocab_size"));
  MOTLEY_ASSIGN_OR_RETURN(int64_t hidden, required(c, "hidden_size"));
  MOTLEY_ASSIGN_OR_RETURN(int64_t layers, layer_count(c, "num_hidden_layers", 1, 2));
  MOTLEY_ASSIGN_OR_RETURN(Dims d, attention_dims(c, hidden, kv_default, head_dim_default));
  d.vocab = vocab;
  d.layers = layers;
  return d;
}

AttentionShape attention_shape(const Dims& d, bool qkv_bias, bool output_bias) {
  AttentionShape a;
  a.hidden = d.hidden;
  a.num_heads = d.heads;
  a.num_kv_heads = d.kv_heads;
  a.head_dim = d.head_dim;
  a.qkv_bias = qkv_bias;
  a.output_bias = output_bias;
  return a;
}

FeedForwardShape ffn_shape(int64_t hidden, int64_t size, Activation activation, bool bias) {
  FeedForwardShape f;
  f.hidden = hidden;
  f.ffn_size = size;
  f.activation = activation;
  f.bias = bias;
  return f;
}

Status check_top_k(const JsonField& c, std::string_view key, const MoeShape& m) {
  if (m.top_k > m.num_experts) {
    return c.child_error(key, fmt::format("routes each token to {} experts but there are only {}",
                                          m.top_k, m.num_experts));
  }
  return Status::ok();
}

// Sliding-window size per layer (0: full attention). `layer_types`, when present, decides which
// layers slide; otherwise `slides(i)`, the family's pattern.
Result<std::vector<int64_t>> layer_windows(const JsonField& c, int64_t layers, int64_t window,
                                           const std::function<bool(int64_t)>& slides) {
  std::vector<int64_t> out(static_cast<size_t>(layers), 0);
  std::optional<JsonField> types = c.find("layer_types");
  if (types.has_value()) {
    MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> items, types->items());
    if (static_cast<int64_t>(items.size()) != layers) {
      return types->error(fmt::format(
          "expected one entry per layer (num_hidden_layers = {}), got {}", layers, items.size()));
    }
    for (size_t i = 0; i < items.size(); ++i) {
      MOTLEY_ASSIGN_OR_RETURN(std::string type, items[i].as_string());
      if (type == "sliding_attention") {
        out[i] = window;
      } else if (type != "full_attention") {
        return items[i].error(fmt::format(
            "unsupported layer type \"{}\"; allowed: full_attention or sliding_attention", type));
      }
    }
    return out;
  }
  for (int64_t i = 0; i < layers; ++i) {
    if (slides(i)) out[static_cast<size_t>(i)] = window;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Layers.

Layer head_layer(std::string name, int64_t vocab, int64_t hidden, bool tied) {
  Layer l;
  l.name = std::move(name);
  l.kind = LayerKind::kHead;
  l.head = HeadShape{vocab, hidden, tied};
  l.num_norms = 1;  // the final norm
  return l;
}

std::string layer_name(int64_t i) { return "layers." + std::to_string(i); }

Layer decoder_block(int64_t index, AttentionShape attention, std::optional<FeedForwardShape> ffn,
                    std::optional<MoeShape> moe, int64_t norms) {
  Layer l;
  l.name = layer_name(index);
  l.kind = LayerKind::kDecoderBlock;
  l.attention = attention;
  l.ffn = ffn;
  l.moe = moe;
  l.num_norms = norms;
  return l;
}

// One sub-layer with its single pre-norm, named layers.<i>.<part> (hybrid models).
Layer split_layer(int64_t index, std::string_view part, LayerKind kind) {
  Layer l;
  l.name = layer_name(index);
  if (!part.empty()) l.name += "." + std::string(part);
  l.kind = kind;
  l.num_norms = 1;
  return l;
}

// What every decoder layer of a transformer family holds.
struct Blocks {
  AttentionShape attention;
  std::vector<int64_t> windows;  // per layer
  std::optional<FeedForwardShape> dense;
  std::optional<MoeShape> moe;
  std::vector<bool> moe_layers;  // per layer; empty: none
  int64_t norms = 2;
};

void add_transformer(ModelSpec& spec, const Dims& d, const Blocks& b, bool tied) {
  spec.layers.push_back(embedding_layer(d.vocab, d.hidden));
  for (int64_t i = 0; i < d.layers; ++i) {
    AttentionShape a = b.attention;
    if (!b.windows.empty()) a.sliding_window = b.windows[static_cast<size_t>(i)];
    const bool moe = !b.moe_layers.empty() && b.moe_layers[static_cast<size_t>(i)];
    spec.layers.push_back(
        decoder_block(i, a, moe ? std::nullopt : b.dense, moe ? b.moe : std::nullopt, b.norms));
  }
  spec.layers.push_back(head_layer("head", d.vocab, d.hidden, tied));
}

// ---------------------------------------------------------------------------------------------
// Families.

using Builder = Result<ModelSpec> (*)(const JsonField& c, ModelSpec spec);

Result<ModelSpec> import_llama(const JsonField& c, ModelSpec spec) {
  MOTLEY_ASSIGN_OR_RETURN(Dims d, decoder_dims(c, std::nullopt, std::nullopt));
  MOTLEY_ASSIGN_OR_RETURN(int64_t ffn, required(c, "intermediate_size"));
  MOTLEY_ASSIGN_OR_RETURN(bool attention_bias, c.get_bool_or("attention_bias", false));
  MOTLEY_ASSIGN_OR_RETURN(bool mlp_bias, c.get_bool_or("mlp_bias", false));
  MOTLEY_ASSIGN_OR_RETURN(bool tied, c.get_bool_or("tie_word_embeddings", false));
  MOTLEY_ASSIGN_OR_RETURN(Activation act, activation_from(c, {"hidden_act"}, "silu", true));
  Blocks b;
  b.attention = attention_shape(d, attention_bias, attention_bias);
  b.dense = ffn_shape(d.hidden, ffn, act, mlp_bias);
  add_transformer(spec, d, b, tied);
  return spec;
}

// Mistral and Mixtral: no biases, one window size on every layer.
Result<ModelSpec> import_mistral_like(const JsonField& c, ModelSpec spec, int64_t default_window,
                                      bool moe) {
  MOTLEY_ASSIGN_OR_RETURN(Dims d, decoder_dims(c, /*kv_default=*/8, std::nullopt));
  MOTLEY_ASSIGN_OR_RETURN(int64_t ffn, required(c, "intermediate_size"));
  MOTLEY_ASSIGN_OR_RETURN(bool tied, c.get_bool_or("tie_word_embeddings", false));
  MOTLEY_ASSIGN_OR_RETURN(Activation act, activation_from(c, {"hidden_act"}, "silu", true));
  MOTLEY_ASSIGN_OR_RETURN(int64_t window, window_size(c, "sliding_window", default_window));
  Blocks b;
  b.attention = attention_shape(d, false, false);
  b.windows.assign(static_cast<size_t>(d.layers), window);
  if (moe) {
    MoeShape m;
    m.hidden = d.hidden;
    MOTLEY_ASSIGN_OR_RETURN(m.num_experts, positive_from(c, {"num_local_experts"}, 8));
    MOTLEY_ASSIGN_OR_RETURN(m.top_k, positive_from(c, {"num_experts_per_tok"}, 2));
    MOTLEY_RETURN_IF_ERROR(check_top_k(c, "num_experts_per_tok", m));
    m.expert_ffn_size = ffn;
    m.activation = act;
    b.moe = m;
    b.moe_layers.assign(static_cast<size_t>(d.layers), true);
  } else {
    b.dense = ffn_shape(d.hidden, ffn, act, false);
  }
  add_transformer(spec, d, b, tied);
  return spec;
}

Result<ModelSpec> import_mistral(const JsonField& c, ModelSpec spec) {
  return import_mistral_like(c, std::move(spec), 4096, /*moe=*/false);
}

Result<ModelSpec> import_mixtral(const JsonField& c, ModelSpec spec) {
  return import_mistral_like(c, std::move(spec), 0, /*moe=*/true);
}

// The Qwen families: Qwen2 (q/k/v biases always), Qwen2-MoE (q/k/v biases, shared expert with
// a gate), Qwen3 and Qwen3-MoE (per-head q/k norms, optional attention_bias).
enum class Qwen { k2, k2Moe, k3, k3Moe };

Result<ModelSpec> import_qwen(const JsonField& c, ModelSpec spec, Qwen version) {
  const bool qwen3 = version == Qwen::k3 || version == Qwen::k3Moe;
  const bool moe = version == Qwen::k2Moe || version == Qwen::k3Moe;
  std::optional<int64_t> kv_default;
  if (version == Qwen::k2) kv_default = 32;
  if (version == Qwen::k2Moe) kv_default = 16;
  if (version == Qwen::k3) kv_default = 32;
  if (version == Qwen::k3Moe) kv_default = 4;
  std::optional<int64_t> head_dim_default;
  if (version == Qwen::k3) head_dim_default = 128;
  MOTLEY_ASSIGN_OR_RETURN(Dims d, decoder_dims(c, kv_default, head_dim_default));
  MOTLEY_ASSIGN_OR_RETURN(bool tied, c.get_bool_or("tie_word_embeddings", false));
  MOTLEY_ASSIGN_OR_RETURN(Activation act, activation_from(c, {"hidden_act"}, "silu", true));

  bool qkv_bias = true;
  bool output_bias = false;
  if (version == Qwen::k2Moe) {
    MOTLEY_ASSIGN_OR_RETURN(qkv_bias, c.get_bool_or("qkv_bias", true));
  } else if (qwen3) {
    MOTLEY_ASSIGN_OR_RETURN(qkv_bias, c.get_bool_or("attention_bias", false));
    output_bias = qkv_bias;
  }
  Blocks b;
  b.attention = attention_shape(d, qkv_bias, output_bias);
  b.attention.qk_norm = qwen3;

  MOTLEY_ASSIGN_OR_RETURN(bool use_sliding, c.get_bool_or("use_sliding_window", false));
  MOTLEY_ASSIGN_OR_RETURN(int64_t window, window_size(c, "sliding_window", 4096));
  MOTLEY_ASSIGN_OR_RETURN(int64_t max_window_layers,
                          nonnegative_from(c, {"max_window_layers"}, 28));
  if (!use_sliding) window = 0;
  std::function<bool(int64_t)> slides = [&](int64_t i) { return i >= max_window_layers; };
  if (version == Qwen::k2Moe) {
    slides = [&](int64_t i) { return (i + 1) % 2 != 0 && i < max_window_layers; };
  } else if (version == Qwen::k3Moe) {
    slides = [](int64_t) { return true; };
  }
  MOTLEY_ASSIGN_OR_RETURN(b.windows, layer_windows(c, d.layers, window, slides));

  bool any_dense = !moe;
  if (moe) {
    MoeShape m;
    m.hidden = d.hidden;
    m.activation = act;
    MOTLEY_ASSIGN_OR_RETURN(m.num_experts,
                            nonnegative_from(c, {"num_experts"}, moe && qwen3 ? 128 : 60));
    MOTLEY_ASSIGN_OR_RETURN(m.top_k, positive_from(c, {"num_experts_per_tok"}, qwen3 ? 8 : 4));
    MOTLEY_ASSIGN_OR_RETURN(m.expert_ffn_size,
                            positive_from(c, {"moe_intermediate_size"}, qwen3 ? 768 : 1408));
    if (version == Qwen::k2Moe) {
      MOTLEY_ASSIGN_OR_RETURN(m.shared_ffn_size,
                              nonnegative_from(c, {"shared_expert_intermediate_size"}, 5632));
      m.num_shared_experts = m.shared_ffn_size > 0 ? 1 : 0;
      m.shared_expert_gate = m.num_shared_experts > 0;
    }
    MOTLEY_ASSIGN_OR_RETURN(int64_t step, positive_from(c, {"decoder_sparse_step"}, 1));
    MOTLEY_ASSIGN_OR_RETURN(std::vector<int64_t> mlp_only, index_list(c, "mlp_only_layers"));
    if (m.num_experts > 0) MOTLEY_RETURN_IF_ERROR(check_top_k(c, "num_experts_per_tok", m));
    b.moe_layers.assign(static_cast<size_t>(d.layers), false);
    for (int64_t i = 0; i < d.layers; ++i) {
      const bool sparse = m.num_experts > 0 && (i + 1) % step == 0 &&
                          std::find(mlp_only.begin(), mlp_only.end(), i) == mlp_only.end();
      b.moe_layers[static_cast<size_t>(i)] = sparse;
      any_dense = any_dense || !sparse;
    }
    b.moe = m;
  }
  if (any_dense) {
    MOTLEY_ASSIGN_OR_RETURN(int64_t ffn, required(c, "intermediate_size"));
    b.dense = ffn_shape(d.hidden, ffn, act, false);
  }
  add_transformer(spec, d, b, tied);
  return spec;
}

Result<ModelSpec> import_qwen2(const JsonField& c, ModelSpec spec) {
  return import_qwen(c, std::move(spec), Qwen::k2);
}
Result<ModelSpec> import_qwen2_moe(const JsonField& c, ModelSpec spec) {
  return import_qwen(c, std::move(spec), Qwen::k2Moe);
}
Result<ModelSpec> import_qwen3(const JsonField& c, ModelSpec spec) {
  return import_qwen(c, std::move(spec), Qwen::k3);
}
Result<ModelSpec> import_qwen3_moe(const JsonField& c, ModelSpec spec) {
  return import_qwen(c, std::move(spec), Qwen::k3Moe);
}

// The Gemma families: GeGLU, tied embeddings, head_dim 256. Gemma 2 and 3 add a post-norm
// after attention and around the feed-forward network (4 norms per block) and alternate
// sliding-window and full layers; Gemma 3 adds per-head q/k norms.
enum class Gemma { k1, k2, k3 };

Result<ModelSpec> import_gemma(const JsonField& c, ModelSpec spec, Gemma version) {
  std::optional<int64_t> kv_default = version == Gemma::k1 ? 16 : version == Gemma::k2 ? 8 : 4;
  MOTLEY_ASSIGN_OR_RETURN(Dims d, decoder_dims(c, kv_default, /*head_dim_default=*/256));
  MOTLEY_ASSIGN_OR_RETURN(int64_t ffn, required(c, "intermediate_size"));
  MOTLEY_ASSIGN_OR_RETURN(bool tied, c.get_bool_or("tie_word_embeddings", true));
  MOTLEY_ASSIGN_OR_RETURN(bool attention_bias, c.get_bool_or("attention_bias", false));
  MOTLEY_ASSIGN_OR_RETURN(Activation act, activation_from(c, {"hidden_activation", "hidden_act"},
                                                          "gelu_pytorch_tanh", true));
  Blocks b;
  b.attention = attention_shape(d, attention_bias, attention_bias);
  b.dense = ffn_shape(d.hidden, ffn, act, false);
  if (version != Gemma::k1) {
    b.norms = 4;
    MOTLEY_ASSIGN_OR_RETURN(int64_t window, window_size(c, "sliding_window", 4096));
    std::function<bool(int64_t)> slides = [](int64_t i) { return i % 2 == 0; };
    int64_t pattern = 0;
    if (version == Gemma::k3) {
      b.attention.qk_norm = true;
      MOTLEY_ASSIGN_OR_RETURN(
          pattern, positive_from(c, {"sliding_window_pattern", "_sliding_window_pattern"}, 6));
      slides = [&pattern](int64_t i) { return (i + 1) % pattern != 0; };
    }
    MOTLEY_ASSIGN_OR_RETURN(b.windows, layer_windows(c, d.layers, window, slides));
  }
  add_transformer(spec, d, b, tied);
  return spec;
}

Result<ModelSpec> import_gemma1(const JsonField& c, ModelSpec spec) {
  return import_gemma(c, std::move(spec), Gemma::k1);
}
Result<ModelSpec> import_gemma2(const JsonField& c, ModelSpec spec) {
  return import_gemma(c, std::move(spec), Gemma::k2);
}
Result<ModelSpec> import_gemma3_text(const JsonField& c, ModelSpec spec) {
  return import_gemma(c, std::move(spec), Gemma::k3);
}

// Phi-3: fused qkv_proj and gate_up_proj, which hold the same weights as separate projections.
Result<ModelSpec> import_phi3(const JsonField& c, ModelSpec spec) {
  MOTLEY_ASSIGN_OR_RETURN(Dims d, decoder_dims(c, std::nullopt, std::nullopt));
  MOTLEY_ASSIGN_OR_RETURN(int64_t ffn, required(c, "intermediate_size"));
  MOTLEY_ASSIGN_OR_RETURN(bool tied, c.get_bool_or("tie_word_embeddings", false));
  MOTLEY_ASSIGN_OR_RETURN(Activation act, activation_from(c, {"hidden_act"}, "silu", true));
  MOTLEY_ASSIGN_OR_RETURN(int64_t window, window_size(c, "sliding_window", 0));
  Blocks b;
  b.attention = attention_shape(d, false, false);
  b.windows.assign(static_cast<size_t>(d.layers), window);
  b.dense = ffn_shape(d.hidden, ffn, act, false);
  add_transformer(spec, d, b, tied);
  return spec;
}

// gpt-oss: biased attention with a learned sink per head, alternating sliding and full
// layers, every layer an MoE with biased experts and a biased router.
Result<ModelSpec> import_gpt_oss(const JsonField& c, ModelSpec spec) {
  MOTLEY_ASSIGN_OR_RETURN(Dims d, decoder_dims(c, /*kv_default=*/8, /*head_dim_default=*/64));
  MOTLEY_ASSIGN_OR_RETURN(int64_t ffn, required(c, "intermediate_size"));
  MOTLEY_ASSIGN_OR_RETURN(bool tied, c.get_bool_or("tie_word_embeddings", false));
  MOTLEY_ASSIGN_OR_RETURN(bool attention_bias, c.get_bool_or("attention_bias", true));
  MOTLEY_ASSIGN_OR_RETURN(Activation act, activation_from(c, {"hidden_act"}, "silu", true));
  MOTLEY_ASSIGN_OR_RETURN(int64_t window, window_size(c, "sliding_window", 128));
  Blocks b;
  b.attention = attention_shape(d, attention_bias, attention_bias);
  b.attention.sinks = true;
  MOTLEY_ASSIGN_OR_RETURN(b.windows,
                          layer_windows(c, d.layers, window, [](int64_t i) { return i % 2 == 0; }));
  MoeShape m;
  m.hidden = d.hidden;
  MOTLEY_ASSIGN_OR_RETURN(m.num_experts, positive_from(c, {"num_local_experts"}, 128));
  MOTLEY_ASSIGN_OR_RETURN(m.top_k,
                          positive_from(c, {"num_experts_per_tok", "experts_per_token"}, 4));
  MOTLEY_RETURN_IF_ERROR(check_top_k(c, "num_experts_per_tok", m));
  m.expert_ffn_size = ffn;
  m.activation = act;
  m.expert_bias = true;
  m.router_bias = true;
  b.moe = m;
  b.moe_layers.assign(static_cast<size_t>(d.layers), true);
  add_transformer(spec, d, b, tied);
  return spec;
}

// DeepSeek-V2 and V3: multi-head latent attention; the first first_k_dense_replace layers are
// dense, then every moe_layer_freq-th layer is an MoE with shared experts. V3's multi-token
// prediction modules go to extra_layers.
Result<ModelSpec> import_deepseek(const JsonField& c, ModelSpec spec, bool v3) {
  MOTLEY_ASSIGN_OR_RETURN(int64_t vocab, required(c, "vocab_size"));
  MOTLEY_ASSIGN_OR_RETURN(int64_t hidden, required(c, "hidden_size"));
  MOTLEY_ASSIGN_OR_RETURN(int64_t layers, layer_count(c, "num_hidden_layers", 1, 2));
  MOTLEY_ASSIGN_OR_RETURN(int64_t heads, required(c, "num_attention_heads"));
  MOTLEY_ASSIGN_OR_RETURN(bool tied, c.get_bool_or("tie_word_embeddings", false));
  MOTLEY_ASSIGN_OR_RETURN(bool attention_bias, c.get_bool_or("attention_bias", false));
  MOTLEY_ASSIGN_OR_RETURN(Activation act, activation_from(c, {"hidden_act"}, "silu", true));

  AttentionShape a;
  a.hidden = hidden;
  a.num_heads = heads;
  a.num_kv_heads = heads;  // every head has its own key and value, from the shared latent
  a.mla = true;
  a.qkv_bias = attention_bias;
  a.output_bias = attention_bias;
  // A null q_lora_rank (DeepSeek-V2-Lite) projects queries directly.
  if (key_null(c, "q_lora_rank")) {
    a.q_lora_rank = 0;
  } else {
    MOTLEY_ASSIGN_OR_RETURN(a.q_lora_rank, nonnegative_from(c, {"q_lora_rank"}, 1536));
  }
  MOTLEY_ASSIGN_OR_RETURN(a.kv_lora_rank, positive_from(c, {"kv_lora_rank"}, 512));
  MOTLEY_ASSIGN_OR_RETURN(a.qk_nope_head_dim, positive_from(c, {"qk_nope_head_dim"}, 128));
  MOTLEY_ASSIGN_OR_RETURN(a.qk_rope_head_dim, positive_from(c, {"qk_rope_head_dim"}, 64));
  MOTLEY_ASSIGN_OR_RETURN(a.v_head_dim, positive_from(c, {"v_head_dim"}, 128));
  a.head_dim = a.qk_nope_head_dim + a.qk_rope_head_dim;

  std::optional<MoeShape> moe;
  int64_t first_dense = 0;
  int64_t frequency = 1;
  if (c.has("n_routed_experts") || (v3 && !key_null(c, "n_routed_experts"))) {
    MoeShape m;
    m.hidden = hidden;
    m.activation = act;
    MOTLEY_ASSIGN_OR_RETURN(m.num_experts, positive_from(c, {"n_routed_experts"}, 256));
    MOTLEY_ASSIGN_OR_RETURN(m.top_k, positive_from(c, {"num_experts_per_tok"},
                                                   v3 ? std::optional<int64_t>(8) : std::nullopt));
    MOTLEY_RETURN_IF_ERROR(check_top_k(c, "num_experts_per_tok", m));
    MOTLEY_ASSIGN_OR_RETURN(m.expert_ffn_size,
                            positive_from(c, {"moe_intermediate_size"}, v3 ? 2048 : 1407));
    MOTLEY_ASSIGN_OR_RETURN(m.num_shared_experts,
                            nonnegative_from(c, {"n_shared_experts"}, v3 ? 1 : 0));
    m.shared_ffn_size = m.num_shared_experts > 0 ? m.expert_ffn_size : 0;
    // The aux-loss-free balancing of V3 ("noaux_tc") adds a learned bias per expert.
    MOTLEY_ASSIGN_OR_RETURN(std::string method,
                            c.get_string_or("topk_method", v3 ? "noaux_tc" : "greedy"));
    m.router_bias = method == "noaux_tc";
    MOTLEY_ASSIGN_OR_RETURN(first_dense,
                            nonnegative_from(c, {"first_k_dense_replace"}, v3 ? 3 : 0));
    MOTLEY_ASSIGN_OR_RETURN(frequency, positive_from(c, {"moe_layer_freq"}, 1));
    moe = m;
  }
  auto is_moe = [&](int64_t i) {
    return moe.has_value() && i >= first_dense && i % frequency == 0;
  };

  int64_t mtp = 0;
  if (v3) {
    // Each module is three extra layers.
    MOTLEY_ASSIGN_OR_RETURN(mtp, c.get_int_in_or("num_nextn_predict_layers",
                                                 IntRange{0, (kMaxLayers - 2 - layers) / 3}, 0));
  }
  bool any_dense = false;
  for (int64_t i = 0; i < layers + mtp; ++i) any_dense = any_dense || !is_moe(i);
  std::optional<FeedForwardShape> dense;
  if (any_dense) {
    MOTLEY_ASSIGN_OR_RETURN(int64_t ffn, required(c, "intermediate_size"));
    dense = ffn_shape(hidden, ffn, act, false);
  }

  spec.layers.push_back(embedding_layer(vocab, hidden));
  for (int64_t i = 0; i < layers; ++i) {
    spec.layers.push_back(
        decoder_block(i, a, is_moe(i) ? std::nullopt : dense, is_moe(i) ? moe : std::nullopt, 2));
  }
  spec.layers.push_back(head_layer("head", vocab, hidden, tied));

  // Each multi-token-prediction module: RMSNorms of the next token's embedding and of the
  // hidden state (enorm, hnorm), their concatenation projected back to hidden (eh_proj), one
  // decoder block (index num_hidden_layers + k by the same dense/MoE rule) and a final norm
  // before the LM head it shares with the main model, as it shares the embedding.
  for (int64_t k = 0; k < mtp; ++k) {
    const std::string prefix = "mtp." + std::to_string(k);
    Layer proj;
    proj.name = prefix + ".proj";
    proj.kind = LayerKind::kProjector;
    proj.projector = ProjectorShape{2 * hidden, hidden, 0, /*bias=*/false};
    proj.num_norms = 1;  // enorm and hnorm: one weight per element of the 2h-wide input
    spec.extra_layers.push_back(proj);
    Layer block = decoder_block(layers + k, a, is_moe(layers + k) ? std::nullopt : dense,
                                is_moe(layers + k) ? moe : std::nullopt, 2);
    block.name = prefix + ".block";
    spec.extra_layers.push_back(block);
    spec.extra_layers.push_back(head_layer(prefix + ".head", vocab, hidden, /*tied=*/true));
  }
  return spec;
}

Result<ModelSpec> import_deepseek_v2(const JsonField& c, ModelSpec spec) {
  return import_deepseek(c, std::move(spec), /*v3=*/false);
}
Result<ModelSpec> import_deepseek_v3(const JsonField& c, ModelSpec spec) {
  return import_deepseek(c, std::move(spec), /*v3=*/true);
}

// Mamba-1 mixer as Jamba and Falcon-Mamba build it.
MambaShape mamba1_shape(int64_t hidden, int64_t inner, int64_t state, int64_t kernel,
                        int64_t dt_rank, bool conv_bias, bool proj_bias, bool inner_norms) {
  MambaShape m;
  m.version = 1;
  m.hidden = hidden;
  m.d_inner = inner;
  m.d_state = state;
  m.conv_kernel = kernel;
  m.dt_rank = dt_rank;
  m.conv_bias = conv_bias;
  m.proj_bias = proj_bias;
  m.gated_norm = false;
  m.inner_norms = inner_norms;
  return m;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Jamba: layer i is attention when i % attn_layer_period == attn_layer_offset, else a Mamba-1
// mixer; its feed-forward part is an MoE when i % expert_layer_period == expert_layer_offset.
// Attention layers become decoder blocks; Mamba layers split into mixer and feed-forward.
Result<ModelSpec> import_jamba(const JsonField& c, ModelSpec spec) {
  MOTLEY_ASSIGN_OR_RETURN(Dims d, decoder_dims(c, /*kv_default=*/8, std::nullopt));
  // A Mamba layer becomes two: the mixer and its feed-forward part.
  MOTLEY_RETURN_IF_ERROR(layer_count(c, "num_hidden_layers", 2, 2).status());
  MOTLEY_ASSIGN_OR_RETURN(int64_t ffn, required(c, "intermediate_size"));
  MOTLEY_ASSIGN_OR_RETURN(bool tied, c.get_bool_or("tie_word_embeddings", false));
  MOTLEY_ASSIGN_OR_RETURN(Activation act, activation_from(c, {"hidden_act"}, "silu", true));
  MOTLEY_ASSIGN_OR_RETURN(int64_t window, window_size(c, "sliding_window", 0));
  MOTLEY_ASSIGN_OR_RETURN(int64_t attn_period, positive_from(c, {"attn_layer_period"}, 8));
  MOTLEY_ASSIGN_OR_RETURN(int64_t attn_offset, nonnegative_from(c, {"attn_layer_offset"}, 4));
  MOTLEY_ASSIGN_OR_RETURN(int64_t expert_period, positive_from(c, {"expert_layer_period"}, 2));
  MOTLEY_ASSIGN_OR_RETURN(int64_t expert_offset, nonnegative_from(c, {"expert_layer_offset"}, 1));
  if (attn_offset >= attn_period) {
    return c.child_error(
        "attn_layer_offset",
        fmt::format("must be less than attn_layer_period ({}), got {}", attn_period, attn_offset));
  }
  if (expert_offset >= expert_period) {
    return c.child_error("expert_layer_offset",
                         fmt::format("must be less than expert_layer_period ({}), got {}",
                                     expert_period, expert_offset));
  }
  MoeShape m;
  m.hidden = d.hidden;
  m.activation = act;
  m.expert_ffn_size = ffn;
  MOTLEY_ASSIGN_OR_RETURN(m.num_experts, positive_from(c, {"num_experts"}, 16));
  MOTLEY_ASSIGN_OR_RETURN(m.top_k, positive_from(c, {"num_experts_per_tok"}, 2));
  MOTLEY_RETURN_IF_ERROR(check_top_k(c, "num_experts_per_tok", m));

  MOTLEY_ASSIGN_OR_RETURN(int64_t state, positive_from(c, {"mamba_d_state"}, 16));
  MOTLEY_ASSIGN_OR_RETURN(int64_t kernel, positive_from(c, {"mamba_d_conv"}, 4));
  MOTLEY_ASSIGN_OR_RETURN(int64_t expand, positive_from(c, {"mamba_expand"}, 2));
  MOTLEY_ASSIGN_OR_RETURN(int64_t dt_rank,
                          positive_or_auto(c, "mamba_dt_rank", ceil_div(d.hidden, 16)));
  MOTLEY_ASSIGN_OR_RETURN(bool conv_bias, c.get_bool_or("mamba_conv_bias", true));
  MOTLEY_ASSIGN_OR_RETURN(bool proj_bias, c.get_bool_or("mamba_proj_bias", false));
  MOTLEY_ASSIGN_OR_RETURN(bool inner_norms, c.get_bool_or("mamba_inner_layernorms", true));
  const MambaShape mixer = mamba1_shape(d.hidden, expand * d.hidden, state, kernel, dt_rank,
                                        conv_bias, proj_bias, inner_norms);
  AttentionShape a = attention_shape(d, false, false);
  a.sliding_window = window;
  const FeedForwardShape dense = ffn_shape(d.hidden, ffn, act, false);

  spec.layers.push_back(embedding_layer(d.vocab, d.hidden));
  for (int64_t i = 0; i < d.layers; ++i) {
    const bool moe = m.num_experts > 1 && i % expert_period == expert_offset;
    if (i % attn_period == attn_offset) {
      spec.layers.push_back(decoder_block(i, a, moe ? std::nullopt : std::optional(dense),
                                          moe ? std::optional(m) : std::nullopt, 2));
      continue;
    }
    Layer mamba = split_layer(i, "mamba", LayerKind::kMamba);
    mamba.mamba = mixer;
    spec.layers.push_back(mamba);
    if (moe) {
      Layer l = split_layer(i, "moe", LayerKind::kMoe);
      l.moe = m;
      spec.layers.push_back(l);
    } else {
      Layer l = split_layer(i, "ffn", LayerKind::kFeedForward);
      l.ffn = dense;
      spec.layers.push_back(l);
    }
  }
  spec.layers.push_back(head_layer("head", d.vocab, d.hidden, tied));
  return spec;
}

// A Nemotron-H pattern's symbols, one layer each, next to the embedding and the head.
constexpr size_t kMaxNemotronPattern = kMaxLayers - 2;

std::string too_many_symbols(size_t n) {
  return fmt::format("gives {} layers; at most {} are supported", n, kMaxNemotronPattern);
}

// Nemotron-H: one sub-layer per symbol of hybrid_override_pattern (M Mamba-2, * attention,
// - squared-ReLU MLP, E MoE), each with one pre-norm. Newer configs give the same as a list
// (layers_block_type or layer_types) of mamba / attention / mlp / moe names.
Result<std::string> nemotron_pattern(const JsonField& c) {
  if (c.has("hybrid_override_pattern")) {
    MOTLEY_ASSIGN_OR_RETURN(std::string pattern, c.get_string("hybrid_override_pattern"));
    for (size_t i = 0; i < pattern.size(); ++i) {
      if (std::string_view("M*-E").find(pattern[i]) == std::string_view::npos) {
        return c.child_error("hybrid_override_pattern",
                             fmt::format("unknown layer symbol '{}' at position {}; allowed: M "
                                         "(Mamba-2), * (attention), - (MLP) or E (MoE)",
                                         pattern[i], i));
      }
    }
    if (pattern.empty()) return c.child_error("hybrid_override_pattern", "is empty");
    if (pattern.size() > kMaxNemotronPattern) {
      return c.child_error("hybrid_override_pattern", too_many_symbols(pattern.size()));
    }
    return pattern;
  }
  for (std::string_view key : {"layers_block_type", "layer_types"}) {
    std::optional<JsonField> list = c.find(key);
    if (!list.has_value()) continue;
    if (list->is_array() && list->json().size() > kMaxNemotronPattern) {
      return list->error(too_many_symbols(list->json().size()));
    }
    MOTLEY_ASSIGN_OR_RETURN(std::vector<JsonField> items, list->items());
    std::string pattern;
    for (const JsonField& item : items) {
      MOTLEY_ASSIGN_OR_RETURN(std::string type, item.as_string());
      if (type == "mamba" || type == "linear_attention") {
        pattern += 'M';
      } else if (type == "attention" || type == "full_attention") {
        pattern += '*';
      } else if (type == "mlp") {
        pattern += '-';
      } else if (type == "moe") {
        pattern += 'E';
      } else {
        return item.error(
            fmt::format("unknown layer type \"{}\"; allowed: mamba, linear_attention, attention, "
                        "full_attention, mlp or moe",
                        type));
      }
    }
    if (pattern.empty()) return list->error("is empty");
    return pattern;
  }
  return c.child_error("hybrid_override_pattern",
                       "is missing (nor is there a layers_block_type list); it gives the layer "
                       "layout, e.g. \"M-M*-\"");
}

Result<ModelSpec> import_nemotron_h(const JsonField& c, ModelSpec spec) {
  MOTLEY_ASSIGN_OR_RETURN(int64_t vocab, required(c, "vocab_size"));
  MOTLEY_ASSIGN_OR_RETURN(int64_t hidden, required(c, "hidden_size"));
  MOTLEY_ASSIGN_OR_RETURN(std::string pattern, nemotron_pattern(c));
  // The pattern decides the depth, as in transformers; num_hidden_layers is only checked.
  if (c.has("num_hidden_layers")) {
    MOTLEY_RETURN_IF_ERROR(required(c, "num_hidden_layers").status());
  }
  MOTLEY_ASSIGN_OR_RETURN(bool tied, c.get_bool_or("tie_word_embeddings", false));
  auto has = [&pattern](char symbol) { return pattern.find(symbol) != std::string::npos; };

  AttentionShape a;
  if (has('*')) {
    MOTLEY_ASSIGN_OR_RETURN(
        Dims d, attention_dims(c, hidden, /*kv_default=*/8,
                               /*head_dim_default=*/128, {"head_dim", "attention_head_dim"}));
    MOTLEY_ASSIGN_OR_RETURN(bool attention_bias, c.get_bool_or("attention_bias", false));
    a = attention_shape(d, attention_bias, attention_bias);
  }
  MOTLEY_ASSIGN_OR_RETURN(bool mlp_bias, c.get_bool_or("mlp_bias", false));
  FeedForwardShape mlp;
  MoeShape moe;
  if (has('-') || has('E')) {
    MOTLEY_ASSIGN_OR_RETURN(Activation act,
                            activation_from(c, {"mlp_hidden_act"}, "relu2", /*gated=*/false));
    if (has('-')) {
      MOTLEY_ASSIGN_OR_RETURN(int64_t ffn, required(c, "intermediate_size"));
      mlp = ffn_shape(hidden, ffn, act, mlp_bias);
    }
    if (has('E')) {
      moe.hidden = hidden;
      moe.activation = act;
      moe.router_bias = true;  // e_score_correction_bias
      MOTLEY_ASSIGN_OR_RETURN(moe.num_experts, positive_from(c, {"n_routed_experts"}, 8));
      MOTLEY_ASSIGN_OR_RETURN(moe.top_k, positive_from(c, {"num_experts_per_tok"}, 2));
      MOTLEY_RETURN_IF_ERROR(check_top_k(c, "num_experts_per_tok", moe));
      MOTLEY_ASSIGN_OR_RETURN(moe.expert_ffn_size,
                              positive_from(c, {"moe_intermediate_size"}, 7688));
      MOTLEY_ASSIGN_OR_RETURN(moe.shared_ffn_size,
                              nonnegative_from(c, {"moe_shared_expert_intermediate_size"}, 7688));
      moe.num_shared_experts = moe.shared_ffn_size > 0 ? 1 : 0;
      MOTLEY_ASSIGN_OR_RETURN(moe.latent_size, nonnegative_from(c, {"moe_latent_size"}, 0));
    }
  }
  MambaShape mixer;
  if (has('M')) {
    mixer.version = 2;
    mixer.hidden = hidden;
    MOTLEY_ASSIGN_OR_RETURN(mixer.n_heads, positive_from(c, {"mamba_num_heads"}, 128));
    MOTLEY_ASSIGN_OR_RETURN(mixer.head_dim, positive_from(c, {"mamba_head_dim"}, 64));
    mixer.d_inner = mixer.n_heads * mixer.head_dim;
    MOTLEY_ASSIGN_OR_RETURN(mixer.d_state, positive_from(c, {"ssm_state_size"}, 128));
    MOTLEY_ASSIGN_OR_RETURN(mixer.n_groups, positive_from(c, {"n_groups", "mamba_n_groups"}, 8));
    MOTLEY_ASSIGN_OR_RETURN(mixer.conv_kernel,
                            positive_from(c, {"conv_kernel", "mamba_d_conv"}, 4));
    MOTLEY_ASSIGN_OR_RETURN(mixer.chunk_size,
                            positive_from(c, {"chunk_size", "mamba_chunk_size"}, 128));
    MOTLEY_ASSIGN_OR_RETURN(mixer.conv_bias,
                            bool_from(c, {"use_conv_bias", "mamba_conv_bias"}, true));
    MOTLEY_ASSIGN_OR_RETURN(mixer.proj_bias, bool_from(c, {"mamba_proj_bias", "use_bias"}, false));
    mixer.gated_norm = true;
  }

  spec.layers.push_back(embedding_layer(vocab, hidden));
  for (size_t i = 0; i < pattern.size(); ++i) {
    const int64_t index = static_cast<int64_t>(i);
    switch (pattern[i]) {
      case 'M': {
        Layer l = split_layer(index, "mamba", LayerKind::kMamba);
        l.mamba = mixer;
        spec.layers.push_back(l);
        break;
      }
      case '*': {
        Layer l = split_layer(index, "attention", LayerKind::kAttention);
        l.attention = a;
        spec.layers.push_back(l);
        break;
      }
      case '-': {
        Layer l = split_layer(index, "ffn", LayerKind::kFeedForward);
        l.ffn = mlp;
        spec.layers.push_back(l);
        break;
      }
      default: {
        Layer l = split_layer(index, "moe", LayerKind::kMoe);
        l.moe = moe;
        spec.layers.push_back(l);
        break;
      }
    }
  }
  spec.layers.push_back(head_layer("head", vocab, hidden, tied));
  return spec;
}

// Pure SSM stacks: embedding, num_hidden_layers pre-norm + mixer layers, final norm and head.
Result<ModelSpec> add_ssm_stack(const JsonField& c, ModelSpec spec, int64_t vocab,
                                const MambaShape& mixer, bool tie_default) {
  MOTLEY_ASSIGN_OR_RETURN(int64_t layers, layer_count(c, "num_hidden_layers", 1, 2));
  MOTLEY_ASSIGN_OR_RETURN(bool tied, c.get_bool_or("tie_word_embeddings", tie_default));
  spec.layers.push_back(embedding_layer(vocab, mixer.hidden));
  for (int64_t i = 0; i < layers; ++i) {
    Layer l = split_layer(i, "", LayerKind::kMamba);
    l.mamba = mixer;
    spec.layers.push_back(l);
  }
  spec.layers.push_back(head_layer("head", vocab, mixer.hidden, tied));
  return spec;
}

// Mamba-2 (e.g. Mamba-Codestral): d_inner = expand * hidden_size, split into num_heads heads.
Result<ModelSpec> import_mamba2(const JsonField& c, ModelSpec spec) {
  MOTLEY_ASSIGN_OR_RETURN(int64_t vocab, required(c, "vocab_size"));
  MambaShape m;
  m.version = 2;
  MOTLEY_ASSIGN_OR_RETURN(m.hidden, required(c, "hidden_size"));
  MOTLEY_ASSIGN_OR_RETURN(int64_t expand, positive_from(c, {"expand"}, 2));
  m.d_inner = expand * m.hidden;
  MOTLEY_ASSIGN_OR_RETURN(m.n_heads, positive_from(c, {"num_heads"}, 128));
  MOTLEY_ASSIGN_OR_RETURN(m.head_dim, positive_from(c, {"head_dim"}, 64));
  if (m.n_heads * m.head_dim != m.d_inner) {
    return c.child_error(
        "num_heads",
        fmt::format("num_heads ({}) x head_dim ({}) must equal expand x hidden_size ({})",
                    m.n_heads, m.head_dim, m.d_inner));
  }
  MOTLEY_ASSIGN_OR_RETURN(m.d_state, positive_from(c, {"state_size"}, 128));
  MOTLEY_ASSIGN_OR_RETURN(m.n_groups, positive_from(c, {"n_groups"}, 8));
  MOTLEY_ASSIGN_OR_RETURN(m.conv_kernel, positive_from(c, {"conv_kernel"}, 4));
  MOTLEY_ASSIGN_OR_RETURN(m.chunk_size, positive_from(c, {"chunk_size"}, 256));
  MOTLEY_ASSIGN_OR_RETURN(m.conv_bias, c.get_bool_or("use_conv_bias", true));
  MOTLEY_ASSIGN_OR_RETURN(m.proj_bias, c.get_bool_or("use_bias", false));
  m.gated_norm = true;
  return add_ssm_stack(c, std::move(spec), vocab, m, /*tie_default=*/false);
}

// Mamba-1 stacks (Falcon-Mamba, and the original Hugging Face Mamba). intermediate_size, when
// given, wins over expand * hidden_size, as in transformers (falcon-mamba-7b ships expand 16
// with intermediate_size 8192). Falcon-Mamba normalizes dt, B and C with weightless RMS norms,
// so neither variant has inner-norm parameters.
Result<ModelSpec> import_mamba1(const JsonField& c, ModelSpec spec) {
  MOTLEY_ASSIGN_OR_RETURN(int64_t vocab, required(c, "vocab_size"));
  MOTLEY_ASSIGN_OR_RETURN(int64_t hidden, required(c, "hidden_size"));
  MOTLEY_ASSIGN_OR_RETURN(int64_t expand, positive_from(c, {"expand"}, 2));
  MOTLEY_ASSIGN_OR_RETURN(int64_t inner, positive_from(c, {"intermediate_size"}, expand * hidden));
  MOTLEY_ASSIGN_OR_RETURN(int64_t state, positive_from(c, {"state_size"}, 16));
  MOTLEY_ASSIGN_OR_RETURN(int64_t kernel, positive_from(c, {"conv_kernel"}, 4));
  MOTLEY_ASSIGN_OR_RETURN(int64_t dt_rank,
                          positive_or_auto(c, "time_step_rank", ceil_div(hidden, 16)));
  MOTLEY_ASSIGN_OR_RETURN(bool conv_bias, c.get_bool_or("use_conv_bias", true));
  MOTLEY_ASSIGN_OR_RETURN(bool proj_bias, c.get_bool_or("use_bias", false));
  const MambaShape m = mamba1_shape(hidden, inner, state, kernel, dt_rank, conv_bias, proj_bias,
                                    /*inner_norms=*/false);
  return add_ssm_stack(c, std::move(spec), vocab, m, /*tie_default=*/true);
}

struct Family {
  const char* model_type;
  Builder build;
};

// Sorted by model_type, the order supported_hf_model_types() reports.
constexpr Family kFamilies[] = {
    {"deepseek_v2", import_deepseek_v2},
    {"deepseek_v3", import_deepseek_v3},
    {"falcon_mamba", import_mamba1},
    {"gemma", import_gemma1},
    {"gemma2", import_gemma2},
    {"gemma3_text", import_gemma3_text},
    {"gpt_oss", import_gpt_oss},
    {"jamba", import_jamba},
    {"llama", import_llama},
    {"mamba", import_mamba1},
    {"mamba2", import_mamba2},
    {"mistral", import_mistral},
    {"mixtral", import_mixtral},
    {"nemotron_h", import_nemotron_h},
    {"phi3", import_phi3},
    {"qwen2", import_qwen2},
    {"qwen2_moe", import_qwen2_moe},
    {"qwen3", import_qwen3},
    {"qwen3_moe", import_qwen3_moe},
};

// `_name_or_path` when it names something; else the file name without extension, or the
// folder's name for a file called config.json.
std::string model_name(const JsonField& c, const std::string& source) {
  if (c.json().contains("_name_or_path") && c.json()["_name_or_path"].is_string()) {
    std::string name = c.json()["_name_or_path"].get<std::string>();
    while (!name.empty() && name.back() == '/') name.pop_back();
    if (!name.empty() && name != "." && name != "./") return name;
  }
  const std::filesystem::path path(source);
  std::string stem = path.stem().string();
  if (stem == "config" && path.has_parent_path()) {
    std::string folder = path.parent_path().filename().string();
    if (!folder.empty() && folder != "." && folder != "..") return folder;
  }
  return stem.empty() ? std::string("model") : stem;
}

}  // namespace

Layer embedding_layer(int64_t vocab, int64_t hidden) {
  Layer l;
  l.name = "embed";
  l.kind = LayerKind::kEmbedding;
  l.embedding = EmbeddingShape{vocab, hidden, 0};
  return l;
}

std::vector<std::string> supported_hf_model_types() {
  std::vector<std::string> out;
  for (const Family& f : kFamilies) out.emplace_back(f.model_type);
  return out;
}

Result<ModelSpec> import_hf_config(const Json& config, const std::string& source) {
  const JsonField c(config, source);
  if (!c.is_object()) {
    return c.error(fmt::format("expected a JSON object (a Hugging Face config.json), got {}",
                               describe_json_value(config)));
  }
  const std::string supported = join_alternatives(supported_hf_model_types());
  if (!c.has("model_type")) {
    return c.child_error("model_type",
                         fmt::format("is missing; supported model types: {}", supported));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::string model_type, c.get_string("model_type"));
  const Family* family = nullptr;
  for (const Family& f : kFamilies) {
    if (model_type == f.model_type) family = &f;
  }
  if (family == nullptr) {
    return c.child_error("model_type", fmt::format("unsupported model type \"{}\"; supported: {}",
                                                   model_type, supported));
  }

  ModelSpec spec;
  spec.name = model_name(c, source);
  spec.family = model_type;
  // Only its minimum with kMaxDefaultSeqLen is used, so any positive size will do.
  MOTLEY_ASSIGN_OR_RETURN(int64_t max_positions,
                          c.get_positive_int_or("max_position_embeddings", kMaxDefaultSeqLen));
  spec.default_seq_len = std::min(max_positions, kMaxDefaultSeqLen);
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec model, family->build(c, std::move(spec)));
  MOTLEY_RETURN_IF_ERROR(validate_model(model, source));
  return model;
}

}  // namespace motley
