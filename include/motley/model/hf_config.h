// Import of Hugging Face `config.json` files into a ModelSpec, one rule set per model family
// (model_type), with transformers' defaults where a key is absent. Does not read weights.
// Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/model/model.h"

namespace motley {

// The model_type values this importer understands.
std::vector<std::string> supported_hf_model_types();

// `source` names the file in error messages (and the model when the config has no
// `_name_or_path`). An unsupported model_type is an error listing supported_hf_model_types().
// Layer names, per-family defaults and counting conventions: docs/hf-import.md.
Result<ModelSpec> import_hf_config(const Json& config, const std::string& source);

// The token embedding ("embed") that the imported models and the built-in ones begin with.
Layer embedding_layer(int64_t vocab, int64_t hidden);

}  // namespace motley
