// plan::structure — what every reader of a plan checks before indexing it: partition, replica
// shape, device ids, each action's stage, micro-batch and group, one F and one B or I+W per
// (stage, micro-batch). Not placement rules, batch, deadlocks or memory (validate_plan adds
// those). Errors name the field path and say the fault in words (docs/plan-format.md).
// Thread-safe free function; a StructureChecker is thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "motley/core/status.h"
#include "motley/plan/plan.h"

namespace motley {

// The most actions a plan may list over all its replicas and groups: task ids downstream
// (task_graph.h) are 32-bit.
inline constexpr int64_t kMaxPlanActions = int64_t{1} << 30;

// What a plan's indices are checked against, and how messages name it.
struct PlanBounds {
  // The model's layer count; -1 when the reader has no model (the simulator): the stages are
  // then only required to be non-empty and contiguous from layer 0.
  int num_layers = -1;
  // Device ids must lie in 0 .. num_devices - 1.
  int num_devices = 0;
  // Noun phrases for messages: "model 'llama-3-8b'" ("... has 32 layers"), "cluster 'h100x8'"
  // ("... has devices 0-7").
  std::string model = "the model";
  std::string cluster = "the cluster";
};

// The first structural fault of `plan` as invalid_argument, e.g. "field
// 'replicas[0].groups[1].actions[4].stage': 2F0 on device group 1 (device 1): stage 2 does not
// exist; the plan has stages 0-1"; ok when there is none. A plan that passes can be indexed
// and lowered (lower_plan, build_task_graph) without further checks.
Status check_plan_structure(const Plan& plan, const PlanBounds& bounds);

// The same check keeping its working memory (one byte per stage and micro-batch) between
// calls, for a caller that checks thousands of plans.
class StructureChecker {
 public:
  Status check(const Plan& plan, const PlanBounds& bounds);

 private:
  std::vector<uint8_t> seen_;  // per (stage, micro-batch): the action kinds listed, as bits
};

}  // namespace motley
