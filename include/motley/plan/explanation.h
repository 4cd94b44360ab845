// PlanExplanation: what the planner decided for a plan and what it is compared with, as numbers
// (times in Seconds, fractions, counts), so that each report renders it its own way
// (report/explanation.h: the lines `motley plan` prints). tune/ fills it. Plain data with no
// behaviour beyond equality and no JSON form of its own; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "motley/core/units.h"
#include "motley/model/model.h"

namespace motley {

// The megatron-1f1b baseline's figures, which the decisions are measured against.
struct ExplainedBaseline {
  std::string detail;  // its choice in words: "TP 1 x PP 4 x DP 4, 1f1b, Megatron-LM's ..."
  Seconds bottleneck;  // its busiest device group's F + B + W per micro-batch
  int64_t micro_batch_size = 0;
  double bubble_fraction = 0;
  Seconds iteration_time;
  double dollars_per_million_tokens = 0;
  bool operator==(const ExplainedBaseline&) const = default;
};

// A baseline that optimizes one dimension alone ("partition-only", ...) and its result.
struct DimensionOutcome {
  std::string strategy;
  Seconds iteration_time;
  bool operator==(const DimensionOutcome&) const = default;
};

struct PlanExplanation {
  // Placement: the replicas' device groups in words ("4 x [A100-80GB x1 TP2 | H100-SXM x2
  // TP1]"), each replica's micro-batches, and the devices left unused per type (by name).
  std::string layout;
  std::vector<int64_t> replica_micro_batches;
  std::vector<std::pair<std::string, int>> idle_devices;
  // Partition of the first replica: layers per stage and its busiest group's F + B + W per
  // micro-batch; whether the model ends with an LM head (whose stage is then described).
  std::vector<int> stage_layers;
  Seconds bottleneck;
  bool ends_with_head = false;
  // Recompute of the first replica: stages per policy, in policy order (none first).
  std::vector<std::pair<RecomputePolicy, int>> recompute;
  // Layers recomputed in full on their own (per-layer recompute) in stages that recompute less.
  int recompute_layers = 0;
  // Micro-batches the first replica's orders recompute alone (an R on a stage that keeps its
  // activations: the adaptive scheduler's recompute-some), over all its stages.
  int64_t recomputed_micro_batches = 0;
  // ZeRO (Plan::zero_stage, 1 to 3) across this many data-parallel replicas; 0: none.
  int zero_stage = 0;
  int64_t zero_replicas = 0;
  // Expert parallelism: the MoE experts split over groups of this many replicas (1: none), and
  // how many such groups there are.
  int expert_parallel = 1;
  int64_t expert_groups = 0;
  // Context parallelism: every sequence split over groups of this many replicas (1: none).
  int context_parallel = 1;
  // Vocabulary parallelism: the rows of each vocabulary shard of the head, shard k on group k
  // of every pipeline (empty: the head is whole).
  std::vector<int64_t> vocab_rows;
  // The head's rows even out the groups' whole load rather than follow their speed on the head.
  bool vocab_rows_balance_load = false;
  std::vector<int64_t> embedding_rows;  // the embedding's shards, likewise (empty: whole)
  // Megatron-LM's sequence parallelism in the tensor-parallel groups.
  bool sequence_parallel = false;
  // Schedule.
  std::string schedule;  // ScheduleSpec::name(): "1f1b", "adaptive(eager-w)", ...
  int64_t micro_batch_size = 0;
  double bubble_fraction = 0;
  // Cost, stated when the objective was cost.
  bool cost_objective = false;
  double dollars_per_million_tokens = 0;
  // Result, against the lower bound (iteration_lower_bound).
  Seconds iteration_time;
  double tokens_per_s = 0;
  Seconds lower_bound;
  // megatron-1f1b, when it found a plan; then the single-dimension baselines that found one,
  // in tune_strategy_names() order.
  std::optional<ExplainedBaseline> megatron;
  // megatron-tuned's iteration (the best of a sweep of Megatron-LM layouts), when it found one.
  std::optional<Seconds> megatron_tuned;
  std::vector<DimensionOutcome> single_dimension;
  // The baseline whose plan this is (the first in tune_strategy_names() order); empty when the
  // full search's own candidate won.
  std::string baseline_plan;
  bool operator==(const PlanExplanation&) const = default;
};

}  // namespace motley
