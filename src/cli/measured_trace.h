// The executor's merged measured trace (the Chrome trace `motley run --trace` writes under
// `motley launch`; docs/executor.md, "Trace") read back as a MeasuredTrace (calibrate/fidelity.h):
// each rank's events by step, relative to the rank's step start, and its step times. Shared by
// `motley fidelity` and `motley report --trace`, with the profile that prices such a run. Free
// functions; thread-safe.
#pragma once

#include <string>

#include "motley/calibrate/fidelity.h"
#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley::cli {

// Events by rank and step (otherData.first_step on), relative to the rank's step start
// (otherData.step_offsets_s), the ranks' step times from otherData.step_time_s. Gradient sums,
// which overlap the actions, are left out. Errors (invalid_argument, naming `source`): not a
// measured trace, a rank count other than the plan's, an event outside the run or of a kind a
// measured trace does not have.
Result<MeasuredTrace> measured_trace_from_chrome(const Json& doc, const Plan& plan,
                                                 const std::string& source);

// The model a plan is priced with when a measured profile stands in for it layer for layer:
// `model` itself when `profile` is empty, else the profile (a motley.profile or motley.model
// file). Errors: an unreadable profile; one whose layer count is not the model's.
Result<ModelSpec> profile_pricing_model(const std::string& profile, const ModelSpec& model);

}  // namespace motley::cli
