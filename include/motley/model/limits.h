// The largest sizes a model may have, wherever it comes from (motley.model/1, motley.profile/1,
// a Hugging Face config.json, a plan's embedded model). Each is far above any model trained
// so far; together they keep every parameter count inside int64_t and every list a reader
// builds small. docs/model-format.md, "Limits", lists them. Constants only.
#pragma once

#include <cstdint>

namespace motley {

// Layers of a model: `layers` and `extra_layers` together, after a profile's `repeat` and an
// importer's expansion.
inline constexpr int64_t kMaxLayers = 100'000;
// Widths: hidden and intermediate sizes, head dimensions, low-rank and state sizes.
inline constexpr int64_t kMaxWidth = int64_t{1} << 20;
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;
// Counts inside a layer: attention and key/value heads, experts, top-k, Mamba heads and groups.
inline constexpr int64_t kMaxHeads = int64_t{1} << 16;
// Convolution kernels, patch sizes and image channels.
inline constexpr int64_t kMaxKernel = 1024;
inline constexpr int64_t kMaxNormsPerLayer = 64;
// Tokens: sequence lengths, position tables, a layer's tokens per sample.
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 20;
inline constexpr int64_t kMaxMicroBatchSize = int64_t{1} << 16;
// A measured layer's parameter, activation and output bytes.
inline constexpr double kMaxLayerBytes = 1e18;
// A measured layer's time for one pass of one micro-batch (and its optimizer step), in seconds:
// a million seconds, eleven days, is far above any layer; sums over a model's layers and a
// batch's micro-batches then stay finite.
inline constexpr double kMaxLayerSeconds = 1e6;
// Parameters of the whole model (layers and extra_layers).
inline constexpr int64_t kMaxModelParams = 1'000'000'000'000'000;

}  // namespace motley
