// Partitioning a model's layers into contiguous pipeline stages on given device groups: the
// balanced (min-max) partition with per-stage recompute where memory is short. The rules that
// only count layers are schedule/layer_split.h's. Chooses neither the groups nor the schedule.
// Pure functions of a CostModel, which is thread-safe; so are they.
#pragma once

#include <cstdint>
#include <vector>

#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/cost/cost_model.h"
#include "motley/model/model.h"

namespace motley {

struct PartitionRequest {
  int num_layers = 0;
  // Per stage, in pipeline order: the devices running it.
  std::vector<DeviceGroup> stage_groups;
  // Per stage: memory per device its weights, gradients, optimizer state, buffers and
  // `in_flight` micro-batches of activations may take (cost.stage_memory(...).total()).
  std::vector<Bytes> memory_budget;
  std::vector<int64_t> in_flight;
  // Replicas and ZeRO-1, as cost.stage_memory reads them (recompute and in_flight are set
  // per stage by the partitioner).
  MemoryOptions memory;
  // Policies a stage may use, cheapest (least recomputation) first.
  std::vector<RecomputePolicy> policies = {RecomputePolicy::kNone, RecomputePolicy::kSelective,
                                           RecomputePolicy::kFull};
  // Optional, per stage: the device group that runs it, when a group runs several stages
  // (interleaved, V-shaped). Then what is balanced is each group's total over its stages.
  std::vector<int> stage_owner;
  // The schedule runs fused backwards: a stage's time is F + fused backward + recompute
  // (ComputeTimes::fused_backward(), which a measured profile may make less than B + W).
  bool fused_backward = false;
  // Vocabulary parallelism (plan.h, Stage): the model's last layer, its head, is split over
  // every group (and with spread_embedding its first, the embedding), so the stage holding it
  // prices it at nothing, and each stage carries these instead, per stage (its group's shards,
  // shared among the group's stages; empty: none).
  bool spread_head = false;
  bool spread_embedding = false;
  std::vector<Seconds> shard_time;
  std::vector<Bytes> shard_memory;
};

struct Partition {
  std::vector<int> bounds;  // size stages + 1: stage s holds layers [bounds[s], bounds[s+1])
  std::vector<RecomputePolicy> recompute;  // per stage
  Seconds bottleneck;  // the largest stage time F + B + W (or fused backward) + recompute
};

// What stage `stage` of `request` needs per device holding layers [begin, end) under `policy`
// with `in_flight` micro-batches: its weights, gradients, optimizer state, buffers and
// activations (cost.stage_memory), less the embedding and the head where vocabulary
// parallelism spreads them, plus its share of their shards' memory. The partitioner's memory
// rule, exported for checks of a group's stages together.
Bytes stage_need(const PartitionRequest& request, const CostModel& cost, int stage, int begin,
                 int end, RecomputePolicy policy, int64_t in_flight);

// The partition minimizing the largest per-micro-batch stage time F + B + W + recompute (each
// stage priced on its own group), subject to every stage fitting its memory budget with at
// least one layer. Each stage takes the cheapest allowed policy that lets it reach furthest.
// Method: bisection on the bottleneck, each step a greedy pass where every stage takes as many
// layers as fit — optimal whenever a stage's time and memory grow with the layers it holds, as a
// stage that starts later then never ends earlier — to a relative precision of 1e-9.
// With stage_owner, the bisection bounds each stage by its group's share (group bound / stages
// of the group), then boundaries move one layer at a time while that lowers the largest group
// total (or keeps it and lowers the sum of squared totals); `bottleneck` is then the largest
// group total. A heuristic: the exact problem couples a group's distant stages. Errors:
// invalid_argument for inconsistent sizes or more stages than layers; infeasible when no partition
// fits memory (names the first stage that cannot).
Result<Partition> balanced_partition(const PartitionRequest& request, const CostModel& cost);

}  // namespace motley
