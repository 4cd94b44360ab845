// The profile JSON format ("motley.profile/1"): per-layer times a user measured, turned into
// a ModelSpec of kMeasured layers (`repeat` expands into consecutive identical layers).
// Thread-safe.
#pragma once

#include <string>

#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/model/model.h"

namespace motley {

inline constexpr const char* kProfileFormat = "motley.profile/1";

Result<ModelSpec> profile_from_json(const Json& profile, const std::string& source);
// REQUIRES: every layer of `model` is kMeasured. Consecutive identical layers are folded back
// into one entry with `repeat`.
Json profile_to_json(const ModelSpec& model);

}  // namespace motley
