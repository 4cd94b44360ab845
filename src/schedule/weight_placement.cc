// The W placement of the zero-bubble kinds (docs/schedules.md, "Where W goes"). Because W
// produces nothing another action waits for, a group's W decisions can be taken lazily: when the
// group's next F or B has all its inputs estimated, the gap before it is known exactly, and no
// other group's timing depends on which W fill it. So groups advance in any order that respects
// dependencies and the result does not depend on that order.
#include "weight_placement.h"

#include <algorithm>
#include <deque>
#include <string>
#include <utility>

namespace motley::internal {
namespace {

struct GroupState {
  size_t next = 0;               // index into the skeleton
  int64_t in_flight = 0;         // F done, W not done
  std::deque<Action> pending_w;  // oldest B first
  std::vector<Action> out;
};

}  // namespace

Result<PlacedOrders> place_weight_passes(EstimatedTimeline timeline,
                                         const std::vector<int64_t>& limit,
                                         const GroupOrders& skeleton, WeightFill fill) {
  // Gaps compare sums of durations taken in different orders; a tolerance keeps a W that fits
  // exactly (the textbook case) from being rejected by rounding.
  const double tolerance = 1e-9 * timeline.longest_time();
  const int num_groups = static_cast<int>(skeleton.size());
  std::vector<GroupState> groups(num_groups);
  const auto put_w = [&](int gi) {
    GroupState& g = groups[gi];
    const Action w = g.pending_w.front();
    g.pending_w.pop_front();
    timeline.run(w, timeline.free_at(gi));
    --g.in_flight;
    g.out.push_back(w);
  };

  bool progress = true;
  while (progress) {
    progress = false;
    for (int gi = 0; gi < num_groups; ++gi) {
      GroupState& g = groups[gi];
      const std::vector<Action>& order = skeleton[gi];
      while (g.next < order.size()) {
        const Action& a = order[g.next];
        const Readiness input = timeline.readiness(a, 0.0);
        if (!input.known) break;
        const double ready = input.time;

        if (a.kind == ActionKind::kForward && limit[gi] > 0) {
          while (g.in_flight >= limit[gi]) {
            if (g.pending_w.empty()) {
              return internal_error("schedule: device group " + std::to_string(gi) +
                                    " must run a forward with " + std::to_string(g.in_flight) +
                                    " micro-batches in flight (limit " + std::to_string(limit[gi]) +
                                    ") and no weight-gradient pass to free one");
            }
            put_w(gi);
          }
        }
        while (!g.pending_w.empty() && timeline.free_at(gi) < ready - tolerance) {
          const double w = timeline.duration(g.pending_w.front());
          if (fill == WeightFill::kIfItFits && timeline.free_at(gi) + w > ready + tolerance) break;
          put_w(gi);
        }
        timeline.run(a, std::max(timeline.free_at(gi), ready));
        if (a.kind == ActionKind::kForward) {
          ++g.in_flight;
        } else {
          g.pending_w.push_back(Action{ActionKind::kBackwardWeight, a.stage, a.micro_batch});
        }
        g.out.push_back(a);
        ++g.next;
        progress = true;
      }
    }
  }

  PlacedOrders result;
  for (int gi = 0; gi < num_groups; ++gi) {
    GroupState& g = groups[gi];
    if (g.next < skeleton[gi].size()) {
      const Action& a = skeleton[gi][g.next];
      return internal_error("schedule: the forward/backward order deadlocks at device group " +
                            std::to_string(gi) + ", action " + action_kind_name(a.kind) +
                            " of stage " + std::to_string(a.stage) + ", micro-batch " +
                            std::to_string(a.micro_batch));
    }
    while (!g.pending_w.empty()) put_w(gi);
    result.makespan = std::max(result.makespan, timeline.free_at(gi));
    result.orders.push_back(std::move(g.out));
  }
  return result;
}

}  // namespace motley::internal
