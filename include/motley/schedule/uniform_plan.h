// make_uniform_plan: the complete Plan behind `motley simulate --schedule X --stages N
// --virtual-stages V --micro-batches M` — the layers split over the stages by a counting rule
// (layer_split.h), device groups in cluster order, the rest of the cluster as data-parallel
// replicas — assembled as a candidate by assemble_plan. It neither prices nor validates the
// plan (sim/, plan/validate.h) and chooses nothing: the tuner does. Thread-safe free function.
#pragma once

#include <cstdint>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/cost/cost_model.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"
#include "motley/schedule/layer_split.h"
#include "motley/schedule/schedule.h"

namespace motley {

struct UniformPlanOptions {
  ScheduleKind kind = ScheduleKind::k1f1b;
  // p: device groups per replica. 0: every group of the cluster in one pipeline.
  int stages = 0;
  // Chunks per group: interleaved needs >= 2; zb-v and dualpipev run 2 (1 is read as 2); the
  // other kinds need 1.
  int virtual_stages = 1;
  int64_t micro_batches = 0;  // m, per replica; must be positive
  // t: devices per group, consecutive in cluster order, inside one node and of one type.
  int tensor_parallel = 1;
  // Replicas of the pipeline. 0: as many as the cluster holds, which must then be divisible by
  // stages * tensor_parallel; otherwise the first data_parallel * stages * t devices are used.
  int data_parallel = 0;
  int64_t micro_batch_size = 1;
  int64_t seq_len = 0;  // 0: the model's default_seq_len
  RecomputePolicy recompute = RecomputePolicy::kNone;
  // Per-layer recompute as Megatron-LM's block method (--recompute-num-layers N): the first N
  // layers of every stage other than the embedding and the head recompute in full
  // (Candidate::recompute_layers); 0: none. Needs `recompute` none.
  int recompute_layers = 0;
  int zero_stage = 0;              // Plan::zero_stage
  int expert_parallel = 1;         // Plan::expert_parallel
  int context_parallel = 1;        // Plan::context_parallel: replicas per context group
  bool sequence_parallel = false;  // recorded in the plan (Plan::sequence_parallel)
  // Split the head, and the embedding where the model starts with one, into one vocabulary
  // shard per group (Candidate::vocab_parallel, vocab_embedding); the orders
  // then come from the adaptive scheduler on `kind`'s stage shape (backward first), since the
  // named schedules place no shards.
  bool vocab_parallel = false;
  // How layers are counted onto stages: uniform_bounds (every layer alike) or megatron_bounds.
  LayerSplit partition = LayerSplit::kUniform;
  // Non-empty: the layers of each stage in order (one count per stage, each at least 1,
  // summing to the model's layers), instead of `partition`'s rule.
  std::vector<int> layer_counts;
  // Where replica k's group r sits, in groups of t devices in cluster order: false, group
  // k * p + r (each replica's pipeline on consecutive devices); true, group r * replicas + k,
  // Megatron-LM's rank order (tensor, context, expert and data parallel ranks inside the
  // pipeline rank), which keeps a stage's data-, context- and expert-parallel peers together.
  bool megatron_rank_order = false;
};

// The S = p * stages_per_group stages get split_bounds(partition, model, S): by default stage s
// has floor(L / S) layers, and one more when s < L mod S. Replica k's group r holds devices
// [(k*p + r) * t, (k*p + r + 1) * t) of cluster_devices(cluster) (with megatron_rank_order,
// [(r*d + k) * t, (r*d + k + 1) * t) for d replicas). Stage times for the
// zero-bubble kinds come from cost.compute() on each replica's own devices, so replicas on
// different hardware may get different orders; the activation/gradient transfer time given to
// the generator is the largest over the replica's stage boundaries. global_batch =
// replicas * m * micro_batch_size; model/cluster refs per spec_hash.h; no predicted metrics.
// Errors (invalid_argument): a non-positive count, a virtual-stage count the kind does not
// take, fewer layers (megatron: decoder layers) than stages, a cluster too small or not
// divisible, a TP group that spans nodes or device types, and the generator's own errors.
// REQUIRES: `cost` prices `model` on `cluster` for micro_batch_size and seq_len.
Result<Plan> make_uniform_plan(const UniformPlanOptions& options, const ModelSpec& model,
                               const ClusterSpec& cluster, const CostModel& cost);

}  // namespace motley
