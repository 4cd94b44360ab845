#include "motley/model/model.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "motley/core/enum_names.h"
#include "motley/model/limits.h"

namespace motley {
namespace {

// Indexed by Activation, in declaration order.
constexpr const char* kActivations[] = {"gelu", "relu", "relu2", "silu", "swiglu", "geglu"};
static_assert(std::size(kActivations) == static_cast<size_t>(Activation::kGeGlu) + 1);
// Indexed by RecomputePolicy, in declaration order.
constexpr const char* kPolicies[] = {"none", "selective", "full"};
static_assert(std::size(kPolicies) == static_cast<size_t>(RecomputePolicy::kFull) + 1);
// Indexed by LayerKind, in declaration order.
constexpr const char* kKinds[] = {"embedding", "attention",     "feed_forward",    "moe",
                                  "mamba",     "decoder_block", "patch_embedding", "vision_block",
                                  "projector", "head",          "measured"};
static_assert(std::size(kKinds) == static_cast<size_t>(LayerKind::kMeasured) + 1);
// Indexed by WeightPass, in declaration order.
constexpr const char* kWeightPasses[] = {"weights_only", "full_backward"};
static_assert(std::size(kWeightPasses) == static_cast<size_t>(WeightPass::kFullBackward) + 1);

}  // namespace

bool is_gated(Activation activation) {
  return activation == Activation::kSwiGlu || activation == Activation::kGeGlu;
}

const char* activation_name(Activation activation) { return name_in(kActivations, activation); }

std::optional<Activation> parse_activation(std::string_view name) {
  return parse_name_in<Activation>(kActivations, name);
}

std::vector<std::string> activation_names() { return names_in(kActivations); }

const char* recompute_policy_name(RecomputePolicy policy) { return name_in(kPolicies, policy); }

std::optional<RecomputePolicy> parse_recompute_policy(std::string_view name) {
  return parse_name_in<RecomputePolicy>(kPolicies, name);
}

std::vector<std::string> recompute_policy_names() { return names_in(kPolicies); }

const char* layer_kind_name(LayerKind kind) { return name_in(kKinds, kind); }

std::optional<LayerKind> parse_layer_kind(std::string_view name) {
  return parse_name_in<LayerKind>(kKinds, name);
}

std::vector<std::string> layer_kind_names() { return names_in(kKinds); }

const char* weight_pass_name(WeightPass pass) { return name_in(kWeightPasses, pass); }

std::optional<WeightPass> parse_weight_pass(std::string_view name) {
  return parse_name_in<WeightPass>(kWeightPasses, name);
}

namespace {

// Tokens of one micro-batch at the shape a measured layer was timed at; 0 when not stated.
int64_t measured_tokens(const ModelSpec& model, const MeasuredLayer& m) {
  const int64_t s = m.seq_len > 0 ? m.seq_len : model.default_seq_len;
  return m.micro_batch_size > 0 && s > 0 ? m.micro_batch_size * s : 0;
}

// The bytes of one token's hidden state that a measured layer hands on (the width of a row
// of a vocabulary layer's weights, when weights and activations share the model's dtype); 0
// when its output is not a whole number of bytes per token.
double hidden_row_bytes(const ModelSpec& model, const MeasuredLayer& m) {
  const int64_t tokens = measured_tokens(model, m);
  const double out = m.output_bytes.value();
  if (tokens <= 0 || out <= 0) return 0;
  const double row = out / static_cast<double>(tokens);
  return row == std::floor(row) ? row : 0;
}

// Rows of `param_bytes` in rows of `row` bytes (less `extra` rows), when at least two and at
// most a vocabulary's limit; else 0.
int64_t rows_of(double param_bytes, double row, int64_t extra) {
  if (row <= 0) return 0;
  const double rows = std::floor(param_bytes / row) - static_cast<double>(extra);
  return rows >= 2 && rows <= static_cast<double>(kMaxVocab) ? static_cast<int64_t>(rows) : 0;
}

}  // namespace

int64_t head_vocab(const ModelSpec& model) {
  if (model.layers.empty()) return 0;
  const Layer& last = model.layers.back();
  if (last.kind == LayerKind::kHead && last.head) return last.head->vocab;
  if (last.kind != LayerKind::kMeasured || !last.measured) return 0;
  const MeasuredLayer& m = *last.measured;
  if (m.vocab > 0 || model.layers.size() < 2) return m.vocab;
  // Not stated: a last layer whose output is a loss (less than a byte per token, not a hidden
  // state) holds the output projection; its rows are its weights over one hidden state's
  // bytes (from the layer before), less one for the final norm a head holds.
  const Layer& before = model.layers[model.layers.size() - 2];
  const int64_t tokens = measured_tokens(model, m);
  if (before.kind != LayerKind::kMeasured || !before.measured || tokens <= 0 ||
      m.output_bytes.value() >= static_cast<double>(tokens)) {
    return 0;
  }
  return rows_of(m.param_bytes.value(), hidden_row_bytes(model, *before.measured), 1);
}

int64_t embedding_vocab(const ModelSpec& model) {
  if (model.layers.size() < 2) return 0;
  const Layer& first = model.layers.front();
  if (first.kind == LayerKind::kEmbedding && first.embedding) return first.embedding->vocab;
  if (first.kind != LayerKind::kMeasured || !first.measured) return 0;
  const MeasuredLayer& m = *first.measured;
  if (m.vocab > 0) return m.vocab;
  // Not stated: a first layer that keeps the token ids and no more (up to 8 bytes a token) for
  // its backward is a lookup table; its rows are its weights over one output token's bytes.
  // (A profile that leaves activation bytes out says nothing either way: 0 is no lookup.)
  const int64_t tokens = measured_tokens(model, m);
  const double kept = m.activation_bytes.value();
  if (tokens <= 0 || kept <= 0 || kept > 8.0 * static_cast<double>(tokens)) return 0;
  return rows_of(m.param_bytes.value(), hidden_row_bytes(model, m), 0);
}

std::optional<std::string> tensor_parallel_obstacle(const Layer& layer, int t, bool vocabulary) {
  if (t <= 1) return std::nullopt;
  std::vector<std::pair<const char*, int64_t>> widths;
  if (vocabulary && layer.embedding) widths.push_back({"vocab", layer.embedding->vocab});
  if (vocabulary && layer.head) widths.push_back({"vocab", layer.head->vocab});
  if (layer.attention) {
    widths.push_back({"num_heads", layer.attention->num_heads});
    // Latent attention's keys and values come per head from a shared latent: heads only.
    if (!layer.attention->mla) widths.push_back({"num_kv_heads", layer.attention->num_kv_heads});
  }
  if (layer.ffn) widths.push_back({"ffn_size", layer.ffn->ffn_size});
  if (layer.moe) {
    widths.push_back({"expert_ffn_size", layer.moe->expert_ffn_size});
    if (layer.moe->num_shared_experts > 0) {
      widths.push_back({"shared_ffn_size", layer.moe->shared_ffn_size});
    }
  }
  // Mamba-1 splits its channels; Mamba-2 its heads, and their groups by the rule below.
  const bool mamba2 = layer.mamba && layer.mamba->version != 1;
  if (layer.mamba && !mamba2) widths.push_back({"d_inner", layer.mamba->d_inner});
  if (mamba2) widths.push_back({"n_heads", layer.mamba->n_heads});
  for (const auto& [field, width] : widths) {
    if (width % t != 0) {
      return fmt::format("{} ({}) is not a multiple of {}", field, width, t);
    }
  }
  if (mamba2 && layer.mamba->n_groups > 0 && layer.mamba->n_groups % t != 0 &&
      t % layer.mamba->n_groups != 0) {
    return fmt::format("n_groups ({}) neither divides nor is a multiple of {}",
                       layer.mamba->n_groups, t);
  }
  return std::nullopt;
}

}  // namespace motley
