// The adaptive list scheduler: an irregular order per device group for any map of stages to
// groups, built by replaying the estimated timeline the zero-bubble W placement uses too — a
// free group runs its most urgent ready action (B, then F while memory admits it, W in the
// gaps; or F and B in turn) — with admission control that keeps activations within budget and
// deadlock-free orders. No simulation (sim/). Algorithm: docs/planner.md, "Adaptive schedule".
// Thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/cost/cost_model.h"
#include "motley/schedule/schedule.h"

namespace motley {

enum class AdaptivePriority {
  kBackwardFirst,  // a ready backward runs before a ready forward (1F1B-like steady state)
  kForwardFirst,   // forwards first while memory admits them (deep warm-up), then backwards
  // After a forward a ready backward runs first, after a backward a ready forward (one of each
  // in turn where both are ready), and the backward of the deepest stage goes first: the rule
  // of OctoPipe's dynamic scheduler (guojihu-hana/SimPipe), which suits deep interleaving.
  kAlternate,
};

struct AdaptiveRequest {
  int num_groups = 0;
  std::vector<int> stage_group;  // stage -> group, stages in pipeline order; any map
  int64_t micro_batches = 0;
  // Per stage, per micro-batch: F, B, W and the recompute, which is charged to B (as the
  // simulator does when a plan lists no R).
  std::vector<ComputeTimes> stage_times;
  // Per stage boundary s -> s+1 (size stages - 1): time for the activation (and the gradient
  // coming back) to cross; ignored where both stages run on the same group. With vocabulary
  // shards [b, n): entry b - 1 is the hidden state's to each shard, entries b .. n - 2 the loss
  // statistics' between shards.
  std::vector<Seconds> transfer_time;
  // The last stages that are vocabulary shards of the head, and the first that are shards of
  // the embedding (plan.h), each run side by side on distinct groups; 0: none.
  int vocab_shards = 0;
  int embedding_shards = 0;
  // Per stage: activation bytes one micro-batch holds from its F until its W (or fused B).
  std::vector<Bytes> activation_bytes;
  // Per group: bytes available for activations (capacity minus fixed memory).
  std::vector<Bytes> memory_budget;
  // Per stage, or empty: what a micro-batch keeps when its forward runs without its
  // activations (recomputed_bytes, below activation_bytes where that is allowed; a stage with
  // as much or more is never recomputed so), and what the R that rebuilds them right before
  // its backward takes (recompute_time). A forward that memory admits only so runs so when the
  // group would otherwise wait (docs/planner.md, "Adaptive schedule").
  std::vector<Bytes> recomputed_bytes;
  std::vector<Seconds> recompute_time;
  bool split_backward = true;  // emit B and W (else one fused backward)
  AdaptivePriority priority = AdaptivePriority::kBackwardFirst;
  WeightFill weight_fill = WeightFill::kIfItFits;
};

// The most activation memory one micro-batch needs on group `g` passing through it alone: its
// forwards on the group's stages (in `stage_group`, stage -> group) keeping `first[s]` of stage
// s's `full[s]` bytes, then from the deepest stage the R that brings it to `full[s]` and the
// backward that frees it. With `first` equal to `full`, their sum over the group's stages.
double least_activation_need(const std::vector<int>& stage_group, const std::vector<double>& full,
                             const std::vector<double>& first, int g);

// One action list per group, in execution order. Every (stage, micro-batch) gets one F and one
// B and W (or one fused backward), and an R before the backward of a micro-batch whose forward
// kept only recomputed_bytes; per stage, forwards and backwards run in micro-batch order; a
// forward or R runs only when, after it, every micro-batch can still finish on the group, the
// oldest first, from the free memory plus what the older micro-batches hold (a banker's safe
// state: so the peak memory <= memory_budget, and the orders cannot deadlock: docs/planner.md,
// "Adaptive schedule").
// Errors: invalid_argument for inconsistent sizes or negative values; infeasible when one
// micro-batch's activations on a group exceed its budget (names the group and both sizes).
Result<GroupOrders> adaptive_schedule(const AdaptiveRequest& request);

}  // namespace motley
