#include "motley/tune/tune.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "candidate.h"
#include "context.h"
#include "evaluator.h"
#include "motley/plan/validate.h"
#include "space.h"
#include "strategies.h"

namespace motley {
namespace {

using tune_internal::Context;
using tune_internal::Evaluator;
using tune_internal::Found;
using tune_internal::Searcher;

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

std::string ms(double seconds) { return fixed(seconds * 1e3, 2) + " ms"; }

double dollars_per_million_tokens(const Context& ctx, const tune_internal::Evaluation& e) {
  const double tokens = static_cast<double>(ctx.global_batch() * ctx.seq_len());
  return e.iteration_time * e.price_per_second / tokens * 1e6;
}

// Validates a chosen plan the way `motley simulate` does: memory footprints per (replica,
// group, stage) from the cost model.
Status validate_chosen(const Context& ctx, const Plan& plan, const CostModel& cost) {
  ValidateOptions validate;
  const int64_t replicas = static_cast<int64_t>(plan.replicas.size());
  validate.footprint = [&](int r, int g, int stage) {
    const Stage& st = plan.stages[stage];
    MemoryOptions m{st.recompute, 0, replicas, plan.zero1};
    StageMemory mem = cost.stage_memory(LayerRange{st.layer_begin, st.layer_end},
                                        DeviceGroup{plan.replicas[r].groups[g].devices}, m);
    return StageFootprint{mem.total(), mem.activations_per_micro_batch};
  };
  return validate_plan(plan, ctx.model(), ctx.cluster(), validate);
}

// The group loads' maximum over the first replica, per micro-batch.
double bottleneck(const Context& ctx, const Candidate& c) {
  double worst = 0;
  for (const auto& replica : tune_internal::group_loads(ctx, c)) {
    for (const auto& g : replica) worst = std::max(worst, g.total());
  }
  return worst;
}

std::string layer_counts(const PipelineSpec& rep) {
  std::string out;
  for (size_t s = 0; s + 1 < rep.bounds.size(); ++s) {
    if (!out.empty()) out += ", ";
    out += std::to_string(rep.bounds[s + 1] - rep.bounds[s]);
  }
  return out;
}

std::vector<std::string> explain(const Context& ctx, const Found& best, const SimResult& sim,
                                 const Found& megatron, const std::vector<std::string>& names,
                                 const std::vector<Found>& baselines, Seconds lower) {
  std::vector<std::string> out;
  const Candidate& c = best.candidate;
  const PipelineSpec& first = c.replicas[0];

  std::string placement = "Placement: " + tune_internal::describe_layout(ctx, c.replicas) + ".";
  int64_t lo = first.micro_batches, hi = lo;
  std::string counts;
  for (const auto& r : c.replicas) {
    lo = std::min(lo, r.micro_batches);
    hi = std::max(hi, r.micro_batches);
    counts += (counts.empty() ? "" : ", ") + std::to_string(r.micro_batches);
  }
  if (lo != hi) {
    placement += " Replicas run " + counts +
                 " micro-batches: proportional to their speed, so that all finish together.";
  }
  if (megatron.ok) placement += " megatron-1f1b: " + megatron.detail + ".";
  // Devices the plan leaves idle, by type.
  std::map<std::string, int> idle;
  std::vector<bool> used(ctx.num_devices(), false);
  for (const auto& r : c.replicas) {
    for (const auto& g : r.groups) {
      for (int d : g) used[d] = true;
    }
  }
  for (int d = 0; d < ctx.num_devices(); ++d) {
    if (!used[d]) ++idle[ctx.devices()[d].type];
  }
  if (!idle.empty()) {
    std::string text;
    for (const auto& [type, count] : idle) {
      text += (text.empty() ? "" : ", ") + std::to_string(count) + " " + type;
    }
    placement += " Left idle: " + text + " (the best plan found does not use them).";
  }
  out.push_back(placement);

  std::string partition = "Partition: " + std::to_string(first.bounds.size() - 1) +
                          " stages in the first replica with " + layer_counts(first) +
                          " layers; the busiest device group needs " + ms(bottleneck(ctx, c)) +
                          " per micro-batch";
  if (megatron.ok) {
    partition += " (megatron-1f1b's split: " + ms(bottleneck(ctx, megatron.candidate)) +
                 " with micro-batches of " + std::to_string(megatron.candidate.micro_batch_size) +
                 ")";
  }
  const Layer& last = ctx.model().layers.back();
  if (last.kind == LayerKind::kHead && first.bounds.size() > 2) {
    const int size = first.bounds.back() - first.bounds[first.bounds.size() - 2];
    partition +=
        "; the stage with the LM head holds " + std::to_string(size - 1) + " other layer(s)";
  }
  out.push_back(partition + ".");

  std::map<RecomputePolicy, int> policies;
  for (RecomputePolicy p : first.recompute) ++policies[p];
  std::string recompute = "Recompute: ";
  if (policies.size() == 1 && policies.begin()->first == RecomputePolicy::kNone) {
    recompute += "none (everything fits in memory).";
  } else {
    std::string parts;
    for (const auto& [p, k] : policies) {
      parts += (parts.empty() ? "" : ", ") + std::string(recompute_policy_name(p)) + " on " +
               std::to_string(k) + " stage(s)";
    }
    recompute += parts + ", where memory is short.";
  }
  out.push_back(recompute);

  std::string schedule = "Schedule: " + c.schedule.name() + ", micro-batch size " +
                         std::to_string(c.micro_batch_size) + ", bubble " +
                         fixed(100 * sim.bubble_fraction, 1) + "%";
  if (megatron.ok) {
    schedule += " (megatron-1f1b: " + fixed(100 * megatron.eval->bubble_fraction, 1) + "%)";
  }
  out.push_back(schedule + ".");

  if (ctx.options().objective == TuneObjective::kCost) {
    std::string cost =
        "Cost: $" + fixed(dollars_per_million_tokens(ctx, *best.eval), 3) + " per million tokens";
    if (megatron.ok) {
      cost +=
          " (megatron-1f1b: $" + fixed(dollars_per_million_tokens(ctx, *megatron.eval), 3) + ")";
    }
    out.push_back(cost + ".");
  }
  std::string result = "Result: " + ms(sim.iteration_time.value()) + " per iteration, " +
                       fixed(sim.throughput_tokens_per_s, 0) + " tokens/s, " +
                       fixed(lower.value() / sim.iteration_time.value(), 3) + " of the lower bound";
  if (megatron.ok) {
    result += "; " + fixed(megatron.eval->iteration_time / sim.iteration_time.value(), 2) +
              "x megatron-1f1b (" + ms(megatron.eval->iteration_time) + ")";
  }
  out.push_back(result + ".");
  if (megatron.ok) {
    // What each dimension gains alone (the others as megatron-1f1b), and all together.
    std::string alone;
    for (size_t i = 0; i < baselines.size(); ++i) {
      if (!baselines[i].ok || names[i].find("-only") == std::string::npos) continue;
      alone += (alone.empty() ? "" : ", ") + names[i] + " " +
               fixed(megatron.eval->iteration_time / baselines[i].eval->iteration_time, 2) + "x";
    }
    if (!alone.empty()) {
      out.push_back("Gain over megatron-1f1b by one dimension alone: " + alone + "; all together " +
                    fixed(megatron.eval->iteration_time / sim.iteration_time.value(), 2) + "x.");
    }
  }
  for (size_t i = 0; i < baselines.size(); ++i) {
    if (baselines[i].ok &&
        tune_internal::candidate_key(baselines[i].candidate) == tune_internal::candidate_key(c)) {
      out.push_back("This is the " + names[i] +
                    " baseline's plan: no candidate of the full search beat it.");
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
  return {"motley", "megatron-1f1b",  "megatron-interleaved", "zb-h1",        "zb-v",
          "metis",  "partition-only", "placement-only",       "schedule-only"};
}

Result<Seconds> iteration_lower_bound(const TuneOptions& options, const ModelSpec& model,
                                      const ClusterSpec& cluster) {
  MOTLEY_ASSIGN_OR_RETURN(auto ctx, Context::create(options, model, cluster));
  return tune_internal::lower_bound(*ctx);
}

Result<TuneResult> tune(const TuneOptions& options, const ModelSpec& model,
                        const ClusterSpec& cluster) {
  const auto start = std::chrono::steady_clock::now();
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, Context::create(options, model, cluster));
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(options.time_budget.value()));
  Evaluator evaluator(*ctx, deadline);
  std::string phase = "baselines";
  auto report = [&](const std::string& searcher_phase) {
    if (!options.progress) return;
    TuneProgress p;
    p.phase = searcher_phase.empty() ? phase : searcher_phase;
    p.candidates_evaluated = evaluator.simulated();
    p.best_iteration_time = Seconds(evaluator.best_iteration_time());
    p.elapsed =
        Seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    options.progress(p);
  };
  Searcher searcher(*ctx, evaluator, report);

  // The baselines, in tune_strategy_names() order after "motley".
  const std::vector<std::string> names = tune_strategy_names();
  std::vector<std::string> baseline_names(names.begin() + 1, names.end());
  std::vector<Found> baselines(baseline_names.size());
  std::function<Found&(const std::string&)> run_baseline;
  run_baseline = [&](const std::string& name) -> Found& {
    const size_t i =
        std::find(baseline_names.begin(), baseline_names.end(), name) - baseline_names.begin();
    Found& slot = baselines[i];
    if (slot.ok || !slot.why_not.empty()) return slot;
    if (name == "megatron-1f1b") {
      slot = searcher.megatron(ScheduleSpec::named(ScheduleKind::k1f1b));
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
    return slot;
  };

  Found chosen;
  if (options.strategy == "motley") {
    // Everything motley is compared with is also a candidate it may return.
    const bool all = options.report_baselines || !options.exhaustive;
    for (const std::string& name : baseline_names) {
      if (all || name == "megatron-1f1b") run_baseline(name);
    }
    if (options.exhaustive) {
      phase = "exhaustive";
      chosen = searcher.exhaustive();
    } else {
      phase = "structures";
      chosen = searcher.motley(baselines);
    }
  } else {
    chosen = run_baseline(options.strategy);
  }
  phase = "done";
  report("");
  if (!chosen.ok) {
    return infeasible("tune: strategy '" + options.strategy + "' found no plan for model '" +
                      model.name + "' on cluster '" + cluster.name + "': " + chosen.why_not);
  }

  // The winner's plan and full simulation, checked the way `motley simulate` checks a file.
  auto realize = [&](const Found& f, StrategyOutcome* out, SimResult* sim) -> Status {
    MOTLEY_ASSIGN_OR_RETURN(auto replay, evaluator.replay(f.candidate));
    Plan& plan = replay.first;
    const CostModel& cost = ctx->cost(f.candidate.micro_batch_size);
    Status valid = validate_chosen(*ctx, plan, cost);
    if (!valid.is_ok()) {
      return internal_error("tune: the chosen plan does not validate (a bug): " + valid.message());
    }
    if (!replay.second.fits_memory) {
      return internal_error("tune: the chosen plan exceeds memory in simulation (a bug)");
    }
    plan.predicted =
        PredictedMetrics{replay.second.iteration_time, replay.second.throughput_tokens_per_s,
                         replay.second.bubble_fraction, options.cost_model_name};
    out->feasible = true;
    out->detail = f.detail;
    out->iteration_time = replay.second.iteration_time;
    out->tokens_per_s = replay.second.throughput_tokens_per_s;
    out->dollars_per_million_tokens = dollars_per_million_tokens(*ctx, *f.eval);
    out->search_time = Seconds(f.seconds);
    out->candidates_evaluated = f.simulated;
    out->plan = std::move(plan);
    if (sim != nullptr) *sim = std::move(replay.second);
    return Status::ok();
  };

  TuneResult result;
  result.strategy = options.strategy;
  StrategyOutcome best;
  MOTLEY_RETURN_IF_ERROR(realize(chosen, &best, &result.simulation));
  result.plan = std::move(best.plan);
  result.dollars_per_million_tokens = best.dollars_per_million_tokens;
  result.candidates_evaluated = evaluator.simulated();
  result.lower_bound = tune_internal::lower_bound(*ctx);
  result.efficiency = result.lower_bound.value() / result.simulation.iteration_time.value();
  const Found& megatron = baselines[0];
  result.explanation = explain(*ctx, chosen, result.simulation, megatron, baseline_names, baselines,
                               result.lower_bound);
  if (options.strategy == "motley" && options.report_baselines) {
    for (size_t i = 0; i < baselines.size(); ++i) {
      StrategyOutcome o;
      o.strategy = baseline_names[i];
      if (baselines[i].ok) {
        MOTLEY_RETURN_IF_ERROR(realize(baselines[i], &o, nullptr));
      } else {
        o.detail = baselines[i].why_not;
        o.search_time = Seconds(baselines[i].seconds);
        o.candidates_evaluated = baselines[i].simulated;
      }
      result.baselines.push_back(std::move(o));
    }
  }
  result.search_time =
      Seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return result;
}

}  // namespace motley
