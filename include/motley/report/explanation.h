// The planner's explanation of a plan (plan/explanation.h) as lines of text: placement,
// partition, recompute, schedule, cost, result, the gain of each dimension alone, and whether a
// baseline's plan won — what `motley plan` and `motley compare` print. Formatting only: it
// decides nothing. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "motley/plan/explanation.h"

namespace motley {

// One sentence per decision, each ending with a full stop: "Placement: ...", "Partition: ...",
// "Recompute: ...", "Optimizer: ..." (under ZeRO-1 only), "Sequence parallelism: ..." (when on),
// "Schedule: ...", "Cost: ..." (cost objective only), "Result: ...", then, with a megatron-1f1b
// plan and single-dimension outcomes, "Gain over megatron-1f1b by one dimension alone: ...", and
// "This is the X baseline's plan: ..." when one won.
std::vector<std::string> explanation_lines(const PlanExplanation& explanation);

}  // namespace motley
