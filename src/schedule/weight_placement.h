// Internal to schedule/: places the weight-gradient passes (W) of the zero-bubble kinds into a
// fixed order of forwards (F) and input-gradient passes (B) by replaying the orders on an
// EstimatedTimeline (estimated_timeline.h): every action starts when its group is free and its
// inputs are estimated. Thread-safe free function.
#pragma once

#include <cstdint>
#include <vector>

#include "estimated_timeline.h"
#include "motley/core/status.h"
#include "motley/schedule/schedule.h"

namespace motley::internal {

struct PlacedOrders {
  GroupOrders orders;
  double makespan = 0;  // of the estimate
};

// `timeline` is where the replay starts (nothing run yet; passed by value, so one built timeline
// serves several placements). `skeleton` holds, per group, its kForward and kBackwardInput
// actions in order;
// `limit`, per group, the activations allowed in flight (F done, W not done; 0 = unlimited).
// The result inserts one kBackwardWeight per B: before an F when the group's in-flight count is
// at its limit (the oldest pending W first), into idle gaps per `fill`, and the rest at the end.
// Errors (internal): the skeleton deadlocks, or a limit cannot be met because no W is pending.
Result<PlacedOrders> place_weight_passes(EstimatedTimeline timeline,
                                         const std::vector<int64_t>& limit,
                                         const GroupOrders& skeleton, WeightFill fill);

}  // namespace motley::internal
