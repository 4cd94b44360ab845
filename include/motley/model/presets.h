// Built-in models by name (Llama-3, Mixtral, DeepSeek-V2-Lite, Gemma-2, hybrids, a VLM and tiny
// CPU-trainable models). Published models are embedded config.json files run through
// import_hf_config; the others are built directly. Names are case-insensitive. Thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "motley/core/status.h"
#include "motley/model/model.h"

namespace motley {

std::vector<std::string> model_preset_names();
// Error (not found) lists the known names.
Result<ModelSpec> model_preset(std::string_view name);

}  // namespace motley
