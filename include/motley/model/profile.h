// The profile JSON format: per-layer times measured by a user or by `motley profile layers`,
// turned into a ModelSpec of kMeasured layers (`repeat` expands into consecutive identical
// layers). "motley.profile/2" adds to each entry its selective-recompute time and its times
// per tensor-parallel degree; "motley.profile/1" files are read as before. Does not measure
// anything (profile/layer_profiler.h does) nor check device names (the cost model does).
// Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/model/model.h"

namespace motley {

// The format profile_to_json writes.
inline constexpr const char* kProfileFormat = "motley.profile/2";
// The first format, still read: no selective_recompute_s and no times_by_tp.
inline constexpr const char* kProfileFormatV1 = "motley.profile/1";

// Whether `format` names a profile version profile_from_json reads.
bool is_profile_format(std::string_view format);

// Reads either version. Errors name `source` and the field, e.g.
// "p.json: field 'layers[0].times_by_tp.cpu': tensor-parallel degree \"1\": expected an integer
// from 2 to 65536"; a v2 field in a v1 file is an unknown key.
Result<ModelSpec> profile_from_json(const Json& profile, const std::string& source);
// Writes kProfileFormat. REQUIRES: every layer of `model` is kMeasured. Consecutive identical
// layers are folded back into one entry with `repeat`; every entry states its measured_on,
// seq_len and micro_batch_size.
Json profile_to_json(const ModelSpec& model);

}  // namespace motley
