// Internal to schedule/: the estimated timeline that the generators replay to choose an order —
// per device group the time it is next free, per (stage, micro-batch) the estimated end of its
// forward (F) and of its input backward (I, or B when fused). An action is ready when the inputs
// data_dependencies (plan/dependencies.h) names are estimated, plus a fixed transfer time where
// an input comes from another group. Drivers decide what runs when; the timeline keeps the
// times. It is not the simulator: no links, no contention, no all-reduce, no optimizer.
// Not thread-safe: one timeline per replay.
#pragma once

#include <cstdint>
#include <vector>

#include "motley/cost/cost_model.h"
#include "motley/plan/plan.h"

namespace motley::internal {

// Seconds one micro-batch of a stage takes, per action.
struct StageDurations {
  double forward = 0;
  double input_backward = 0;  // I with the recompute before it; B (I + W) when fused
  double weight = 0;          // W
};

// The durations of a stage priced at `times`: recompute is charged to the input backward (as
// the simulator does for a plan that lists no R), and so is W when the backward is fused.
StageDurations stage_durations(const ComputeTimes& times, bool split_backward);

struct TimelineSpec {
  int num_groups = 0;
  std::vector<int> stage_group;  // stage -> group
  int64_t micro_batches = 0;
  std::vector<StageDurations> durations;  // per stage
  // Per stage boundary s -> s+1 (size stages - 1): what an input crossing it adds when the two
  // stages run on different groups.
  std::vector<double> hop;
};

// When an action's inputs are available.
struct Readiness {
  double time = 0;
  bool known = true;  // every producer has run on the timeline, so `time` is exact
};

class EstimatedTimeline {
 public:
  // REQUIRES: the spec's sizes agree (checked by the generators' request checks).
  explicit EstimatedTimeline(TimelineSpec spec);

  int num_stages() const { return static_cast<int>(spec_.stage_group.size()); }
  int group_of(int stage) const { return spec_.stage_group[stage]; }
  double free_at(int group) const { return free_at_[group]; }
  double duration(const Action& action) const;
  // What an input adds on its way from stage `from` to the adjacent stage `to`: the boundary's
  // hop when their groups differ, else 0.
  double transfer(int from, int to) const;

  // When `action`'s inputs are available. Exact once every producer has run; before that a
  // lower bound, taking a producer of another stage that has not run to start at `now` and a
  // producer of the action's own stage that has not run as never (infinity).
  Readiness readiness(const Action& action, double now) const;

  // Runs `action` on its stage's group from `start`; returns its end, which is when the group
  // is free again. REQUIRES: start >= free_at(group_of(action.stage)); kind F, I, B or W.
  double run(const Action& action, double start);

 private:
  size_t cell(int stage, int micro_batch) const {
    return static_cast<size_t>(stage) * static_cast<size_t>(spec_.micro_batches) +
           static_cast<size_t>(micro_batch);
  }

  TimelineSpec spec_;
  std::vector<double> free_at_;
  std::vector<double> forward_end_;
  std::vector<double> input_backward_end_;
};

}  // namespace motley::internal
