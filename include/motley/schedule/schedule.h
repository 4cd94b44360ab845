// schedule: generators of per-device-group action orders for the named pipeline schedules —
// GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-H2, ZB-V and DualPipeV — as plain action lists.
// It neither simulates nor validates a plan (sim/, plan/validate.h); the zero-bubble kinds only
// use a small internal timing estimate to decide where weight-gradient passes go. Structures,
// memory and exact iteration times: docs/schedules.md. Thread-safe free functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/cost/cost_model.h"
#include "motley/plan/plan.h"

namespace motley {

enum class ScheduleKind {
  kGpipe,        // all forwards, then all (fused) backwards
  k1f1b,         // PipeDream-flush / Megatron-LM 1F1B, fused backward
  kInterleaved,  // Megatron-LM's interleaved 1F1B, v chunks per group, fused backward
  kZbH1,         // zero bubble, 1F1B memory (Qi et al. 2024), split B / W
  kZbH2,         // zero bubble, up to 2p-1 micro-batches in flight, split B / W
  kZbV,          // zero bubble V schedule, two chunks per group in V order, split B / W
  kDualPipeV,    // DeepSeek's DualPipeV, two chunks per group in V order
};
// "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev".
const char* schedule_kind_name(ScheduleKind kind);
// Inverse of schedule_kind_name (case-insensitive; '_' is read as '-'); nullopt if unknown.
std::optional<ScheduleKind> parse_schedule_kind(std::string_view name);
std::vector<std::string> schedule_kind_names();

// Whether the kind splits the backward pass into B (kBackwardInput) and W (kBackwardWeight);
// the others emit one fused kBackward per (stage, micro-batch).
bool splits_backward(ScheduleKind kind);

// Stages each device group runs under `kind`: 1, `virtual_stages` for interleaved, 2 for the
// V-shaped kinds.
int stages_per_group(ScheduleKind kind, int virtual_stages);

// The conventional placement of `p` * stages_per_group(kind, v) stages on p groups:
// one chunk: stage s -> group s; interleaved: s -> s mod p; ZB-V and DualPipeV (V shape):
// group r runs stages r and 2p-1-r.
// REQUIRES: p >= 1, v >= 1.
std::vector<int> default_stage_group(ScheduleKind kind, int p, int v);

struct ScheduleRequest {
  int num_groups = 0;            // p
  int num_stages = 0;            // p, p*v or 2p depending on the kind
  std::vector<int> stage_group;  // stage -> group, in the kind's shape (default_stage_group up
                                 // to a renumbering of the groups)
  int64_t micro_batches = 0;     // m
  // Per stage, per micro-batch: F, B (input gradient), W (weight gradient) and the recompute
  // that precedes B. Only the zero-bubble kinds read them, to decide where W goes; empty means
  // F = B = W = 1 s on every stage (the textbook design point).
  std::vector<ComputeTimes> stage_times;
  // Per group: the most micro-batches of its stages whose activations may be held at once
  // (F allocates, W or a fused backward frees); 0 = no limit beyond the kind's own. Empty means
  // no limit anywhere. ZB-H1 and ZB-H2 shorten their warm-up to meet it; the other kinds fail
  // with `infeasible` when their order needs more.
  std::vector<int64_t> max_in_flight;
  // Time for an activation or gradient to cross between adjacent stages on different groups,
  // used by the zero-bubble kinds' timing estimate only.
  Seconds p2p_time;
};

// One action list per group (index = group), each group's actions in execution order.
using GroupOrders = std::vector<std::vector<Action>>;

// Where a split schedule may put a pending weight-gradient pass (W) besides where memory forces
// one and the end of the order, when its group would otherwise wait for the next F or B. The
// zero-bubble kinds try both and keep the shorter estimate; the adaptive scheduler
// (adaptive_schedule.h) is given one.
enum class WeightFill {
  kIfItFits,  // only into an idle gap long enough that the next F or B is not delayed
  kAlways,    // into any idle gap, even if the next F or B then starts late
};

// Generates the orders of `kind` for `request`. Every (stage, micro-batch) gets one F and one
// fused backward, or one B and one W for the split kinds; each group runs only its stages; the
// orders cannot deadlock.
// Errors (invalid_argument, naming the field and what is allowed): counts that are not
// positive, stage_group of the wrong shape for the kind, stage_times or max_in_flight of the
// wrong size or negative, interleaved with m not a multiple of p (Megatron-LM requires it) or
// fewer than 2 chunks, DualPipeV with m < 2p (DeepSeek's DualPipeV requires it).
// infeasible: a max_in_flight below what the kind needs (named with the group and the need).
Result<GroupOrders> generate_schedule(ScheduleKind kind, const ScheduleRequest& request);

// The peak number of micro-batches whose activations each group holds under `orders`, over all
// its stages together (F allocates, W or a fused kBackward frees).
std::vector<int64_t> peak_in_flight_per_group(const GroupOrders& orders);

}  // namespace motley
