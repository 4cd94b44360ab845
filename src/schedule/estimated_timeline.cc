#include "estimated_timeline.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "motley/core/check.h"
#include "motley/plan/dependencies.h"

namespace motley::internal {
namespace {

constexpr double kNotRun = -1.0;  // estimated times are never negative

}  // namespace

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
      free_at_(spec_.num_groups, 0.0),
      forward_end_(spec_.stage_group.size() * static_cast<size_t>(spec_.micro_batches), kNotRun),
      input_backward_end_(forward_end_.size(), kNotRun) {}

double EstimatedTimeline::duration(const Action& a) const {
  const StageDurations& d = spec_.durations[a.stage];
  switch (a.kind) {
    case ActionKind::kForward:
      return d.forward;
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward:
      return d.input_backward;
    case ActionKind::kBackwardWeight:
      return d.weight;
    default:
      MOTLEY_CHECK(false, "estimated timeline: no duration for this action kind");
  }
  return 0;
}

double EstimatedTimeline::transfer(int from, int to) const {
  if (group_of(from) == group_of(to)) return 0.0;
  return spec_.hop[std::min(from, to)];
}

Readiness EstimatedTimeline::readiness(const Action& a, double now) const {
  Readiness r;
  for (const Dependency& d : data_dependencies(a, num_stages())) {
    // These orders list no R: its work is part of the input backward's duration.
    if (d.optional) continue;
    const Action producer{
        d.producer == Producer::kForward ? ActionKind::kForward : ActionKind::kBackwardInput,
        d.stage, d.micro_batch};
    const size_t at = cell(d.stage, d.micro_batch);
    const double end =
        producer.kind == ActionKind::kForward ? forward_end_[at] : input_backward_end_[at];
    const double hop = d.crosses_stages ? transfer(d.stage, a.stage) : 0.0;
    double available;
    if (end != kNotRun) {
      available = end + hop;
    } else if (d.crosses_stages) {
      r.known = false;
      available = now + duration(producer) + hop;
    } else {
      r.known = false;
      available = std::numeric_limits<double>::infinity();
    }
    r.time = std::max(r.time, available);
  }
  return r;
}

double EstimatedTimeline::run(const Action& a, double start) {
  const int g = group_of(a.stage);
  MOTLEY_CHECK(start >= free_at_[g],
               "estimated timeline: an action starts before its group is free");
  const double end = start + duration(a);
  free_at_[g] = end;
  if (a.kind == ActionKind::kForward) {
    forward_end_[cell(a.stage, a.micro_batch)] = end;
  } else if (is_input_backward(a.kind)) {
    input_backward_end_[cell(a.stage, a.micro_batch)] = end;
  }
  return end;
}

}  // namespace motley::internal
