#include "strategies.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "motley/model/layer_cost.h"

namespace motley::tune_internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// A group whose simulated peak memory is within this fraction of its capacity is short of it
// (the moves that relieve memory are tried there).
constexpr double kNearlyFull = 0.03;

// Whether any stage of `c` recomputes: its partition was short of memory.
bool needs_recompute(const Candidate& c) {
  for (const PipelineSpec& r : c.replicas) {
    for (RecomputePolicy p : r.recompute) {
      if (p != RecomputePolicy::kNone) return true;
    }
  }
  return false;
}

// How a baseline's row names its ZeRO stage.
std::string zero_stage_note(int zero_stage) {
  switch (zero_stage) {
    case 0:
      return "";
    case 1:
      return ", distributed optimizer";
    default:
      return ", ZeRO-" + std::to_string(zero_stage);
  }
}

double score_of(const std::shared_ptr<const Evaluation>& e) { return e && e->ok ? e->score : kInf; }

// How to build a ranked candidate again, and what screening reads of it. Rankings keep this
// beside the estimate rather than the candidate, which holds every replica's device groups: on
// 16,384 devices thousands of candidates of thousands of replicas each would be built, copied
// and freed, when only the few dozen screened are needed. build_candidate is deterministic, so
// the candidate built again is the one that was estimated.
struct Recipe {
  size_t layout = 0;  // into the ranking's own layouts
  const ScheduleSpec* spec = nullptr;
  int64_t b = 0;
  BuildOptions build;
  int zero_stage = 0;
  int expert_parallel = 1;
  int context_parallel = 1;
  bool vocab_parallel = false;
  std::string schedule;
};

Recipe recipe_of(size_t layout, const ScheduleSpec& spec, int64_t b, const BuildOptions& build,
                 const Candidate& c) {
  return Recipe{layout,
                &spec,
                b,
                build,
                c.zero_stage,
                c.expert_parallel,
                c.context_parallel,
                c.vocab_parallel,
                c.schedule.name()};
}

Candidate rebuild(const Context& ctx, const std::vector<Layout>& layouts, const Recipe& r) {
  Result<Candidate> c = build_candidate(ctx, layouts[r.layout], *r.spec, r.b, r.build);
  MOTLEY_CHECK(c.is_ok(), "a ranked candidate no longer builds");
  return std::move(c.value());
}

bool memory_failure(const Evaluation& e) {
  return !e.ok && e.status.code() == StatusCode::kInfeasible &&
         e.status.message().rfind("memory", 0) == 0;
}

// The pipeline depths Megatron-LM's rule tries at TP t on n devices: the fixed one, else those
// that divide the devices left by the fixed replica count (or by t alone).
std::vector<int> megatron_depths(int n, int t, const PlanConstraints& fixed) {
  if (fixed.pipeline_parallel > 0) return {fixed.pipeline_parallel};
  const int per_replica = n / t / std::max(1, fixed.data_parallel);
  return per_replica >= 1 ? divisors(per_replica) : std::vector<int>{};
}

// The TP degrees Megatron-LM's rule tries: powers of two up to 8 and the smallest node's
// usable devices, or the fixed one.
std::vector<int> megatron_tp_degrees(const Context& ctx) {
  std::map<int, int> per_node;
  for (const Device& d : ctx.devices()) ++per_node[d.node];
  int smallest_node = ctx.num_devices();
  for (const auto& [node, count] : per_node) smallest_node = std::min(smallest_node, count);
  const int fixed = ctx.options().constraints.tensor_parallel;
  std::vector<int> tps;
  for (int t = 1; t <= std::min(8, smallest_node); t *= 2) {
    if (fixed == 0 || t == fixed) tps.push_back(t);
  }
  return tps;
}

// The layers of coarse stage `s` of `rep` that per-layer recompute may take (not the embedding
// or the head), ranked by the activation bytes recomputing one in full saves per micro-batch
// per second of recompute it costs on the stage's group, best first (ties by layer).
std::vector<int> ranked_recompute_layers(const Context& ctx, const Candidate& c,
                                         const PipelineSpec& rep,
                                         const std::vector<int>& stage_group, int s) {
  const CostModel& cost = ctx.cost(c.micro_batch_size, c.sequence_parallel, c.context_parallel);
  const DeviceGroup group{rep.groups[stage_group[s]]};
  MemoryOptions kept, full;
  full.recompute = RecomputePolicy::kFull;
  std::vector<std::pair<double, int>> by_rate;
  const int last = ctx.num_layers() - 1;
  for (int l = rep.bounds[s]; l < rep.bounds[s + 1]; ++l) {
    const LayerKind kind = ctx.model().layers[l].kind;
    if (kind == LayerKind::kEmbedding || kind == LayerKind::kHead ||
        (l == 0 && embedding_vocab(ctx.model()) > 0) ||
        (l == last && head_vocab(ctx.model()) > 0)) {
      continue;
    }
    const LayerRange one{l, l + 1};
    const double saved = (cost.stage_memory(one, group, kept).activations_per_micro_batch -
                          cost.stage_memory(one, group, full).activations_per_micro_batch)
                             .value();
    if (saved <= 0) continue;
    const double spent = cost.compute(one, group, RecomputePolicy::kFull).recompute.value();
    by_rate.emplace_back(spent > 0 ? -saved / spent : -kInf, l);
  }
  std::sort(by_rate.begin(), by_rate.end());
  std::vector<int> out;
  for (const auto& [rate, l] : by_rate) out.push_back(l);
  return out;
}

// `c` with coarse stage `s` of the replicas `cls` (structured like `rep`) recomputing exactly
// `layers` on their own, nothing else.
Candidate with_recompute_layers(const Candidate& c, const std::vector<int>& cls,
                                const PipelineSpec& rep, int s, std::vector<int> layers) {
  Candidate x = c;
  for (int r : cls) x.replicas[r].recompute[s] = RecomputePolicy::kNone;
  std::vector<int>& list = x.recompute_layers;
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](int l) { return l >= rep.bounds[s] && l < rep.bounds[s + 1]; }),
             list.end());
  list.insert(list.end(), layers.begin(), layers.end());
  std::sort(list.begin(), list.end());
  list.erase(std::unique(list.begin(), list.end()), list.end());
  return x;
}

RecomputePolicy more_recompute(RecomputePolicy p) {
  return p == RecomputePolicy::kNone ? RecomputePolicy::kSelective : RecomputePolicy::kFull;
}

Layout layout_of(const Candidate& c) {
  Layout l;
  for (const PipelineSpec& r : c.replicas) l.replicas.push_back(r.groups);
  return l;
}

// The named schedules and adaptive variants motley considers.
std::vector<ScheduleSpec> all_search_specs() {
  return {
      ScheduleSpec::named(ScheduleKind::k1f1b),
      ScheduleSpec::named(ScheduleKind::kInterleaved, 2),
      ScheduleSpec::named(ScheduleKind::kZbH1),
      ScheduleSpec::named(ScheduleKind::kZbH2),
      ScheduleSpec::named(ScheduleKind::kZbV),
      ScheduleSpec::named(ScheduleKind::kDualPipeV),
      ScheduleSpec::adaptive_on(StageShape::kLinear, 1, AdaptivePriority::kBackwardFirst,
                                WeightFill::kIfItFits),
      ScheduleSpec::adaptive_on(StageShape::kLinear, 1, AdaptivePriority::kForwardFirst,
                                WeightFill::kIfItFits),
      ScheduleSpec::adaptive_on(StageShape::kV, 2, AdaptivePriority::kBackwardFirst,
                                WeightFill::kIfItFits),
      // V and zigzags of more chunks under OctoPipe's alternating rule: finer stages shorten
      // every group's warm-up, and a zigzag keeps the groups' memory even (docs/planner.md).
      ScheduleSpec::adaptive_on(StageShape::kV, 2, AdaptivePriority::kAlternate,
                                WeightFill::kAlways),
      ScheduleSpec::adaptive_on(StageShape::kV, 3, AdaptivePriority::kAlternate,
                                WeightFill::kAlways),
      ScheduleSpec::adaptive_on(StageShape::kV, 4, AdaptivePriority::kAlternate,
                                WeightFill::kAlways),
      ScheduleSpec::adaptive_on(StageShape::kV, 5, AdaptivePriority::kAlternate,
                                WeightFill::kAlways),
  };
}

// Those the constraints allow; GPipe and deeper interleaving where the constraints name them.
std::vector<ScheduleSpec> search_specs(const Context& ctx) {
  std::vector<ScheduleSpec> out;
  for (const ScheduleSpec& s : all_search_specs()) {
    if (schedule_allowed(ctx, s)) out.push_back(s);
  }
  const std::vector<std::string>& named = ctx.options().constraints.schedules;
  auto names = [&](const char* family) {
    return std::find(named.begin(), named.end(), family) != named.end();
  };
  if (names("gpipe")) out.push_back(ScheduleSpec::named(ScheduleKind::kGpipe));
  if (names("interleaved")) out.push_back(ScheduleSpec::named(ScheduleKind::kInterleaved, 4));
  return out;
}

// Whether a schedule can run m micro-batches on p groups (the generators' requirements).
bool schedule_accepts(const ScheduleSpec& s, int p, int64_t m) {
  if (s.adaptive) return true;
  if (s.kind == ScheduleKind::kInterleaved) return m % p == 0;
  if (s.kind == ScheduleKind::kDualPipeV) return m >= 2 * static_cast<int64_t>(p);
  return true;
}

bool accepts_all(const ScheduleSpec& s, const Candidate& c) {
  for (const PipelineSpec& r : c.replicas) {
    if (!schedule_accepts(s, static_cast<int>(r.groups.size()), r.micro_batches)) return false;
  }
  return true;
}

// A candidate to build and estimate: one of the ranking's layouts, a schedule, a micro-batch
// size and the build options.
struct Job {
  size_t layout = 0;
  const ScheduleSpec* spec = nullptr;
  int64_t b = 0;
  BuildOptions options;
};

// Runs fn(i, scratch) for i in [0, count) on the evaluator's threads, each thread taking every
// n-th index into one candidate of its own, whose buffers the next index reuses: building and
// freeing tens of thousands of replicas per candidate took most of a sweep.
template <typename Fn>
void for_each_with_scratch(const Context& ctx, Evaluator& evaluator, size_t count, Fn fn) {
  const size_t n = std::min(count, static_cast<size_t>(std::max(ctx.options().threads, 1)));
  evaluator.for_each(n, [&](size_t first, Simulator&) {
    BuildScratch scratch;
    for (size_t i = first; i < count; i += n) fn(i, scratch);
  });
}

// Each job built and estimated as an independent task on the evaluator's threads; the
// estimates and recipes of those that build, and whose schedule accepts them, in job order,
// so that the ranking does not depend on the thread count. With `honour_budget` a job that
// starts past the time budget, or at or past `until` on the context's clock, gives none. (On
// 16,384 devices a candidate holds 8,192 replicas: the thousands a search ranks cost seconds
// on one thread.)
std::vector<std::pair<double, Recipe>> estimate_jobs(
    const Context& ctx, Evaluator& evaluator, const std::vector<Layout>& layouts,
    const std::vector<Job>& jobs, bool honour_budget,
    Seconds until = Seconds(std::numeric_limits<double>::infinity())) {
  std::vector<std::optional<std::pair<double, Recipe>>> estimated(jobs.size());
  for_each_with_scratch(ctx, evaluator, jobs.size(), [&](size_t i, BuildScratch& scratch) {
    if (honour_budget && (evaluator.out_of_time() || ctx.now() >= until)) return;
    const Job& j = jobs[i];
    const Candidate& c = scratch.candidate;
    if (!build_candidate_into(ctx, layouts[j.layout], *j.spec, j.b, j.options, scratch).is_ok() ||
        !accepts_all(*j.spec, c)) {
      return;
    }
    estimated[i].emplace(objective_estimate(ctx, c, &scratch.facts),
                         recipe_of(j.layout, *j.spec, j.b, j.options, c));
  });
  std::vector<std::pair<double, Recipe>> out;
  for (auto& e : estimated) {
    if (e) out.push_back(std::move(*e));
  }
  return out;
}

// Replicas with the same groups' make, bounds and recompute move together.
std::vector<std::vector<int>> replica_classes(const Context& ctx, const Candidate& c) {
  std::vector<std::vector<int>> classes;
  std::vector<std::string> keys;
  for (size_t r = 0; r < c.replicas.size(); ++r) {
    const PipelineSpec& rep = c.replicas[r];
    std::string key;
    for (const auto& g : rep.groups) {
      key += std::to_string(ctx.type_of(g[0])) + "x" + std::to_string(g.size()) + ",";
    }
    key += "|";
    for (int b : rep.bounds) key += std::to_string(b) + ",";
    for (RecomputePolicy p : rep.recompute) key += std::to_string(static_cast<int>(p));
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      keys.push_back(key);
      classes.push_back({static_cast<int>(r)});
    } else {
      classes[it - keys.begin()].push_back(static_cast<int>(r));
    }
  }
  return classes;
}

}  // namespace

Searcher::Searcher(const Context& ctx, Evaluator& evaluator, ProgressFn progress)
    : ctx_(ctx),
      evaluator_(evaluator),
      progress_(std::move(progress)),
      rng_state_(ctx.options().seed) {}

std::vector<std::shared_ptr<const Evaluation>> Searcher::evaluate(
    const std::vector<Candidate>& batch) {
  auto out = evaluator_.evaluate(batch, fidelity_);
  if (progress_) progress_(phase_);
  return out;
}

std::string Searcher::no_plan() const {
  const std::string refusal = evaluator_.constraint_refusal();
  if (refusal.empty()) {
    // Every plan keeps at least one copy of every layer's weights and optimizer state
    // somewhere (ZeRO-3 shards it over all devices at most), and one of its gradients when
    // the backward pass ends and the step begins: where that alone is more than all the usable
    // memory, say so, so that the user knows no option of the search helps.
    double state = 0, memory = 0;
    for (const Bytes& b : ctx_.layer_state()) state += b.value();
    state += ctx_.cost(ctx_.baseline_micro_batch_size())
                 .stage_memory(LayerRange{0, ctx_.num_layers()}, DeviceGroup{{0}}, MemoryOptions{})
                 .gradients.value();
    for (int d = 0; d < ctx_.num_cluster_devices(); ++d) {
      if (ctx_.type_of(d) >= 0) memory += ctx_.capacity(d).value();
    }
    if (state > memory) {
      const int n = ctx_.num_devices();
      return fmt::format(
          "no plan fits the cluster's memory: one copy of the model's weights, gradients and "
          "optimizer state takes {:.1f} GiB, more than {} can hold ({:.1f} GiB)",
          state / kGiB,
          n == 1 ? std::string("the one device it may use")
                 : fmt::format("the {} devices it may use together", n),
          memory / kGiB);
    }
    // Stopped early, the search cannot say that nothing fits: it may not have tried the plans
    // that would (a forced dimension the baselines' plans lack, a budget of a few plans).
    if (evaluator_.out_of_time()) {
      return fmt::format(
          "no plan that fits memory and meets the options was found among the {} plans "
          "evaluated",
          evaluator_.simulated());
    }
    // Memory is the reason only where plans were simulated and came out over it; otherwise
    // nothing the options allow could be built (a schedule family that needs more
    // micro-batches, ZeRO-2 or -3 that needs the batch split evenly, degrees that do not
    // divide the layers).
    if (evaluator_.over_memory() == 0 && ctx_.memory_refusals() == 0) {
      return "no layout the search forms on the devices it may use runs this batch with the "
             "schedules, ZeRO stage and degrees the options allow (--devices or "
             "--exclude-devices can narrow the devices)";
    }
    return "no plan fits the cluster's memory";
  }
  return "no plan that fits memory meets the budget and deadline; the nearest: " + refusal;
}

std::vector<int> Searcher::context_degrees(int replicas) const {
  std::vector<int> out;
  for (int cp : ctx_.context_degrees()) {
    if (replicas >= cp && replicas % cp == 0) out.push_back(cp);
  }
  return out;
}

std::vector<int> Searcher::expert_degrees(int replicas) const {
  int64_t experts = 0;  // the gcd of every MoE layer's expert count
  for (const Layer& l : ctx_.model().layers) {
    if (layer_routed_expert_params(l) > 0) experts = std::gcd(experts, l.moe->num_experts);
  }
  std::vector<int> out;
  if (experts == 0 || replicas < 2) return out;
  for (int e = 2; e <= replicas; ++e) {
    if (ctx_.options().expert_parallel > 0 && e != ctx_.options().expert_parallel) continue;
    if (replicas % e == 0 && experts % e == 0) out.push_back(e);
  }
  return out;
}

std::string Searcher::describe(const Candidate& c) const {
  std::string text = describe_layout(ctx_, c.replicas) + ", " + c.schedule.name() +
                     ", micro-batch size " + std::to_string(c.micro_batch_size);
  int64_t lo = c.replicas[0].micro_batches, hi = lo;
  for (const PipelineSpec& r : c.replicas) {
    lo = std::min(lo, r.micro_batches);
    hi = std::max(hi, r.micro_batches);
  }
  text += lo == hi
              ? ", " + std::to_string(lo) + " micro-batches per replica"
              : ", " + std::to_string(lo) + "-" + std::to_string(hi) + " micro-batches per replica";
  return text;
}

Found Searcher::best_of(const std::vector<Candidate>& cands,
                        const std::vector<std::shared_ptr<const Evaluation>>& evals,
                        const std::string& detail_prefix) const {
  Found f;
  double best = kInf;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (score_of(evals[i]) < best) {
      best = score_of(evals[i]);
      f.ok = true;
      f.candidate = cands[i];
      f.eval = evals[i];
    }
  }
  if (f.ok) {
    f.detail = detail_prefix + describe(f.candidate);
  } else {
    f.why_not = "no candidate fits memory";
    for (const auto& e : evals) {
      if (e && !e->ok && !e->status.is_ok()) {
        f.why_not = e->status.message();
        break;
      }
    }
  }
  return f;
}

std::vector<Candidate> Searcher::finalists(
    const std::vector<Candidate>& cands,
    const std::vector<std::shared_ptr<const Evaluation>>& screened, const Found& improved) {
  std::vector<size_t> order(cands.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return score_of(screened[a]) < score_of(screened[b]);
  });
  std::vector<Candidate> out;
  if (improved.ok) out.push_back(improved.candidate);
  for (size_t i : order) {
    if (out.size() >= 4 || !screened[i]->ok) break;
    out.push_back(cands[i]);
  }
  return out;
}

Found Searcher::best_of(const std::vector<Candidate>& cands, const std::string& detail_prefix) {
  return best_of(cands, evaluate(cands), detail_prefix);
}

Found Searcher::megatron(const ScheduleSpec& spec) {
  const Seconds start = ctx_.now();
  const int64_t simulated = evaluator_.simulated();
  const int64_t b = ctx_.baseline_micro_batch_size();
  const int64_t total = ctx_.global_batch() / b;
  const int n = ctx_.num_devices();
  const PlanConstraints& fixed = ctx_.options().constraints;
  const std::vector<int> tps = megatron_tp_degrees(ctx_);
  const int most_stages = max_stages(LayerSplit::kMegatron, ctx_.model());

  Found found;
  if (tps.empty() || !schedule_allowed(ctx_, spec)) {
    found.why_not = tps.empty() ? fmt::format("no node holds {} devices for TP {}",
                                              fixed.tensor_parallel, fixed.tensor_parallel)
                                : fmt::format("the constraints leave out {}", spec.name());
    return found;
  }
  bool shaped = false;  // some TP x PP x DP met the shape's requirements
  auto attempt = [&](int t, RecomputePolicy policy) {
    if (n % t != 0 && (fixed.pipeline_parallel == 0 || fixed.data_parallel == 0)) return false;
    for (int p : megatron_depths(n, t, fixed)) {
      if (p * spec.chunks > most_stages) continue;
      const int d = fixed.data_parallel > 0 ? fixed.data_parallel : n / (t * p);
      if (d < 1 || static_cast<int64_t>(t) * p * d > n) continue;
      if (total % d != 0) continue;
      const int64_t m = total / d;
      if (!schedule_accepts(spec, p, m)) continue;
      Result<Layout> layout = cluster_order_layout(ctx_, t, p, d, /*megatron_rank_order=*/true);
      if (!layout.is_ok()) continue;
      shaped = true;
      BuildOptions options;
      options.split = LayerSplit::kMegatron;
      options.uniform_recompute = policy;
      options.proportional_micro_batches = false;
      Result<Candidate> c = build_candidate(ctx_, layout.value(), spec, b, options);
      if (!c.is_ok()) continue;
      auto e = evaluate({c.value()})[0];
      if (e->ok) {
        found.ok = true;
        found.candidate = c.value();
        found.eval = e;
        found.detail = "TP " + std::to_string(t) + " x PP " + std::to_string(p) + " x DP " +
                       std::to_string(d) + ", " + spec.name() + ", Megatron-LM's layer split, " +
                       device_order_name(true) + ", recompute " + recompute_policy_name(policy) +
                       ", " + std::to_string(m) + " micro-batches of " + std::to_string(b) +
                       " per replica";
        return true;
      }
    }
    return false;
  };
  bool done = false;
  for (int t : tps) {
    if ((done = attempt(t, RecomputePolicy::kNone))) break;
  }
  for (RecomputePolicy policy : {RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    if (!done) done = attempt(tps.back(), policy);
  }
  for (RecomputePolicy policy : {RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    for (int t : tps) {
      if (!done) done = attempt(t, policy);
    }
  }
  if (!done && shaped) {
    found.why_not =
        fmt::format("no TP x PP x DP of Megatron-LM's rule fits memory with {}", spec.name());
  } else if (!done) {
    found.why_not = fmt::format(
        "no TP x PP x DP in Megatron-LM's rank order meets {}'s requirements (PP x chunks <= "
        "decoder layers, DP dividing the micro-batches{})",
        spec.name(),
        spec.kind == ScheduleKind::kInterleaved ? ", micro-batches per replica a multiple of PP"
                                                : "");
  }
  found.simulated = evaluator_.simulated() - simulated;
  found.seconds = (ctx_.now() - start).value();
  return found;
}

Found Searcher::megatron_tuned(const std::vector<Found>& defaults) {
  const Seconds start = ctx_.now();
  const int64_t simulated = evaluator_.simulated();
  const PlanConstraints& fixed = ctx_.options().constraints;
  const int n = ctx_.num_devices();
  const int most_stages = max_stages(LayerSplit::kMegatron, ctx_.model());
  std::vector<ScheduleSpec> specs;
  for (const ScheduleSpec& s : {ScheduleSpec::named(ScheduleKind::k1f1b),
                                ScheduleSpec::named(ScheduleKind::kInterleaved, 2),
                                ScheduleSpec::named(ScheduleKind::kInterleaved, 4)}) {
    if (schedule_allowed(ctx_, s)) specs.push_back(s);
  }
  std::vector<Layout> swept;
  // The sweep's candidates, listed here and estimated on the threads (estimate_jobs). The
  // sweep is a baseline's whole definition: it runs past the time budget.
  std::vector<Job> sweep;
  for (int t : megatron_tp_degrees(ctx_)) {
    for (int p : megatron_depths(n, t, fixed)) {
      const int d = fixed.data_parallel > 0 ? fixed.data_parallel : n / (t * p);
      if (d < 1 || static_cast<int64_t>(t) * p * d > n) continue;
      Result<Layout> layout = cluster_order_layout(ctx_, t, p, d, /*megatron_rank_order=*/true);
      if (!layout.is_ok()) continue;
      swept.push_back(std::move(layout.value()));
      const size_t index = swept.size() - 1;
      for (int64_t b : ctx_.micro_batch_sizes()) {
        const int64_t total = ctx_.global_batch() / b;
        if (total % d != 0) continue;
        for (const ScheduleSpec& spec : specs) {
          if (p * spec.chunks > most_stages || !schedule_accepts(spec, p, total / d)) continue;
          if (spec.chunks > 1 && p == 1) continue;
          for (RecomputePolicy policy :
               {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
            for (int variant = 0; variant < 4; ++variant) {
              // Megatron-LM's distributed optimizer is ZeRO-1; a stage the options force holds.
              const bool zero1 = (variant & 1) != 0, sequence_parallel = (variant & 2) != 0;
              if (zero1 && (d == 1 || ctx_.options().zero_stage)) continue;
              if (sequence_parallel && (t == 1 || !ctx_.searches_sequence_parallel())) continue;
              BuildOptions options;
              options.split = LayerSplit::kMegatron;
              options.uniform_recompute = policy;
              options.proportional_micro_batches = false;
              options.zero_stage = zero1 ? 1 : 0;
              options.sequence_parallel = sequence_parallel;
              sweep.push_back(Job{index, &spec, b, options});
            }
          }
        }
      }
    }
  }
  // (Every swept layout's replicas run total / d micro-batches, which schedule_accepts
  // checked above: estimate_jobs' schedule check refuses none of them.)
  std::vector<std::pair<double, Recipe>> ranked =
      estimate_jobs(ctx_, evaluator_, swept, sweep, /*honour_budget=*/false);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  // Screened in the estimate's order until eight fit (those short of memory fail fast in
  // assembly); the best four of them simulated whole.
  fidelity_ = Fidelity::kScreen;
  std::vector<Candidate> cands;
  std::vector<std::shared_ptr<const Evaluation>> evals;
  const size_t step = static_cast<size_t>(std::max(1, ctx_.options().threads)) * 4;
  size_t fitting = 0;
  for (size_t i = 0; i < ranked.size() && fitting < 8 && !evaluator_.out_of_time(); i += step) {
    std::vector<Candidate> batch;
    for (size_t j = i; j < std::min(ranked.size(), i + step); ++j) {
      batch.push_back(rebuild(ctx_, swept, ranked[j].second));
    }
    auto batch_evals = evaluate(batch);
    for (size_t j = 0; j < batch.size(); ++j) {
      fitting += batch_evals[j]->ok ? 1 : 0;
      cands.push_back(std::move(batch[j]));
      evals.push_back(std::move(batch_evals[j]));
    }
  }
  fidelity_ = Fidelity::kFull;
  std::vector<Candidate> last = finalists(cands, evals, Found{});
  for (const Found& f : defaults) {
    if (f.ok) last.push_back(f.candidate);
  }
  Found found = best_of(last, "");
  if (found.ok) {
    const Candidate& c = found.candidate;
    const int t = static_cast<int>(c.replicas[0].groups[0].size());
    const int p = static_cast<int>(c.replicas[0].groups.size());
    const int d = static_cast<int>(c.replicas.size());
    found.detail = fmt::format(
        "TP {} x PP {} x DP {}, {}, Megatron-LM's layer split, {}, "
        "recompute {}{}, {} micro-batches of {} per replica (best of {} swept layouts)",
        t, p, d, c.schedule.name(), device_order_name(true),
        recompute_policy_name(c.replicas[0].recompute[0]), zero_stage_note(c.zero_stage),
        c.replicas[0].micro_batches, c.micro_batch_size, ranked.size());
  } else if (ranked.empty()) {
    found.why_not = "no TP x PP x DP meets Megatron-LM's requirements";
  } else if (found.why_not.empty() || cands.empty()) {
    found.why_not = "no swept Megatron-LM layout fits memory";
  }
  found.simulated = evaluator_.simulated() - simulated;
  found.seconds = (ctx_.now() - start).value();
  return found;
}

Found Searcher::metis() {
  const Seconds start = ctx_.now();
  const int64_t simulated = evaluator_.simulated();
  const int64_t b = ctx_.baseline_micro_batch_size();
  const ScheduleSpec spec = ScheduleSpec::named(ScheduleKind::k1f1b);
  std::vector<std::pair<double, Candidate>> ranked;
  for (const Layout& layout : mixed_layouts(ctx_)) {
    if (!layout_meets_constraints(ctx_, layout)) continue;
    size_t devices = 0;
    for (const auto& rep : layout.replicas) {
      for (const auto& g : rep) devices += g.size();
    }
    if (static_cast<int>(devices) != ctx_.num_devices()) continue;
    BuildOptions options;
    options.proportional_micro_batches = false;
    options.cache = &partitions_;
    Result<Candidate> c = build_candidate(ctx_, layout, spec, b, options);
    if (!c.is_ok()) continue;
    ranked.emplace_back(estimate(ctx_, c.value()), c.value());
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  // Metis trusts its cost model: the first plan in its order that runs is its choice.
  Found found;
  const size_t step = std::max(1, ctx_.options().threads);
  for (size_t i = 0; i < ranked.size() && !found.ok; i += step) {
    std::vector<Candidate> batch;
    for (size_t j = i; j < std::min(ranked.size(), i + step); ++j)
      batch.push_back(ranked[j].second);
    auto evals = evaluate(batch);
    for (size_t j = 0; j < batch.size(); ++j) {
      if (evals[j]->ok) {
        found.ok = true;
        found.candidate = batch[j];
        found.eval = evals[j];
        found.detail = describe(batch[j]) + ", layers balanced by its cost model";
        break;
      }
    }
    if (evaluator_.out_of_time()) break;
  }
  if (!found.ok) found.why_not = "no heterogeneity-aware 1F1B plan fits memory";
  found.simulated = evaluator_.simulated() - simulated;
  found.seconds = (ctx_.now() - start).value();
  return found;
}

Found Searcher::partition_only(const Found& base) {
  const Seconds start = ctx_.now();
  const int64_t simulated = evaluator_.simulated();
  Found found;
  if (!base.ok) {
    found.why_not = base.why_not;
    return found;
  }
  BuildOptions options;
  options.proportional_micro_batches = false;
  options.cache = &partitions_;
  std::vector<Candidate> cands{base.candidate};
  Result<Candidate> balanced =
      build_candidate(ctx_, layout_of(base.candidate), base.candidate.schedule,
                      base.candidate.micro_batch_size, options);
  if (balanced.is_ok()) cands.push_back(balanced.value());
  fidelity_ = Fidelity::kScreen;
  found = best_of(cands, evaluate(cands), "");
  found = improve(found, kMovePartition | kMoveRecompute, 1);
  fidelity_ = Fidelity::kFull;
  cands.push_back(found.candidate);
  found = best_of(cands, evaluate(cands), "");
  found.detail = "megatron-1f1b's placement and schedule with a balanced partition: " +
                 describe(found.candidate);
  found.simulated = evaluator_.simulated() - simulated;
  found.seconds = (ctx_.now() - start).value();
  return found;
}

Found Searcher::given(const Candidate& c, const std::string& detail_prefix) {
  const Seconds start = ctx_.now();
  const int64_t simulated = evaluator_.simulated();
  fidelity_ = Fidelity::kFull;
  std::vector<Candidate> cands = {c};
  std::vector<std::shared_ptr<const Evaluation>> evals = evaluate(cands);
  retry_with_more_recompute(cands, evals);
  Found found = best_of(cands, evals, detail_prefix);
  found.simulated = evaluator_.simulated() - simulated;
  found.seconds = (ctx_.now() - start).value();
  return found;
}

Found Searcher::placement_only() {
  const Seconds start = ctx_.now();
  const int64_t simulated = evaluator_.simulated();
  const int64_t b = ctx_.baseline_micro_batch_size();
  const ScheduleSpec spec = ScheduleSpec::named(ScheduleKind::k1f1b);
  std::vector<Layout> layouts = mixed_layouts(ctx_);
  for (Layout& l : separate_layouts(ctx_)) layouts.push_back(std::move(l));
  const int n = ctx_.num_devices();
  const int most_stages = max_stages(LayerSplit::kMegatron, ctx_.model());
  for (int t : {1, 2, 4, 8}) {
    if (n % t != 0) continue;
    for (int p : divisors(n / t)) {
      if (p > most_stages) continue;
      Result<Layout> l = cluster_order_layout(ctx_, t, p, n / (t * p));
      if (l.is_ok()) layouts.push_back(std::move(l.value()));
    }
  }
  layouts = constrained_layouts(ctx_, std::move(layouts));
  std::vector<std::pair<double, Candidate>> ranked;
  for (const Layout& layout : layouts) {
    BuildOptions options;
    options.split = LayerSplit::kMegatron;
    Result<Candidate> c = build_candidate(ctx_, layout, spec, b, options);
    if (c.is_ok()) ranked.emplace_back(objective_estimate(ctx_, c.value()), c.value());
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<Candidate> cands;
  std::set<std::string> seen;
  for (const auto& [est, c] : ranked) {
    if (cands.size() >= 16) break;
    if (seen.insert(candidate_key(c)).second) cands.push_back(c);
  }
  fidelity_ = Fidelity::kScreen;
  auto evals = evaluate(cands);
  // Where memory is short, the same placement with uniform recompute.
  retry_with_more_recompute(cands, evals);
  Found found = best_of(cands, evals, "");
  if (found.ok) found = improve(found, kMoveMicroBatches, 0);
  fidelity_ = Fidelity::kFull;
  found = best_of(finalists(cands, evals, found), "");
  if (found.ok)
    found.detail =
        "Megatron-LM's layer split with 1F1B on the best placement: " + describe(found.candidate);
  found.simulated = evaluator_.simulated() - simulated;
  found.seconds = (ctx_.now() - start).value();
  return found;
}

void Searcher::retry_with_more_recompute(std::vector<Candidate>& cands,
                                         std::vector<std::shared_ptr<const Evaluation>>& evals) {
  for (int round = 0; round < 2; ++round) {
    std::vector<Candidate> retry;
    std::vector<size_t> where;
    for (size_t i = 0; i < cands.size(); ++i) {
      if (memory_failure(*evals[i]) &&
          cands[i].replicas[0].recompute[0] != RecomputePolicy::kFull) {
        Candidate c = cands[i];
        for (PipelineSpec& r : c.replicas) {
          for (RecomputePolicy& p : r.recompute) p = more_recompute(p);
        }
        retry.push_back(c);
        where.push_back(i);
      }
    }
    if (retry.empty()) break;
    auto again = evaluate(retry);
    for (size_t j = 0; j < retry.size(); ++j) {
      cands[where[j]] = retry[j];
      evals[where[j]] = again[j];
    }
  }
}

Found Searcher::schedule_only(const Found& base) {
  const Seconds start = ctx_.now();
  const int64_t simulated = evaluator_.simulated();
  Found found;
  if (!base.ok) {
    found.why_not = base.why_not;
    return found;
  }
  const Layout layout = layout_of(base.candidate);
  const int64_t b = base.candidate.micro_batch_size;
  std::vector<ScheduleSpec> specs = search_specs(ctx_);
  for (const ScheduleSpec& extra :
       {ScheduleSpec::named(ScheduleKind::kInterleaved, 4),
        ScheduleSpec::adaptive_on(StageShape::kLinear, 1, AdaptivePriority::kBackwardFirst,
                                  WeightFill::kAlways)}) {
    if (schedule_allowed(ctx_, extra) &&
        std::find(specs.begin(), specs.end(), extra) == specs.end()) {
      specs.push_back(extra);
    }
  }
  std::vector<Candidate> cands{base.candidate};
  fidelity_ = Fidelity::kScreen;
  for (const ScheduleSpec& spec : specs) {
    BuildOptions options;
    options.split = LayerSplit::kMegatron;
    options.uniform_recompute = base.candidate.replicas[0].recompute[0];
    options.proportional_micro_batches = false;
    Result<Candidate> c = build_candidate(ctx_, layout, spec, b, options);
    if (c.is_ok() && accepts_all(spec, c.value())) cands.push_back(c.value());
  }
  auto evals = evaluate(cands);
  retry_with_more_recompute(cands, evals);
  fidelity_ = Fidelity::kFull;
  found = best_of(finalists(cands, evals, Found{}), "");
  if (found.ok) {
    found.detail = "megatron-1f1b's partition and placement with the best schedule: " +
                   describe(found.candidate);
  }
  found.simulated = evaluator_.simulated() - simulated;
  found.seconds = (ctx_.now() - start).value();
  return found;
}

// The share of the busiest group's time that moving the head's rows must save to be tried.
constexpr double kRebalanceGain = 0.002;

std::vector<Candidate> Searcher::neighbors(const Candidate& c, const Evaluation& e,
                                           unsigned moves) const {
  std::vector<Candidate> out;
  std::set<std::string> seen{candidate_key(c)};
  auto add = [&](Candidate x) {
    if (seen.insert(candidate_key(x)).second) out.push_back(std::move(x));
  };
  const auto classes = replica_classes(ctx_, c);
  for (const std::vector<int>& cls : classes) {
    const PipelineSpec& rep = c.replicas[cls[0]];
    const int p = static_cast<int>(rep.groups.size());
    const int stages = static_cast<int>(rep.bounds.size()) - 1;
    const std::vector<int> stage_group = shape_stage_group(c.schedule, p);
    const std::vector<GroupStat>& stats = e.groups[cls[0]];
    auto apply = [&](auto&& change) {
      Candidate x = c;
      for (int r : cls) change(x.replicas[r]);
      add(std::move(x));
    };
    if (moves & kMovePartition) {
      std::vector<int> order(p);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return stats[a].busy > stats[b].busy; });
      auto size = [&](int s) { return rep.bounds[s + 1] - rep.bounds[s]; };
      // The busiest groups give a layer to a neighbouring stage; the idlest take one.
      for (int rank = 0; rank < std::min(p, 2); ++rank) {
        for (int s = 0; s < stages; ++s) {
          if (stage_group[s] != order[rank] || size(s) <= 1) continue;
          if (s > 0) apply([&](PipelineSpec& r) { ++r.bounds[s]; });
          if (s + 1 < stages) apply([&](PipelineSpec& r) { --r.bounds[s + 1]; });
        }
      }
      for (int s = 0; s < stages && p > 1; ++s) {
        if (stage_group[s] != order[p - 1]) continue;
        if (s > 0 && size(s - 1) > 1) apply([&](PipelineSpec& r) { --r.bounds[s]; });
        if (s + 1 < stages && size(s + 1) > 1) apply([&](PipelineSpec& r) { ++r.bounds[s + 1]; });
      }
      // The group holding the first stage finishes its backward passes last, so its gradient
      // all-reduce is the one left exposed at the end: lighten it.
      if (c.replicas.size() > 1 && stages > 1) {
        for (int s = 0; s < stages; ++s) {
          if (stage_group[s] != stage_group[0] || size(s) <= 1) continue;
          if (s + 1 < stages) apply([&](PipelineSpec& r) { --r.bounds[s + 1]; });
          if (s > 0) apply([&](PipelineSpec& r) { ++r.bounds[s]; });
        }
      }
    }
    if (moves & kMovePartition) {
      // A group left waiting on its input for long: the boundary into it crosses a slow link;
      // try the nearby boundaries that carry the fewest bytes.
      const CostModel& cost =
          ctx_.cost(c.micro_batch_size, c.sequence_parallel, c.context_parallel);
      const double mean_busy =
          std::accumulate(stats.begin(), stats.end(), 0.0,
                          [](double a, const GroupStat& g) { return a + g.busy; }) /
          static_cast<double>(p);
      for (int s = 1; s < stages; ++s) {
        if (stats[stage_group[s]].exposed < 0.05 * mean_busy ||
            stage_group[s] == stage_group[s - 1]) {
          continue;
        }
        int best = rep.bounds[s];
        double fewest = cost.boundary_bytes(best - 1).value();
        for (int b = std::max(rep.bounds[s - 1] + 1, rep.bounds[s] - 3);
             b <= std::min(rep.bounds[s + 1] - 1, rep.bounds[s] + 3); ++b) {
          const double bytes = cost.boundary_bytes(b - 1).value();
          if (bytes < fewest) {
            fewest = bytes;
            best = b;
          }
        }
        if (best != rep.bounds[s]) apply([&](PipelineSpec& r) { r.bounds[s] = best; });
      }
    }
    if (moves & kMoveRecompute) {
      for (int s = 0; s < stages; ++s) {
        if (rep.recompute[s] == RecomputePolicy::kNone) continue;
        apply([&](PipelineSpec& r) {
          r.recompute[s] = r.recompute[s] == RecomputePolicy::kFull ? RecomputePolicy::kSelective
                                                                    : RecomputePolicy::kNone;
        });
      }
      // Per-layer recompute: a stage recomputing all its layers keeps recomputing only the
      // ones that save the most memory per second of recompute (all but one, or the better
      // half), and a stage recomputing some of its layers one fewer, or half as many.
      for (int s = 0; s < stages; ++s) {
        const std::vector<int> ranked = ranked_recompute_layers(ctx_, c, rep, stage_group, s);
        std::vector<int> listed;
        for (int l : ranked) {
          if (std::binary_search(c.recompute_layers.begin(), c.recompute_layers.end(), l)) {
            listed.push_back(l);
          }
        }
        const bool whole = rep.recompute[s] == RecomputePolicy::kFull;
        if (!whole && (rep.recompute[s] != RecomputePolicy::kNone || listed.empty())) continue;
        const std::vector<int>& from = whole ? ranked : listed;
        const size_t k = from.size();
        for (size_t n : {k - 1, (k + 1) / 2}) {
          if (k == 0 || n >= k || (whole && n == 0)) continue;
          add(with_recompute_layers(c, cls, rep, s,
                                    std::vector<int>(from.begin(), from.begin() + n)));
        }
      }
      // Single recomputes (adaptive schedules): the adaptive scheduler recomputes only the
      // micro-batches memory holds back, where a stage's recompute pays for every one; with
      // the stages' recompute as it is, and with none anywhere.
      if (c.schedule.adaptive && !c.schedule.recompute_single) {
        Candidate x = c;
        x.schedule.recompute_single = true;
        add(x);
        bool recomputes = !x.recompute_layers.empty();
        for (PipelineSpec& r : x.replicas) {
          for (RecomputePolicy& policy : r.recompute) {
            recomputes = recomputes || policy != RecomputePolicy::kNone;
            policy = RecomputePolicy::kNone;
          }
        }
        x.recompute_layers.clear();
        if (recomputes) add(std::move(x));
      }
      // A group at its memory limit that idles more than most may be holding back its warm-up
      // (schedules that adapt to memory): more recompute lets it keep more micro-batches.
      if (c.schedule.adaptive || c.schedule.kind == ScheduleKind::kZbH1 ||
          c.schedule.kind == ScheduleKind::kZbH2) {
        double mean_busy = 0;
        for (const GroupStat& g : stats) mean_busy += g.busy / static_cast<double>(p);
        for (int s = 0; s < stages; ++s) {
          const GroupStat& g = stats[stage_group[s]];
          if (g.peak < 0.97 * g.capacity || g.busy > mean_busy ||
              rep.recompute[s] == RecomputePolicy::kFull) {
            continue;
          }
          apply([&](PipelineSpec& r) { r.recompute[s] = more_recompute(r.recompute[s]); });
          // Or one more layer recomputed on its own, the one saving the most per second.
          if (rep.recompute[s] != RecomputePolicy::kNone) continue;
          std::vector<int> more;
          bool added = false;
          for (int l : ranked_recompute_layers(ctx_, c, rep, stage_group, s)) {
            const bool listed =
                std::binary_search(c.recompute_layers.begin(), c.recompute_layers.end(), l);
            if (listed || !added) more.push_back(l);
            added = added || !listed;
          }
          if (added) add(with_recompute_layers(c, cls, rep, s, more));
        }
      }
    }
  }
  if ((moves & kMoveMicroBatches) && classes.size() > 1) {
    // From the replica whose busiest group works longest to the one whose works least.
    std::vector<double> load;
    for (const auto& groups : e.groups) {
      double worst = 0;
      for (const GroupStat& g : groups) worst = std::max(worst, g.busy);
      load.push_back(worst);
    }
    const int hi = static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin());
    const int lo = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    const int64_t m = c.replicas[hi].micro_batches;
    // ZeRO-2 and -3, and expert parallelism, exchange every micro-batch in lockstep: their
    // counts stay equal.
    if (hi != lo && m > 1 && c.zero_stage < 2 && c.expert_parallel == 1 &&
        c.context_parallel == 1) {
      for (int64_t k : {int64_t{1}, std::max<int64_t>(1, m / 8)}) {
        Candidate x = c;
        x.replicas[hi].micro_batches -= k;
        x.replicas[lo].micro_batches += k;
        add(std::move(x));
      }
    }
  }
  if ((moves & kMoveExperts) && ctx_.options().expert_parallel == 0 && c.context_parallel == 1) {
    // The same partition with the experts split otherwise (memory freed for less recompute
    // by the next moves, or the all-to-alls saved); the counts must be equal. (Not on a
    // candidate that splits its sequences: both group the replicas, and one is priced at a
    // time.)
    bool equal = true;
    for (const PipelineSpec& r : c.replicas) {
      equal = equal && r.micro_batches == c.replicas[0].micro_batches;
    }
    std::vector<int> degrees;
    if (equal) degrees = expert_degrees(static_cast<int>(c.replicas.size()));
    if (!degrees.empty()) degrees.insert(degrees.begin(), 1);
    for (int e : degrees) {
      if (e == c.expert_parallel) continue;
      Candidate x = c;
      x.expert_parallel = e;
      add(std::move(x));
    }
  }
  // Context parallelism started on a candidate without it where memory is short (recompute on
  // some stage, or a group within 3 % of its capacity), up to 32 devices as in the structure
  // phase: each member then holds its share of every sequence's activations.
  bool starts_context =
      (moves & kMoveContext) && c.context_parallel == 1 && ctx_.num_devices() <= 32;
  if (starts_context) {
    bool short_of_memory = needs_recompute(c);
    for (const std::vector<GroupStat>& replica : e.groups) {
      for (const GroupStat& g : replica) {
        short_of_memory = short_of_memory || g.peak >= (1 - kNearlyFull) * g.capacity;
      }
    }
    starts_context = short_of_memory;
  }
  if ((moves & kMoveContext) && (c.context_parallel > 1 || starts_context) &&
      ctx_.options().context_parallel == 0 && c.expert_parallel == 1) {
    // The same partition with each sequence split over groups of another size (1: whole
    // sequences again): a group's members run the group's micro-batches, so the counts are
    // those of the new groups, sharing the batch evenly. Only where the new groups are of one
    // make; the evaluation says whether the activations still fit. A start takes the
    // distributed optimizer too, as the structure phase's context candidates do.
    const int replicas = static_cast<int>(c.replicas.size());
    std::vector<int> degrees = context_degrees(replicas);
    degrees.insert(degrees.begin(), 1);
    const int64_t total = ctx_.global_batch() / c.micro_batch_size;
    for (int cp : degrees) {
      if (cp == c.context_parallel) continue;
      const int64_t groups = replicas / cp;
      // ZeRO-2 and -3 need equal counts (the reduce-scatter after every micro-batch).
      bool one_make = total >= groups && (c.zero_stage < 2 || total % replicas == 0);
      for (int r = 0; one_make && r < replicas; ++r) {
        one_make = group_signature(ctx_, c.replicas[r].groups) ==
                   group_signature(ctx_, c.replicas[static_cast<size_t>(r / cp * cp)].groups);
      }
      if (!one_make) continue;
      Candidate x = c;
      x.context_parallel = cp;
      if (c.context_parallel == 1 && !ctx_.options().zero_stage) {
        x.zero_stage = std::max(x.zero_stage, 1);
      }
      for (int r = 0; r < replicas; ++r) {
        const int64_t g = r / cp;
        x.replicas[r].micro_batches = total / groups + (g < total % groups ? 1 : 0);
      }
      add(std::move(x));
    }
  }
  if ((moves & kMoveVocab) && !ctx_.options().vocab_parallel && head_vocab(ctx_.model()) > 0 &&
      (c.schedule.adaptive ||
       schedule_allowed(ctx_, ScheduleSpec::adaptive_on(c.schedule.shape, c.schedule.chunks,
                                                        AdaptivePriority::kBackwardFirst,
                                                        WeightFill::kIfItFits)))) {
    // The head split over the groups, or whole again; a named schedule gives way to the
    // adaptive scheduler on its stage shape, which places the shards. Split only where the
    // group holding the head is the busiest or its memory nearly full (what a split relieves).
    bool relieves = c.vocab_parallel;
    if (!relieves && !e.groups.empty() && !e.groups[0].empty()) {
      const std::vector<GroupStat>& stats = e.groups[0];
      const std::vector<int> sg =
          shape_stage_group(c.schedule, static_cast<int>(c.replicas[0].groups.size()));
      const size_t head = static_cast<size_t>(sg.back());
      double busiest = 0;
      for (const GroupStat& g : stats) busiest = std::max(busiest, g.busy);
      relieves =
          head < stats.size() && (stats[head].busy >= busiest * (1 - 1e-9) ||
                                  stats[head].peak >= (1 - kNearlyFull) * stats[head].capacity);
    }
    Candidate x = c;
    x.vocab_parallel = !c.vocab_parallel;
    x.head_shares.clear();
    if (!x.schedule.adaptive) {
      x.schedule =
          ScheduleSpec::adaptive_on(c.schedule.shape, c.schedule.chunks,
                                    AdaptivePriority::kBackwardFirst, WeightFill::kIfItFits);
    }
    x.vocab_embedding = false;
    if (relieves) add(std::move(x));
  }
  if ((moves & kMoveVocab) && c.vocab_parallel && !e.groups.empty() &&
      e.groups[0].size() == c.replicas[0].groups.size()) {
    // The head's rows moved towards the groups the partition left with less work: the shards
    // absorb what whole layers cannot even out. Each group's busy time less its shard is its
    // other work; the water level over the groups' whole-head times gives the shares.
    const CostModel& cost = ctx_.cost(c.micro_batch_size, c.sequence_parallel, c.context_parallel);
    const std::vector<std::vector<int>>& groups = c.replicas[0].groups;
    const int head = ctx_.num_layers() - 1;
    const std::vector<double> now = vocab_shard_shares(ctx_, cost, c, groups, head);
    const double m = static_cast<double>(c.replicas[0].micro_batches);
    std::vector<double> base(groups.size()), whole(groups.size());
    bool usable = now.size() == groups.size();
    for (size_t g = 0; usable && g < groups.size(); ++g) {
      const ComputeTimes t =
          cost.compute(LayerRange{head, head + 1}, DeviceGroup{groups[g]}, RecomputePolicy::kNone);
      whole[g] = m * (t.forward + t.backward()).value();
      base[g] = e.groups[0][g].busy - now[g] * whole[g];
      usable = whole[g] > 0;
    }
    const double vocab = static_cast<double>(head_vocab(ctx_.model()));
    const double unit = static_cast<double>(vocab_row_granule(c)) / vocab;
    if (usable && unit * static_cast<double>(groups.size()) <= 1) {
      const std::vector<double> even = balanced_head_shares(base, whole, unit);
      // Worth an evaluation only where it shortens the busiest group by more than 0.2 %: the
      // simulation of a large plan costs more than a sliver of balance gains.
      double busiest = 0, level = 0;
      for (size_t g = 0; g < groups.size(); ++g) {
        busiest = std::max(busiest, e.groups[0][g].busy);
        level = std::max(level, base[g] + even[g] * whole[g]);
      }
      if (level < busiest * (1 - kRebalanceGain)) {
        Candidate x = c;
        x.head_shares = even;
        add(std::move(x));
        // And halfway there: the schedule answers the moved work and memory (the adaptive
        // scheduler admits by what each group holds), so the whole step can overshoot.
        Candidate half = c;
        half.head_shares = now;
        for (size_t g = 0; g < groups.size(); ++g) {
          half.head_shares[g] = 0.5 * (now[g] + even[g]);
        }
        add(std::move(half));
      }
    }
  }
  if ((moves & kMoveVocab) && c.vocab_parallel && splits_embedding(ctx_)) {
    // The embedding split too, or whole again.
    Candidate y = c;
    y.vocab_embedding = !c.vocab_embedding;
    add(std::move(y));
  }
  if ((moves & kMoveSchedule) && c.schedule.adaptive) {
    for (AdaptivePriority pr : {AdaptivePriority::kBackwardFirst, AdaptivePriority::kForwardFirst,
                                AdaptivePriority::kAlternate}) {
      for (WeightFill wf : {WeightFill::kIfItFits, WeightFill::kAlways}) {
        Candidate x = c;
        x.schedule.priority = pr;
        x.schedule.weight_fill = wf;
        add(std::move(x));
      }
    }
  }
  return out;
}

Found Searcher::climb(const Found& start, unsigned moves) {
  Found cur = start;
  for (int it = 0; it < 60 && !evaluator_.out_of_time(); ++it) {
    std::vector<Candidate> nb = neighbors(cur.candidate, *cur.eval, moves);
    if (nb.empty()) break;
    auto evals = evaluate(nb);
    // A boundary move that runs out of memory may fit with more recompute where it landed.
    std::vector<Candidate> bumped;
    for (size_t i = 0; i < nb.size(); ++i) {
      if (!memory_failure(*evals[i])) continue;
      for (size_t r = 0; r < nb[i].replicas.size(); ++r) {
        const PipelineSpec& before = cur.candidate.replicas[r];
        const PipelineSpec& after = nb[i].replicas[r];
        if (before.bounds == after.bounds) continue;
        for (size_t s = 0; s + 1 < after.bounds.size(); ++s) {
          const int grew =
              (after.bounds[s + 1] - after.bounds[s]) - (before.bounds[s + 1] - before.bounds[s]);
          if (grew > 0 && after.recompute[s] != RecomputePolicy::kFull) {
            Candidate x = nb[i];
            for (size_t q = 0; q < x.replicas.size(); ++q) {
              if (x.replicas[q].bounds == after.bounds) {
                x.replicas[q].recompute[s] = more_recompute(x.replicas[q].recompute[s]);
              }
            }
            bumped.push_back(std::move(x));
          }
        }
        break;
      }
    }
    if (!bumped.empty()) {
      auto more = evaluate(bumped);
      nb.insert(nb.end(), bumped.begin(), bumped.end());
      evals.insert(evals.end(), more.begin(), more.end());
    }
    int best = -1;
    // A step must gain at least 0.01%: smaller gains are within the screening's error and
    // would only lengthen the climb.
    double best_score = score_of(cur.eval) * (1 - 1e-4);
    for (size_t i = 0; i < nb.size(); ++i) {
      if (score_of(evals[i]) < best_score) {
        best_score = score_of(evals[i]);
        best = static_cast<int>(i);
      }
    }
    if (best < 0) break;
    cur.candidate = nb[best];
    cur.eval = evals[best];
  }
  return cur;
}

Found Searcher::on_other_layouts(const Candidate& from, const std::vector<Layout>& layouts,
                                 const std::vector<size_t>& kept, const BuildOptions& options) {
  BuildOptions build = options;
  build.zero_stage = from.zero_stage;
  build.expert_parallel = from.expert_parallel;
  build.context_parallel = from.context_parallel;
  build.sequence_parallel = from.sequence_parallel;
  build.vocab_parallel = from.vocab_parallel;
  build.vocab_embedding = from.vocab_embedding;
  auto allows = [](const std::vector<int>& degrees, int degree) {
    return degree == 1 || std::find(degrees.begin(), degrees.end(), degree) != degrees.end();
  };
  // A layout of the same replica count and groups as `from`'s, in another order, is skipped:
  // the climbs have tried that structure already.
  using Census = std::pair<size_t, std::map<std::pair<int, size_t>, int>>;
  auto census = [&](const Layout& layout) {
    Census out{layout.replicas.size(), {}};
    for (const auto& rep : layout.replicas) {
      for (const auto& g : rep) ++out.second[{ctx_.type_of(g[0]), g.size()}];
    }
    return out;
  };
  const Census own = census(layout_of(from));
  std::vector<Candidate> cands;
  for (size_t k : kept) {
    const Layout& layout = layouts[k];
    const int replicas = static_cast<int>(layout.replicas.size());
    if (census(layout) == own || !allows(expert_degrees(replicas), build.expert_parallel) ||
        !allows(context_degrees(replicas), build.context_parallel)) {
      continue;
    }
    Result<Candidate> c =
        build_candidate(ctx_, layout, from.schedule, from.micro_batch_size, build);
    if (c.is_ok() && accepts_all(from.schedule, c.value())) cands.push_back(std::move(c.value()));
  }
  const auto evals = evaluate(cands);
  Found best;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (!evals[i]->ok || (best.ok && score_of(evals[i]) >= score_of(best.eval))) continue;
    best.ok = true;
    best.candidate = cands[i];
    best.eval = evals[i];
  }
  return best;
}

Found Searcher::improve(const Found& start, unsigned moves, int kicks) {
  if (!start.ok) return start;
  Found best = climb(start, moves);
  std::mt19937_64 rng(rng_state_);
  rng_state_ = rng();
  for (int k = 0; k < kicks && !evaluator_.out_of_time(); ++k) {
    // Perturb the best: shift a random boundary of a random replica class by up to 3 layers.
    Candidate x = best.candidate;
    const auto classes = replica_classes(ctx_, x);
    const std::vector<int>& cls = classes[rng() % classes.size()];
    std::vector<int>& bounds = x.replicas[cls[0]].bounds;
    const int stages = static_cast<int>(bounds.size()) - 1;
    if (stages < 2 || !(moves & kMovePartition)) break;
    const int i = 1 + static_cast<int>(rng() % (stages - 1));
    const int shift = static_cast<int>(rng() % 7) - 3;
    const int moved = std::clamp(bounds[i] + shift, bounds[i - 1] + 1, bounds[i + 1] - 1);
    if (moved == bounds[i]) continue;
    for (int r : cls) x.replicas[r].bounds[i] = moved;
    Found kicked = best;
    kicked.candidate = x;
    kicked.eval = evaluate({x})[0];
    if (!kicked.eval->ok) continue;
    kicked = climb(kicked, moves);
    if (score_of(kicked.eval) < score_of(best.eval)) best = kicked;
  }
  best.detail = describe(best.candidate);
  return best;
}

Found Searcher::motley(const std::vector<Found>& seeds) {
  const Seconds start = ctx_.now();
  const int64_t simulated = evaluator_.simulated();
  // Layouts, ranked by the best estimate of a balanced partition with ZB-H1 over the
  // micro-batch sizes.
  std::vector<Layout> layouts = mixed_layouts(ctx_);
  for (Layout& l : separate_layouts(ctx_)) layouts.push_back(std::move(l));
  const int n = ctx_.num_devices();
  for (int t : {1, 2, 4, 8}) {
    if (n % t != 0) continue;
    for (int p : divisors(n / t)) {
      if (p > ctx_.num_layers()) continue;
      Result<Layout> l = cluster_order_layout(ctx_, t, p, n / (t * p));
      if (l.is_ok() && std::find(layouts.begin(), layouts.end(), l.value()) == layouts.end()) {
        layouts.push_back(std::move(l.value()));
      }
    }
  }
  layouts = constrained_layouts(ctx_, std::move(layouts));
  fidelity_ = Fidelity::kScreen;
  phase_ = "structures";
  BuildOptions options;
  options.cache = &partitions_;
  std::vector<std::pair<double, size_t>> layout_rank;
  const ScheduleSpec rank_spec = ScheduleSpec::named(ScheduleKind::kZbH1);
  // Layouts that fit only with the MoE experts split (expert parallelism at the largest degree
  // the layout allows), ranked apart so that they add to the others rather than displace them.
  std::vector<std::pair<double, size_t>> expert_rank;
  std::vector<size_t> unfit;  // layouts that fit neither way
  // The screening below runs on the evaluator's threads as estimate_jobs does, results in job
  // order, and a job that starts past the time budget does nothing: the search then goes on
  // with what was screened (on 65,536 devices the screening alone would take 16 s).
  enum class Fit { kUnscreened, kWhole, kExpertsSplit, kNeither };
  std::vector<std::pair<Fit, double>> fits(layouts.size(), {Fit::kUnscreened, kInf});
  for_each_with_scratch(ctx_, evaluator_, layouts.size(), [&](size_t i, BuildScratch& scratch) {
    if (evaluator_.out_of_time()) return;
    fits[i].first = Fit::kNeither;
    double best = kInf;
    for (int64_t b : ctx_.micro_batch_sizes()) {
      if (build_candidate_into(ctx_, layouts[i], rank_spec, b, options, scratch).is_ok()) {
        best = std::min(best, objective_estimate(ctx_, scratch.candidate, &scratch.facts));
      }
    }
    if (best < kInf) {
      fits[i] = {Fit::kWhole, best};
      return;
    }
    const std::vector<int> degrees = expert_degrees(static_cast<int>(layouts[i].replicas.size()));
    if (degrees.empty()) return;  // fits neither way
    BuildOptions split = options;
    split.expert_parallel = degrees.back();
    split.zero_stage = 1;
    for (int64_t b : ctx_.micro_batch_sizes()) {
      if (build_candidate_into(ctx_, layouts[i], rank_spec, b, split, scratch).is_ok()) {
        best = std::min(best, objective_estimate(ctx_, scratch.candidate, &scratch.facts));
      }
    }
    fits[i] = {Fit::kExpertsSplit, best};
  });
  for (size_t i = 0; i < layouts.size(); ++i) {
    const auto [fit, best] = fits[i];
    if (fit == Fit::kWhole) {
      layout_rank.emplace_back(best, i);
    } else if (fit == Fit::kExpertsSplit) {
      if (best < kInf) expert_rank.emplace_back(best, i);
    } else if (fit == Fit::kNeither) {
      unfit.push_back(i);
    }
  }
  // Effort by size: a larger cluster costs more per simulation, so fewer layouts are kept and
  // fewer climbs run. The sizes depend only on the instance, never on the clock, so the search
  // stays deterministic.
  const int n_devices = ctx_.num_devices();
  const int size_class = n_devices <= 32 ? 0 : n_devices <= 128 ? 1 : 2;
  // Layouts that fit only with the sequences split over the replicas (the largest context
  // degree), ranked with those that fit only with the experts split: up to 32 devices, and
  // beyond where no layout fits whole sequences (each costs a partition per micro-batch size)
  // or where the layout has more replicas than the batch has sequences, which only context
  // groups can share (a long-sequence batch of a few sequences on many devices).
  const int64_t sequences = ctx_.global_batch();
  const bool all_unfit = size_class == 0 || (layout_rank.empty() && expert_rank.empty());
  for (size_t i : unfit) {
    if (!all_unfit && static_cast<int64_t>(layouts[i].replicas.size()) <= sequences) continue;
    if (evaluator_.out_of_time()) break;
    const std::vector<int> context = context_degrees(static_cast<int>(layouts[i].replicas.size()));
    if (context.empty()) continue;
    BuildOptions split = options;
    split.context_parallel = context.back();
    split.zero_stage = 1;
    double best = kInf;
    for (int64_t b : ctx_.micro_batch_sizes()) {
      Result<Candidate> c = build_candidate(ctx_, layouts[i], rank_spec, b, split);
      if (c.is_ok()) best = std::min(best, objective_estimate(ctx_, c.value()));
    }
    if (best < kInf) expert_rank.emplace_back(best, i);
  }
  std::stable_sort(layout_rank.begin(), layout_rank.end());
  std::stable_sort(expert_rank.begin(), expert_rank.end());
  // The estimate ranks layouts by a balanced partition under ZB-H1 alone; the schedule and
  // memory a layout ends with can reorder them (on Llama-3-70B over 512 H100s and 512 A100s,
  // 360 layouts, the best plan's is 15th by estimate). So at least a tenth of the ranked
  // layouts is kept, up to 24: a mixed cluster's many layouts get more of them, while a
  // homogeneous one's few (69 on 16,384 H100s) keep 12 and leave the budget to simulation.
  const size_t keep_layouts = std::min<size_t>(
      layout_rank.size(), std::max<size_t>(size_class == 0 ? 24 : 12,
                                           std::min<size_t>(24, (layout_rank.size() + 9) / 10)));
  // Screening simulates two replicas standing for all (below), so its cost grows little with
  // the cluster: every size screens 64. (With 32 above 128 devices, on 8,192 H100s and 8,192
  // A100s, Llama-3-70B at one sequence per device, the layout of the best plan had none of
  // its good candidates screened: 0.840 of the bound against 0.864, in the same time.)
  constexpr size_t kScreened = 64;
  const size_t climbs = size_class == 0 ? 6 : size_class == 1 ? 4 : 3;
  // Up to 8 devices a simulation costs little, so each start gets more random perturbations:
  // the plan found then depends less on the seed. Where devices x sequences is at most 64
  // (four devices with 16 sequences, eight with eight), twice as many. (With 24 instead of 48, on
  // OctoPipe's Nemotron-Nano-v2-9B profile, four devices with eight sequences, seeds 1-4 found
  // 881-894 ms instead of 881-888 ms, and on the same setup with a Llama-3-8B profile whose memory
  // binds 410-415 ms instead of 399-402 ms, in 1-2 s; 48 on eight devices with 32 sequences took
  // the whole 8 s budget for gains under 0.3 %.)
  const int kicks = n_devices * ctx_.global_batch() <= 64 ? 48
                    : n_devices <= 8                      ? 24
                    : size_class == 0                     ? 3
                    : size_class == 1                     ? 2
                                                          : 1;

  // Candidates: the kept layouts x schedules x micro-batch sizes, with each ZeRO stage where
  // there are replicas to shard across (2 and 3 where ZeRO-1 is short of memory) and with and
  // without sequence parallelism where there are TP groups, ranked by the estimate. ZeRO-1
  // trades an all-gather of the weights for memory that may spare recomputation or allow a
  // longer warm-up, ZeRO-2 and -3 a collective per micro-batch for more; sequence parallelism
  // splits the residual-stream work and activations of a TP group for a reduce-scatter and an
  // all-gather in place of each all-reduce.
  std::vector<std::pair<double, Recipe>> ranked;
  std::vector<size_t> kept;
  for (size_t k = 0; k < keep_layouts; ++k) kept.push_back(layout_rank[k].second);
  constexpr size_t kExpertLayouts = 4;
  for (size_t k = 0; k < expert_rank.size() && k < kExpertLayouts; ++k) {
    kept.push_back(expert_rank[k].second);
  }
  // The base candidates: no ZeRO and ZeRO-1. ZeRO-2 and -3 pay with a collective per
  // micro-batch for memory, and expert parallelism with all-to-alls: they are built afterwards
  // for the best-estimated bases only (ZeRO-2 and -3 where ZeRO-1 is short of memory: no
  // partition fits, or one needs recompute; up to 32 devices for every base), and for every
  // base of a layout that fits only with the experts split.
  struct Base {
    double estimate = kInf;
    size_t layout = 0;
    bool sequence_parallel = false;
    const ScheduleSpec* spec = nullptr;
    int64_t b = 0;
    bool short_of_memory = false;
    bool expert_only = false;  // a layout that fits only with the experts split
  };
  std::vector<Base> bases;
  const std::vector<ScheduleSpec> specs = search_specs(ctx_);
  for (size_t k = 0; k < kept.size(); ++k) {
    const Layout& layout = layouts[kept[k]];
    // Layouts ranked by their own estimate; those that fit only with the experts split come
    // after the others.
    const double layout_estimate =
        k < keep_layouts ? layout_rank[k].first : expert_rank[k - keep_layouts].first;
    for (const bool sequence_parallel : {false, true}) {
      if (sequence_parallel && !has_tensor_parallel_group(ctx_, layout)) continue;
      for (const ScheduleSpec& spec : specs) {
        for (int64_t b : ctx_.micro_batch_sizes()) {
          bases.push_back(Base{layout_estimate, kept[k], sequence_parallel, &spec, b, false,
                               k >= keep_layouts});
        }
      }
    }
  }
  // Each base built without ZeRO and with ZeRO-1 (on the threads, gathered in order).
  std::vector<std::vector<std::pair<double, Recipe>>> base_ranked(bases.size());
  for_each_with_scratch(ctx_, evaluator_, bases.size(), [&](size_t j, BuildScratch& scratch) {
    if (evaluator_.out_of_time()) return;
    const Candidate& c = scratch.candidate;
    Base& base = bases[j];
    const Layout& layout = layouts[base.layout];
    for (int zero = 0; zero <= 1; ++zero) {
      if (zero > 0 && (layout.replicas.size() < 2 || ctx_.options().zero_stage)) continue;
      BuildOptions build = options;
      build.zero_stage = zero;
      build.sequence_parallel = base.sequence_parallel;
      build.vocab_parallel = ctx_.options().vocab_parallel.value_or(false);
      build.vocab_embedding = false;
      const bool built =
          build_candidate_into(ctx_, layout, *base.spec, base.b, build, scratch).is_ok();
      if (zero == 1) base.short_of_memory = !built || needs_recompute(c);
      if (!built || !accepts_all(*base.spec, c)) continue;
      const double estimate = objective_estimate(ctx_, c, &scratch.facts);
      if (zero == 1 || layout.replicas.size() < 2) base.estimate = estimate;
      base_ranked[j].emplace_back(estimate, recipe_of(base.layout, *base.spec, base.b, build, c));
    }
  });
  for (auto& entries : base_ranked) {
    for (auto& entry : entries) ranked.push_back(std::move(entry));
  }
  std::stable_sort(bases.begin(), bases.end(),
                   [](const Base& x, const Base& y) { return x.estimate < y.estimate; });
  // By size, as the effort above: every base up to 32 devices, fewer on larger clusters.
  const size_t extra_bases = size_class == 0 ? bases.size() : size_class == 1 ? 24 : 8;
  // The head split over the groups: for the best adaptive bases (it changes the partition, not
  // the layout), and beyond 32 devices, where those are few, also for the best adaptive base of
  // each kept layout and stage shape (zigzag chunks). Whole layers leave some layouts and
  // shapes further from even than others, and the head's shards even those out most: on
  // Llama-3-70B over 512 H100s and 512 A100s, 32 replicas of four A100 and four H100 groups at
  // TP 4 on a zigzag of three chunks gained 4 % by the estimate with the head split, while the
  // two best bases, of other layouts, gained nothing; with the split on every kept layout the
  // search went from 0.870 of the bound to 0.890 (on yet another layout). (Up to 32 devices
  // the 16 best bases and every schedule's best are tried already.)
  // Only while at most half the time budget is spent: where it binds, the variants' screening
  // and their whole simulations took time the others needed (on 65,536 H100s, Llama-3-70B's
  // search, two of them its first finalists, 8-9 % slower whole than screened at three seconds
  // each, ran 6 s past its 8 s budget to the same plan).
  const size_t vocab_extra_bases = size_class == 0 ? 16 : size_class == 1 ? 4 : 2;
  const bool vocab_shapes_wanted = size_class > 0 && !evaluator_.spent_time_share(0.5);
  std::set<std::tuple<size_t, StageShape, int>> vocab_shapes;
  std::vector<Job> shape_variants;  // estimated after the others, in a share of the time
  // Vocabulary parallelism is tried on bases of any replica count (where the search decides).
  const bool vocab_free = !ctx_.options().vocab_parallel && head_vocab(ctx_.model()) > 0;
  size_t sharded_bases = 0, expert_bases = 0, vocab_bases = 0, context_bases = 0;
  // The variants to build, listed in order here and estimated on the threads below.
  std::vector<Job> variants;
  for (const Base& base : bases) {
    const Layout& layout = layouts[base.layout];
    const bool expert_only = base.expert_only;
    // Where add() puts its jobs: the variants, or the head-split variants of further layouts and
    // shapes, which are estimated after them.
    std::vector<Job>* into = &variants;
    auto add = [&](int zero, int e, bool vocab = false, bool embedding = false, int cp = 1) {
      BuildOptions build = options;
      build.zero_stage = zero;
      build.expert_parallel = e;
      build.context_parallel = cp;
      build.vocab_parallel = vocab || ctx_.options().vocab_parallel.value_or(false);
      build.vocab_embedding = embedding;
      build.sequence_parallel = base.sequence_parallel;
      into->push_back(Job{base.layout, base.spec, base.b, build});
    };
    // (Up to 32 devices every base: sharding also buys a deeper warm-up, or a schedule that
    // holds more in flight, where ZeRO-1 fits without recompute.)
    if ((base.short_of_memory || size_class == 0) && layout.replicas.size() > 1 &&
        !ctx_.options().zero_stage && sharded_bases < extra_bases) {
      ++sharded_bases;
      add(2, 1);
      add(3, 1);
    }
    // Expert parallelism, with the distributed optimizer, at every degree that divides the
    // replicas and the experts (the options' degree alone when they fix one).
    const std::vector<int> degrees = expert_degrees(static_cast<int>(layout.replicas.size()));
    if (!degrees.empty() && (expert_only || expert_bases < extra_bases)) {
      if (!expert_only) ++expert_bases;
      for (int e : degrees) add(1, e);
    }
    // The sequences split over groups of replicas, with the distributed optimizer, at every
    // context degree that divides the replicas: for layouts that fit only with it, up to 32
    // devices for those short of memory without it, where a member's share of each sequence
    // spares recompute or lets more micro-batches be in flight, and at any size where a
    // replica has fewer micro-batches than groups, so that each micro-batch's path through the
    // pipeline sets the step and a member's share of the sequence shortens it. (Otherwise,
    // beyond 32 devices, a context group's candidate is screened on all its replicas, not two
    // standing for all: too slow for what it seldom gains there.)
    const std::vector<int> context = context_degrees(static_cast<int>(layout.replicas.size()));
    const bool path_bound =
        ctx_.global_batch() / base.b <
        static_cast<int64_t>(layout.replicas.size() * layout.replicas.front().size());
    if (!context.empty() &&
        (expert_only || ((path_bound || (base.short_of_memory && size_class == 0)) &&
                         context_bases < extra_bases))) {
      if (!expert_only) ++context_bases;
      for (int cp : context) add(1, 1, false, false, cp);
    }
    // The head split over the groups, with the distributed optimizer where there are replicas.
    if (vocab_free && base.spec->adaptive) {
      const bool shape_first =
          vocab_shapes_wanted &&
          vocab_shapes.emplace(base.layout, base.spec->shape, base.spec->chunks).second;
      const bool best_base = vocab_bases < vocab_extra_bases;
      if (best_base || shape_first) {
        into = best_base ? &variants : &shape_variants;
        const int zero = layout.replicas.size() > 1 ? 1 : 0;
        add(zero, 1, true);
        if (splits_embedding(ctx_)) add(zero, 1, true, true);
        into = &variants;
      }
      if (best_base) ++vocab_bases;
    }
  }
  // The variants, best bases first, take at most half the time left, so that screening and
  // the climbs always get the other half. (On 65,536 H100s, DeepSeek-V2-Lite, 1,688 variants,
  // most with expert parallelism over 8,192 to 32,768 replicas, took all 2.4 s the baselines
  // had left, and nothing was screened.)
  const Seconds variants_until = ctx_.now() + evaluator_.time_left() * 0.5;
  for (auto& entry :
       estimate_jobs(ctx_, evaluator_, layouts, variants, /*honour_budget=*/true, variants_until)) {
    ranked.push_back(std::move(entry));
  }
  // The head split on every kept layout and shape comes last, in at most a tenth of the time
  // left, so that it does not take the screening's and the climbs' time, which the other
  // variants leave them. Its best few are screened beside the others' (below), not in their
  // place.
  const Seconds shapes_until = ctx_.now() + evaluator_.time_left() * 0.1;
  std::vector<std::pair<double, Recipe>> shape_ranked = estimate_jobs(
      ctx_, evaluator_, layouts, shape_variants, /*honour_budget=*/true, shapes_until);
  std::stable_sort(shape_ranked.begin(), shape_ranked.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<Candidate> cands;
  std::set<std::string> chosen;
  auto take = [&](const Recipe& r) {
    Candidate c = rebuild(ctx_, layouts, r);
    if (chosen.insert(candidate_key(c)).second) cands.push_back(std::move(c));
  };
  // ZeRO-2 and -3 candidates, and those with expert parallelism, compete for screening among
  // themselves (the best few of each), so that they add to the others rather than displace
  // them.
  constexpr size_t kExtraScreened = 4;
  // (Where the options fix the stage or the degree, every candidate has it: none is extra.)
  const bool zero_free = !ctx_.options().zero_stage;
  const bool expert_free = ctx_.options().expert_parallel == 0;
  auto sharded_extra = [&](const Recipe& c) { return zero_free && c.zero_stage >= 2; };
  auto expert_extra = [&](const Recipe& c) {
    return expert_free && c.expert_parallel > 1 && !sharded_extra(c);
  };
  auto vocab_extra = [&](const Recipe& c) {
    return vocab_free && c.vocab_parallel && !sharded_extra(c) && !expert_extra(c);
  };
  const bool context_free = ctx_.options().context_parallel == 0;
  auto context_extra = [&](const Recipe& c) {
    return context_free && c.context_parallel > 1 && !sharded_extra(c) && !expert_extra(c) &&
           !vocab_extra(c);
  };
  auto extra = [&](const Recipe& c) {
    return sharded_extra(c) || expert_extra(c) || vocab_extra(c) || context_extra(c);
  };
  for (size_t i = 0; i < ranked.size() && cands.size() < kScreened; ++i) {
    if (!extra(ranked[i].second)) take(ranked[i].second);
  }
  // And the best-estimated candidate of every schedule, so that no schedule is judged by the
  // estimate alone.
  auto take_best_of_each_schedule = [&](const auto& wanted) {
    std::set<std::string> schedules;
    for (const auto& [est, c] : ranked) {
      if (wanted(c) && schedules.insert(c.schedule).second) take(c);
    }
  };
  take_best_of_each_schedule([&](const Recipe& c) { return !extra(c); });
  size_t sharded = 0, expert = 0, vocab = 0, context = 0;
  for (const auto& [est, c] : ranked) {
    if (sharded_extra(c) && sharded < kExtraScreened) {
      take(c);
      ++sharded;
    } else if (context_extra(c) && context < kExtraScreened) {
      take(c);
      ++context;
    } else if (expert_extra(c) && expert < kExtraScreened) {
      take(c);
      ++expert;
    } else if (vocab_extra(c) && vocab < kExtraScreened) {
      take(c);
      ++vocab;
    }
  }
  // And, split heads up to 32 devices, the best-estimated of every schedule too: where memory
  // binds, the estimate ranks them worst of all (on a Llama-3-8B profile over four 80 GB
  // devices the four best-estimated were two linear orders, screened 20-30 % slower than the
  // zigzag ones the estimate put below them).
  if (size_class == 0) take_best_of_each_schedule(vocab_extra);
  // The best four head-split variants of the kept layouts and shapes, in slots of their own as
  // the other extras. (With eight, 512 H100s and 512 A100s went from 0.890 of the bound to
  // 0.893, but Mixtral-8x7B on the 64 devices of bench/cases from 0.897 to 0.819: the extra
  // candidates took climbs from better starts.)
  for (size_t i = 0; i < shape_ranked.size() && i < kExtraScreened; ++i) {
    take(shape_ranked[i].second);
  }
  auto evals = evaluate(cands);

  // Local search from the best distinct simulated candidates and the best seeds.
  std::vector<Found> starts;
  std::vector<size_t> order(cands.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return score_of(evals[a]) < score_of(evals[b]); });
  // The best of each data-parallel degree first, then the best of the rest: a climb gains
  // more on some layouts than on others, and near-copies of one layout (the same devices in
  // another order) would otherwise take every start. (On 8,192 H100s and 8,192 A100s,
  // Llama-3-70B at one sequence per device, the three best screened were of 256 replicas and
  // climbed no lower than 4.30 s, while the best of 512 replicas climbs to 4.18 s.)
  std::vector<bool> taken(cands.size(), false);
  std::set<size_t> degrees;
  for (const bool one_per_degree : {true, false}) {
    for (size_t i : order) {
      if (starts.size() >= climbs || !evals[i]->ok) break;
      if (taken[i] || (one_per_degree && !degrees.insert(cands[i].replicas.size()).second)) {
        continue;
      }
      // A candidate screened at exactly a start's time is that start's plan under another
      // name (two schedule rules that give the same orders): it would climb the same way.
      if (std::any_of(starts.begin(), starts.end(),
                      [&](const Found& f) { return score_of(f.eval) == score_of(evals[i]); })) {
        continue;
      }
      taken[i] = true;
      Found f;
      f.ok = true;
      f.candidate = cands[i];
      f.eval = evals[i];
      starts.push_back(f);
    }
  }
  // And from the best three candidates that split the head, where the search decides it: their
  // partition and order differ enough from the others' that a single move seldom reaches them.
  size_t vocab_starts = 0;
  for (size_t i : order) {
    if (!vocab_free || size_class > 0 || !evals[i]->ok || !cands[i].vocab_parallel) continue;
    bool started = false;
    for (const Found& f : starts) started = started || f.candidate == cands[i];
    if (!started) {
      Found f;
      f.ok = true;
      f.candidate = cands[i];
      f.eval = evals[i];
      starts.push_back(f);
    }
    if (++vocab_starts == 3) break;
  }
  // Where the options split the head, every plan motley returns splits it: the baselines'
  // plans, which never do, are no seeds then.
  const bool vocab_forced = ctx_.options().vocab_parallel.value_or(false);
  std::vector<Found> good_seeds;
  for (const Found& s : seeds) {
    if (s.ok && (!vocab_forced || s.candidate.vocab_parallel)) good_seeds.push_back(s);
  }
  std::stable_sort(good_seeds.begin(), good_seeds.end(), [](const Found& a, const Found& b) {
    return score_of(a.eval) < score_of(b.eval);
  });
  for (size_t i = 0; i < good_seeds.size() && i < 2; ++i) {
    // Climbs compare screened times, so a seed starts from its screened time too.
    Found f = good_seeds[i];
    f.eval = evaluate({f.candidate})[0];
    if (f.eval->ok) starts.push_back(f);
  }

  phase_ = "local search";
  Found climbed;  // the best plan the climbs reach
  for (const Found& s : starts) {
    if (evaluator_.out_of_time()) break;
    Found f = improve(s, kMoveAll, kicks);
    if (f.ok && (!climbed.ok || score_of(f.eval) < score_of(climbed.eval))) climbed = f;
  }
  // And from the best climbed plan's settings on another kept layout: the estimate ranks
  // layouts within a few per cent, less surely than the climbs tell them apart, so the settings
  // that climbed best are screened on every other kept layout and the best of those climbs too.
  // (On Llama-3-70B over 512 H100s and 512 A100s the best climb, on A100 groups of TP 8, ended
  // at 5.02 s; its settings on TP 4 groups screened at 5.03 s and climbed to 4.94 s, 0.904 of
  // the bound against 0.890. That layout's own candidates had ranked too low to be screened.)
  // Only while at most half the time budget is spent, as the head-split variants above.
  if (climbed.ok && !evaluator_.spent_time_share(0.5)) {
    const Found moved = on_other_layouts(climbed.candidate, layouts, kept, options);
    if (moved.ok) climb(moved, kMoveAll);
  }
  // The best screened candidates, simulated whole, compete with the seeds: at most two per
  // schedule (a split head counting as another), so that near-copies of one plan do not crowd
  // out the others.
  fidelity_ = Fidelity::kFull;
  std::vector<Candidate> finalists;
  std::map<std::string, int> per_schedule;
  // Candidates that split the head are finalists beside the others (the best two), not in
  // their place: the screening's extrapolation, and so its ranking, is least sure of them.
  size_t whole = 0, split = 0;
  for (const Candidate& c : evaluator_.best_screened(32)) {
    if (vocab_forced && !c.vocab_parallel) continue;
    const std::string kind = c.schedule.name() + (c.vocab_parallel ? " vocab" : "");
    size_t& taken = c.vocab_parallel && !vocab_forced ? split : whole;
    if (taken < (&taken == &split ? 2u : 6u) && per_schedule[kind]++ < 2) {
      finalists.push_back(c);
      ++taken;
    }
  }
  // The best screened candidate is the search's answer: it is simulated whole even when the
  // local search used up the time budget (one simulation over it), so that the answer is
  // never a baseline's only because time ran out. Where the whole simulation finds it more
  // than 5 % slower than screened (the extrapolation missed something), the next finalist is
  // simulated whole too, up to two more. (On 65,536 H100s, Llama-3-70B, the best screened, an
  // adaptive zigzag at 23.2 s, took 33.4 s whole, and the answer fell back to megatron-tuned's
  // 25.6 s with finalists screened at 23.2-23.7 s left unsimulated.)
  for (size_t i = 0; i < finalists.size() && i < 3; ++i) {
    const double screened =
        score_of(evaluator_.evaluate({finalists[i]}, Fidelity::kScreen, Deadline::kIgnore)[0]);
    const double whole =
        score_of(evaluator_.evaluate({finalists[i]}, fidelity_, Deadline::kIgnore)[0]);
    if (whole <= 1.05 * screened) break;
  }
  Found best = best_of(finalists, evaluate(finalists), "");
  for (const Found& s : good_seeds) {
    if (score_of(s.eval) < score_of(best.eval)) best = s;
  }
  if (best.ok) {
    best.detail = describe(best.candidate);
  } else {
    best.why_not = no_plan();
  }
  best.simulated = evaluator_.simulated() - simulated;
  best.seconds = (ctx_.now() - start).value();
  return best;
}

Found Searcher::exhaustive() {
  const Seconds start = ctx_.now();
  phase_ = "exhaustive";
  const int64_t simulated = evaluator_.simulated();
  const int layers = ctx_.num_layers();
  // Placements: the mixed layouts plus, for one pipeline, every order of the groups' types.
  std::vector<Layout> layouts = mixed_layouts(ctx_);
  {
    const std::vector<TypeInfo>& types = ctx_.types();
    std::vector<std::vector<int>> combos{{}};
    for (const TypeInfo& t : types) {
      std::vector<std::vector<int>> next;
      for (const auto& c : combos) {
        for (int tp : t.tp_degrees) {
          auto x = c;
          x.push_back(tp);
          next.push_back(x);
        }
      }
      combos = next;
    }
    for (const auto& tps : combos) {
      std::vector<int> pattern;
      std::vector<std::vector<std::vector<int>>> groups;
      for (size_t t = 0; t < types.size(); ++t) {
        groups.push_back(type_groups(types[t], tps[t]));
        pattern.insert(pattern.end(), groups.back().size(), static_cast<int>(t));
      }
      if (static_cast<int>(pattern.size()) > layers) continue;
      std::sort(pattern.begin(), pattern.end());
      do {
        std::vector<size_t> next(types.size(), 0);
        Layout l;
        l.replicas.emplace_back();
        for (int t : pattern) l.replicas[0].push_back(groups[t][next[t]++]);
        if (std::find(layouts.begin(), layouts.end(), l) == layouts.end()) layouts.push_back(l);
      } while (std::next_permutation(pattern.begin(), pattern.end()));
    }
  }
  layouts = constrained_layouts(ctx_, std::move(layouts));
  const std::vector<ScheduleSpec> specs = {
      ScheduleSpec::named(ScheduleKind::kGpipe),          ScheduleSpec::named(ScheduleKind::k1f1b),
      ScheduleSpec::named(ScheduleKind::kInterleaved, 2), ScheduleSpec::named(ScheduleKind::kZbH1),
      ScheduleSpec::named(ScheduleKind::kZbH2),           ScheduleSpec::named(ScheduleKind::kZbV),
      ScheduleSpec::named(ScheduleKind::kDualPipeV)};
  const std::vector<StageShape> shapes = {StageShape::kLinear, StageShape::kInterleaved,
                                          StageShape::kV};

  // Every (micro-batch size, layout, shape, partition) with a bound: the busiest group's
  // compute, which no schedule can beat.
  struct Entry {
    double bound;
    int64_t b;
    size_t layout;
    int shape;
    std::vector<int> bounds;
  };
  std::vector<Entry> entries;
  for (int64_t b : ctx_.micro_batch_sizes()) {
    const int64_t total = ctx_.global_batch() / b;
    const CostModel& cost = ctx_.cost(b);
    for (size_t li = 0; li < layouts.size(); ++li) {
      const Layout& layout = layouts[li];
      const int d = static_cast<int>(layout.replicas.size());
      if (total < d) continue;
      const int64_t m = (total + d - 1) / d;
      const int p = static_cast<int>(layout.replicas[0].size());
      double price = 0;
      for (const auto& rep : layout.replicas) {
        for (const auto& g : rep) {
          for (int dev : g) price += ctx_.price_per_second(dev);
        }
      }
      for (size_t si = 0; si < shapes.size(); ++si) {
        ScheduleSpec shape_spec;
        shape_spec.shape = shapes[si];
        shape_spec.chunks = shapes[si] == StageShape::kLinear ? 1 : 2;
        const int stages = p * shape_spec.chunks;
        if (stages > layers) continue;
        const std::vector<int> stage_group = shape_stage_group(shape_spec, p);
        // Compositions of the layers into `stages` parts, in lexicographic order.
        std::vector<int> cut(stages + 1);
        for (int s = 0; s <= stages; ++s) cut[s] = s;
        cut[stages] = layers;
        while (true) {
          double worst = 0;
          for (const auto& rep : layout.replicas) {
            std::vector<double> load(p, 0);
            for (int s = 0; s < stages; ++s) {
              const ComputeTimes t =
                  cost.compute(LayerRange{cut[s], cut[s + 1]}, DeviceGroup{rep[stage_group[s]]},
                               RecomputePolicy::kNone);
              // A bound for any schedule of the shape: the cheaper backward of the two.
              load[stage_group[s]] +=
                  (t.forward + std::min(t.backward(), t.fused_backward())).value();
            }
            worst = std::max(worst, *std::max_element(load.begin(), load.end()));
          }
          double bound = worst * static_cast<double>(m);
          if (ctx_.options().objective == TuneObjective::kCost) bound *= price;
          entries.push_back(Entry{bound, b, li, static_cast<int>(si), cut});
          // Next composition: advance the last cut that can move, reset the ones after it.
          int i = stages - 1;
          while (i >= 1 && cut[i] == layers - (stages - i)) --i;
          if (i < 1) break;
          ++cut[i];
          for (int j = i + 1; j < stages; ++j) cut[j] = cut[j - 1] + 1;
        }
      }
    }
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.bound < b.bound; });

  Found best;
  double best_score = kInf;
  const size_t chunk = 32;
  for (size_t i = 0; i < entries.size(); i += chunk) {
    if (entries[i].bound >= best_score || evaluator_.out_of_time()) break;
    std::vector<Candidate> batch;
    for (size_t k = i; k < std::min(entries.size(), i + chunk); ++k) {
      const Entry& e = entries[k];
      if (e.bound >= best_score) break;
      const Layout& layout = layouts[e.layout];
      const int d = static_cast<int>(layout.replicas.size());
      const int64_t total = ctx_.global_batch() / e.b;
      for (const ScheduleSpec& spec : specs) {
        if (spec.shape != shapes[e.shape]) continue;
        Candidate c;
        c.micro_batch_size = e.b;
        c.schedule = spec;
        for (int r = 0; r < d; ++r) {
          PipelineSpec rep;
          rep.groups = layout.replicas[r];
          rep.bounds = e.bounds;
          rep.recompute.assign(e.bounds.size() - 1, RecomputePolicy::kNone);
          rep.micro_batches = total / d + (r < total % d ? 1 : 0);
          c.replicas.push_back(std::move(rep));
        }
        if (accepts_all(spec, c)) batch.push_back(std::move(c));
      }
    }
    auto evals = evaluate(batch);
    // The least uniform recompute that fits.
    retry_with_more_recompute(batch, evals);
    for (size_t k = 0; k < batch.size(); ++k) {
      if (score_of(evals[k]) < best_score) {
        best_score = score_of(evals[k]);
        best.ok = true;
        best.candidate = batch[k];
        best.eval = evals[k];
      }
    }
  }
  if (best.ok) {
    best.detail = "exhaustive: " + describe(best.candidate);
  } else {
    best.why_not = no_plan();
  }
  best.simulated = evaluator_.simulated() - simulated;
  best.seconds = (ctx_.now() - start).value();
  return best;
}

}  // namespace motley::tune_internal
