// The fixed rules that split a model's layers into contiguous pipeline stages by counting them,
// without pricing anything: the uniform split, and Megatron-LM's, which splits the decoder
// layers and puts the embedding (and a vision encoder) first and the head last. The balanced
// partition, which prices layers on their devices, is the tuner's (tune/partition.h). Rules and
// sources: docs/planner.md, "Partition modes". Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motley/cost/cost_model.h"
#include "motley/model/model.h"

namespace motley {

enum class LayerSplit {
  kUniform,   // every layer counts alike, the embedding and the head included
  kMegatron,  // Megatron-LM's: the decoder layers evenly, the others on the first or last stage
};
const char* layer_split_name(LayerSplit split);  // "uniform", "megatron"
// Inverse of layer_split_name (case-insensitive); nullopt if unknown.
std::optional<LayerSplit> parse_layer_split(std::string_view name);
std::vector<std::string> layer_split_names();

// Stage s of S gets floor(L/S) layers, one more when s < L mod S (the first stages take the
// remainder). REQUIRES: 1 <= stages <= num_layers.
std::vector<int> uniform_bounds(int num_layers, int stages);

// The layers Megatron-LM counts as its decoder's: from the model's first layer of a decoder kind
// (decoder_block, attention, feed_forward, moe, mamba, measured) to its last one, inclusive;
// empty when it has none.
LayerRange decoder_span(const ModelSpec& model);

// Megatron-LM's split over `stages` stages in pipeline order (p * v chunks when interleaved):
// each stage gets floor(D/S) of the D layers of decoder_span; the D mod S extra layers go one
// each to stages 1, 2, ... — never the last, and the first only when every stage between
// already has one; the layers before the span (embedding, vision encoder, projector) join the
// first stage, those after it (the head) the last. REQUIRES: 1 <= stages <= D.
std::vector<int> megatron_bounds(const ModelSpec& model, int stages);

// The most stages `split` can make of `model`: its layer count, or its decoder layers'.
int max_stages(LayerSplit split, const ModelSpec& model);
// uniform_bounds or megatron_bounds. REQUIRES: 1 <= stages <= max_stages(split, model).
std::vector<int> split_bounds(LayerSplit split, const ModelSpec& model, int stages);

}  // namespace motley
