// sim: identical replicas simulated once. Two replicas whose simulations cannot differ — the
// same micro-batch count, stage-to-group map and orders, every stage priced alike, their
// messages over paths of the same latency, bandwidth and link-sharing pattern, and no link
// shared with another replica — run as one; the gradient all-reduce is still priced over every
// replica's devices, and the results list every replica (docs/simulator.md, "Identical
// replicas"). It decides nothing about time. Pure functions; thread-safe.
#pragma once

#include <array>
#include <functional>
#include <span>
#include <vector>

#include "motley/cost/cost_model.h"
#include "motley/plan/plan.h"

namespace motley::sim_internal {

// Seconds of one action of a stage, by ActionKind (F, B/I, W, fused B, R), and last
// (kShardedReduction) what each pass finishing the stage's gradients adds under ZeRO-2 and -3
// for its reduce-scatter, which the last micro-batch's leaves to the end-of-iteration sync.
using StageTimes = std::array<double, 6>;
inline constexpr size_t kShardedReduction = 5;

struct ReplicaFolding {
  // Per simulated replica, the plan's replicas it stands for, itself first; ordered by the
  // first member, so simulated replica k is the k-th replica of the folded plan.
  std::vector<std::vector<int>> members;
  // Per replica of the plan: the index into `members` of the simulated replica it is.
  std::vector<int> simulated_as;
  // Whether fewer replicas are simulated than the plan has.
  bool folds() const { return members.size() < simulated_as.size(); }
};

// Every replica on its own: what simulating the plan whole means.
ReplicaFolding no_folding(const Plan& plan);

// The classes of replicas that simulate identically. `stage_times` and `stage_memory` are the
// priced stages, replica * stages + stage; `wire_bytes(replica, group, peer_group, stage,
// gradient)` the bytes a message of that stage (its activation, or its input's gradient) takes
// on its path, as the simulator prices it.
// REQUIRES: `plan` passed check_plan_structure; `cost` prices the plan's cluster.
ReplicaFolding fold_identical_replicas(
    const Plan& plan, const CostModel& cost, std::span<const StageTimes> stage_times,
    std::span<const StageMemory> stage_memory,
    const std::function<double(int replica, int group, int peer_group, int stage, bool gradient)>&
        wire_bytes);

// The stages of `plan` and, in the order of `folding.members`, the first replica of each class:
// all a task graph reads of a plan (the other fields stay as `out` had them; the plan's own
// are read from `plan`).
void folded_plan(const Plan& plan, const ReplicaFolding& folding, Plan& out);

}  // namespace motley::sim_internal
