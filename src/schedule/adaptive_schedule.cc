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
        orders_(r.num_groups) {
    for (int s = 0; s < stages_; ++s) {
      const int g = r.stage_group[s];
      stages_of_[g].push_back(s);
      reserve_[g] += r.activation_bytes[s].value();
      remaining_fb_[g] += int64_t{2} * m_;
    }
  }

  Result<GroupOrders> run() {
    for (int g = 0; g < r_.num_groups; ++g) {
      const double budget = r_.memory_budget[g].value();
      if (reserve_[g] > budget * (1 + 1e-12)) {
        return infeasible(fmt::format(
            "{}group {} needs {:f} GiB of activations for one micro-batch but its budget is "
            "{:f} GiB",
            kWhat, g, reserve_[g] / kGiB, budget / kGiB));
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
  bool admissible(int g, int s, int j) const {
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

  void wake(int g, double t) { events_.push(Event{t, seq_++, g}); }

  void start(int g, double t, const Action& a) {
    const double end = timeline_.run(a, t);
    orders_[g].push_back(a);
    if (a.kind != ActionKind::kBackwardWeight)
      last_was_backward_[g] = a.kind != ActionKind::kForward;
    wake(g, end);
    const int s = a.stage;
    switch (a.kind) {
      case ActionKind::kForward:
        ++next_f_[s];
        --remaining_fb_[g];
        live_[g] += r_.activation_bytes[s].value();
        break;
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
        break;
      case ActionKind::kBackwardWeight:
        ++next_freed_[s];
        live_[g] -= r_.activation_bytes[s].value();
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
    // Candidates: the next backward and the next forward of each of the group's stages.
    int best_b = -1, best_f = -1;
    bool blocked_f = false;  // a forward is ready but memory does not admit it
    double next_ready = kUnknown;
    for (int s : stages_of_[g]) {
      const int jb = next_b_[s];
      if (jb < m_) {
        const internal::Readiness ready = timeline_.readiness(Action{b_kind, s, jb}, t);
        if (ready.known && ready.time <= t) {
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
    if (first >= 0) {
      if (backward_first) {
        start(g, t, Action{b_kind, first, next_b_[first]});
      } else {
        start(g, t, Action{ActionKind::kForward, first, next_f_[first]});
      }
      return;
    }
    if (second >= 0) {
      if (!backward_first) {
        start(g, t, Action{b_kind, second, next_b_[second]});
      } else {
        start(g, t, Action{ActionKind::kForward, second, next_f_[second]});
      }
      return;
    }
    if (pending_w_[g].empty()) return;
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
  GroupOrders orders_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  int64_t seq_ = 0;
};

}  // namespace

Result<GroupOrders> adaptive_schedule(const AdaptiveRequest& request) {
  MOTLEY_RETURN_IF_ERROR(check_request(request));
  ListScheduler scheduler(request);
  return scheduler.run();
}

}  // namespace motley
