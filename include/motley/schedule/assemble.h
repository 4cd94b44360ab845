// The plan assembler: a candidate — per replica its device groups in pipeline order, its coarse
// stages (layer bounds, recompute) and micro-batch count; a schedule; a micro-batch size — made
// into a Plan: the common refinement of the replicas' bounds, named schedules generated on each
// replica's coarse stages and expanded onto the fine ones, the adaptive scheduler under memory
// budgets, and the memory check. It chooses nothing (tune/) and simulates nothing (sim/).
// Algorithm: docs/planner.md, "Assembling a plan". Thread-safe free functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "motley/core/status.h"
#include "motley/cost/cost_model.h"
#include "motley/plan/plan.h"
#include "motley/schedule/adaptive_schedule.h"
#include "motley/schedule/schedule.h"

namespace motley {

// Where each group's stages sit: one per group, interleaved (s mod p), or V (r and 2p-1-r):
// with more than two chunks a zigzag, out to the last group and back again, stage s of chunk
// k = s / p on group s mod p when k is even and p - 1 - s mod p when it is odd.
enum class StageShape { kLinear, kInterleaved, kV };

struct ScheduleSpec {
  bool adaptive = false;
  ScheduleKind kind = ScheduleKind::k1f1b;  // named schedules only
  StageShape shape = StageShape::kLinear;
  int chunks = 1;  // stages per group: 1, v (interleaved), 2 (V) or v (zigzag, adaptive only)
  AdaptivePriority priority = AdaptivePriority::kBackwardFirst;
  WeightFill weight_fill = WeightFill::kIfItFits;
  // ZB-H1 / ZB-H2: let the generator shorten the warm-up to what memory holds (max_in_flight).
  // The published schedules (the baselines) run their full warm-up or do not fit.
  bool limit_in_flight = true;
  // Adaptive only: where memory blocks every forward a group could run, a forward may keep
  // only each layer's input of a stage that keeps its activations, and an R rebuilds them
  // before its backward (AdaptiveRequest::recomputed_bytes): single micro-batches recomputed
  // instead of every micro-batch of the stage.
  bool recompute_single = false;

  // The named schedule `kind` on its conventional shape; interleaved gets max(v, 2) chunks.
  static ScheduleSpec named(ScheduleKind kind, int virtual_stages = 1);
  static ScheduleSpec adaptive_on(StageShape shape, int chunks, AdaptivePriority priority,
                                  WeightFill fill);
  // "1f1b", "interleaved(v=2)", "zb-v", "adaptive", "adaptive-v", "adaptive(forward-first)",
  // "adaptive-zigzag(v=3)(alternate, eager-w)", "adaptive(alternate, recompute-some)".
  std::string name() const;
  bool operator==(const ScheduleSpec&) const = default;
};

// Whether the spec's schedule runs one fused backward per stage and micro-batch (the named
// kinds that do not split B from W), so that a stage's backward costs
// ComputeTimes::fused_backward(), not B + W.
bool runs_fused_backward(const ScheduleSpec& schedule);

// Coarse stage -> group for `p` groups under the spec's shape (default_stage_group's maps).
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
  // The ZeRO stage across the replicas (Plan::zero_stage); the plan gets the larger of this
  // and AssembleOptions::zero_stage.
  int zero_stage = 0;
  // Expert parallelism over the replicas (Plan::expert_parallel); the plan gets the larger of
  // this and AssembleOptions::expert_parallel.
  int expert_parallel = 1;
  // Context parallelism over the replicas (Plan::context_parallel): groups of this many
  // consecutive replicas split the same micro-batches' sequences, so they must have equal
  // micro-batch counts and the global batch counts a group's once. The plan gets the larger of
  // this and AssembleOptions::context_parallel; the cost model must price the same split.
  int context_parallel = 1;
  // Megatron-LM's sequence parallelism inside the tensor-parallel groups (Plan's); so is it
  // with AssembleOptions::sequence_parallel.
  bool sequence_parallel = false;
  // Vocabulary parallelism: the model's head as a stage of its own split by vocabulary rows into
  // one shard per group of each replica (Stage::vocab_begin), rows in proportion to each group's
  // speed on the head. Needs the adaptive scheduler, replicas of equal group counts (at least
  // two) and AssembleOptions::head_vocab. With vocab_embedding the embedding too, where
  // AssembleOptions::embedding_vocab is given and a layer lies between the two.
  bool vocab_parallel = false;
  bool vocab_embedding = false;
  // The head's rows in proportion to these weights, one per group (every replica's group g
  // takes weight g), instead of the groups' speed; empty: by speed. The search sets them to
  // even out the groups' whole load, the head shards absorbing what the layer granularity of
  // the partition leaves uneven (balanced_head_shares). Positive and finite.
  std::vector<double> head_shares{};
  // Per-layer recompute: these layers (ascending) recompute in full in every replica, keeping
  // only their input, wherever the stage holding them recomputes less (Stage::recompute_layers).
  std::vector<int> recompute_layers{};
  bool operator==(const Candidate&) const = default;
};

struct AssembleOptions {
  // What the plan is for (spec_hash.h's refs, computed once by callers that assemble many).
  SpecRef model;
  SpecRef cluster;
  int num_layers = 0;  // the model's: every replica's bounds must run from 0 to it
  int64_t seq_len = 0;
  // The vocabularies of the model's head and embedding (head_vocab, embedding_vocab), for
  // vocabulary parallelism; 0: not to be split.
  int64_t head_vocab = 0;
  int64_t embedding_vocab = 0;
  int zero_stage = 0;
  int expert_parallel = 1;
  int context_parallel = 1;
  bool sequence_parallel = false;
  // Replicas the optimizer state is sharded across (ZeRO-1); 0: the candidate's replicas. Set
  // when the candidate stands for a larger plan (a subset of identical replicas).
  int64_t data_parallel = 0;
  // > 0: the replicas must run exactly this many sequences (an internal error otherwise).
  int64_t global_batch = 0;
  // Give the adaptive scheduler and ZB-H1/ZB-H2 the groups' memory budgets and refuse a plan
  // whose peak exceeds a device's capacity. Off: no budget anywhere, no check (the plan is
  // validated later, as `motley simulate` does).
  bool check_memory = true;
  // The share of each device's capacity the budgets and the check use (1 less a headroom the
  // plan leaves free), in (0, 1].
  double usable_memory_fraction = 1.0;
};

// How vocabulary parallelism splits a head of `vocab` rows over groups taking `head_time`
// seconds each for the whole head (F + B + W): rows in proportion to their speed, each group at
// least one. Every end but the last is a multiple of `granule` (each group at least `granule`
// rows) where the vocabulary has `granule` rows per group; else any row. The end row of each
// group's shard, ascending, the last `vocab`. REQUIRES: vocab >= head_time.size() >= 1,
// granule >= 1.
std::vector<int64_t> vocab_shard_ends(int64_t vocab, const std::vector<double>& head_time,
                                      int64_t granule = 1);
// The same with rows in proportion to `weights` (> 0) rather than to 1 / head time.
std::vector<int64_t> vocab_shard_ends_by_weight(int64_t vocab, const std::vector<double>& weights,
                                                int64_t granule = 1);

// The head's shares (summing to 1) that even out the groups' loads: group g, with `base[g]`
// seconds of other work and `head[g]` seconds for the whole head, ends at base[g] + x[g] *
// head[g]; the shares minimize the largest of these (water filling: every group with a share
// ends at the same level, a group already above it takes none). Each share is at least
// `min_share` (a shard per group, as the plan format needs), the level then found for the
// rest. REQUIRES: base and head of one size p >= 1, head[g] > 0, 0 <= min_share * p <= 1.
std::vector<double> balanced_head_shares(const std::vector<double>& base,
                                         const std::vector<double>& head, double min_share);

// What a candidate's shard row counts are multiples of: the least common multiple of every
// group's tensor-parallel degree in every replica (a shard's rows split evenly over its group).
int64_t vocab_row_granule(const Candidate& c);
// The same rule folded over one replica's groups (device ids per group), from `granule`: for
// a layout whose candidate is not built yet.
int64_t vocab_row_granule(const std::vector<std::vector<int>>& groups, int64_t granule = 1);

// The Plan of `candidate`, its stages and orders priced with `cost` (the memory check with the
// capacities of cost.topology()). Errors: invalid_argument for a malformed candidate (naming the
// replica and what is wrong), the schedule generators' errors, infeasible ("memory: replica r
// group g ...") when a group cannot hold one micro-batch or peaks above its capacity.
Result<Plan> assemble_plan(const AssembleOptions& options, const Candidate& candidate,
                           const CostModel& cost);

}  // namespace motley
