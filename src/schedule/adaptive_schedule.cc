#include "motley/schedule/adaptive_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <string>
#include <utility>

#include "estimated_timeline.h"

namespace motley {
namespace {

constexpr const char* kWhat = "adaptive schedule: ";
constexpr double kUnknown = std::numeric_limits<double>::infinity();

Status check_request(const AdaptiveRequest& r) {
  if (r.num_groups <= 0)
    return invalid_argument(fmt::format("{}num_groups must be positive", kWhat));
  if (r.micro_batches <= 0) {
    return invalid_argument(fmt::format("{}micro_batches must be positive", kWhat));
  }
  const size_t stages = r.stage_group.size();
  if (stages == 0) return invalid_argument(fmt::format("{}stage_group is empty", kWhat));
  if (r.stage_times.size() != stages || r.activation_bytes.size() != stages) {
    return invalid_argument(fmt::format(
        "{}stage_times and activation_bytes need one entry per stage ({})", kWhat, stages));
  }
  if (r.transfer_time.size() != stages - 1) {
    return invalid_argument(
        fmt::format("{}transfer_time needs one entry per stage boundary ({}), got {}", kWhat,
                    stages - 1, r.transfer_time.size()));
  }
  if (r.memory_budget.size() != static_cast<size_t>(r.num_groups)) {
    return invalid_argument(
        fmt::format("{}memory_budget needs one entry per group ({})", kWhat, r.num_groups));
  }
  if (!r.recomputed_bytes.empty() || !r.recompute_time.empty()) {
    if (r.recomputed_bytes.size() != stages || r.recompute_time.size() != stages) {
      return invalid_argument(
          fmt::format("{}recomputed_bytes and recompute_time need one entry per stage ({}) or none",
                      kWhat, stages));
    }
    for (size_t s = 0; s < stages; ++s) {
      if (!(r.recomputed_bytes[s].value() >= 0) || !(r.recompute_time[s].value() >= 0) ||
          !std::isfinite(r.recompute_time[s].value())) {
        return invalid_argument(fmt::format(
            "{}recomputed_bytes[{}] or recompute_time[{}] is negative or not finite", kWhat, s, s));
      }
    }
  }
  std::vector<bool> used(r.num_groups, false);
  for (size_t s = 0; s < stages; ++s) {
    const int g = r.stage_group[s];
    if (g < 0 || g >= r.num_groups) {
      return invalid_argument(fmt::format("{}stage_group[{}] is {}, not a group in [0, {})", kWhat,
                                          s, g, r.num_groups));
    }
    used[g] = true;
    const ComputeTimes& t = r.stage_times[s];
    for (Seconds x : {t.forward, t.backward_input, t.backward_weight, t.recompute}) {
      if (!(x.value() >= 0) || !std::isfinite(x.value())) {
        return invalid_argument(
            fmt::format("{}stage_times[{}] has a negative or non-finite time", kWhat, s));
      }
    }
    if (!(r.activation_bytes[s].value() >= 0)) {
      return invalid_argument(fmt::format("{}activation_bytes[{}] is negative", kWhat, s));
    }
    if (s + 1 < stages && !(r.transfer_time[s].value() >= 0)) {
      return invalid_argument(fmt::format("{}transfer_time[{}] is negative", kWhat, s));
    }
  }
  for (int g = 0; g < r.num_groups; ++g) {
    if (!used[g]) {
      return invalid_argument(fmt::format("{}group {} runs no stage", kWhat, g));
    }
  }
  const size_t runs = static_cast<size_t>(std::max(0, r.vocab_shards)) +
                      static_cast<size_t>(std::max(0, r.embedding_shards));
  for (const int shards : {r.vocab_shards, r.embedding_shards}) {
    if (shards != 0 && (shards < 2 || runs >= stages)) {
      return invalid_argument(fmt::format(
          "{}a run of {} vocabulary shards; expected 0, or 2 or more with a stage of other "
          "layers besides them ({} stages)",
          kWhat, shards, stages));
    }
  }
  for (const auto& [first, last] :
       {std::pair<size_t, size_t>{0, static_cast<size_t>(r.embedding_shards)},
        std::pair<size_t, size_t>{stages - r.vocab_shards, stages}}) {
    std::vector<bool> holds_shard(r.num_groups, false);
    for (size_t s = first; s < last; ++s) {
      if (holds_shard[r.stage_group[s]]) {
        return invalid_argument(fmt::format(
            "{}group {} runs two vocabulary shards of one layer; each needs a group of its own",
            kWhat, r.stage_group[s]));
      }
      holds_shard[r.stage_group[s]] = true;
    }
  }
  return Status::ok();
}

internal::TimelineSpec timeline_of(const AdaptiveRequest& r) {
  internal::TimelineSpec spec;
  spec.num_groups = r.num_groups;
  spec.stage_group = r.stage_group;
  spec.micro_batches = r.micro_batches;
  for (const ComputeTimes& t : r.stage_times) {
    spec.durations.push_back(internal::stage_durations(t, r.split_backward));
  }
  for (Seconds t : r.transfer_time) spec.hop.push_back(t.value());
  spec.vocab_shards = r.vocab_shards;
  spec.embedding_shards = r.embedding_shards;
  return spec;
}

// Drives the estimated timeline event by event: a group is woken when it becomes free and when
// an input it waits for may have become available, and then starts what step() chooses.
class ListScheduler {
 public:
  explicit ListScheduler(const AdaptiveRequest& r)
      : r_(r),
        stages_(static_cast<int>(r.stage_group.size())),
        m_(static_cast<int>(r.micro_batches)),
        timeline_(timeline_of(r)),
        stages_of_(r.num_groups),
        reserve_(r.num_groups, 0.0),
        next_f_(stages_, 0),
        next_b_(stages_, 0),
        next_freed_(stages_, 0),
        live_(r.num_groups, 0.0),
        pending_w_(r.num_groups),
        remaining_fb_(r.num_groups, 0),
        last_was_backward_(r.num_groups, false),
        after_recompute_(r.num_groups, -1),
        orders_(r.num_groups) {
    for (int s = 0; s < stages_; ++s) {
      const int g = r.stage_group[s];
      stages_of_[g].push_back(s);
      reserve_[g] += r.activation_bytes[s].value();
      remaining_fb_[g] += int64_t{2} * m_;
    }
    kept_first_.resize(stages_);
    for (int s = 0; s < stages_; ++s) {
      const double full = r.activation_bytes[s].value();
      full_.push_back(full);
      kept_first_[s] = full;
      if (!r.recomputed_bytes.empty() && r.recomputed_bytes[s].value() < full) {
        kept_first_[s] = r.recomputed_bytes[s].value();
        recomputes_ = true;
      }
    }
    if (recomputes_) {
      held_.assign(stages_, std::vector<double>(m_, 0.0));
      top_up_.assign(stages_, std::vector<double>(m_, 0.0));
    }
  }

  Result<GroupOrders> run() {
    for (int g = 0; g < r_.num_groups; ++g) {
      const double budget = r_.memory_budget[g].value();
      if (least_need(g) > budget * (1 + 1e-12)) {
        return infeasible(fmt::format(
            "{}group {} needs {:f} GiB of activations for one micro-batch but its budget is "
            "{:f} GiB",
            kWhat, g, least_need(g) / kGiB, budget / kGiB));
      }
      wake(g, 0.0);
    }
    while (!events_.empty()) {
      const auto [t, seq, g] = events_.top();
      events_.pop();
      (void)seq;
      if (t < timeline_.free_at(g)) continue;  // busy then; woken again when it is free
      step(g, t);
    }
    for (int g = 0; g < r_.num_groups; ++g) {
      if (remaining_fb_[g] > 0 || !pending_w_[g].empty()) {
        return internal_error(fmt::format("{}group {} stalled with work left (a bug)", kWhat, g));
      }
    }
    return std::move(orders_);
  }

 private:
  // F(s, j) allocates its stage's activations. It is admitted only if afterwards every
  // micro-batch i can still allocate what its forwards left on this group need, from the free
  // memory plus what the micro-batches older than i hold (they finish first, since every stage
  // runs micro-batches in order): a banker's safe state, ordered by age (docs/planner.md,
  // "Adaptive schedule": why this cannot deadlock).
  bool admissible(int g, int s, int j) {
    if (recomputes_) return admits_forward(g, s, j, r_.activation_bytes[s].value());
    const double free =
        r_.memory_budget[g].value() * (1 + 1e-12) - live_[g] - r_.activation_bytes[s].value();
    if (free < 0) return false;
    if (free >= reserve_[g]) return true;  // no micro-batch needs more than its whole share
    const auto next_f = [&](int t) { return t == s ? j + 1 : next_f_[t]; };
    // need(i) - held(older than i) only grows where need(i) does, at i = next_f(t).
    for (int t : stages_of_[g]) {
      const int i = next_f(t);
      if (i >= m_) continue;
      double need = 0, held_by_older = 0;
      for (int u : stages_of_[g]) {
        const double bytes = r_.activation_bytes[u].value();
        if (next_f(u) <= i) need += bytes;
        held_by_older += bytes * std::max(0, std::min(i, next_f(u)) - next_freed_[u]);
      }
      if (need > free + held_by_older) return false;
    }
    return true;
  }

  // The most memory one micro-batch needs to pass through group g from the start, its
  // forwards keeping what they may and each backward preceded by its R.
  double least_need(int g) const {
    return recomputes_ ? least_activation_need(r_.stage_group, full_, kept_first_, g) : reserve_[g];
  }

  // The safe-state check with single recomputes, on the state as it is: every micro-batch i
  // of the group, the oldest first, can still finish from the free memory plus what the
  // micro-batches older than i hold. Micro-batch i's need is the peak of its remaining walk:
  // forwards on the stages it has not reached (keeping what they may), then per stage from the
  // deepest its R (if its forward kept less) and the release of everything it holds there.
  bool safe(int g) const {
    const double free = r_.memory_budget[g].value() * (1 + 1e-12) - live_[g];
    if (free < 0) return false;
    int lo = m_, hi = 0;
    for (int u : stages_of_[g]) {
      lo = std::min(lo, next_freed_[u]);
      hi = std::max(hi, next_f_[u]);
    }
    // Micro-batches past every stage's next forward all need the same and have the most held
    // by older ones: the first of them stands for all.
    const int last = std::min(hi, m_ - 1);
    const std::vector<int>& mine = stages_of_[g];
    double older = 0;
    for (int i = lo; i <= last; ++i) {
      double now = 0, peak = 0, held = 0;
      for (int u : mine) {
        if (i >= next_f_[u]) peak = std::max(peak, now += kept_first_[u]);
      }
      for (auto it = mine.rbegin(); it != mine.rend(); ++it) {
        const int u = *it;
        if (i >= next_f_[u]) {
          const double full = r_.activation_bytes[u].value();
          peak = std::max(peak, now += full - kept_first_[u]);
          now -= full;
        } else if (i >= next_freed_[u]) {
          held += held_[u][i];
          peak = std::max(peak, now += top_up_[u][i]);
          now -= held_[u][i] + top_up_[u][i];
        }
      }
      if (peak > free + older) return false;
      older += held;
    }
    return true;
  }

  // Whether F(s, j) may run keeping `bytes` (tried on the state, then undone).
  bool admits_forward(int g, int s, int j, double bytes) {
    const double free_after = r_.memory_budget[g].value() * (1 + 1e-12) - live_[g] - bytes;
    if (free_after < 0) return false;
    if (free_after >= reserve_[g]) return true;
    ++next_f_[s];
    held_[s][j] = bytes;
    top_up_[s][j] = full_[s] - bytes;
    live_[g] += bytes;
    const bool ok = safe(g);
    live_[g] -= bytes;
    held_[s][j] = top_up_[s][j] = 0;
    --next_f_[s];
    return ok;
  }
  // Whether the R of micro-batch j on stage s may run (its forward kept less), tried likewise.
  bool admits_recompute(int g, int s, int j) {
    const double top = top_up_[s][j];
    held_[s][j] += top;
    top_up_[s][j] = 0;
    live_[g] += top;
    const bool ok = safe(g);
    live_[g] -= top;
    held_[s][j] -= top;
    top_up_[s][j] = top;
    return ok;
  }
  bool needs_recompute(int s, int j) const { return recomputes_ && top_up_[s][j] > 0; }

  // R(s, j): rebuilds what its forward dropped, on its group until the recompute's time.
  void start_recompute(int g, double t, int s, int j) {
    const double end = t + r_.recompute_time[s].value();
    timeline_.occupy(g, end);
    orders_[g].push_back(Action{ActionKind::kRecompute, s, j});
    live_[g] += top_up_[s][j];
    held_[s][j] += top_up_[s][j];
    top_up_[s][j] = 0;
    after_recompute_[g] = s;
    wake(g, end);
  }

  void wake(int g, double t) { events_.push(Event{t, seq_++, g}); }

  void start(int g, double t, const Action& a, bool keep_less = false) {
    const double end = timeline_.run(a, t);
    orders_[g].push_back(a);
    if (a.kind != ActionKind::kBackwardWeight)
      last_was_backward_[g] = a.kind != ActionKind::kForward;
    wake(g, end);
    const int s = a.stage;
    switch (a.kind) {
      case ActionKind::kForward: {
        ++next_f_[s];
        --remaining_fb_[g];
        const double full = r_.activation_bytes[s].value();
        const double kept = keep_less ? kept_first_[s] : full;
        live_[g] += kept;
        if (recomputes_) {
          held_[s][a.micro_batch] = kept;
          top_up_[s][a.micro_batch] = full - kept;
        }
        break;
      }
      case ActionKind::kBackwardInput:
        ++next_b_[s];
        --remaining_fb_[g];
        pending_w_[g].push_back({s, a.micro_batch});
        break;
      case ActionKind::kBackward:
        ++next_b_[s];
        ++next_freed_[s];
        --remaining_fb_[g];
        live_[g] -= r_.activation_bytes[s].value();
        if (recomputes_) held_[s][a.micro_batch] = 0;
        break;
      case ActionKind::kBackwardWeight:
        ++next_freed_[s];
        live_[g] -= r_.activation_bytes[s].value();
        if (recomputes_) held_[s][a.micro_batch] = 0;
        break;
      default:
        MOTLEY_CHECK(false, "unexpected action kind");
    }
    // The group consuming this output on another stage: its next-ready estimate is exact from
    // now on, and the input arrives after the hop.
    for (const internal::Consumer& consumer : timeline_.consumers(a)) {
      wake(consumer.group, t);
      wake(consumer.group, end + consumer.hop);
    }
  }

  void step(int g, double t) {
    const ActionKind b_kind =
        r_.split_backward ? ActionKind::kBackwardInput : ActionKind::kBackward;
    // The backward an R was run for comes right after it.
    if (const int s = after_recompute_[g]; s >= 0) {
      after_recompute_[g] = -1;
      start(g, t, Action{b_kind, s, next_b_[s]});
      return;
    }
    // Candidates: the next backward and the next forward of each of the group's stages.
    int best_b = -1, best_f = -1;
    int keep_less_f = -1;    // a forward memory admits only keeping less (single recomputes)
    int early_r = -1;        // a recompute whose backward is not ready yet, to run while idle
    bool blocked_f = false;  // a forward (or an R) is ready but memory does not admit it
    double next_ready = kUnknown;
    for (int s : stages_of_[g]) {
      const int jb = next_b_[s];
      if (jb < m_) {
        const internal::Readiness ready = timeline_.readiness(Action{b_kind, s, jb}, t);
        if (ready.known && ready.time <= t && needs_recompute(s, jb) &&
            !admits_recompute(g, s, jb)) {
          blocked_f = true;
        } else if (!(ready.known && ready.time <= t) && needs_recompute(s, jb)) {
          // Not ready: its R may run ahead, off the backward's path, if the group is idle.
          if (early_r < 0 && admits_recompute(g, s, jb)) early_r = s;
          next_ready = std::min(next_ready, ready.time);
        } else if (ready.known && ready.time <= t) {
          const bool deepest_first = r_.priority == AdaptivePriority::kAlternate;
          if (best_b < 0 || (deepest_first && s > best_b) ||
              (!deepest_first && (jb < next_b_[best_b] || (jb == next_b_[best_b] && s > best_b)))) {
            best_b = s;
          }
        } else {
          next_ready = std::min(next_ready, ready.time);
        }
      }
      const int jf = next_f_[s];
      if (jf < m_) {
        const internal::Readiness ready =
            timeline_.readiness(Action{ActionKind::kForward, s, jf}, t);
        if (ready.known && ready.time <= t) {
          if (!admissible(g, s, jf)) {
            blocked_f = true;
            if (recomputes_ && kept_first_[s] < r_.activation_bytes[s].value() &&
                (keep_less_f < 0 || jf < next_f_[keep_less_f]) &&
                admits_forward(g, s, jf, kept_first_[s])) {
              keep_less_f = s;
            }
          } else if (best_f < 0 || jf < next_f_[best_f] || (jf == next_f_[best_f] && s > best_f)) {
            best_f = s;
          }
        } else {
          next_ready = std::min(next_ready, ready.time);
        }
      }
    }
    const bool backward_first = r_.priority == AdaptivePriority::kAlternate
                                    ? !last_was_backward_[g]
                                    : r_.priority == AdaptivePriority::kBackwardFirst;
    const int first = backward_first ? best_b : best_f;
    const int second = backward_first ? best_f : best_b;
    auto backward = [&](int s) {
      if (needs_recompute(s, next_b_[s])) {
        start_recompute(g, t, s, next_b_[s]);
      } else {
        start(g, t, Action{b_kind, s, next_b_[s]});
      }
    };
    if (first >= 0) {
      if (backward_first) {
        backward(first);
      } else {
        start(g, t, Action{ActionKind::kForward, first, next_f_[first]});
      }
      return;
    }
    if (second >= 0) {
      if (!backward_first) {
        backward(second);
      } else {
        start(g, t, Action{ActionKind::kForward, second, next_f_[second]});
      }
      return;
    }
    // No F or B to run: the recompute of a backward still to come runs ahead, off that
    // backward's path (before the W's, which can wait for any gap).
    if (early_r >= 0) {
      start_recompute(g, t, early_r, next_b_[early_r]);
      after_recompute_[g] = -1;  // its backward runs when it is ready, as any other
      return;
    }
    if (pending_w_[g].empty()) {
      // Nothing else to run: rather than wait, a forward that keeps less and is recomputed
      // later, where the wait would hold the forward and its recompute (the recompute costs
      // time); and always for the oldest micro-batch with a forward left on the group once
      // nothing older holds memory there: waiting frees nothing for it then, since what the
      // younger ones hold waits for it (the safe state counts on it going on).
      if (keep_less_f >= 0) {
        const int j = next_f_[keep_less_f];
        const Action f{ActionKind::kForward, keep_less_f, j};
        int oldest = m_, oldest_held = m_;
        for (int u : stages_of_[g]) {
          oldest = std::min(oldest, next_f_[u]);
          oldest_held = std::min(oldest_held, next_freed_[u]);
        }
        if ((j == oldest && oldest_held >= oldest) ||
            t + timeline_.duration(f) + r_.recompute_time[keep_less_f].value() <= next_ready) {
          start(g, t, f, /*keep_less=*/true);
        }
      }
      return;
    }
    const auto [s, j] = pending_w_[g].front();
    const Action w{ActionKind::kBackwardWeight, s, j};
    const bool run = blocked_f || remaining_fb_[g] == 0 || r_.weight_fill == WeightFill::kAlways ||
                     t + timeline_.duration(w) <= next_ready;
    if (!run) return;
    pending_w_[g].pop_front();
    start(g, t, w);
  }

  struct Event {
    double time;
    int64_t seq;
    int group;
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };

  const AdaptiveRequest& r_;
  int stages_;
  int m_;
  internal::EstimatedTimeline timeline_;
  std::vector<std::vector<int>> stages_of_;
  std::vector<double> reserve_;  // activation bytes of one micro-batch over the group's stages
  std::vector<int> next_f_, next_b_;
  std::vector<int> next_freed_;  // per stage: micro-batches whose activations were freed
  std::vector<double> live_;     // activation bytes held
  std::vector<std::deque<std::pair<int, int>>> pending_w_;
  std::vector<int64_t> remaining_fb_;
  std::vector<bool> last_was_backward_;  // of the group's last F or B (kAlternate)
  std::vector<int> after_recompute_;     // per group: the stage whose backward follows its R
  // Single recomputes (AdaptiveRequest::recomputed_bytes): whether any stage allows them,
  // what a forward keeps at first per stage (its activations where it does not), and per
  // stage and micro-batch what is held and what its R will add.
  bool recomputes_ = false;
  std::vector<double> full_;  // per stage: activation_bytes, as numbers
  std::vector<double> kept_first_;
  std::vector<std::vector<double>> held_, top_up_;
  GroupOrders orders_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  int64_t seq_ = 0;
};

}  // namespace

double least_activation_need(const std::vector<int>& stage_group, const std::vector<double>& full,
                             const std::vector<double>& first, int g) {
  double now = 0, peak = 0;
  for (size_t s = 0; s < stage_group.size(); ++s) {
    if (stage_group[s] == g) peak = std::max(peak, now += first[s]);
  }
  for (size_t s = stage_group.size(); s-- > 0;) {
    if (stage_group[s] != g) continue;
    peak = std::max(peak, now += full[s] - first[s]);
    now -= full[s];
  }
  return peak;
}

Result<GroupOrders> adaptive_schedule(const AdaptiveRequest& request) {
  MOTLEY_RETURN_IF_ERROR(check_request(request));
  ListScheduler scheduler(request);
  return scheduler.run();
}

}  // namespace motley
