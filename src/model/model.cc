#include "motley/model/model.h"

#include <fmt/format.h>

#include <string>

#include "motley/core/enum_names.h"

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

int64_t head_vocab(const ModelSpec& model) {
  if (model.layers.empty()) return 0;
  const Layer& last = model.layers.back();
  if (last.kind == LayerKind::kHead && last.head) return last.head->vocab;
  if (last.kind == LayerKind::kMeasured && last.measured) return last.measured->vocab;
  return 0;
}

int64_t embedding_vocab(const ModelSpec& model) {
  if (model.layers.size() < 2) return 0;
  const Layer& first = model.layers.front();
  if (first.kind == LayerKind::kEmbedding && first.embedding) return first.embedding->vocab;
  if (first.kind == LayerKind::kMeasured && first.measured) return first.measured->vocab;
  return 0;
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
