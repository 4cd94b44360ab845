// The adaptive list scheduler: builds an irregular order per device group from the stages'
// times, for any map of stages to groups (one stage per group, interleaved, V-shaped, or several
// consecutive stages on one group), by replaying an estimated timeline: whenever a group is free
// it runs the most urgent ready action — input-gradient backwards, then forwards while its
// memory admits another micro-batch, and weight-gradient passes in the gaps. Admission control
// keeps every group's live activations within its budget, and admitting micro-batches in order
// makes the result deadlock-free. It does not simulate the plan (sim/) or choose stage times.
// Algorithm: docs/planner.md, "Adaptive schedule". Thread-safe free function.
#pragma once

#include <cstdint>
#include <vector>

#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/cost/cost_model.h"
#include "motley/schedule/schedule.h"

namespace motley {

enum class AdaptivePriority {
  kBackwardFirst,  // a ready backward runs before a ready forward (1F1B-like steady state)
  kForwardFirst,   // forwards first while memory admits them (deep warm-up), then backwards
};

enum class WeightFill {
  kIfItFits,  // a W fills a gap only when it ends before the group's next F or B can start
  kAlways,    // any gap is filled with a pending W
};

struct AdaptiveRequest {
  int num_groups = 0;
  std::vector<int> stage_group;  // stage -> group, stages in pipeline order; any map
  int64_t micro_batches = 0;
  // Per stage, per micro-batch: F, B, W and the recompute, which is charged to B (as the
  // simulator does when a plan lists no R).
  std::vector<ComputeTimes> stage_times;
  // Per stage boundary s -> s+1 (size stages - 1): time for the activation (and the gradient
  // coming back) to cross; ignored where both stages run on the same group.
  std::vector<Seconds> transfer_time;
  // Per stage: activation bytes one micro-batch holds from its F until its W (or fused B).
  std::vector<Bytes> activation_bytes;
  // Per group: bytes available for activations (capacity minus fixed memory).
  std::vector<Bytes> memory_budget;
  bool split_backward = true;  // emit B and W (else one fused backward)
  AdaptivePriority priority = AdaptivePriority::kBackwardFirst;
  WeightFill weight_fill = WeightFill::kIfItFits;
};

// One action list per group, in execution order. Every (stage, micro-batch) gets one F and one
// B and W (or one fused backward); per stage, forwards and backwards run in micro-batch order; a
// group starts a micro-batch's first forward only when the activations of all its stages for
// that micro-batch fit beside those it holds (so peak_in_flight memory <= memory_budget).
// Errors: invalid_argument for inconsistent sizes or negative values; infeasible when one
// micro-batch's activations on a group exceed its budget (names the group and both sizes).
Result<GroupOrders> adaptive_schedule(const AdaptiveRequest& request);

}  // namespace motley
