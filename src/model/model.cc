#include "motley/model/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace motley {
namespace {

// Every enumerator once, in declaration order; the name tables below are indexed the same way.
constexpr std::array kActivations = {Activation::kGelu, Activation::kRelu,   Activation::kRelu2,
                                     Activation::kSilu, Activation::kSwiGlu, Activation::kGeGlu};
constexpr std::array kPolicies = {RecomputePolicy::kNone, RecomputePolicy::kSelective,
                                  RecomputePolicy::kFull};
constexpr std::array kKinds = {LayerKind::kEmbedding,      LayerKind::kAttention,
                               LayerKind::kFeedForward,    LayerKind::kMoe,
                               LayerKind::kMamba,          LayerKind::kDecoderBlock,
                               LayerKind::kPatchEmbedding, LayerKind::kVisionBlock,
                               LayerKind::kProjector,      LayerKind::kHead,
                               LayerKind::kMeasured};

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](unsigned char x, unsigned char y) {
           return std::tolower(x) == std::tolower(y);
         });
}

template <class Enum, size_t N, class NameFn>
std::optional<Enum> parse_by_name(const std::array<Enum, N>& values, NameFn name_of,
                                  std::string_view name) {
  for (Enum v : values) {
    if (equals_ignoring_case(name, name_of(v))) return v;
  }
  return std::nullopt;
}

template <class Enum, size_t N, class NameFn>
std::vector<std::string> all_names(const std::array<Enum, N>& values, NameFn name_of) {
  std::vector<std::string> out;
  for (Enum v : values) out.emplace_back(name_of(v));
  return out;
}

}  // namespace

bool is_gated(Activation activation) {
  return activation == Activation::kSwiGlu || activation == Activation::kGeGlu;
}

const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::kGelu:
      return "gelu";
    case Activation::kRelu:
      return "relu";
    case Activation::kRelu2:
      return "relu2";
    case Activation::kSilu:
      return "silu";
    case Activation::kSwiGlu:
      return "swiglu";
    case Activation::kGeGlu:
      return "geglu";
  }
  return "?";
}

std::optional<Activation> parse_activation(std::string_view name) {
  return parse_by_name(kActivations, activation_name, name);
}

std::vector<std::string> activation_names() { return all_names(kActivations, activation_name); }

const char* recompute_policy_name(RecomputePolicy policy) {
  switch (policy) {
    case RecomputePolicy::kNone:
      return "none";
    case RecomputePolicy::kSelective:
      return "selective";
    case RecomputePolicy::kFull:
      return "full";
  }
  return "?";
}

std::optional<RecomputePolicy> parse_recompute_policy(std::string_view name) {
  return parse_by_name(kPolicies, recompute_policy_name, name);
}

std::vector<std::string> recompute_policy_names() {
  return all_names(kPolicies, recompute_policy_name);
}

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kEmbedding:
      return "embedding";
    case LayerKind::kAttention:
      return "attention";
    case LayerKind::kFeedForward:
      return "feed_forward";
    case LayerKind::kMoe:
      return "moe";
    case LayerKind::kMamba:
      return "mamba";
    case LayerKind::kDecoderBlock:
      return "decoder_block";
    case LayerKind::kPatchEmbedding:
      return "patch_embedding";
    case LayerKind::kVisionBlock:
      return "vision_block";
    case LayerKind::kProjector:
      return "projector";
    case LayerKind::kHead:
      return "head";
    case LayerKind::kMeasured:
      return "measured";
  }
  return "?";
}

std::optional<LayerKind> parse_layer_kind(std::string_view name) {
  return parse_by_name(kKinds, layer_kind_name, name);
}

std::vector<std::string> layer_kind_names() { return all_names(kKinds, layer_kind_name); }

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
