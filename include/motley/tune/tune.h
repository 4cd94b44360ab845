// tune: the co-optimizer. Given a model, a cluster and a global batch it searches partition
// (layers per stage, per-stage recompute) x placement (TP degree per device type, pipeline
// depth, device order, data-parallel replicas of different hardware with uneven micro-batch
// counts, interleaved and V-shaped stage maps) x schedule (the named generators and an adaptive
// list scheduler) x micro-batch size, pricing every candidate with the simulator; it also builds
// the named baselines it is compared against. It never runs anything (exec/) or draws (report/).
// Algorithms: docs/planner.md. tune() is thread-safe; it uses TuneOptions::threads threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/cost/cost_model.h"
#include "motley/cost/software_stack.h"
#include "motley/model/layer_cost.h"
#include "motley/model/model.h"
#include "motley/plan/explanation.h"
#include "motley/plan/plan.h"
#include "motley/sim/simulator.h"
#include "motley/tune/preemption.h"

namespace motley {

enum class TuneObjective {
  kThroughput,  // the shortest iteration (most tokens per second)
  // The fewest expected dollars per token: the prices of the devices a plan uses over its
  // tokens per second times its goodput under interruptions (preemption.h).
  kCost,
};
const char* tune_objective_name(TuneObjective objective);  // "throughput", "cost"

// Reported while the search runs (from the calling thread).
struct TuneProgress {
  std::string
      phase;  // "warm starts", "baselines", "structures", "local search", "exhaustive", "done"
  int64_t candidates_evaluated = 0;
  Seconds best_iteration_time;  // 0 before the first feasible candidate
  Seconds elapsed;
};

// Builds the cost model every candidate with this micro-batch shape is priced with. The tuner
// keeps `model` and `cluster` alive while the cost model lives.
using CostModelFactory = std::function<std::unique_ptr<CostModel>(
    const ModelSpec& model, const ClusterSpec& cluster, const Workload& workload)>;

// Seconds since any fixed origin; only differences are read. Called from the evaluation
// threads, so it must be thread-safe. Tests inject a fake one.
using TuneClock = std::function<Seconds()>;

// The layout a user fixes; every strategy's plan meets it (baselines included). Zero or empty
// leaves a dimension to the search.
struct PlanConstraints {
  int tensor_parallel = 0;    // devices in every device group
  int pipeline_parallel = 0;  // device groups in every replica (the pipeline depth)
  int data_parallel = 0;      // replicas
  // Schedule families a plan may use (schedule_family_names()); empty: any.
  std::vector<std::string> schedules;
  // Cluster device ids no plan uses (ascending, unique); the rest must hold some device.
  std::vector<int> excluded_devices;
  // The share of every device's memory a plan leaves free (the framework's own buffers, the
  // allocator's fragmentation), in [0, 1): peaks are checked against (1 - headroom) x capacity.
  double memory_headroom = 0;
  bool any() const {
    return tensor_parallel > 0 || pipeline_parallel > 0 || data_parallel > 0 ||
           !schedules.empty() || !excluded_devices.empty() || memory_headroom > 0;
  }
};

// The families PlanConstraints::schedules names: schedule_kind_names() and "adaptive" (the list
// scheduler on any stage shape).
std::vector<std::string> schedule_family_names();

struct TuneOptions {
  int64_t global_batch = 0;  // sequences per iteration; required, > 0
  int64_t seq_len = 0;       // 0: the model's default_seq_len
  // Sequences per micro-batch; 0 lets the tuner choose among 1, 2 and 4 (baselines use 1).
  int64_t micro_batch_size = 0;
  TuneObjective objective = TuneObjective::kThroughput;
  // Constraints every plan must meet (each strategy's): the devices it uses cost at most
  // `budget_per_hour` USD an hour (0: no limit); `train_tokens` tokens take at most `deadline`
  // of expected wall-clock time, interruptions included (both 0: no deadline).
  double budget_per_hour = 0;
  double train_tokens = 0;
  Seconds deadline;
  // Time limit of the search, on `clock`. The result is deterministic for a seed whenever the
  // search converges before the limit (the usual case); a search cut short returns the best so
  // far, which then depends on the machine's speed.
  Seconds time_budget = Seconds(8);
  // Limit on the candidates simulated (0: none; those refused on their price alone, over
  // budget_per_hour, or outside the constraints do not count). A search cut short by it returns the
  // best so far, the same whatever the machine's speed and the thread count.
  int64_t max_evaluations = 0;
  // What time_budget, TuneProgress::elapsed and the search times are measured on; empty: the
  // steady clock.
  TuneClock clock;
  uint64_t seed = 1;
  int threads = 2;  // candidates simulated in parallel; the result does not depend on it
  // "motley" (the full search) or one of the baselines of tune_strategy_names().
  std::string strategy = "motley";
  // Enumerate partitions x placements x named schedules completely (motley only; at most
  // kExhaustiveMaxDevices devices and kExhaustiveMaxLayers layers).
  bool exhaustive = false;
  // Every plan uses this ZeRO stage (Plan::zero_stage, 0 to 3); unset, each candidate says
  // (motley searches 0 to 3, megatron-tuned 0 and 1).
  std::optional<int> zero_stage;
  // Every plan splits its MoE layers' experts over groups of this many replicas
  // (Plan::expert_parallel); 0: searched (motley tries the degrees that divide the replicas and
  // every MoE layer's experts; the baselines use none).
  int expert_parallel = 0;
  // Every plan splits its sequences over groups of this many replicas (Plan::context_parallel);
  // 0: searched (motley tries 2, 4 and 8 where the model's sequence mixing is all attention,
  // the sequence splits into 2c chunks and no expert parallelism is fixed, for layouts short of
  // memory without it, under the analytic cost model only; the baselines use none); 1: none.
  int context_parallel = 0;
  // Vocabulary parallelism (Plan's vocabulary shards: the head split by rows over every group
  // of each pipeline): unset, searched (motley tries it with the adaptive scheduler where the
  // model's last layer is a head; the baselines never split it); true, every motley candidate
  // splits it; false, none does.
  std::optional<bool> vocab_parallel;
  // Megatron-LM's sequence parallelism inside tensor-parallel groups: searched (motley and
  // megatron-tuned try candidates with and without it) unless false, which rules it out. Only
  // the analytic cost model prices it (a cost_model factory rules it out).
  bool search_sequence_parallel = true;
  // The iteration includes the optimizer step, as training does. false: every plan is
  // simulated, estimated and bounded without it, to compare with iteration times published
  // that way (OctoPipe's, the zero-bubble schedules').
  bool optimizer_step = true;
  PlanConstraints constraints;
  // Keep every baseline's outcome in TuneResult::baselines (motley only). The full search
  // builds the baselines anyway and may return one of their plans; the exhaustive search builds
  // only megatron-1f1b (for the explanation) unless this is set, and returns its own best.
  bool report_baselines = true;
  // Plans on this cluster whose structure the full search also starts from and may return,
  // such as the survivors of an earlier plan (replan.h): per replica its device groups, stages
  // and micro-batch count, and the plan's schedule and micro-batch size. Their actions are not
  // read, and the micro-batch counts are scaled to the global batch. One whose stages are not a
  // linear, interleaved or V map, or whose micro-batch size does not divide the global batch,
  // is left out (its outcome says why).
  std::vector<Plan> warm_starts;
  std::function<void(const TuneProgress&)> progress;
  CostModelFactory cost_model;  // empty: AnalyticCostModel with the model's dtype and `stack`
  // The software stack the analytic cost model assumes; unset: the cluster's software_stack,
  // else the default stack (software_stacks().front()), as `motley simulate` prices a plan.
  std::optional<SoftwareStack> stack;
  std::string cost_model_name = "analytic";  // PredictedMetrics::cost_model of the plans
};

inline constexpr int kExhaustiveMaxDevices = 8;
inline constexpr int kExhaustiveMaxLayers = 16;

// "motley" first, then the baselines: "megatron-1f1b" (Megatron-LM's default layout),
// "megatron-tuned" (the best of a sweep of Megatron-LM layouts), "megatron-interleaved",
// "zb-h1", "zb-v", "metis", "partition-only", "placement-only", "schedule-only".
std::vector<std::string> tune_strategy_names();

// What one strategy produced.
struct StrategyOutcome {
  std::string strategy;
  bool feasible = false;  // a memory-feasible plan exists under this strategy's rules
  // It did not run: a budget (time or evaluations) was spent before it started. `detail` says
  // which; it may have plans, the search's budget left none to look for them.
  bool not_run = false;
  // What it chose ("TP 1 x PP 8 x DP 2, 1f1b, Megatron-LM's layer split, ...") or why none.
  std::string detail;
  Plan plan;  // with predicted metrics; empty when !feasible
  Seconds iteration_time;
  double tokens_per_s = 0;
  // Expected, interruptions included (goodput below), and with every spot node bought on
  // demand instead.
  double dollars_per_million_tokens = 0;
  double on_demand_dollars_per_million_tokens = 0;
  PreemptionEstimate preemption;  // of `plan` on the cluster as it is
  Seconds search_time;
  int64_t candidates_evaluated = 0;
};

struct TuneResult {
  std::string strategy;  // the strategy that was asked for
  Plan plan;             // the best memory-feasible plan, predicted metrics filled
  SimResult simulation;  // its simulation (with the critical path, without the timeline)
  double dollars_per_million_tokens = 0;            // expected (StrategyOutcome's)
  double on_demand_dollars_per_million_tokens = 0;  // spot nodes bought on demand
  PreemptionEstimate preemption;
  Seconds search_time;
  // Candidates evaluated: assembled into plans and, when they fit memory, simulated (repeats
  // served from the cache are not counted).
  int64_t candidates_evaluated = 0;
  // A bound no plan on this cluster can beat: the work of one iteration spread perfectly over
  // every device at its effective rate (iteration_lower_bound); efficiency = bound / time.
  Seconds lower_bound;
  double efficiency = 0;
  // The decisions — placement, partition, recompute, schedule — and the result against the
  // lower bound, megatron-1f1b and the single-dimension baselines, as numbers;
  // report/explanation.h renders it as text.
  PlanExplanation explanation;
  // motley with report_baselines: every baseline's outcome, in tune_strategy_names() order.
  std::vector<StrategyOutcome> baselines;
  // Each of TuneOptions::warm_starts as it is (strategy "warm start"), simulated whole (with
  // more recompute if it does not fit as it is), in their order; motley only.
  std::vector<StrategyOutcome> warm_starts;
};

// Searches for the best plan under `options.strategy`.
// Errors: invalid_argument for bad options (naming the option and what is allowed: unknown
// strategy, non-positive global batch, exhaustive on a too large instance, ...);
// infeasible when no plan of the strategy fits the cluster's memory.
Result<TuneResult> tune(const TuneOptions& options, const ModelSpec& model,
                        const ClusterSpec& cluster);

// The result's chosen plan as a row beside the baselines: strategy "motley", its times,
// prices, search time and candidates, with `detail` as the row's text.
StrategyOutcome motley_outcome(const TuneResult& result, std::string detail);

// The lower bound on the iteration time of any plan with the options' global batch, sequence
// length and micro-batch sizes: per layer, F+B+W device-seconds at its best tensor-parallel
// degree on each device type, plus one optimizer pass over the layer's parameters, spread over
// the devices by a fractional assignment (the LP dual of docs/planner.md). Ignores memory,
// communication and bubbles, so every simulated iteration is at least this long.
Result<Seconds> iteration_lower_bound(const TuneOptions& options, const ModelSpec& model,
                                      const ClusterSpec& cluster);

}  // namespace motley
