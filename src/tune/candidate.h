// Internal to tune/: what the search keeps of a candidate plan (schedule/assemble.h's Candidate)
// — its cache key, its per-group loads — and its assembly for the tuning problem of a Context,
// a thin call of assemble_plan. Pure functions over a Context; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "context.h"
#include "motley/core/status.h"
#include "motley/plan/plan.h"
#include "motley/schedule/assemble.h"
#include "motley/tune/preemption.h"

namespace motley::tune_internal {

// A canonical text of the candidate, for caching evaluations. A run of replicas each like the
// one before but for its devices, all moved by one offset, is written as the offset and the
// run's length: the key of 16,384 replicas of one make in cluster order stays short.
std::string candidate_key(const Candidate& c);

// `c` with these replicas in place of its own, which are not copied (on 65,536 devices tens of
// thousands of them, where screening keeps two).
Candidate with_replicas(const Candidate& c, std::vector<PipelineSpec> replicas);

// Per replica: the sum of F+B+W(+recompute) over each group's coarse stages, per micro-batch.
struct GroupLoad {
  double forward = 0, backward = 0, weight = 0;  // backward includes recompute
  double total() const { return forward + backward + weight; }
};
// With what ZeRO-2 and -3 and expert parallelism add to the passes (space.h's pass_overhead),
// their collectives priced by `collectives` (default: the context's cost model). With `only`,
// the loads of those replicas alone (the others' are left empty).
std::vector<std::vector<GroupLoad>> group_loads(const Context& ctx, const Candidate& c,
                                                const CostModel* collectives = nullptr,
                                                const std::vector<size_t>* only = nullptr);

// The Plan of `c` for the context's model, cluster, sequence length and ZeRO-1 (assemble_plan
// with the memory check). `data_parallel`: replicas the optimizer state is sharded across, 0
// for c's own (set when `c` stands for a larger plan); `whole_batch`: whether the replicas must
// run exactly the global batch.
Result<Plan> assemble(const Context& ctx, const Candidate& c, int64_t data_parallel = 0,
                      bool whole_batch = true);

// The schedule family of `s` (PlanConstraints::schedules): "adaptive" or the named kind.
std::string schedule_family(const ScheduleSpec& s);
// Whether the options' constraints allow schedule `s`.
bool schedule_allowed(const Context& ctx, const ScheduleSpec& s);
// Why `c` breaks the options' constraints (TP, PP, DP, schedule, excluded devices), in words;
// empty when it meets them.
std::string constraint_violation(const Context& ctx, const Candidate& c);

// The layers each device group of `c` holds (preemption.h), coarse stage by coarse stage.
std::vector<StateHolder> candidate_state_holders(const Candidate& c);

// The interruption estimate of `c` (or of a plan with `holders`) on the context's cluster with
// iterations of `iteration_time`, on the cluster as it is.
PreemptionEstimate candidate_preemption(const Context& ctx, const std::vector<StateHolder>& holders,
                                        double iteration_time);
// The same for `c`, whose holders are listed only where a node can be interrupted (on a cluster
// of tens of thousands of devices that cannot be, listing them was a tenth of each evaluation).
PreemptionEstimate candidate_preemption(const Context& ctx, const Candidate& c,
                                        double iteration_time);

// The structure of `plan` as a candidate: each replica's device groups in pipeline order, its
// coarse stages (the runs of consecutive stages on one group, the middle run of a V split
// where it splits most evenly) with their recompute (the most any of its stages has), and its
// micro-batch count; the plan's micro-batch size; the schedule its name names on that shape
// (the adaptive scheduler on it when the name is none of the search's). The plan's actions are
// not read. Errors: invalid_argument when a replica's stages are not one of the shapes over its
// groups in order (linear, interleaved, V) or the replicas' shapes differ.
Result<Candidate> candidate_from_plan(const Plan& plan);

}  // namespace motley::tune_internal
