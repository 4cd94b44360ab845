#include "motley/tune/partition.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace motley {
namespace {

constexpr const char* kWhat = "partition: ";

// Where a stage's own layers begin and end: after the embedding and before the head where
// vocabulary parallelism spreads them.
int priced_begin(const PartitionRequest& req, int begin) {
  return req.spread_embedding ? std::max(begin, 1) : begin;
}
int priced_end(const PartitionRequest& req, int end) {
  return req.spread_head ? std::min(end, req.num_layers - 1) : end;
}

struct Reach {
  int end = 0;  // == begin when no layer fits
  RecomputePolicy policy = RecomputePolicy::kNone;
};

class Partitioner {
 public:
  Partitioner(const PartitionRequest& req, const CostModel& cost) : req_(req), cost_(cost) {}

  double time(int s, int begin_layer, int end, RecomputePolicy p) const {
    const int begin = priced_begin(req_, begin_layer);
    const int priced = priced_end(req_, end);
    double own = 0;
    if (priced > begin) {
      const ComputeTimes t = cost_.compute(LayerRange{begin, priced}, req_.stage_groups[s], p);
      own = (t.forward + (req_.fused_backward ? t.fused_backward() : t.backward()) + t.recompute)
                .value();
    }
    return own + (req_.shard_time.empty() ? 0.0 : req_.shard_time[s].value());
  }

  bool fits(int s, int begin_layer, int end, RecomputePolicy p) const {
    return stage_need(req_, cost_, s, begin_layer, end, p, req_.in_flight[s]) <=
           req_.memory_budget[s];
  }

  // The furthest end stage s may reach from `begin` within `bound`, leaving a layer for every
  // later stage; the cheapest policy among those reaching it.
  Reach reach(int s, int begin, double bound) const {
    const int stages = static_cast<int>(req_.stage_groups.size());
    const int last = req_.num_layers - (stages - 1 - s);
    Reach best{begin, req_.policies.front()};
    for (RecomputePolicy p : req_.policies) {
      int lo = begin, hi = last;  // lo: known ok (or begin), find max ok in (begin, last]
      while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (time(s, begin, mid, p) <= bound && fits(s, begin, mid, p)) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      if (lo > best.end) best = Reach{lo, p};
    }
    return best;
  }

  // Greedy pass: every stage takes as many layers as it can. Returns the stage that got stuck,
  // or -1 when the layers are covered.
  int greedy(double bound, std::vector<int>* bounds, std::vector<RecomputePolicy>* policies) const {
    const int stages = static_cast<int>(req_.stage_groups.size());
    bounds->assign(1, 0);
    policies->clear();
    int begin = 0;
    for (int s = 0; s < stages; ++s) {
      const Reach r = reach(s, begin, bound);
      if (r.end == begin) return s;
      bounds->push_back(r.end);
      policies->push_back(r.policy);
      begin = r.end;
    }
    return begin == req_.num_layers ? -1 : stages - 1;
  }

 private:
  const PartitionRequest& req_;
  const CostModel& cost_;
};

}  // namespace

Bytes stage_need(const PartitionRequest& req, const CostModel& cost, int stage, int begin, int end,
                 RecomputePolicy policy, int64_t in_flight) {
  MemoryOptions m = req.memory;
  m.recompute = policy;
  m.in_flight_micro_batches = in_flight;
  const int first = priced_begin(req, begin);
  const int last = priced_end(req, end);
  Bytes need = req.shard_memory.empty() ? Bytes(0) : req.shard_memory[stage];
  if (last > first) {
    need += cost.stage_memory(LayerRange{first, last}, req.stage_groups[stage], m).total();
  }
  return need;
}

namespace {

// The largest group total and the sum of squared totals: what the group rebalancing lowers.
std::pair<double, double> load_score(const std::vector<double>& load) {
  double worst = 0, squares = 0;
  for (double x : load) {
    worst = std::max(worst, x);
    squares += x * x;
  }
  return {worst, squares};
}

// Whether group totals scored `a` (largest total, sum of squares) beat `b`.
bool better_score(const std::pair<double, double>& a, const std::pair<double, double>& b) {
  return a.first < b.first * (1 - 1e-12) ||
         (a.first <= b.first * (1 + 1e-12) && a.second < b.second * (1 - 1e-12));
}

// The best chain move (rebalance_groups, below) out of a stage of a busiest group: applied to
// `out`, `time` (each stage's time) and `current` (their score) when it beats `current`; false
// when none does.
template <class Cheapest>
bool chain_move(const PartitionRequest& req, const Partitioner& part, Cheapest cheapest, int groups,
                std::vector<double>* time, std::pair<double, double>* current, Partition* out) {
  const int stages = static_cast<int>(req.stage_groups.size());
  const std::vector<int>& owner = req.stage_owner;
  const std::vector<int>& b = out->bounds;
  std::vector<double> load(groups, 0);
  for (int s = 0; s < stages; ++s) load[owner[s]] += (*time)[s];
  const double worst = current->first;  // the largest of `load`
  // The best move: stages from, from + dir, ..., to with their new times and policies.
  int best_from = -1, best_to = -1;
  std::pair<double, double> best_score = *current;
  std::vector<double> best_times;
  std::vector<RecomputePolicy> best_policies;
  for (int j = 0; j < stages; ++j) {
    if (load[owner[j]] < worst * (1 - 1e-12) || b[j + 1] - b[j] < 2) continue;
    // dir -1: the layer goes towards stage 0 (stage j gives up its first layer, each stage on
    // the way takes the next one's first and gives up its own); dir +1: towards the last stage.
    for (int dir : {-1, 1}) {
      RecomputePolicy p = out->recompute[j];
      const int jb = dir < 0 ? b[j] + 1 : b[j];
      const int je = dir < 0 ? b[j + 1] : b[j + 1] - 1;
      if (!cheapest(j, jb, je, &p)) continue;
      std::vector<double> l = load;
      std::vector<double> times = {part.time(j, jb, je, p)};
      std::vector<RecomputePolicy> policies = {p};
      l[owner[j]] += times.back() - (*time)[j];
      for (int k = j + dir; k >= 0 && k < stages; k += dir) {
        // Stage k keeps the extra layer and ends the chain.
        const int kb = dir < 0 ? b[k] : b[k] - 1;
        const int ke = dir < 0 ? b[k + 1] + 1 : b[k + 1];
        RecomputePolicy pk = out->recompute[k];
        if (cheapest(k, kb, ke, &pk)) {
          std::vector<double> lk = l;
          const double tk = part.time(k, kb, ke, pk);
          lk[owner[k]] += tk - (*time)[k];
          const auto sc = load_score(lk);
          if (better_score(sc, best_score)) {
            best_score = sc;
            best_from = j;
            best_to = k;
            best_times = times;
            best_times.push_back(tk);
            best_policies = policies;
            best_policies.push_back(pk);
          }
        }
        // Or stage k passes a layer on as well: its range shifts by one, its size stays.
        const int shift = -dir;
        RecomputePolicy ps = out->recompute[k];
        if (!cheapest(k, b[k] + shift, b[k + 1] + shift, &ps)) break;
        times.push_back(part.time(k, b[k] + shift, b[k + 1] + shift, ps));
        policies.push_back(ps);
        l[owner[k]] += times.back() - (*time)[k];
      }
    }
  }
  if (best_from < 0) return false;
  const int dir = best_to < best_from ? -1 : 1;
  // The boundaries between the two stages move one layer towards best_from.
  for (int c = std::min(best_from, best_to) + 1; c <= std::max(best_from, best_to); ++c) {
    out->bounds[c] -= dir;
  }
  for (size_t i = 0; i < best_times.size(); ++i) {
    const int s = best_from + dir * static_cast<int>(i);
    (*time)[s] = best_times[i];
    out->recompute[s] = best_policies[i];
  }
  *current = best_score;
  return true;
}

// Moves single boundaries while that lowers (largest group total, sum of squared totals),
// steepest first; every stage keeps the cheapest policy that fits its new range. Where no
// single move helps, a chain move: a stage of a busiest group hands its first (or last) layer
// on to the stage before (after) it, that stage its own first (last) layer to the next, and so
// on, until the stage that keeps the extra layer; the stages in between keep their sizes and
// their groups' totals change only as much as their shifted ranges differ. It takes a layer
// from a busiest group to any other group at once, where single moves would have to pass it
// through groups already at the largest total or stages already full (which no single move
// may raise or overfill): Llama-3-70B's eighty layers on a zigzag of three chunks over sixteen
// groups were left with six layers on three groups and four on three others (partition_test.cc).
template <class Cheapest>
void rebalance_groups(const PartitionRequest& req, const Partitioner& part, Cheapest cheapest,
                      Partition* out) {
  const int stages = static_cast<int>(req.stage_groups.size());
  int groups = 0;
  for (int g : req.stage_owner) groups = std::max(groups, g + 1);
  std::vector<double> time(stages);
  for (int s = 0; s < stages; ++s) {
    time[s] = part.time(s, out->bounds[s], out->bounds[s + 1], out->recompute[s]);
  }
  auto score = [&](const std::vector<double>& t) {
    std::vector<double> load(groups, 0);
    for (int s = 0; s < stages; ++s) load[req.stage_owner[s]] += t[s];
    return load_score(load);
  };
  auto current = score(time);
  // Whether the busiest and the idlest group differ by more than any one layer costs on its
  // stage: more than whole layers explain, so the single moves are stuck, not the layers.
  auto uneven_beyond_layers = [&] {
    std::vector<double> load(groups, 0);
    double layer = 0;
    for (int s = 0; s < stages; ++s) {
      load[req.stage_owner[s]] += time[s];
      for (int l = out->bounds[s]; l < out->bounds[s + 1]; ++l) {
        const double shard = req.shard_time.empty() ? 0.0 : req.shard_time[s].value();
        layer = std::max(layer, part.time(s, l, l + 1, out->recompute[s]) - shard);
      }
    }
    const auto [least, most] = std::minmax_element(load.begin(), load.end());
    return *most - *least > layer * (1 + 1e-9);
  };
  // Chain moves are tried only there, and kept only where they, with the single moves after
  // them, lower the largest total. Evening out groups that whole layers already leave within a
  // layer of each other changes the stages' recompute and warm-up for no gain: on a
  // memory-bound Llama-3-8B of four devices the plans found were 1-4 % slower over four seeds.
  // `trial` is the partition before the first chain move not yet paid for, and its largest
  // total.
  std::optional<std::pair<Partition, double>> trial;
  for (int it = 0; it < 4 * req.num_layers; ++it) {
    int best_cut = -1, best_bound = 0;
    RecomputePolicy best_left = RecomputePolicy::kNone, best_right = RecomputePolicy::kNone;
    auto best_score = current;
    for (int c = 1; c < stages; ++c) {
      for (int delta : {-1, 1}) {
        const int bound = out->bounds[c] + delta;
        if (bound <= out->bounds[c - 1] || bound >= out->bounds[c + 1]) continue;
        RecomputePolicy left = out->recompute[c - 1], right = out->recompute[c];
        if (!cheapest(c - 1, out->bounds[c - 1], bound, &left) ||
            !cheapest(c, bound, out->bounds[c + 1], &right)) {
          continue;
        }
        std::vector<double> t = time;
        t[c - 1] = part.time(c - 1, out->bounds[c - 1], bound, left);
        t[c] = part.time(c, bound, out->bounds[c + 1], right);
        const auto sc = score(t);
        if (better_score(sc, best_score)) {
          best_score = sc;
          best_cut = c;
          best_bound = bound;
          best_left = left;
          best_right = right;
        }
      }
    }
    if (best_cut < 0) {
      if (!trial) {
        if (!uneven_beyond_layers()) break;
        trial.emplace(*out, current.first);
      }
      if (!chain_move(req, part, cheapest, groups, &time, &current, out)) break;
      if (current.first < trial->second * (1 - 1e-12)) trial.reset();
      continue;
    }
    out->bounds[best_cut] = best_bound;
    out->recompute[best_cut - 1] = best_left;
    out->recompute[best_cut] = best_right;
    time[best_cut - 1] = part.time(best_cut - 1, out->bounds[best_cut - 1], best_bound, best_left);
    time[best_cut] = part.time(best_cut, best_bound, out->bounds[best_cut + 1], best_right);
    current = best_score;
    if (trial && current.first < trial->second * (1 - 1e-12)) trial.reset();
  }
  if (trial) *out = std::move(trial->first);
}

// The largest group total and the sum of squared group totals of `p` (rebalance_groups's
// objective).
std::pair<double, double> group_score(const PartitionRequest& req, const Partitioner& part,
                                      const Partition& p) {
  std::vector<double> load;
  for (size_t s = 0; s + 1 < p.bounds.size(); ++s) {
    const size_t g = static_cast<size_t>(req.stage_owner[s]);
    if (load.size() <= g) load.resize(g + 1, 0);
    load[g] += part.time(static_cast<int>(s), p.bounds[s], p.bounds[s + 1], p.recompute[s]);
  }
  return load_score(load);
}

// The partition whose stage times are closest to one another: the least sum of squared
// differences from a target time, each stage at the cheapest policy that fits its budget. A
// dynamic program over (stage, last layer), O(stages x layers^2). The target is the time at
// which every stage would finish the whole model's work together, 1 / sum_s (1 / time of all
// layers on stage s's group), refined once to the mean of the first result's stage times.
// Where a group runs many stages, even stages keep every group's warm-up short, which the
// bisection's partition (early stages filled to the bound, the last ones left a layer each)
// does not. nullopt when no partition fits memory.
template <class Cheapest>
std::optional<Partition> even_partition(const PartitionRequest& req, const Partitioner& part,
                                        Cheapest cheapest) {
  const int stages = static_cast<int>(req.stage_groups.size());
  const int layers = req.num_layers;
  const RecomputePolicy first = req.policies.front();
  double rate = 0;
  for (int s = 0; s < stages; ++s) rate += 1.0 / part.time(s, 0, layers, first);
  double target = 1.0 / rate;
  std::optional<Partition> best;
  for (int pass = 0; pass < 2; ++pass) {
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> cost(stages + 1, std::vector<double>(layers + 1, inf));
    std::vector<std::vector<int>> from(stages + 1, std::vector<int>(layers + 1, -1));
    std::vector<std::vector<RecomputePolicy>> policy(
        stages + 1, std::vector<RecomputePolicy>(layers + 1, first));
    cost[0][0] = 0;
    for (int s = 1; s <= stages; ++s) {
      // Stage s - 1 ends at `end`, leaving a layer for every later stage. Its ranges are tried
      // from the shortest: a stage's time without recompute only grows with its range and no
      // policy is faster, so once that time exceeds the target by more than the root of the
      // best cost so far, every longer range costs more (the margin covers rounding), and the
      // search stops. (Only a first stage, which begins at layer 0 alone, may price a longer
      // range lower: a measured W that walks the whole backward drops its B.) Ties keep the
      // earliest begin, as a search from the longest range would.
      for (int end = s; end <= layers - (stages - s); ++end) {
        for (int begin = end - 1; begin >= s - 1; --begin) {
          if (cost[s - 1][begin] == inf) continue;
          const double least = part.time(s - 1, begin, end, RecomputePolicy::kNone) - target;
          if (least > 0 && least * least > cost[s][end] * (1 + 1e-9)) break;
          RecomputePolicy p = first;
          if (!cheapest(s - 1, begin, end, &p)) continue;
          const double d =
              p == RecomputePolicy::kNone ? least : part.time(s - 1, begin, end, p) - target;
          const double c = cost[s - 1][begin] + d * d;
          if (c < cost[s][end] || (c == cost[s][end] && begin < from[s][end])) {
            cost[s][end] = c;
            from[s][end] = begin;
            policy[s][end] = p;
          }
        }
      }
    }
    if (cost[stages][layers] == inf) return best;
    Partition out;
    out.bounds.assign(stages + 1, layers);
    out.recompute.assign(stages, first);
    for (int s = stages; s > 0; --s) {
      out.recompute[s - 1] = policy[s][out.bounds[s]];
      out.bounds[s - 1] = from[s][out.bounds[s]];
    }
    double sum = 0;
    for (int s = 0; s < stages; ++s) {
      sum += part.time(s, out.bounds[s], out.bounds[s + 1], out.recompute[s]);
    }
    target = sum / stages;
    best = std::move(out);
  }
  return best;
}

std::string devices_text(const DeviceGroup& g) {
  return fmt::format("{}", fmt::join(g.devices, ","));
}

}  // namespace

Result<Partition> balanced_partition(const PartitionRequest& req, const CostModel& cost) {
  const size_t stages = req.stage_groups.size();
  if (stages == 0) return invalid_argument(fmt::format("{}no stages", kWhat));
  if (req.memory_budget.size() != stages || req.in_flight.size() != stages) {
    return invalid_argument(
        fmt::format("{}memory_budget and in_flight need one entry per stage ({}), got {} and {}",
                    kWhat, stages, req.memory_budget.size(), req.in_flight.size()));
  }
  if (req.policies.empty()) return invalid_argument(fmt::format("{}no recompute policy", kWhat));
  if (!req.stage_owner.empty() && req.stage_owner.size() != stages) {
    return invalid_argument(
        fmt::format("{}stage_owner needs one entry per stage ({})", kWhat, stages));
  }
  for (int g : req.stage_owner) {
    if (g < 0) return invalid_argument(fmt::format("{}stage_owner has a negative group", kWhat));
  }
  if ((!req.shard_time.empty() || !req.shard_memory.empty()) &&
      (req.shard_time.size() != stages || req.shard_memory.size() != stages)) {
    return invalid_argument(fmt::format(
        "{}shard_time and shard_memory need one entry per stage ({}) or none, got {} and {}", kWhat,
        stages, req.shard_time.size(), req.shard_memory.size()));
  }
  if (static_cast<int>(stages) > req.num_layers) {
    return invalid_argument(
        fmt::format("{}{} stages but only {} layers", kWhat, stages, req.num_layers));
  }
  for (size_t s = 0; s < stages; ++s) {
    if (req.stage_groups[s].devices.empty()) {
      return invalid_argument(fmt::format("{}stage {} has no devices", kWhat, s));
    }
    if (req.in_flight[s] < 0) {
      return invalid_argument(fmt::format("{}in_flight[{}] is negative", kWhat, s));
    }
  }

  Partitioner part(req, cost);
  std::vector<int> bounds;
  std::vector<RecomputePolicy> policies;
  const double inf = std::numeric_limits<double>::infinity();
  const int stuck = part.greedy(inf, &bounds, &policies);
  if (stuck >= 0) {
    return infeasible(
        fmt::format("{}no partition of {} layers over {} stages fits memory: stage {} (devices {}, "
                    "budget {:f} GiB) cannot take the layers left to it",
                    kWhat, req.num_layers, stages, stuck, devices_text(req.stage_groups[stuck]),
                    req.memory_budget[stuck].value() / kGiB));
  }
  // The bottleneck lies between the largest single-layer stage and the whole model anywhere.
  double hi = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    hi = std::max(hi, part.time(static_cast<int>(s), bounds[s], bounds[s + 1], policies[s]));
  }
  double lo = 0;
  for (int it = 0; it < 200 && hi - lo > 1e-9 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    std::vector<int> b;
    std::vector<RecomputePolicy> p;
    if (part.greedy(mid, &b, &p) < 0) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  MOTLEY_CHECK(part.greedy(hi, &bounds, &policies) < 0, "bisection lost its feasible bound");

  // With the bounds fixed, each stage needs only the cheapest policy that fits its range.
  auto cheapest = [&](int s, int begin, int end, RecomputePolicy* chosen) {
    for (RecomputePolicy p : req.policies) {
      if (part.fits(s, begin, end, p)) {
        *chosen = p;
        return true;
      }
    }
    return false;
  };
  Partition out;
  out.bounds = bounds;
  for (size_t s = 0; s < stages; ++s) {
    RecomputePolicy chosen = policies[s];
    cheapest(static_cast<int>(s), bounds[s], bounds[s + 1], &chosen);
    out.recompute.push_back(chosen);
  }
  if (!req.stage_owner.empty()) {
    rebalance_groups(req, part, cheapest, &out);
    // Where a group runs three or more stages, the even partition rebalanced is kept unless it
    // balances the groups worse: its stages are even, the other's need not be.
    int groups = 0;
    for (int g : req.stage_owner) groups = std::max(groups, g + 1);
    if (static_cast<int>(stages) >= 3 * groups) {
      if (std::optional<Partition> even = even_partition(req, part, cheapest)) {
        rebalance_groups(req, part, cheapest, &*even);
        if (group_score(req, part, *even).first <= group_score(req, part, out).first * (1 + 1e-9)) {
          out = std::move(*even);
        }
      }
    }
  }
  for (size_t s = 0; s < stages; ++s) {
    out.bottleneck =
        std::max(out.bottleneck, Seconds(part.time(static_cast<int>(s), out.bounds[s],
                                                   out.bounds[s + 1], out.recompute[s])));
  }
  if (!req.stage_owner.empty()) {
    std::vector<double> load;
    for (size_t s = 0; s < stages; ++s) {
      const size_t g = static_cast<size_t>(req.stage_owner[s]);
      if (load.size() <= g) load.resize(g + 1, 0);
      load[g] += part.time(static_cast<int>(s), out.bounds[s], out.bounds[s + 1], out.recompute[s]);
    }
    out.bottleneck = Seconds(*std::max_element(load.begin(), load.end()));
  }
  return out;
}

}  // namespace motley
