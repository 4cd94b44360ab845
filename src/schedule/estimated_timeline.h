// Internal to schedule/: the estimated timeline that the generators replay to choose an order —
// per device group the time it is next free, per (stage, micro-batch) the estimated end of its
// forward (F) and of its input backward (I, or B when fused). An action is ready when the inputs
// data_dependencies (plan/dependencies.h) names are estimated, plus a fixed transfer time where
// an input comes from another group. Drivers decide what runs when; the timeline keeps the
// times. It is not the simulator: no links, no contention, no all-reduce, no optimizer.
// Not thread-safe: one timeline per replay.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
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
  // stages run on different groups. With vocabulary shards [b, n): hop[b - 1] is the hidden
  // state's (to each shard, and its gradient back), hop[s >= b] the loss statistics' between
  // shards; with embedding shards [0, a), hop[s < a] the partial embeddings' into stage a.
  std::vector<double> hop;
  int vocab_shards = 0;      // the last stages that are the head's vocabulary shards
  int embedding_shards = 0;  // the first stages that are the embedding's (plan/dependencies.h)
};

// When an action's inputs are available.
struct Readiness {
  double time = 0;
  bool known = true;  // every producer has run on the timeline, so `time` is exact
};

// Another group waiting for an action's output (the activation of F, the gradient of I or B).
struct Consumer {
  int group = -1;  // -1: none (no consumer, or one on the action's own group)
  double hop = 0;  // the transfer to it
};
// Every other group waiting for it: one, or one per vocabulary shard on another group.
using Consumers = std::vector<Consumer>;

class EstimatedTimeline {
 public:
  // Reads data_dependencies and downstream_consumer once per stage and action kind (the rule
  // does not depend on the micro-batch). REQUIRES: the spec's sizes agree (checked by the
  // generators' request checks).
  explicit EstimatedTimeline(TimelineSpec spec);

  int num_stages() const { return static_cast<int>(spec_.stage_group.size()); }
  int group_of(int stage) const { return spec_.stage_group[stage]; }
  double free_at(int group) const { return free_at_[group]; }
  double duration(const Action& action) const { return resolved(action).duration; }
  const Consumers& consumers(const Action& action) const { return resolved(action).consumers; }
  // The longest duration or hop of the spec (the scale of its times).
  double longest_time() const;

  // When `action`'s inputs are available. Exact once every producer has run; before that a
  // lower bound, taking a producer of another stage that has not run to start at `now` and a
  // producer of the action's own stage that has not run as never (infinity). Inline, like
  // run(): the generators ask it for every candidate action at every step.
  Readiness readiness(const Action& action, double now) const {
    const Resolved& r = resolved(action);
    Readiness out;
    out.time = std::max(arrival(r.inputs[0], action.micro_batch, now, &out.known),
                        arrival(r.inputs[1], action.micro_batch, now, &out.known));
    return out;
  }

  // Keeps `group` busy from now until `end` with work the timeline does not track (a
  // recompute, whose end nothing waits on but its own group). REQUIRES: end >= free_at(group).
  void occupy(int group, double end) { free_at_[group] = end; }

  // Runs `action` on its stage's group from `start`; returns its end, which is when the group
  // is free again. REQUIRES: start >= free_at(group_of(action.stage)); kind F, I, B or W.
  double run(const Action& action, double start) {
    const Resolved& r = resolved(action);
    const double end = start + r.duration;
    free_at_[r.group] = end;
    if (r.records) ends_[r.row + static_cast<size_t>(action.micro_batch)] = end;
    return end;
  }

 private:
  static constexpr double kNotRun = -1.0;  // estimated times are never negative

  // One input of an action, resolved for its stage. An action with fewer than two inputs has
  // the others read the row of zeros at the end of ends_: available from the start. An input
  // from every vocabulary shard reads `count` consecutive rows (one per shard stage) and waits
  // for the last.
  struct Input {
    size_t row = 0;            // the producer's row of ends_
    double hop = 0;            // added to the producer's end (0 on the same group)
    bool other_stage = false;  // the producer's stage is not the action's
    double producer_duration = 0;
    int count = 1;   // producers: rows row, row + stride, ...
    int local = -1;  // the one of them on the action's group (no hop), or -1
  };
  // What the timeline knows of one action kind on one stage.
  struct Resolved {
    std::array<Input, 2> inputs{};
    double duration = 0;
    int group = 0;         // the stage's
    bool records = false;  // F and the input backward record their end (in ends_), W does not
    size_t row = 0;        // of ends_, where they do
    Consumers consumers;
  };

  // When the input `in` of micro-batch `j` is available (readiness()'s rule); clears `*known`
  // when its producer has not run.
  double arrival(const Input& in, int j, double now, bool* known) const {
    if (in.count == 1) return arrival_from(in, 0, j, now, known);
    double latest = 0;
    for (int k = 0; k < in.count; ++k)
      latest = std::max(latest, arrival_from(in, k, j, now, known));
    return latest;
  }
  double arrival_from(const Input& in, int k, int j, double now, bool* known) const {
    const double hop = k == in.local ? 0.0 : in.hop;
    const double end =
        ends_[in.row + static_cast<size_t>(k) * static_cast<size_t>(spec_.micro_batches) +
              static_cast<size_t>(j)];
    if (end != kNotRun) return end + hop;
    *known = false;
    return in.other_stage ? now + in.producer_duration + hop
                          : std::numeric_limits<double>::infinity();
  }
  // What the timeline knows of the action's kind on its stage: the slot of F, of the input
  // backward (I or B) or of W, by ActionKind's order (F, I, W, B, R).
  const Resolved& resolved(const Action& action) const {
    static constexpr int kSlot[] = {0, 1, 2, 1, 1};  // R: unused (REQUIRES)
    return resolved_[action.stage][kSlot[static_cast<int>(action.kind)]];
  }
  // The row of ends_ holding the ends of F (forward) or of the input backward of a stage.
  size_t row(bool forward, int stage) const {
    return (static_cast<size_t>(forward ? 0 : 1) * spec_.stage_group.size() +
            static_cast<size_t>(stage)) *
           static_cast<size_t>(spec_.micro_batches);
  }
  // What an input adds on its way between stages `a` and `b` on different groups: the hop of
  // the boundary below the lower of the two (TimelineSpec::hop).
  double hop_between(int a, int b) const;

  TimelineSpec spec_;
  std::vector<std::array<Resolved, 3>> resolved_;  // per stage, per slot
  std::vector<double> free_at_;
  // The ends of every stage's F, then of every stage's input backward, per micro-batch, then a
  // row of zeros (no input).
  std::vector<double> ends_;
};

}  // namespace motley::internal
