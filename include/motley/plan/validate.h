// plan::validate — proves a plan is runnable: schema-level consistency, the partition covers
// the model, placements are legal (tensor-parallel groups inside one node and one device type,
// no device in two groups), every (stage, micro-batch) has exactly one F and either one I and
// one W or one fused B (at most one R), no cycle in the dependency graph of group orders and
// data (a deadlock, which also covers a stage's own F < R < I < W order), and memory within
// each device's capacity when footprints are given. Errors name the device group, stage and
// micro-batch at fault (docs/plan-format.md, "Validation"). Thread-safe free functions.
#pragma once

#include <functional>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley {

// Memory of one stage on each device of its group: `fixed` (weights, gradients, optimizer
// state, buffers) plus `activation_per_micro_batch` for every micro-batch whose F has run and
// whose W (or fused backward) has not; a micro-batch the order recomputes alone holds
// `recomputed_activation_per_micro_batch` from its F until its R
// (plan/dependencies.h, RecomputedMicroBatches).
struct StageFootprint {
  Bytes fixed;
  Bytes activation_per_micro_batch;
  Bytes recomputed_activation_per_micro_batch;
};

struct ValidateOptions {
  // Per stage (Plan::stages order); empty skips the memory check.
  std::vector<StageFootprint> stage_memory;
  // Per (replica, group, stage), for replicas on different hardware or TP degrees; when set it
  // is used instead of stage_memory.
  std::function<StageFootprint(int replica, int group, int stage)> footprint;
  // Check that Plan::model / Plan::cluster hashes match the given specs.
  bool check_spec_hashes = true;
};

Status validate_plan(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster,
                     const ValidateOptions& options);

// Peak number of micro-batches whose activations a group holds at once under its order, per
// stage it runs (F allocates, W or fused B frees). Indexed [replica][group][stage].
std::vector<std::vector<std::vector<int64_t>>> peak_in_flight(const Plan& plan);

}  // namespace motley
