// The plan file: Plan <-> JSON ("format": "motley.plan/1"), load and atomic save. Actions are
// written as PyTorch pipelining writes them: "<stage><letter><micro-batch>", e.g. "0F3",
// "1I3" (input-gradient backward), "1W3", "2B0" (fused backward), "0R3" (recompute).
// Thread-safe free functions.
#pragma once

#include <string>

#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/plan/plan.h"

namespace motley {

Json plan_to_json(const Plan& plan);
// Checks the schema only (types, ranges, known keys); validate_plan checks runnability.
Result<Plan> plan_from_json(const Json& json, const std::string& source);
Result<Plan> load_plan(const std::string& path);
Status save_plan(const Plan& plan, const std::string& path);
// The text save_plan writes: indented JSON with the format first and each action list on one
// line, ending in a newline.
std::string plan_to_text(const Plan& plan);

std::string action_to_string(const Action& action);  // "0F3"
Result<Action> parse_action(const std::string& text);

}  // namespace motley
