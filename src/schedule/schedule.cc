// The named schedules. Each generator writes the order of one pipeline position ("rank" r, as
// the sources number them) in terms of stage indices; the request's stage_group then says which
// group runs that rank. Sources and derivations: docs/schedules.md.
#include "motley/schedule/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <deque>
#include <string>
#include <utility>

#include "motley/core/enum_names.h"
#include "weight_placement.h"

namespace motley {
namespace {

Action forward(int stage, int64_t mb) {
  return Action{ActionKind::kForward, stage, static_cast<int>(mb)};
}
Action backward(int stage, int64_t mb) {
  return Action{ActionKind::kBackward, stage, static_cast<int>(mb)};
}
Action backward_input(int stage, int64_t mb) {
  return Action{ActionKind::kBackwardInput, stage, static_cast<int>(mb)};
}

// ---- Fixed orders -------------------------------------------------------------------------

std::vector<Action> gpipe_rank(int stage, int64_t m) {
  std::vector<Action> out;
  for (int64_t j = 0; j < m; ++j) out.push_back(forward(stage, j));
  for (int64_t j = 0; j < m; ++j) out.push_back(backward(stage, j));
  return out;
}

// Warm-up of p-1-r forwards, then one forward and one backward alternately, then the rest of
// the backwards.
std::vector<Action> one_f_one_b_rank(int p, int r, int64_t m) {
  const int64_t warmup = std::min<int64_t>(p - 1 - r, m);
  std::vector<Action> out;
  for (int64_t j = 0; j < warmup; ++j) out.push_back(forward(r, j));
  for (int64_t i = 0; i < m - warmup; ++i) {
    out.push_back(forward(r, warmup + i));
    out.push_back(backward(r, i));
  }
  for (int64_t i = m - warmup; i < m; ++i) out.push_back(backward(r, i));
  return out;
}

// Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th forward of a rank runs
// chunk (k mod pv) / p on micro-batch (k / pv) * p + k mod p; backwards visit the chunks in
// reverse. Warm-up (p-r-1)*2 + (v-1)*p forwards, or all of them when m == p.
std::vector<Action> interleaved_rank(int p, int v, int r, int64_t m) {
  const int64_t group = static_cast<int64_t>(p) * v;
  const int64_t total = m * v;
  const auto micro_batch = [&](int64_t k) { return (k / group) * p + k % p; };
  const auto fwd = [&](int64_t k) {
    const int chunk = static_cast<int>((k % group) / p);
    return forward(chunk * p + r, micro_batch(k));
  };
  const auto bwd = [&](int64_t k) {
    const int chunk = v - 1 - static_cast<int>((k % group) / p);
    return backward(chunk * p + r, micro_batch(k));
  };
  const int64_t warmup =
      m == p ? total
             : std::min<int64_t>(
                   static_cast<int64_t>(p - r - 1) * 2 + static_cast<int64_t>(v - 1) * p, total);
  std::vector<Action> out;
  for (int64_t k = 0; k < warmup; ++k) out.push_back(fwd(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    out.push_back(fwd(warmup + k));
    out.push_back(bwd(k));
  }
  for (int64_t k = total - warmup; k < total; ++k) out.push_back(bwd(k));
  return out;
}

// DeepSeek's DualPipeV (dualpipe/dualpipev.py, DualPipeV.step) with each overlapped
// forward-and-backward pair written as the forward, then the backward. Chunk 0 is stage r,
// chunk 1 stage 2p-1-r. A backward "with zero bubble" is split: B now, its W queued and popped
// oldest first by the weight steps; the others are fused.
std::vector<Action> dualpipev_rank(int p, int r, int64_t m) {
  const int stage[2] = {r, 2 * p - 1 - r};
  int64_t f_count[2] = {0, 0};
  int64_t b_count[2] = {0, 0};
  std::deque<Action> weights;
  std::vector<Action> out;
  const auto f = [&](int c) { out.push_back(forward(stage[c], f_count[c]++)); };
  const auto b = [&](int c, bool split) {
    const int64_t j = b_count[c]++;
    if (split) {
      out.push_back(backward_input(stage[c], j));
      weights.push_back(Action{ActionKind::kBackwardWeight, stage[c], static_cast<int>(j)});
    } else {
      out.push_back(backward(stage[c], j));
    }
  };
  const auto w = [&] {
    out.push_back(weights.front());
    weights.pop_front();
  };
  // Step 1: forwards of chunk 0 ahead of the V.
  for (int i = 0; i < (p - r - 1) * 2; ++i) f(0);
  // Step 2: alternate the two chunks' forwards.
  for (int i = 0; i < r + 1; ++i) {
    f(0);
    f(1);
  }
  // Step 3: B, W, F of chunk 1.
  for (int i = 0; i < p - r - 1; ++i) {
    b(1, true);
    w();
    f(1);
  }
  // Step 4 (main): F0 with B1, then F1 with B0.
  for (int64_t i = 0; i < m - int64_t{2} * p + r + 1; ++i) {
    f(0);
    b(1, false);
    f(1);
    b(0, false);
  }
  // Step 5.
  for (int i = 0; i < p - r - 1; ++i) {
    b(1, false);
    f(1);
    b(0, false);
  }
  // Step 6: the second half of these backwards is split.
  const int step6 = r + 1;
  bool split = false;
  for (int i = 0; i < step6; ++i) {
    if (i == step6 / 2 && r % 2 == 1) split = true;
    b(1, split);
    if (i == step6 / 2 && r % 2 == 0) split = true;
    b(0, split);
  }
  // Step 7: W, B of chunk 0.
  for (int i = 0; i < p - r - 1; ++i) {
    w();
    b(0, true);
  }
  // Step 8: the remaining weight passes.
  while (!weights.empty()) w();
  return out;
}

// ---- Zero-bubble skeletons (F and B only; W is placed by weight_placement) ---------------

// `first_backward_after` forwards, then B and F alternately, then the remaining B's.
std::vector<Action> zb_chain_skeleton(int r, int64_t first_backward_after, int64_t m) {
  const int64_t k = std::min(first_backward_after, m);
  std::vector<Action> out;
  for (int64_t j = 0; j < k; ++j) out.push_back(forward(r, j));
  for (int64_t i = 0; i < m; ++i) {
    out.push_back(backward_input(r, i));
    if (k + i < m) out.push_back(forward(r, k + i));
  }
  return out;
}

// ZB-V's forward and input-gradient order as PyTorch's ScheduleZBVZeroBubble writes it (after
// the ZB paper's Figure for ZB-V), without its W's. For m < 2p-1 the order of 2p-1
// micro-batches is written and the actions of the missing ones dropped, as PyTorch does.
std::vector<Action> zbv_skeleton(int p, int r, int64_t m) {
  const int s0 = r;
  const int s1 = 2 * p - 1 - r;
  const int64_t n = std::max<int64_t>(2 * p - 1, m);
  int64_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  std::vector<Action> all;
  for (int i = 0; i < 2 * (p - r) - 1; ++i) all.push_back(forward(s0, f0++));
  for (int i = 0; i < r; ++i) {
    all.push_back(forward(s1, f1++));
    all.push_back(forward(s0, f0++));
  }
  for (int i = 0; i < p - r; ++i) {
    all.push_back(forward(s1, f1++));
    all.push_back(backward_input(s1, b1++));
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) all.push_back(forward(s0, f0++));
    all.push_back(backward_input(s0, b0++));
    all.push_back(forward(s1, f1++));
    all.push_back(backward_input(s1, b1++));
  }
  for (int i = 0; i < r; ++i) {
    all.push_back(backward_input(s0, b0++));
    all.push_back(backward_input(s1, b1++));
  }
  for (int i = 0; i < p - r; ++i) all.push_back(backward_input(s0, b0++));
  std::vector<Action> out;
  for (const Action& a : all) {
    if (a.micro_batch < m) out.push_back(a);
  }
  return out;
}

// ---- Request checks -------------------------------------------------------------------------

std::string prefix(ScheduleKind kind) {
  return fmt::format("{} schedule: ", schedule_kind_name(kind));
}

bool is_finite_nonnegative(Seconds s) { return std::isfinite(s.value()) && s.value() >= 0; }

Status check_common(ScheduleKind kind, const ScheduleRequest& req) {
  const std::string pre = prefix(kind);
  if (req.num_groups <= 0) {
    return invalid_argument(
        fmt::format("{}num_groups must be positive, got {}", pre, req.num_groups));
  }
  if (req.micro_batches <= 0 || req.micro_batches > INT_MAX) {
    return invalid_argument(fmt::format("{}micro_batches must be between 1 and {}, got {}", pre,
                                        INT_MAX, req.micro_batches));
  }
  if (static_cast<int>(req.stage_group.size()) != req.num_stages) {
    return invalid_argument(
        fmt::format("{}stage_group has {} entries but num_stages is {}; expected one group per "
                    "stage",
                    pre, req.stage_group.size(), req.num_stages));
  }
  for (int s = 0; s < req.num_stages; ++s) {
    const int g = req.stage_group[s];
    if (g < 0 || g >= req.num_groups) {
      return invalid_argument(
          fmt::format("{}stage_group[{}] is {}; expected a group between 0 and {}", pre, s, g,
                      req.num_groups - 1));
    }
  }
  if (!req.stage_times.empty()) {
    if (static_cast<int>(req.stage_times.size()) != req.num_stages) {
      return invalid_argument(
          fmt::format("{}stage_times has {} entries but num_stages is {}; expected one per stage, "
                      "or none",
                      pre, req.stage_times.size(), req.num_stages));
    }
    for (int s = 0; s < req.num_stages; ++s) {
      const ComputeTimes& t = req.stage_times[s];
      const std::pair<const char*, Seconds> fields[] = {{"forward", t.forward},
                                                        {"backward_input", t.backward_input},
                                                        {"backward_weight", t.backward_weight},
                                                        {"recompute", t.recompute}};
      for (const auto& [name, value] : fields) {
        if (!is_finite_nonnegative(value)) {
          return invalid_argument(
              fmt::format("{}stage_times[{}].{} must be a finite, non-negative time, got {:f}", pre,
                          s, name, value.value()));
        }
      }
    }
  }
  if (!req.max_in_flight.empty()) {
    if (static_cast<int>(req.max_in_flight.size()) != req.num_groups) {
      return invalid_argument(
          fmt::format("{}max_in_flight has {} entries but num_groups is {}; expected one per group "
                      "(0 = unlimited), or none",
                      pre, req.max_in_flight.size(), req.num_groups));
    }
    for (int g = 0; g < req.num_groups; ++g) {
      if (req.max_in_flight[g] < 0) {
        return invalid_argument(
            fmt::format("{}max_in_flight[{}] is {}; expected a non-negative count (0 = unlimited)",
                        pre, g, req.max_in_flight[g]));
      }
    }
  }
  if (!is_finite_nonnegative(req.p2p_time)) {
    return invalid_argument(fmt::format("{}p2p_time must be a finite, non-negative time, got {:f}",
                                        pre, req.p2p_time.value()));
  }
  return Status::ok();
}

// Checks the placement's shape and returns the group of each rank.
Result<std::vector<int>> rank_groups(ScheduleKind kind, const ScheduleRequest& req) {
  const std::string pre = prefix(kind);
  const int p = req.num_groups;
  const int stages = req.num_stages;
  const bool v_shape = kind == ScheduleKind::kZbV || kind == ScheduleKind::kDualPipeV;
  const int per_group = v_shape ? 2 : 1;  // interleaved: checked apart
  if (kind == ScheduleKind::kInterleaved) {
    if (stages % p != 0 || stages / p < 2) {
      return invalid_argument(
          fmt::format("{}num_stages ({}) must be v * num_groups ({}) with v >= 2 chunks per group; "
                      "use 1f1b for one chunk",
                      pre, stages, p));
    }
  } else if (stages != per_group * p) {
    return invalid_argument(
        fmt::format("{}num_stages is {} but {} the {} groups; expected {}", pre, stages,
                    per_group == 2 ? "a V-shaped schedule runs 2 stages on each of"
                                   : "this schedule runs one stage on each of",
                    p, per_group * p));
  }
  std::vector<int> groups(p);
  std::vector<int> rank_of_group(p, -1);
  for (int r = 0; r < p; ++r) {
    const int g = req.stage_group[r];
    if (rank_of_group[g] >= 0) {
      return invalid_argument(
          fmt::format("{}stage_group[{}] is group {}, which already runs stage {}; stages 0-{} "
                      "must be on distinct groups",
                      pre, r, g, rank_of_group[g], p - 1));
    }
    rank_of_group[g] = r;
    groups[r] = g;
  }
  for (int s = p; s < stages; ++s) {
    const int partner = v_shape ? 2 * p - 1 - s : s % p;
    if (req.stage_group[s] != req.stage_group[partner]) {
      return invalid_argument(fmt::format(
          "{0}stage_group[{1}] is {2} but stage {1} must run on the group of stage {3} (group "
          "{4}){5}",
          pre, s, req.stage_group[s], partner, req.stage_group[partner],
          v_shape ? "; in a V shape the group of stage r also runs stage 2p-1-r"
                  : "; interleaved chunks of a group are stages r, r+p, r+2p, ..."));
    }
  }
  return groups;
}

std::vector<int64_t> limits(const ScheduleRequest& req) {
  return req.max_in_flight.empty() ? std::vector<int64_t>(req.num_groups, 0) : req.max_in_flight;
}

// The most forwards without their B on one list, over any prefix: the activations the
// skeleton holds even if every W runs as early as it can.
int64_t skeleton_need(const std::vector<Action>& order) {
  int64_t now = 0, peak = 0;
  for (const Action& a : order) {
    if (a.kind == ActionKind::kForward) peak = std::max(peak, ++now);
    if (a.kind == ActionKind::kBackwardInput) --now;
  }
  return peak;
}

Status check_fixed_peaks(ScheduleKind kind, const ScheduleRequest& req, const GroupOrders& orders) {
  const std::vector<int64_t> peaks = peak_in_flight_per_group(orders);
  const std::vector<int64_t> limit = limits(req);
  for (int g = 0; g < req.num_groups; ++g) {
    if (limit[g] > 0 && peaks[g] > limit[g]) {
      return infeasible(
          fmt::format("{0}device group {1} holds up to {2} micro-batches' activations under this "
                      "order but max_in_flight[{1}] is {3}; zb-h1 and zb-h2 adapt to a limit, "
                      "this schedule does not",
                      prefix(kind), g, peaks[g], limit[g]));
    }
  }
  return Status::ok();
}

Result<GroupOrders> zero_bubble(ScheduleKind kind, const ScheduleRequest& req,
                                const std::vector<int>& group_of_rank) {
  const int p = req.num_groups;
  const int64_t m = req.micro_batches;
  const std::vector<int64_t> user = limits(req);
  // The kind's own activation budget per group, tightened by the request's.
  const int64_t own = kind == ScheduleKind::kZbH1   ? p
                      : kind == ScheduleKind::kZbH2 ? 2 * static_cast<int64_t>(p) - 1
                                                    : 2 * static_cast<int64_t>(p);
  std::vector<int64_t> limit(p);
  for (int g = 0; g < p; ++g) limit[g] = user[g] > 0 ? std::min(own, user[g]) : own;

  GroupOrders skeleton(p);
  if (kind == ScheduleKind::kZbV) {
    for (int r = 0; r < p; ++r) {
      const int g = group_of_rank[r];
      skeleton[g] = zbv_skeleton(p, r, m);
      const int64_t need = skeleton_need(skeleton[g]);
      if (need > limit[g]) {
        return infeasible(
            fmt::format("{0}device group {1} must hold {2} micro-batches' activations (its 2 "
                        "stages together) but max_in_flight[{1}] is {3}",
                        prefix(kind), g, need, limit[g]));
      }
    }
  } else {
    // Forwards before the first B: 1F1B's p-r for ZB-H1, 2(p-r)-1 for ZB-H2, never above
    // the group's limit nor above the rank before it (a rank must not wait for more forwards
    // than its predecessor sends before that one waits for a backward).
    int64_t previous = m;
    for (int r = 0; r < p; ++r) {
      const int g = group_of_rank[r];
      const int64_t textbook = kind == ScheduleKind::kZbH1 ? p - r : 2 * (p - r) - 1;
      const int64_t k = std::min({textbook, limit[g], previous});
      previous = k;
      skeleton[g] = zb_chain_skeleton(r, k, m);
    }
  }

  internal::TimelineSpec spec;
  spec.num_groups = p;
  spec.stage_group = req.stage_group;
  spec.micro_batches = m;
  spec.hop.assign(req.num_stages - 1, req.p2p_time.value());
  const ComputeTimes design_point{Seconds(1), Seconds(1), Seconds(1), Seconds(0)};
  for (int s = 0; s < req.num_stages; ++s) {
    spec.durations.push_back(internal::stage_durations(
        req.stage_times.empty() ? design_point : req.stage_times[s], /*split_backward=*/true));
  }
  // Both gap policies are tried and the shorter estimate kept (ties: the one that never
  // delays an F or B), as the ZB paper's heuristic tries its variants.
  const internal::EstimatedTimeline start(std::move(spec));
  MOTLEY_ASSIGN_OR_RETURN(
      internal::PlacedOrders fit,
      internal::place_weight_passes(start, limit, skeleton, WeightFill::kIfItFits));
  MOTLEY_ASSIGN_OR_RETURN(
      internal::PlacedOrders always,
      internal::place_weight_passes(start, limit, skeleton, WeightFill::kAlways));
  const double tolerance = 1e-9 * std::max(fit.makespan, 1e-30);
  return always.makespan < fit.makespan - tolerance ? std::move(always.orders)
                                                    : std::move(fit.orders);
}

}  // namespace

// Indexed by ScheduleKind, in declaration order.
constexpr const char* kScheduleKindNames[] = {"gpipe", "1f1b", "interleaved", "zb-h1",
                                              "zb-h2", "zb-v", "dualpipev"};
static_assert(std::size(kScheduleKindNames) == static_cast<size_t>(ScheduleKind::kDualPipeV) + 1);

const char* schedule_kind_name(ScheduleKind kind) { return name_in(kScheduleKindNames, kind); }

std::optional<ScheduleKind> parse_schedule_kind(std::string_view name) {
  return parse_name_in<ScheduleKind>(kScheduleKindNames, name);
}

std::vector<std::string> schedule_kind_names() { return names_in(kScheduleKindNames); }

bool splits_backward(ScheduleKind kind) {
  return kind == ScheduleKind::kZbH1 || kind == ScheduleKind::kZbH2 || kind == ScheduleKind::kZbV ||
         kind == ScheduleKind::kDualPipeV;
}

int stages_per_group(ScheduleKind kind, int virtual_stages) {
  switch (kind) {
    case ScheduleKind::kInterleaved:
      return virtual_stages;
    case ScheduleKind::kZbV:
    case ScheduleKind::kDualPipeV:
      return 2;
    default:
      return 1;
  }
}

std::vector<int> default_stage_group(ScheduleKind kind, int p, int v) {
  MOTLEY_CHECK(p >= 1 && v >= 1, "default_stage_group needs p >= 1 and v >= 1");
  const int stages = p * stages_per_group(kind, v);
  std::vector<int> out(stages);
  for (int s = 0; s < stages; ++s) {
    if (kind == ScheduleKind::kZbV || kind == ScheduleKind::kDualPipeV) {
      out[s] = s < p ? s : 2 * p - 1 - s;
    } else {
      out[s] = s % p;
    }
  }
  return out;
}

std::vector<int64_t> peak_in_flight_per_group(const GroupOrders& orders) {
  std::vector<int64_t> peaks;
  for (const std::vector<Action>& order : orders) {
    int64_t now = 0, peak = 0;
    for (const Action& a : order) {
      if (a.kind == ActionKind::kForward) peak = std::max(peak, ++now);
      if (a.kind == ActionKind::kBackwardWeight || a.kind == ActionKind::kBackward) --now;
    }
    peaks.push_back(peak);
  }
  return peaks;
}

Result<GroupOrders> generate_schedule(ScheduleKind kind, const ScheduleRequest& req) {
  MOTLEY_RETURN_IF_ERROR(check_common(kind, req));
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<int> group_of_rank, rank_groups(kind, req));
  const int p = req.num_groups;
  const int64_t m = req.micro_batches;

  if (kind == ScheduleKind::kInterleaved && m % p != 0) {
    return invalid_argument(
        fmt::format("{}micro_batches ({}) must be a multiple of num_groups ({}), as Megatron-LM's "
                    "interleaved schedule requires",
                    prefix(kind), m, p));
  }
  if (kind == ScheduleKind::kDualPipeV && m < 2 * static_cast<int64_t>(p)) {
    return invalid_argument(
        fmt::format("{}micro_batches ({}) must be at least 2 * num_groups ({}), as DeepSeek's "
                    "DualPipeV requires",
                    prefix(kind), m, 2 * p));
  }
  if (kind == ScheduleKind::kZbH1 || kind == ScheduleKind::kZbH2 || kind == ScheduleKind::kZbV) {
    return zero_bubble(kind, req, group_of_rank);
  }

  GroupOrders orders(p);
  for (int r = 0; r < p; ++r) {
    std::vector<Action>& out = orders[group_of_rank[r]];
    switch (kind) {
      case ScheduleKind::kGpipe:
        out = gpipe_rank(r, m);
        break;
      case ScheduleKind::k1f1b:
        out = one_f_one_b_rank(p, r, m);
        break;
      case ScheduleKind::kInterleaved:
        out = interleaved_rank(p, req.num_stages / p, r, m);
        break;
      case ScheduleKind::kDualPipeV:
        out = dualpipev_rank(p, r, m);
        break;
      default:
        MOTLEY_CHECK(false, "unreachable schedule kind");
    }
  }
  MOTLEY_RETURN_IF_ERROR(check_fixed_peaks(kind, req, orders));
  return orders;
}

}  // namespace motley
