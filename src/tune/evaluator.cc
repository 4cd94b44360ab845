#include "evaluator.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "space.h"

namespace motley::tune_internal {
namespace {

// Why the replicas of `c` cannot run in the lockstep its ZeRO stage, expert or context
// parallelism needs (plan validation's rules, checked before a simulation so that a move that
// breaks them is refused like any other infeasible candidate); empty: they can.
std::string lockstep_obstacle(const Context& ctx, const Candidate& c) {
  const size_t replicas = c.replicas.size();
  if (replicas < 2) return "";
  const int zero = std::max(c.zero_stage, ctx.options().zero_stage.value_or(0));
  const int e = std::max(c.expert_parallel, std::max(ctx.options().expert_parallel, 1));
  const int cp = std::max(c.context_parallel, std::max(ctx.options().context_parallel, 1));
  if (e > 1 && cp > 1) return "expert and context parallelism both group the replicas";
  bool equal = true;
  for (const PipelineSpec& r : c.replicas) {
    equal = equal && r.micro_batches == c.replicas[0].micro_batches;
  }
  if (zero >= 2 && !equal) return fmt::format("ZeRO-{} needs equal micro-batch counts", zero);
  if (e > 1 && (replicas % static_cast<size_t>(e) != 0 || !equal)) {
    return fmt::format("expert parallelism {} needs it to divide the replicas and equal counts", e);
  }
  if (cp > 1 && replicas % static_cast<size_t>(cp) != 0) {
    return fmt::format("context parallelism {} needs it to divide the replicas", cp);
  }
  return "";
}

OptimizerStepModel optimizer_step_model(const TuneOptions& options) {
  return options.optimizer_step ? OptimizerStepModel::kMemoryBound : OptimizerStepModel::kNone;
}

// The best screened candidates kept for the finalists (best_screened). 32: the climbs leave
// near-copies of their plans at the top, and with 16 a finalist that wins whole could drop out
// (docs/planner.md, step 5 of the search).
constexpr size_t kScreenedKept = 32;
// Screening simulates a candidate whole up to this many micro-batch passes over a group,
// summed over the replicas it simulates (Evaluator::run).
constexpr int64_t kWholeScreenPasses = 1024;

// Prices a plan of a few replicas as if it had d: the gradient all-reduce of a ring over the
// kept replicas' devices is priced over the same devices of every replica, and the optimizer
// state is sharded d ways. Everything else is the base model's.
class ReplicaSubsetCostModel final : public CostModel {
 public:
  ReplicaSubsetCostModel(const CostModel& base, int64_t data_parallel,
                         std::map<std::vector<int>, std::vector<int>> rings)
      : base_(base), data_parallel_(data_parallel), rings_(std::move(rings)) {}

  ComputeTimes compute(LayerRange layers, const DeviceGroup& group,
                       RecomputePolicy recompute) const override {
    return base_.compute(layers, group, recompute);
  }
  StageMemory stage_memory(LayerRange layers, const DeviceGroup& group,
                           const MemoryOptions& options) const override {
    MemoryOptions o = options;
    o.data_parallel = data_parallel_;
    return base_.stage_memory(layers, group, o);
  }
  Bytes boundary_bytes(int layer) const override { return base_.boundary_bytes(layer); }
  Bytes expert_dispatch_bytes(int layer) const override {
    return base_.expert_dispatch_bytes(layer);
  }
  Seconds expert_exchange_time(int layer, const std::vector<int>& devices, Bytes bytes,
                               CollectiveAlgorithm algorithm) const override {
    return base_.expert_exchange_time(layer, devices, bytes, algorithm);
  }
  ContextExchange context_exchange(int layer, const DeviceGroup& group) const override {
    return base_.context_exchange(layer, group);
  }
  PipelineMessage pipeline_message(const DeviceGroup& src, const DeviceGroup& dst,
                                   Bytes bytes) const override {
    return base_.pipeline_message(src, dst, bytes);
  }
  std::optional<Seconds> optimizer_step_time(LayerRange layers, const DeviceGroup& group,
                                             const MemoryOptions& options) const override {
    MemoryOptions o = options;
    o.data_parallel = data_parallel_;
    return base_.optimizer_step_time(layers, group, o);
  }
  std::optional<TiedLayers> tied_layers() const override { return base_.tied_layers(); }
  Seconds p2p_time(int src, int dst, Bytes bytes) const override {
    return base_.p2p_time(src, dst, bytes);
  }
  Seconds collective_time(Collective collective, const std::vector<int>& devices, Bytes bytes,
                          CollectiveAlgorithm algorithm) const override {
    std::vector<int> key = devices;
    std::sort(key.begin(), key.end());
    auto it = rings_.find(key);
    return base_.collective_time(collective, it == rings_.end() ? devices : it->second, bytes,
                                 algorithm);
  }
  int gradient_buckets(LayerRange layers, const DeviceGroup& group,
                       int64_t data_parallel) const override {
    (void)data_parallel;
    return base_.gradient_buckets(layers, group, data_parallel_);
  }
  int parameter_gather_buckets(LayerRange layers, const DeviceGroup& group,
                               int64_t data_parallel) const override {
    (void)data_parallel;
    return base_.parameter_gather_buckets(layers, group, data_parallel_);
  }
  const Topology& topology() const override { return base_.topology(); }

 private:
  const CostModel& base_;
  int64_t data_parallel_;
  std::map<std::vector<int>, std::vector<int>> rings_;
};

// Whether every replica has the same make, partition and recompute (micro-batch counts may
// differ by the remainder of an uneven split).
bool identical_replicas(const Context& ctx, const Candidate& c) {
  const PipelineSpec& a = c.replicas[0];
  for (const PipelineSpec& b : c.replicas) {
    if (b.bounds != a.bounds || b.recompute != a.recompute || b.groups.size() != a.groups.size()) {
      return false;
    }
    for (size_t g = 0; g < a.groups.size(); ++g) {
      if (b.groups[g].size() != a.groups[g].size() ||
          ctx.type_of(b.groups[g][0]) != ctx.type_of(a.groups[g][0])) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

Evaluator::Evaluator(const Context& ctx, Seconds deadline)
    : ctx_(ctx), deadline_(deadline), start_(ctx.now()) {
  for (int i = 0; i < ctx.options().threads; ++i) {
    simulators_.push_back(std::make_unique<Simulator>());
  }
}

Evaluator::~Evaluator() = default;

bool Evaluator::out_of_evaluations() const {
  const int64_t most = ctx_.options().max_evaluations;
  return most > 0 && simulated_ >= most;
}

std::string Evaluator::budget_spent() const {
  if (out_of_evaluations()) {
    return fmt::format("the evaluation budget ('max_evaluations' {}) was spent",
                       ctx_.options().max_evaluations);
  }
  return fmt::format("the time budget ({:.1f} s) was spent", ctx_.options().time_budget.value());
}

std::optional<Evaluation> Evaluator::budget_refusal(const Candidate& c) const {
  const double price = candidate_price_per_second(ctx_, c);
  if (!over_budget(ctx_, price)) return std::nullopt;
  const double budget = ctx_.options().budget_per_hour;
  Evaluation e;
  e.status = infeasible(fmt::format("budget: its devices cost ${:.2f}/hour, over the ${:.2f}",
                                    price * 3600.0, budget));
  e.refusal = Evaluation::Refusal::kBudget;
  e.refused_at = price;
  return e;
}

void Evaluator::note_refusal(const std::shared_ptr<const Evaluation>& e) {
  if (e->refusal == Evaluation::Refusal::kNone) return;
  const Evaluation* n = nearest_refused_.get();
  if (n == nullptr || e->refusal > n->refusal ||
      (e->refusal == n->refusal && e->refused_at < n->refused_at)) {
    nearest_refused_ = e;
  }
}

Evaluation Evaluator::run(const Candidate& c, Fidelity fidelity, Simulator& sim) {
  Evaluation e;
  if (const std::string why = lockstep_obstacle(ctx_, c); !why.empty()) {
    e.status = invalid_argument("candidate: " + why);
    return e;
  }
  const CostModel& base = ctx_.cost(c.micro_batch_size, c.sequence_parallel, c.context_parallel);
  const Candidate* plan_of = &c;
  Candidate reduced;
  std::unique_ptr<CostModel> subset;
  int64_t data_parallel = 0;  // of the whole plan, when fewer replicas stand for it
  const size_t replicas = c.replicas.size();
  const bool screen = fidelity == Fidelity::kScreen;
  const bool identical = identical_replicas(ctx_, c);
  // Per simulated replica: micro-batches left out, added as the steady state's period.
  std::vector<int64_t> extra;
  // (Not under expert parallelism, whose all-to-alls need every replica of their groups; under
  // context parallelism the first context group, which runs the most micro-batches, stands for
  // all where there are several.)
  const size_t members = static_cast<size_t>(std::max(c.context_parallel, 1));
  if (screen && identical && replicas >= 3 && c.expert_parallel == 1 &&
      (members == 1 || replicas > members)) {
    // The two replicas with the most micro-batches (or the first context group) stand for all.
    std::vector<size_t> kept;
    if (members > 1) {
      for (size_t r = 0; r < members; ++r) kept.push_back(r);
    } else {
      std::vector<size_t> order(replicas);
      for (size_t r = 0; r < replicas; ++r) order[r] = r;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return c.replicas[a].micro_batches > c.replicas[b].micro_batches;
      });
      kept = {std::min(order[0], order[1]), std::max(order[0], order[1])};
    }
    std::vector<PipelineSpec> few;
    for (size_t r : kept) few.push_back(c.replicas[r]);
    reduced = with_replicas(c, std::move(few));
    const PipelineSpec& first = c.replicas[kept[0]];
    std::map<std::vector<int>, std::vector<int>> rings;
    for (size_t g = 0; g < first.groups.size(); ++g) {
      for (size_t k = 0; k < first.groups[g].size(); ++k) {
        std::vector<int> key;
        for (size_t r : kept) key.push_back(c.replicas[r].groups[g][k]);
        std::sort(key.begin(), key.end());
        std::vector<int> all;
        for (const PipelineSpec& rep : c.replicas) all.push_back(rep.groups[g][k]);
        rings.emplace(key, all);
      }
    }
    subset = std::make_unique<ReplicaSubsetCostModel>(base, static_cast<int64_t>(replicas),
                                                      std::move(rings));
    data_parallel = static_cast<int64_t>(replicas);
    plan_of = &reduced;
  }
  if (screen) {
    // Past a few rounds of the pipeline every further micro-batch adds the steady state's
    // period: simulate about 4p of them (scaled alike in every replica) and extrapolate. Not
    // where the replicas simulated hold at most kWholeScreenPasses micro-batch passes over a
    // group: such a simulation costs little whole, and the period is a floor an order need
    // not reach. (An adaptive zigzag's forwards of its first chunk can run ahead of the
    // backwards up to the memory limit, so that its bubble grows with the micro-batches: on
    // four devices, from 0.5 % at 16 micro-batches to 12 % at 32 and 36 % at 64. Screened
    // from 16 of 32, such a plan came out 12 % faster than whole, and the search returned a
    // baseline's plan 11 % slower than the one it finds screening whole.)
    int64_t p = 0, most = 0, passes = 0;
    for (const PipelineSpec& rep : c.replicas) {
      p = std::max(p, static_cast<int64_t>(rep.groups.size()));
      most = std::max(most, rep.micro_batches);
    }
    for (const PipelineSpec& rep : plan_of->replicas) {
      passes += rep.micro_batches * static_cast<int64_t>(rep.groups.size());
    }
    if (most > 6 * p && passes > kWholeScreenPasses) {
      if (plan_of != &reduced) {
        reduced = c;
        plan_of = &reduced;
      }
      const double scale = static_cast<double>(4 * p) / static_cast<double>(most);
      for (PipelineSpec& rep : reduced.replicas) {
        const int64_t kept =
            std::max<int64_t>(1, std::llround(static_cast<double>(rep.micro_batches) * scale));
        extra.push_back(rep.micro_batches - kept);
        rep.micro_batches = kept;
      }
    }
  }
  const CostModel& cost = subset ? *subset : base;
  Result<Plan> plan = assemble(ctx_, *plan_of, data_parallel, /*whole_batch=*/plan_of != &reduced);
  if (!plan.is_ok()) {
    e.status = plan.status();
    return e;
  }
  SimOptions options;
  options.source = "candidate";
  options.optimizer_step = optimizer_step_model(ctx_.options());
  Result<SimResult> result = sim.run(options, plan.value(), cost);
  if (!result.is_ok()) {
    e.status = result.status();
    return e;
  }
  const SimResult& r = result.value();
  e.iteration_time = r.iteration_time.value();
  std::vector<std::vector<GroupLoad>> loads;
  if (!extra.empty()) {
    // The replica whose left-out micro-batches take longest decides the extrapolation.
    loads = group_loads(ctx_, *plan_of, subset ? subset.get() : nullptr);
    double longest = 0;
    for (size_t ri = 0; ri < loads.size(); ++ri) {
      double period = 0;
      for (const GroupLoad& g : loads[ri]) period = std::max(period, g.total());
      longest = std::max(longest, static_cast<double>(extra[ri]) * period);
    }
    e.iteration_time += longest;
  }
  e.bubble_fraction = r.bubble_fraction;
  size_t k = 0;
  for (size_t ri = 0; ri < plan.value().replicas.size(); ++ri) {
    const Replica& rep = plan.value().replicas[ri];
    std::vector<GroupStat> groups;
    for (size_t gi = 0; gi < rep.groups.size(); ++gi) {
      const DeviceStats& d = r.devices[k];
      double busy = d.busy.value();
      if (!extra.empty()) busy += static_cast<double>(extra[ri]) * loads[ri][gi].total();
      groups.push_back(GroupStat{busy, d.exposed_communication.value(), d.peak_memory.value(),
                                 d.capacity.value()});
      k += rep.groups[gi].devices.size();
    }
    e.groups.push_back(std::move(groups));
  }
  e.price_per_second = candidate_price_per_second(ctx_, c);
  e.goodput = candidate_preemption(ctx_, c, e.iteration_time).goodput;
  e.score = ctx_.options().objective == TuneObjective::kCost
                ? e.iteration_time * e.price_per_second / e.goodput
                : e.iteration_time;
  if (!r.fits_memory) {
    e.status = infeasible("memory: the simulated peak exceeds a device's capacity");
    e.over_memory = true;
    return e;
  }
  if (ctx_.usable_memory_fraction() < 1) {
    for (const DeviceStats& d : r.devices) {
      if (d.peak_memory > d.capacity * ctx_.usable_memory_fraction()) {
        e.status = infeasible(fmt::format(
            "memory: the simulated peak of device {} leaves less than the {:.0f} % headroom",
            d.device, 100 * ctx_.options().constraints.memory_headroom));
        e.over_memory = true;
        return e;
      }
    }
  }
  const TuneOptions& o = ctx_.options();
  if (o.deadline > Seconds(0)) {
    const double tokens_per_iteration =
        static_cast<double>(ctx_.global_batch()) * static_cast<double>(ctx_.seq_len());
    const double expected = o.train_tokens / tokens_per_iteration * e.iteration_time / e.goodput;
    if (expected > o.deadline.value()) {
      e.status = infeasible(fmt::format(
          "deadline: {:.4g} tokens take {:.1f} h expected, past the deadline of {:.1f} h",
          o.train_tokens, expected / 3600.0, o.deadline.value() / 3600.0));
      e.refusal = Evaluation::Refusal::kDeadline;
      e.refused_at = expected;
      return e;
    }
  }
  e.ok = true;
  return e;
}

std::vector<std::shared_ptr<const Evaluation>> Evaluator::evaluate(
    const std::vector<Candidate>& batch, Fidelity fidelity, Deadline deadline) {
  std::vector<std::shared_ptr<const Evaluation>> out(batch.size());
  std::vector<std::string> keys(batch.size());
  std::vector<size_t> todo;                  // first occurrence of each uncached key
  std::map<std::string, size_t> first_todo;  // key -> index into todo
  for (size_t i = 0; i < batch.size(); ++i) {
    keys[i] = (fidelity == Fidelity::kScreen ? "s/" : "f/") + candidate_key(batch[i]);
    auto it = cache_.find(keys[i]);
    if (it != cache_.end()) {
      out[i] = it->second;
    } else if (std::string why = constraint_violation(ctx_, batch[i]); !why.empty()) {
      // Outside the user's constraints: refused without simulating or counting it.
      auto e = std::make_shared<Evaluation>();
      e->status = infeasible("constraints: " + why);
      cache_[keys[i]] = e;
      out[i] = e;
    } else if (std::optional<Evaluation> refused = budget_refusal(batch[i])) {
      // Over the budget: refused on its price alone, without simulating or counting it.
      auto e = std::make_shared<const Evaluation>(std::move(*refused));
      note_refusal(e);
      cache_[keys[i]] = e;
      out[i] = e;
    } else if (first_todo.emplace(keys[i], todo.size()).second) {
      todo.push_back(i);
    }
  }
  // The evaluation budget takes a prefix of the batch, so what is simulated does not depend on
  // the threads' timing.
  size_t allowed = todo.size();
  const int64_t most = ctx_.options().max_evaluations;
  if (most > 0) allowed = std::min<size_t>(allowed, std::max<int64_t>(0, most - simulated_));
  std::vector<std::shared_ptr<const Evaluation>> fresh(todo.size());
  std::vector<char> reached(todo.size(), 0);  // not vector<bool>: written by several threads
  std::vector<double> took(todo.size(), 0.0);
  // A simulation starts only when one of its fidelity's mean duration ends before the deadline.
  const double expected = mean_seconds(fidelity);
  for_each(allowed, [&](size_t i, Simulator& sim) {
    if (deadline == Deadline::kHonour && past_deadline(expected)) return;
    const Seconds begin = ctx_.now();
    fresh[i] = std::make_shared<const Evaluation>(run(batch[todo[i]], fidelity, sim));
    took[i] = (ctx_.now() - begin).value();
    reached[i] = 1;
  });
  for (size_t i = 0; i < todo.size(); ++i) {
    if (reached[i]) {
      ++simulated_;
      seconds_[static_cast<size_t>(fidelity)] += took[i];
      ++runs_[static_cast<size_t>(fidelity)];
      if (fidelity == Fidelity::kFull) longest_full_ = std::max(longest_full_, took[i]);
      cache_[keys[todo[i]]] = fresh[i];
      const Evaluation& e = *fresh[i];
      over_memory_ += e.over_memory ? 1 : 0;
      if (e.ok && (best_iteration_time_ == 0 || e.iteration_time < best_iteration_time_)) {
        best_iteration_time_ = e.iteration_time;
      }
      note_refusal(fresh[i]);
      if (e.ok && fidelity == Fidelity::kScreen) {
        // (The candidate is copied only where it is kept: on 65,536 devices it holds tens of
        // thousands of replicas.)
        std::pair<double, std::string> rank{e.score, keys[todo[i]]};
        auto pos = std::lower_bound(screened_.begin(), screened_.end(), rank,
                                    [](const auto& x, const auto& y) { return x.first < y; });
        if (pos - screened_.begin() < static_cast<std::ptrdiff_t>(kScreenedKept)) {
          screened_.insert(pos, std::make_pair(std::move(rank), batch[todo[i]]));
          if (screened_.size() > kScreenedKept) screened_.pop_back();
        }
      }
    } else {
      auto e = std::make_shared<Evaluation>();
      unreached_why_ = i < allowed ? "the time budget ran out" : "the evaluation budget ran out";
      e->status = Status(StatusCode::kInfeasible, "not evaluated: " + unreached_why_);
      fresh[i] = e;
      ++unreached_;
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!out[i]) out[i] = fresh[first_todo[keys[i]]];
  }
  return out;
}

Seconds Evaluator::reserve() const {
  // Only once there is an answer to finish, and at most half the budget: the search always
  // gets the other half.
  if (best_iteration_time_ <= 0) return Seconds(0);
  return Seconds(std::min(longest_full_ + reserved_simulations_ * mean_seconds(Fidelity::kFull),
                          0.5 * std::max(0.0, (deadline_ - start_).value())));
}

bool Evaluator::spent_time_share(double share) const {
  const double usable = (deadline_ - start_).value() - reserve().value();
  return (ctx_.now() - start_).value() >= share * usable;
}

Seconds Evaluator::time_left() const {
  return Seconds(std::max(0.0, (deadline_ - ctx_.now()).value() - reserve().value()));
}

bool Evaluator::past_deadline(double upcoming) const {
  return ctx_.now().value() + upcoming + reserve().value() >= deadline_.value();
}

double Evaluator::mean_seconds(Fidelity fidelity) const {
  const size_t f = static_cast<size_t>(fidelity);
  return runs_[f] > 0 ? seconds_[f] / static_cast<double>(runs_[f]) : 0.0;
}

std::string Evaluator::constraint_refusal() const {
  return nearest_refused_ ? nearest_refused_->status.message() : "";
}

std::vector<Candidate> Evaluator::best_screened(size_t k) const {
  std::vector<Candidate> out;
  for (size_t i = 0; i < screened_.size() && i < k; ++i) out.push_back(screened_[i].second);
  return out;
}

Result<std::pair<Plan, SimResult>> Evaluator::replay(const Candidate& c, Simulator& sim) const {
  MOTLEY_ASSIGN_OR_RETURN(Plan plan, assemble(ctx_, c));
  SimOptions options;
  options.source = "plan";
  options.optimizer_step = optimizer_step_model(ctx_.options());
  MOTLEY_ASSIGN_OR_RETURN(
      SimResult result,
      sim.run(options, plan,
              ctx_.cost(c.micro_batch_size, c.sequence_parallel, c.context_parallel)));
  return std::make_pair(std::move(plan), std::move(result));
}

void Evaluator::for_each(size_t n, const std::function<void(size_t, Simulator&)>& work) {
  std::atomic<size_t> next{0};
  auto worker = [&](Simulator& sim) {
    for (size_t i = next++; i < n; i = next++) work(i, sim);
  };
  const size_t threads = std::min(simulators_.size(), n);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker, std::ref(*simulators_[t]));
  worker(*simulators_[0]);
  for (std::thread& t : pool) t.join();
}

}  // namespace motley::tune_internal
