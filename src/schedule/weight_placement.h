// Internal to schedule/: places the weight-gradient passes (W) of the zero-bubble kinds into a
// fixed order of forwards (F) and input-gradient passes (B), driven by a minimal timing
// estimate: every action starts when its group is free and its inputs are done (plus a fixed
// transfer time between groups). It is not the simulator: no links, no contention, no
// all-reduce, no optimizer. Thread-safe free function.
#pragma once

#include <cstdint>
#include <vector>

#include "motley/core/status.h"
#include "motley/schedule/schedule.h"

namespace motley::internal {

// Where a W may go besides where memory forces it and the end of the order.
enum class GapFill {
  kWhenItFits,  // only into an idle gap long enough that the next F/B is not delayed
  kAlways,      // into any idle gap, even if the next F/B then starts late
};

struct WeightPlacementInput {
  int num_groups = 0;
  int num_stages = 0;
  std::vector<int> stage_group;
  int64_t micro_batches = 0;
  // Per stage, seconds per micro-batch; backward_input includes any recompute before it.
  std::vector<double> forward;
  std::vector<double> backward_input;
  std::vector<double> backward_weight;
  double p2p = 0;  // added to every dependency between different groups
  // Per group, activations allowed in flight (F done, W not done); 0 = unlimited.
  std::vector<int64_t> limit;
};

struct PlacedOrders {
  GroupOrders orders;
  double makespan = 0;  // of the estimate
};

// `skeleton` holds, per group, its kForward and kBackwardInput actions in order. The result
// inserts one kBackwardWeight per B: before an F when the group's in-flight count is at its
// limit (the oldest pending W first), into idle gaps per `fill`, and the rest at the end.
// Errors (internal): the skeleton deadlocks, or a limit cannot be met because no W is pending.
Result<PlacedOrders> place_weight_passes(const WeightPlacementInput& input,
                                         const GroupOrders& skeleton, GapFill fill);

}  // namespace motley::internal
