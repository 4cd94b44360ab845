#include "motley/schedule/layer_split.h"

#include "motley/core/check.h"
#include "motley/core/enum_names.h"

namespace motley {
namespace {

// Indexed by LayerSplit, in declaration order.
constexpr const char* kLayerSplitNames[] = {"uniform", "megatron"};
static_assert(std::size(kLayerSplitNames) == static_cast<size_t>(LayerSplit::kMegatron) + 1);

bool is_decoder_kind(LayerKind kind) {
  switch (kind) {
    case LayerKind::kDecoderBlock:
    case LayerKind::kAttention:
    case LayerKind::kFeedForward:
    case LayerKind::kMoe:
    case LayerKind::kMamba:
    case LayerKind::kMeasured:
      return true;
    case LayerKind::kEmbedding:
    case LayerKind::kPatchEmbedding:
    case LayerKind::kVisionBlock:
    case LayerKind::kProjector:
    case LayerKind::kHead:
      return false;
  }
  return false;
}

}  // namespace

const char* layer_split_name(LayerSplit split) {
  return name_in(kLayerSplitNames, split, "uniform");
}

std::optional<LayerSplit> parse_layer_split(std::string_view name) {
  return parse_name_in<LayerSplit>(kLayerSplitNames, name);
}

std::vector<std::string> layer_split_names() { return names_in(kLayerSplitNames); }

std::vector<int> uniform_bounds(int num_layers, int stages) {
  MOTLEY_CHECK(stages >= 1 && stages <= num_layers, "uniform_bounds: need 1 <= stages <= layers");
  std::vector<int> bounds{0};
  const int base = num_layers / stages, extra = num_layers % stages;
  for (int s = 0; s < stages; ++s) bounds.push_back(bounds.back() + base + (s < extra ? 1 : 0));
  return bounds;
}

LayerRange decoder_span(const ModelSpec& model) {
  const int n = static_cast<int>(model.layers.size());
  int begin = 0;
  while (begin < n && !is_decoder_kind(model.layers[begin].kind)) ++begin;
  if (begin == n) return LayerRange{0, 0};
  int end = n;
  while (!is_decoder_kind(model.layers[end - 1].kind)) --end;
  return LayerRange{begin, end};
}

std::vector<int> megatron_bounds(const ModelSpec& model, int stages) {
  const LayerRange span = decoder_span(model);
  const int decoder = span.size();
  MOTLEY_CHECK(stages >= 1 && stages <= decoder,
               "megatron_bounds: need 1 <= stages <= decoder layers");
  const int base = decoder / stages, extra = decoder % stages;
  // Stages 1 .. S-2 take the extra layers first; the first takes one only when all of those
  // have one (extra == S - 1); the last never does.
  const auto count = [&](int s) {
    const bool more =
        (s >= 1 && s <= extra && s < stages - 1) || (s == 0 && extra > 0 && extra == stages - 1);
    return base + (more ? 1 : 0);
  };
  std::vector<int> bounds{0};
  int end = span.begin;
  for (int s = 0; s + 1 < stages; ++s) {
    end += count(s);
    bounds.push_back(end);
  }
  bounds.push_back(static_cast<int>(model.layers.size()));
  return bounds;
}

int max_stages(LayerSplit split, const ModelSpec& model) {
  return split == LayerSplit::kMegatron ? decoder_span(model).size()
                                        : static_cast<int>(model.layers.size());
}

std::vector<int> split_bounds(LayerSplit split, const ModelSpec& model, int stages) {
  return split == LayerSplit::kMegatron
             ? megatron_bounds(model, stages)
             : uniform_bounds(static_cast<int>(model.layers.size()), stages);
}

}  // namespace motley
