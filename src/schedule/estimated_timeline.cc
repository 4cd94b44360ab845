#include "estimated_timeline.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "motley/core/check.h"
#include "motley/plan/dependencies.h"

namespace motley::internal {

StageDurations stage_durations(const ComputeTimes& t, bool split_backward) {
  StageDurations d;
  d.forward = t.forward.value();
  d.input_backward = t.backward_input.value() + t.recompute.value();
  if (!split_backward) d.input_backward += t.backward_weight.value();
  d.weight = t.backward_weight.value();
  return d;
}

EstimatedTimeline::EstimatedTimeline(TimelineSpec spec)
    : spec_(std::move(spec)),
      resolved_(spec_.stage_group.size()),
      free_at_(spec_.num_groups, 0.0),
      ends_(2 * spec_.stage_group.size() * static_cast<size_t>(spec_.micro_batches), kNotRun) {
  const int stages = num_stages();
  const size_t no_input = ends_.size();
  ends_.resize(ends_.size() + static_cast<size_t>(spec_.micro_batches), 0.0);
  for (int s = 0; s < stages; ++s) {
    const ActionKind kinds[] = {ActionKind::kForward, ActionKind::kBackwardInput,
                                ActionKind::kBackwardWeight};
    for (int slot = 0; slot < 3; ++slot) {
      const ActionKind kind = kinds[slot];
      const Action action{kind, s, 0};
      Resolved& r = resolved_[s][slot];
      const StageDurations& own = spec_.durations[s];
      r.duration = slot == 0 ? own.forward : slot == 1 ? own.input_backward : own.weight;
      r.group = group_of(s);
      r.records = kind != ActionKind::kBackwardWeight;
      r.row = row(kind == ActionKind::kForward, s);
      for (Input& in : r.inputs) in.row = no_input;
      int inputs = 0;
      const PipelineShape shape{stages, spec_.vocab_shards, spec_.embedding_shards};
      for (const Dependency& d : data_dependencies(action, shape)) {
        // These orders list no R: its work is part of the input backward's duration.
        if (d.optional) continue;
        MOTLEY_CHECK(d.micro_batch == 0 && inputs < 2,
                     "estimated timeline: an input of another micro-batch, or too many inputs");
        const bool forward = d.producer == Producer::kForward;
        const StageDurations& p = spec_.durations[d.stage];
        Input& in = r.inputs[inputs++];
        in.row = row(forward, d.stage);
        in.count = d.count;
        in.other_stage = d.stage != s || d.count > 1;
        in.producer_duration = forward ? p.forward : p.input_backward;
        in.hop = 0.0;
        for (int k = 0; k < d.count; ++k) {
          if (group_of(d.stage + k) == group_of(s)) {
            in.local = k;
          } else if (d.crosses_stages) {
            in.hop = std::max(in.hop, hop_between(d.stage + k, s));
          }
        }
        if (d.count == 1 && in.local == 0) in.hop = 0.0;
      }
      if (const std::optional<Dependency> next = downstream_consumer(action, shape)) {
        for (int k = 0; k < next->count; ++k) {
          const int to = next->stage + k;
          if (group_of(to) != group_of(s)) {
            r.consumers.push_back(Consumer{group_of(to), hop_between(s, to)});
          }
        }
      }
    }
  }
}

double EstimatedTimeline::longest_time() const {
  double longest = 0;
  for (const StageDurations& d : spec_.durations) {
    longest = std::max({longest, d.forward, d.input_backward, d.weight});
  }
  for (double hop : spec_.hop) longest = std::max(longest, hop);
  return longest;
}

double EstimatedTimeline::hop_between(int from, int to) const {
  return spec_.hop[std::min(from, to)];
}

}  // namespace motley::internal
