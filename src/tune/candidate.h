// Internal to tune/: a candidate plan in the tuner's own terms — per replica its device groups
// in pipeline order, its coarse stages (layer bounds and recompute) and micro-batch count, plus
// the schedule — and its assembly into a Plan: replicas with different partitions share the
// common refinement of their stage bounds, and named schedules generated on a replica's coarse
// stages are expanded onto the fine ones. Pure functions over a Context; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "context.h"
#include "motley/core/status.h"
#include "motley/plan/plan.h"
#include "motley/schedule/adaptive_schedule.h"
#include "motley/schedule/schedule.h"

namespace motley::tune_internal {

// Where each group's stages sit: one per group, interleaved (s mod p) or V (r and 2p-1-r).
enum class Shape { kLinear, kInterleaved, kV };

struct ScheduleSpec {
  bool adaptive = false;
  ScheduleKind kind = ScheduleKind::k1f1b;  // named schedules only
  Shape shape = Shape::kLinear;
  int chunks = 1;  // stages per group: 1, v (interleaved) or 2 (V)
  AdaptivePriority priority = AdaptivePriority::kBackwardFirst;
  WeightFill weight_fill = WeightFill::kIfItFits;
  // ZB-H1 / ZB-H2: let the generator shorten the warm-up to what memory holds (max_in_flight).
  // The published schedules (the baselines) run their full warm-up or do not fit.
  bool limit_in_flight = true;

  static ScheduleSpec named(ScheduleKind kind, int virtual_stages = 1);
  static ScheduleSpec adaptive_on(Shape shape, int chunks, AdaptivePriority priority,
                                  WeightFill fill);
  // "1f1b", "interleaved(v=2)", "zb-v", "adaptive", "adaptive-v", "adaptive(forward-first)".
  std::string name() const;
  bool operator==(const ScheduleSpec&) const = default;
};

// Coarse stage -> group for `p` groups under the shape.
std::vector<int> shape_stage_group(const ScheduleSpec& schedule, int p);

struct PipelineSpec {
  std::vector<std::vector<int>> groups;    // device ids per group, in pipeline (rank) order
  std::vector<int> bounds;                 // coarse stage s: layers [bounds[s], bounds[s+1])
  std::vector<RecomputePolicy> recompute;  // per coarse stage
  int64_t micro_batches = 0;
  bool operator==(const PipelineSpec&) const = default;
};

struct Candidate {
  int64_t micro_batch_size = 1;
  ScheduleSpec schedule;
  std::vector<PipelineSpec> replicas;
  bool operator==(const Candidate&) const = default;
};

// A canonical text of the candidate, for caching evaluations.
std::string candidate_key(const Candidate& c);

// Per replica: the sum of F+B+W(+recompute) over each group's coarse stages, per micro-batch.
struct GroupLoad {
  double forward = 0, backward = 0, weight = 0;  // backward includes recompute
  double total() const { return forward + backward + weight; }
};
std::vector<std::vector<GroupLoad>> group_loads(const Context& ctx, const Candidate& c);

struct AssembleOptions {
  // Replicas the optimizer state is sharded across (ZeRO-1); 0: the candidate's replicas. Set
  // when `c` stands for a larger plan (a subset of identical replicas).
  int64_t data_parallel = 0;
  // Whether the replicas must run exactly the global batch.
  bool whole_batch = true;
};

// The Plan of `c`: stages, replicas, orders. Errors: invalid_argument for a malformed candidate,
// the schedule generator's errors, infeasible when a group's peak memory under its order exceeds
// its devices' capacity.
Result<Plan> assemble(const Context& ctx, const Candidate& c,
                      const AssembleOptions& options = AssembleOptions{});

// Per (replica, group): fixed memory and peak memory under the plan's orders, per device.
struct GroupMemory {
  Bytes fixed;
  Bytes peak;
  Bytes capacity;
};
// `data_parallel`: as AssembleOptions::data_parallel.
std::vector<std::vector<GroupMemory>> plan_memory(const Context& ctx, const Plan& plan,
                                                  const CostModel& cost, int64_t data_parallel = 0);

}  // namespace motley::tune_internal
