// The W placement of the zero-bubble kinds (docs/schedules.md, "Where W goes"). Because W
// produces nothing another action waits for, a group's W decisions can be taken lazily: when the
// group's next F or B has all its inputs estimated, the gap before it is known exactly, and no
// other group's timing depends on which W fill it. So groups advance in any order that respects
// dependencies and the result does not depend on that order.
#include "weight_placement.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <string>

namespace motley::internal {
namespace {

constexpr double kNotDone = -1.0;

struct GroupState {
  size_t next = 0;               // index into the skeleton
  double free_at = 0;            // when the group's stream is free
  int64_t in_flight = 0;         // F done, W not done
  std::deque<Action> pending_w;  // oldest B first
  std::vector<Action> out;
};

}  // namespace

Result<PlacedOrders> place_weight_passes(const WeightPlacementInput& in,
                                         const GroupOrders& skeleton, GapFill fill) {
  const int stages = in.num_stages;
  const int64_t m = in.micro_batches;
  const auto cell = [m](int stage, int mb) { return static_cast<size_t>(stage) * m + mb; };
  std::vector<double> f_end(static_cast<size_t>(stages) * m, kNotDone);
  std::vector<double> b_end(static_cast<size_t>(stages) * m, kNotDone);

  // Gaps compare sums of durations taken in different orders; a tolerance keeps a W that fits
  // exactly (the textbook case) from being rejected by rounding.
  double longest = 0;
  for (int s = 0; s < stages; ++s) {
    longest = std::max({longest, in.forward[s], in.backward_input[s], in.backward_weight[s]});
  }
  const double tolerance = 1e-9 * std::max(longest, in.p2p);

  std::vector<GroupState> groups(in.num_groups);
  const auto put_w = [&](GroupState& g) {
    const Action w = g.pending_w.front();
    g.pending_w.pop_front();
    g.free_at += in.backward_weight[w.stage];
    --g.in_flight;
    g.out.push_back(w);
  };

  bool progress = true;
  while (progress) {
    progress = false;
    for (int gi = 0; gi < in.num_groups; ++gi) {
      GroupState& g = groups[gi];
      const std::vector<Action>& order = skeleton[gi];
      while (g.next < order.size()) {
        const Action& a = order[g.next];
        // The one input the action waits for, and whether it crosses groups.
        double input_end = 0;
        int input_stage = a.stage;
        if (a.kind == ActionKind::kForward) {
          if (a.stage > 0) {
            input_stage = a.stage - 1;
            input_end = f_end[cell(input_stage, a.micro_batch)];
          }
        } else {
          if (a.stage + 1 < stages) {
            input_stage = a.stage + 1;
            input_end = b_end[cell(input_stage, a.micro_batch)];
          } else {
            input_end = f_end[cell(a.stage, a.micro_batch)];
          }
        }
        if (input_end == kNotDone) break;
        double ready = input_end;
        if (in.stage_group[input_stage] != gi) ready += in.p2p;

        if (a.kind == ActionKind::kForward && in.limit[gi] > 0) {
          while (g.in_flight >= in.limit[gi]) {
            if (g.pending_w.empty()) {
              return internal_error(
                  "schedule: device group " + std::to_string(gi) + " must run a forward with " +
                  std::to_string(g.in_flight) + " micro-batches in flight (limit " +
                  std::to_string(in.limit[gi]) + ") and no weight-gradient pass to free one");
            }
            put_w(g);
          }
        }
        while (!g.pending_w.empty() && g.free_at < ready - tolerance) {
          const double w = in.backward_weight[g.pending_w.front().stage];
          if (fill == GapFill::kWhenItFits && g.free_at + w > ready + tolerance) break;
          put_w(g);
        }
        const double start = std::max(g.free_at, ready);
        if (a.kind == ActionKind::kForward) {
          g.free_at = start + in.forward[a.stage];
          f_end[cell(a.stage, a.micro_batch)] = g.free_at;
          ++g.in_flight;
        } else {
          g.free_at = start + in.backward_input[a.stage];
          b_end[cell(a.stage, a.micro_batch)] = g.free_at;
          g.pending_w.push_back(Action{ActionKind::kBackwardWeight, a.stage, a.micro_batch});
        }
        g.out.push_back(a);
        ++g.next;
        progress = true;
      }
    }
  }

  PlacedOrders result;
  for (int gi = 0; gi < in.num_groups; ++gi) {
    GroupState& g = groups[gi];
    if (g.next < skeleton[gi].size()) {
      const Action& a = skeleton[gi][g.next];
      return internal_error("schedule: the forward/backward order deadlocks at device group " +
                            std::to_string(gi) + ", action " + action_kind_name(a.kind) +
                            " of stage " + std::to_string(a.stage) + ", micro-batch " +
                            std::to_string(a.micro_batch));
    }
    while (!g.pending_w.empty()) put_w(g);
    result.makespan = std::max(result.makespan, g.free_at);
    result.orders.push_back(std::move(g.out));
  }
  return result;
}

}  // namespace motley::internal
