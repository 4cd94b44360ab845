#include "motley/tune/tune.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "candidate.h"
#include "context.h"
#include "evaluator.h"
#include "motley/plan/dependencies.h"
#include "motley/plan/validate.h"
#include "space.h"
#include "strategies.h"

namespace motley {
namespace {

using tune_internal::Context;
using tune_internal::Evaluator;
using tune_internal::Found;
using tune_internal::Searcher;

// Expected USD per million tokens of an evaluation: its devices' price over its goodput.
double dollars_per_million_tokens(const Context& ctx, const tune_internal::Evaluation& e) {
  // In floating point: the product of two user-given counts may not fit int64_t.
  const double tokens =
      static_cast<double>(ctx.global_batch()) * static_cast<double>(ctx.seq_len());
  return e.iteration_time * e.price_per_second / e.goodput / tokens * 1e6;
}

// Validates a chosen plan the way `motley simulate` does: memory footprints per (replica,
// group, stage) from the cost model.
Status validate_chosen(const Context& ctx, const Plan& plan, const CostModel& cost) {
  ValidateOptions validate;
  // The plan names the context's own model and cluster (assemble takes their refs from it):
  // hashing a 16,384-device cluster again for every strategy's plan would check nothing.
  validate.check_spec_hashes = false;
  const int64_t replicas = static_cast<int64_t>(plan.replicas.size());
  // A footprint depends on the stage and the group's device types alone: replicas of one make
  // ask the same ones, each priced once.
  std::map<std::pair<int, std::vector<int>>, StageFootprint> priced;
  validate.footprint = [&](int r, int g, int stage) {
    const std::vector<int>& devices = plan.replicas[r].groups[g].devices;
    std::pair<int, std::vector<int>> key{stage, {}};
    key.second.reserve(devices.size());
    for (int d : devices) key.second.push_back(ctx.type_of(d));
    if (auto it = priced.find(key); it != priced.end()) return it->second;
    const Stage& st = plan.stages[stage];
    MemoryOptions m{st.recompute, 0, replicas, plan.zero_stage, plan.expert_parallel};
    StageMemory mem = stage_memory_with(
        cost, LayerRange{st.layer_begin, st.layer_end, vocab_share(plan.stages, stage)},
        DeviceGroup{devices}, m, st.recompute_layers);
    const StageFootprint footprint{mem.total(), mem.activations_per_micro_batch,
                                   mem.recomputed_activations_per_micro_batch};
    priced.emplace(std::move(key), footprint);
    return footprint;
  };
  return validate_plan(plan, ctx.model(), ctx.cluster(), validate);
}

// The group loads' maximum per micro-batch, over the replicas the estimate prices (the first of
// each make: on 16,384 replicas pricing them all took seconds).
double bottleneck(const Context& ctx, const Candidate& c) {
  double worst = 0;
  const std::vector<size_t> priced = tune_internal::estimated_replicas(ctx, c);
  for (const auto& replica : tune_internal::group_loads(ctx, c, nullptr, &priced)) {
    for (const auto& g : replica) worst = std::max(worst, g.total());
  }
  return worst;
}

// What was decided for `best` and what it is measured against (report/explanation.h renders
// it): megatron-1f1b's figures when it found a plan, the single-dimension baselines' times, and
// the baseline whose plan `best` is.
PlanExplanation explain(const Context& ctx, const Found& best, const SimResult& sim,
                        const Found& megatron, const std::vector<std::string>& names,
                        const std::vector<Found>& baselines, Seconds lower) {
  PlanExplanation out;
  const Candidate& c = best.candidate;
  const PipelineSpec& first = c.replicas[0];
  out.layout = tune_internal::describe_layout(ctx, c.replicas);
  std::vector<bool> used(ctx.num_cluster_devices(), false);
  for (const PipelineSpec& r : c.replicas) {
    out.replica_micro_batches.push_back(r.micro_batches);
    for (const auto& g : r.groups) {
      for (int d : g) used[d] = true;
    }
  }
  std::map<std::string, int> idle;
  for (const Device& d : ctx.devices()) {
    if (!used[d.id]) ++idle[d.type];
  }
  out.idle_devices.assign(idle.begin(), idle.end());

  for (size_t s = 0; s + 1 < first.bounds.size(); ++s) {
    out.stage_layers.push_back(first.bounds[s + 1] - first.bounds[s]);
  }
  out.bottleneck = Seconds(bottleneck(ctx, c));
  out.ends_with_head = ctx.model().layers.back().kind == LayerKind::kHead;
  std::map<RecomputePolicy, int> policies;
  for (RecomputePolicy p : first.recompute) ++policies[p];
  out.recompute.assign(policies.begin(), policies.end());
  out.recompute_layers = static_cast<int>(c.recompute_layers.size());

  const int zero = ctx.options().zero_stage.value_or(c.zero_stage);
  if (zero > 0 && c.replicas.size() > 1) {
    out.zero_stage = zero;
    out.zero_replicas = static_cast<int64_t>(c.replicas.size());
  }
  if (c.expert_parallel > 1) {
    out.expert_parallel = c.expert_parallel;
    out.expert_groups = static_cast<int64_t>(c.replicas.size()) / c.expert_parallel;
  }
  out.context_parallel = c.context_parallel;
  if (c.vocab_parallel) {
    const CostModel& cost = ctx.cost(c.micro_batch_size, c.sequence_parallel, c.context_parallel);
    const int64_t vocab = head_vocab(ctx.model());
    for (double share :
         tune_internal::vocab_shard_shares(ctx, cost, c, first.groups, ctx.num_layers() - 1)) {
      out.vocab_rows.push_back(std::llround(share * static_cast<double>(vocab)));
    }
    out.vocab_rows_balance_load = !c.head_shares.empty();
    if (c.vocab_embedding) {
      const double rows = static_cast<double>(embedding_vocab(ctx.model()));
      for (double share : tune_internal::vocab_shard_shares(ctx, cost, c, first.groups, 0)) {
        out.embedding_rows.push_back(std::llround(share * rows));
      }
    }
  }
  out.sequence_parallel = c.sequence_parallel;
  out.schedule = c.schedule.name();
  out.micro_batch_size = c.micro_batch_size;
  out.bubble_fraction = sim.bubble_fraction;
  out.cost_objective = ctx.options().objective == TuneObjective::kCost;
  out.dollars_per_million_tokens = dollars_per_million_tokens(ctx, *best.eval);
  out.iteration_time = sim.iteration_time;
  out.tokens_per_s = sim.throughput_tokens_per_s;
  out.lower_bound = lower;

  if (megatron.ok) {
    out.megatron = ExplainedBaseline{megatron.detail,
                                     Seconds(bottleneck(ctx, megatron.candidate)),
                                     megatron.candidate.micro_batch_size,
                                     megatron.eval->bubble_fraction,
                                     Seconds(megatron.eval->iteration_time),
                                     dollars_per_million_tokens(ctx, *megatron.eval)};
    for (size_t i = 0; i < baselines.size(); ++i) {
      if (!baselines[i].ok || names[i].find("-only") == std::string::npos) continue;
      out.single_dimension.push_back(
          DimensionOutcome{names[i], Seconds(baselines[i].eval->iteration_time)});
    }
  }
  for (size_t i = 0; i < baselines.size(); ++i) {
    if (names[i] == "megatron-tuned" && baselines[i].ok) {
      out.megatron_tuned = Seconds(baselines[i].eval->iteration_time);
    }
  }
  // (A key of thousands of replicas costs milliseconds: the answer's is made once, and only
  // for a baseline with as many replicas.)
  const std::string key = tune_internal::candidate_key(c);
  for (size_t i = 0; i < baselines.size(); ++i) {
    if (baselines[i].ok && baselines[i].candidate.replicas.size() == c.replicas.size() &&
        tune_internal::candidate_key(baselines[i].candidate) == key) {
      out.baseline_plan = names[i];
      break;
    }
  }
  return out;
}

}  // namespace

const char* tune_objective_name(TuneObjective objective) {
  return objective == TuneObjective::kCost ? "cost" : "throughput";
}

std::vector<std::string> tune_strategy_names() {
  return {"motley", "megatron-1f1b", "megatron-tuned", "megatron-interleaved", "zb-h1",
          "zb-v",   "metis",         "partition-only", "placement-only",       "schedule-only"};
}

std::vector<std::string> schedule_family_names() {
  std::vector<std::string> names = schedule_kind_names();
  names.emplace_back("adaptive");
  return names;
}

Result<Seconds> iteration_lower_bound(const TuneOptions& options, const ModelSpec& model,
                                      const ClusterSpec& cluster) {
  MOTLEY_ASSIGN_OR_RETURN(auto ctx, Context::create(options, model, cluster));
  return tune_internal::lower_bound(*ctx);
}

namespace {

// Megatron-LM's layouts, which every plan is compared with; the other baselines only compare.
bool reference_baseline(const std::string& name) {
  return name == "megatron-1f1b" || name == "megatron-interleaved" || name == "megatron-tuned";
}

// A warm start's structure with its micro-batch counts scaled to the global batch (largest
// remainders first), simulated as it is.
Found warm_start(const tune_internal::Context& ctx, Searcher& searcher, const Plan& plan) {
  Found refused;
  Result<Candidate> converted = tune_internal::candidate_from_plan(plan);
  if (!converted.is_ok()) {
    refused.why_not = "warm start: " + converted.status().message();
    return refused;
  }
  Candidate c = std::move(converted).value();
  const int64_t b = c.micro_batch_size;
  if (b <= 0 || ctx.global_batch() % b != 0) {
    refused.why_not =
        fmt::format("warm start: micro-batch size {} does not divide the global batch {}", b,
                    ctx.global_batch());
    return refused;
  }
  const std::vector<int64_t>& sizes = ctx.micro_batch_sizes();
  if (std::find(sizes.begin(), sizes.end(), b) == sizes.end()) {
    refused.why_not =
        fmt::format("warm start: micro-batch size {} is not one the search may use ({})", b,
                    fmt::join(sizes, ", "));
    return refused;
  }
  // Sequence parallelism where this search prices it (the cluster may have lost its TP groups).
  c.sequence_parallel = c.sequence_parallel && ctx.searches_sequence_parallel();
  const int64_t total = ctx.global_batch() / b;
  if (c.context_parallel > 1) {
    // A context group's members run the group's micro-batches; the groups share them evenly.
    const std::vector<int>& degrees = ctx.context_degrees();
    const size_t members = static_cast<size_t>(c.context_parallel);
    const int64_t groups = static_cast<int64_t>(c.replicas.size() / members);
    if (std::find(degrees.begin(), degrees.end(), c.context_parallel) == degrees.end() ||
        c.replicas.size() % members != 0 || total < groups) {
      refused.why_not =
          fmt::format("warm start: context parallelism {} is not one the search may use here",
                      c.context_parallel);
      return refused;
    }
    for (size_t r = 0; r < c.replicas.size(); ++r) {
      const int64_t g = static_cast<int64_t>(r / members);
      c.replicas[r].micro_batches = total / groups + (g < total % groups ? 1 : 0);
    }
    return searcher.given(c, "the warm start's structure: ");
  }
  int64_t had = 0;
  for (const PipelineSpec& r : c.replicas) had += r.micro_batches;
  if (had <= 0 || total < static_cast<int64_t>(c.replicas.size())) {
    refused.why_not = "warm start: fewer micro-batches than replicas";
    return refused;
  }
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < c.replicas.size(); ++i) {
    const double share = static_cast<double>(c.replicas[i].micro_batches) *
                         static_cast<double>(total) / static_cast<double>(had);
    c.replicas[i].micro_batches = std::max<int64_t>(1, static_cast<int64_t>(share));
    given += c.replicas[i].micro_batches;
    remainders.emplace_back(share - std::floor(share), i);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  for (size_t k = 0; given < total; k = (k + 1) % remainders.size(), ++given) {
    ++c.replicas[remainders[k].second].micro_batches;
  }
  for (size_t k = 0; given > total; k = (k + 1) % remainders.size()) {
    PipelineSpec& r = c.replicas[remainders[remainders.size() - 1 - k].second];
    if (r.micro_batches > 1) {
      --r.micro_batches;
      --given;
    }
  }
  // ZeRO-2 and -3 and expert parallelism run every replica's micro-batches in lockstep, so the
  // replicas need equal counts, and expert groups must divide them. Replicas that survive in a
  // number that cannot keep that fall back to the distributed optimizer and whole experts,
  // unless the options fix those.
  const int64_t replicas = static_cast<int64_t>(c.replicas.size());
  const bool even = total % replicas == 0;
  const bool experts_split = c.expert_parallel > 1 && even && replicas % c.expert_parallel == 0;
  if ((c.zero_stage >= 2 && !even) || (c.expert_parallel > 1 && !experts_split)) {
    const bool zero_fixed = ctx.options().zero_stage.value_or(0) >= 2 && !even;
    const bool experts_fixed = ctx.options().expert_parallel > 1 && !experts_split;
    if (zero_fixed || experts_fixed) {
      refused.why_not = fmt::format(
          "warm start: {} replicas cannot share {} micro-batches evenly, as the fixed ZeRO "
          "stage or expert parallelism needs",
          replicas, total);
      return refused;
    }
    if (c.zero_stage >= 2 && !even) c.zero_stage = 1;
    if (!experts_split) c.expert_parallel = 1;
  }
  return searcher.given(c, "the warm start's structure: ");
}

}  // namespace

Result<TuneResult> tune(const TuneOptions& options, const ModelSpec& model,
                        const ClusterSpec& cluster) {
  const Seconds start = tune_internal::clock_now(options);
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, Context::create(options, model, cluster));
  Evaluator evaluator(*ctx, start + options.time_budget);
  std::string phase = "baselines";
  auto report = [&](const std::string& searcher_phase) {
    if (!options.progress) return;
    TuneProgress p;
    p.phase = searcher_phase.empty() ? phase : searcher_phase;
    p.candidates_evaluated = evaluator.simulated();
    p.best_iteration_time = Seconds(evaluator.best_iteration_time());
    p.elapsed = ctx->now() - start;
    options.progress(p);
  };
  Searcher searcher(*ctx, evaluator, report);

  // The baselines, in tune_strategy_names() order after "motley".
  const std::vector<std::string> names = tune_strategy_names();
  std::vector<std::string> baseline_names(names.begin() + 1, names.end());
  // After the search: the answer simulated whole (the evaluator's own part of the reserve), then
  // it, the baselines it reports and the warm starts replayed and validated side by side (about
  // three simulations each: on 65,536 devices, with two, the call ended up to 0.36 s past the
  // budget), on the threads.
  const bool with_baselines = options.strategy == "motley" && options.report_baselines;
  // `replayed`: the baselines whose plans may be replayed then.
  auto reserve_for_replays = [&](size_t replayed) {
    const size_t jobs = 1 + options.warm_starts.size() + (with_baselines ? replayed : 0);
    const size_t threads = static_cast<size_t>(std::max(options.threads, 1));
    evaluator.reserve_for(static_cast<int>(3 * ((jobs + threads - 1) / threads)));
  };
  reserve_for_replays(baseline_names.size());
  std::vector<Found> baselines(baseline_names.size());
  std::function<Found&(const std::string&)> run_baseline;
  run_baseline = [&](const std::string& name) -> Found& {
    const size_t i =
        std::find(baseline_names.begin(), baseline_names.end(), name) - baseline_names.begin();
    Found& slot = baselines[i];
    if (slot.ok || !slot.why_not.empty()) return slot;
    const int64_t unreached = evaluator.unreached();
    // Megatron-LM's layouts are what every plan is compared with: they always run. Another
    // baseline that starts with the budget spent could simulate nothing new, only build and
    // rank candidates for nothing (seconds on tens of thousands of devices).
    if (!reference_baseline(name) && evaluator.out_of_time()) {
      slot.why_not = fmt::format("not run: {} before it started", evaluator.budget_spent());
      slot.not_run = true;
      return slot;
    }
    if (name == "megatron-1f1b") {
      slot = searcher.megatron(ScheduleSpec::named(ScheduleKind::k1f1b));
    } else if (name == "megatron-tuned") {
      // The sweep includes the default layouts: a user starts from them.
      std::vector<Found> defaults{run_baseline("megatron-1f1b"),
                                  run_baseline("megatron-interleaved")};
      slot = searcher.megatron_tuned(defaults);
    } else if (name == "megatron-interleaved") {
      slot = searcher.megatron(ScheduleSpec::named(ScheduleKind::kInterleaved, 2));
    } else if (name == "zb-h1") {
      ScheduleSpec zb = ScheduleSpec::named(ScheduleKind::kZbH1);
      zb.limit_in_flight = false;
      slot = searcher.megatron(zb);
    } else if (name == "zb-v") {
      slot = searcher.megatron(ScheduleSpec::named(ScheduleKind::kZbV));
    } else if (name == "metis") {
      slot = searcher.metis();
    } else if (name == "partition-only") {
      slot = searcher.partition_only(run_baseline("megatron-1f1b"));
    } else if (name == "placement-only") {
      slot = searcher.placement_only();
    } else if (name == "schedule-only") {
      slot = searcher.schedule_only(run_baseline("megatron-1f1b"));
    }
    if (!slot.ok && slot.why_not.empty()) slot.why_not = "no plan";
    // Its reason covers what was simulated; say so when a budget left candidates out.
    if (!slot.ok && evaluator.unreached() > unreached) {
      slot.why_not += fmt::format(" among the candidates simulated (others were not: {})",
                                  evaluator.unreached_why());
    }
    return slot;
  };

  Found chosen;
  std::vector<Found> warm;  // options.warm_starts' outcomes
  if (options.strategy == "motley") {
    // First, so that a search cut short by its budget still has them.
    phase = "warm starts";
    for (const Plan& plan : options.warm_starts) warm.push_back(warm_start(*ctx, searcher, plan));
    phase = "baselines";
    // Everything motley is compared with is also a candidate it may return. Megatron-LM's
    // layouts run first; the other baselines, which only compare, run before the search while
    // a third of the time budget is left unspent, and after it otherwise, as the budget allows
    // (on 65,536 devices each is a whole simulation of a fraction of a second, and together
    // they left the search one second of eight).
    const bool all = options.report_baselines || !options.exhaustive;
    std::vector<std::string> deferred;
    for (const std::string& name : baseline_names) {
      if (!all && name != "megatron-1f1b") continue;
      if (!reference_baseline(name) && evaluator.spent_time_share(1.0 / 3)) {
        deferred.push_back(name);
      } else {
        run_baseline(name);
      }
    }
    // A deferred baseline has no plan to replay unless it runs after the search: the search
    // may use its share of the reserve, and it is taken back when the baseline starts.
    size_t replayed = baseline_names.size() - deferred.size();
    reserve_for_replays(replayed);
    if (options.exhaustive) {
      phase = "exhaustive";
      chosen = searcher.exhaustive();
    } else {
      phase = "structures";
      std::vector<Found> seeds = baselines;
      seeds.insert(seeds.end(), warm.begin(), warm.end());
      chosen = searcher.motley(seeds);
    }
    // The deferred baselines; the full search returns the best of them where it beats its own
    // answer (the exhaustive one returns its own).
    if (!deferred.empty()) searcher.set_phase("baselines");
    for (const std::string& name : deferred) {
      reserve_for_replays(++replayed);
      const Found& f = run_baseline(name);
      if (!options.exhaustive && f.ok && f.eval->ok &&
          (!chosen.ok || f.eval->score < chosen.eval->score)) {
        chosen = f;
      }
    }
  } else {
    chosen = run_baseline(options.strategy);
  }
  phase = "done";
  report("");
  if (!chosen.ok) {
    std::string why = chosen.why_not;
    if (evaluator.out_of_time()) {
      why +=
          options.max_evaluations > 0 && evaluator.simulated() >= options.max_evaluations
              ? fmt::format(" (the search stopped at its evaluation budget, 'max_evaluations' {})",
                            options.max_evaluations)
              : fmt::format(" (the search stopped at its time budget, 'time_budget' {:.1f} s)",
                            options.time_budget.value());
    }
    return infeasible(
        fmt::format("tune: strategy '{}' found no plan for model '{}' on cluster "
                    "'{}': {}",
                    options.strategy, model.name, cluster.name, why));
  }

  // The winner's plan and full simulation, checked the way `motley simulate` checks a file.
  auto realize = [&](const Found& f, StrategyOutcome* out, SimResult* sim,
                     Simulator& simulator) -> Status {
    MOTLEY_ASSIGN_OR_RETURN(auto replay, evaluator.replay(f.candidate, simulator));
    Plan& plan = replay.first;
    const CostModel& cost = ctx->cost(f.candidate.micro_batch_size, f.candidate.sequence_parallel,
                                      f.candidate.context_parallel);
    Status valid = validate_chosen(*ctx, plan, cost);
    if (!valid.is_ok()) {
      return internal_error(
          fmt::format("tune: the chosen plan does not validate (a bug): {}", valid.message()));
    }
    if (!replay.second.fits_memory) {
      return internal_error("tune: the chosen plan exceeds memory in simulation (a bug)");
    }
    plan.predicted =
        PredictedMetrics{replay.second.iteration_time, replay.second.throughput_tokens_per_s,
                         replay.second.bubble_fraction, options.cost_model_name};
    plan.predicted->optimizer_step = options.optimizer_step;
    out->feasible = true;
    out->detail = f.detail;
    out->iteration_time = replay.second.iteration_time;
    out->tokens_per_s = replay.second.throughput_tokens_per_s;
    const PlanPricing pricing = price_plan(plan, cost, ctx->cluster(), out->iteration_time);
    out->preemption = pricing.preemption;
    out->dollars_per_million_tokens = pricing.dollars_per_million_tokens;
    out->on_demand_dollars_per_million_tokens = pricing.on_demand_dollars_per_million_tokens;
    out->search_time = Seconds(f.seconds);
    out->candidates_evaluated = f.simulated;
    out->plan = std::move(plan);
    if (sim != nullptr) *sim = std::move(replay.second);
    return Status::ok();
  };

  TuneResult result;
  result.strategy = options.strategy;
  // The chosen plan, the baselines' and the warm starts' are realized side by side: on large
  // clusters each is a whole simulation and a validation.
  StrategyOutcome best;
  std::vector<StrategyOutcome> outcomes(baselines.size() + warm.size());
  std::vector<const Found*> jobs{&chosen};
  if (with_baselines) {
    for (const Found& f : baselines) jobs.push_back(&f);
  }
  for (const Found& f : warm) jobs.push_back(&f);
  // A baseline whose plan is the chosen one (often so on the largest clusters) takes the
  // chosen plan's realization rather than a second one.
  std::vector<char> same_as_chosen(jobs.size(), 0);
  for (size_t i = 1; i < jobs.size(); ++i) {
    same_as_chosen[i] = chosen.ok && jobs[i]->ok && jobs[i]->candidate == chosen.candidate;
  }
  std::vector<Status> realized(jobs.size());
  evaluator.for_each(jobs.size(), [&](size_t i, Simulator& simulator) {
    if (!jobs[i]->ok || same_as_chosen[i]) return;
    realized[i] = i == 0 ? realize(chosen, &best, &result.simulation, simulator)
                         : realize(*jobs[i], &outcomes[i - 1], nullptr, simulator);
  });
  for (const Status& s : realized) MOTLEY_RETURN_IF_ERROR(s);
  for (size_t i = 1; i < jobs.size(); ++i) {
    if (!same_as_chosen[i]) continue;
    StrategyOutcome& o = outcomes[i - 1];
    o = best;
    o.detail = jobs[i]->detail;
    o.search_time = Seconds(jobs[i]->seconds);
    o.candidates_evaluated = jobs[i]->simulated;
  }
  result.plan = std::move(best.plan);
  result.dollars_per_million_tokens = best.dollars_per_million_tokens;
  result.on_demand_dollars_per_million_tokens = best.on_demand_dollars_per_million_tokens;
  result.preemption = best.preemption;
  result.candidates_evaluated = evaluator.simulated();
  result.lower_bound = tune_internal::lower_bound(*ctx);
  result.efficiency = result.lower_bound.value() / result.simulation.iteration_time.value();
  const Found& megatron = baselines[0];
  result.explanation = explain(*ctx, chosen, result.simulation, megatron, baseline_names, baselines,
                               result.lower_bound);
  result.explanation.recomputed_micro_batches =
      micro_batches_recomputed_alone(result.plan.stages, result.plan.replicas[0]);
  size_t next_outcome = 0;
  if (with_baselines) {
    for (size_t i = 0; i < baselines.size(); ++i) {
      StrategyOutcome o = std::move(outcomes[next_outcome++]);
      o.strategy = baseline_names[i];
      if (!baselines[i].ok) {
        o.detail = baselines[i].why_not;
        o.not_run = baselines[i].not_run;
        o.search_time = Seconds(baselines[i].seconds);
        o.candidates_evaluated = baselines[i].simulated;
      }
      result.baselines.push_back(std::move(o));
    }
  }
  for (const Found& f : warm) {
    StrategyOutcome o = std::move(outcomes[next_outcome++]);
    o.strategy = "warm start";
    if (!f.ok) o.detail = f.why_not;
    result.warm_starts.push_back(std::move(o));
  }
  result.search_time = ctx->now() - start;
  return result;
}

StrategyOutcome motley_outcome(const TuneResult& result, std::string detail) {
  StrategyOutcome mine;
  mine.strategy = "motley";
  mine.feasible = true;
  mine.detail = std::move(detail);
  mine.plan = result.plan;
  mine.iteration_time = result.simulation.iteration_time;
  mine.tokens_per_s = result.simulation.throughput_tokens_per_s;
  mine.dollars_per_million_tokens = result.dollars_per_million_tokens;
  mine.on_demand_dollars_per_million_tokens = result.on_demand_dollars_per_million_tokens;
  mine.preemption = result.preemption;
  mine.search_time = result.search_time;
  mine.candidates_evaluated = result.candidates_evaluated;
  return mine;
}

}  // namespace motley
