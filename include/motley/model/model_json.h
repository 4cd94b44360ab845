// motley's own model format ("motley.model/1"): a ModelSpec written out layer by layer, so a
// model built from a preset or an HF config can be saved, edited and loaded again exactly.
// Also the single entry point that resolves what a user passes as --model. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/model/model.h"

namespace motley {

inline constexpr const char* kModelFormat = "motley.model/1";

Json model_to_json(const ModelSpec& model);
Result<ModelSpec> model_from_json(const Json& json, const std::string& source);
// The same for a model inside another document (a plan file's "model_spec"): errors name the
// field's path within that document.
Result<ModelSpec> model_from_json(const JsonField& root);

// A preset name, or the path of a Hugging Face config.json (or of a directory holding one), a
// motley profile or a motley model file (recognized by content: "format" or "model_type").
// An existing path wins over a preset of the same name. Errors name the file and field.
Result<ModelSpec> load_model(const std::string& name_or_path);

// Checks shapes for consistency (positive sizes, heads dividing, top_k <= experts, unique
// layer names, each layer reading the width the one before it writes); importers and loaders
// call it before returning a model.
Status validate_model(const ModelSpec& model, const std::string& source);

// The widths validate_model chains: of the hidden state `layer` reads from the layer before it,
// and of the one it writes for the layer after it; 0 when it reads none (an embedding reads
// token ids, a patch embedding pixels), writes none (the head) or its shapes are unknown (a
// measured layer).
int64_t hidden_width_read(const Layer& layer);
int64_t hidden_width_written(const Layer& layer);

// The times of a measured layer as flat fields "forward_s", "backward_input_s",
// "backward_weight_s" and "selective_recompute_s" (absent ones omitted), shared by the model and
// the profile formats. The reader checks only those four keys; the caller checks the object's
// other keys (and so which of them its format allows).
Json measured_times_to_json(const MeasuredTimes& times);
Result<MeasuredTimes> measured_times_from_json(const JsonField& field);
// A measured layer's "weight_pass" under `key` of `field`: "weights_only" or "full_backward"
// (WeightPass); `fallback` when the key is absent.
Result<WeightPass> weight_pass_from_json(const JsonField& field, std::string_view key,
                                         WeightPass fallback);

// Tensor-parallel degrees a measured layer's "times_by_tp" may name: 2 to kMaxHeads (a degree
// of 1 is the layer's own times; no layer splits over more devices than it has heads).
inline constexpr int64_t kMinMeasuredTpDegree = 2;
// "times_by_tp": device type name -> {"<degree>": times} (the four keys above, at least one),
// shared by the model and the profile formats. Errors name the device and the degree, e.g.
// "p.json: field 'layers[0].times_by_tp.cpu': tensor-parallel degree \"1\": expected an
// integer from 2 to 65536".
Json times_by_tp_to_json(const std::map<std::string, std::map<int, MeasuredTimes>>& by_tp);
Result<std::map<std::string, std::map<int, MeasuredTimes>>> times_by_tp_from_json(
    const JsonField& field);

}  // namespace motley
