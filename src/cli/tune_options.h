// The options `motley plan` and `motley compare` share (model, cluster, batch shape, objective,
// search budget), their checks, and the search run with its terminal progress bar.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cost_options.h"
#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/model/model.h"
#include "motley/tune/tune.h"

namespace motley::cli {

struct TuneCliOptions {
  std::string model;
  std::string cluster;
  std::optional<int64_t> global_batch;      // unset: 8 sequences per device
  std::optional<int64_t> seq_len;           // unset: the model's
  std::optional<int64_t> micro_batch_size;  // unset: the tuner chooses
  std::string objective = "throughput";
  double time_budget = 8;
  std::optional<int64_t> max_plans;  // unset: no limit
  uint64_t seed = 1;
  int threads = 2;
  bool zero1 = false;                    // --zero1: --zero-stage 1
  std::optional<int> zero_stage;         // unset: searched
  std::optional<int> expert_parallel;    // unset: searched
  std::optional<int> context_parallel;   // unset: searched
  bool vocab_parallel = false;           // --vocab-parallel: every motley plan splits the head
  bool no_vocab_parallel = false;        // --no-vocab-parallel: none does (default: searched)
  bool no_optimizer_step = false;        // --no-optimizer-step: iterations without the step
  std::optional<double> budget;          // USD per hour
  std::optional<double> deadline_hours;  // with train_tokens
  std::optional<double> train_tokens;
  bool quiet = false;
  StackChoice stack;  // --stack / --calibration
  // The layout the user fixes (PlanConstraints): unset or empty leaves it to the search.
  std::optional<int> tensor_parallel;
  std::optional<int> pipeline_parallel;
  std::optional<int> data_parallel;
  std::vector<std::string> schedules;  // families
  std::string devices;                 // --devices: the only devices plans may use
  std::string exclude_devices;         // --exclude-devices
  std::optional<double> memory_headroom;
};

// The cluster device ids a device list names: comma-separated device ids ("3"), id ranges
// ("8-15"), node names (every device of the node) and device type names (every device of the
// type). `option` names the flag in errors. Errors: invalid_argument naming the item and what
// the cluster offers.
Result<std::vector<int>> parse_device_list(const std::string& option, const std::string& list,
                                           const ClusterSpec& cluster);

// Declares the options on `cmd`; the parser refuses a value out of its range (option_checks.h).
void add_tune_options(CLI::App* cmd, TuneCliOptions* opt);
// The constraint flags alone (--tensor-parallel, --pipeline-parallel, --data-parallel,
// --schedule, --devices / --exclude-devices, --memory-headroom); add_tune_options declares them.
void add_constraint_options(CLI::App* cmd, TuneCliOptions* opt);
// The search's --max-plans, --seed and --threads alone (add_tune_options declares them too).
void add_search_limits(CLI::App* cmd, std::optional<int64_t>* max_plans, uint64_t* seed,
                       int* threads);

// The constraints in words ("TP 1, PP 4, DP 1, schedules zb-v or adaptive, 2 devices left
// out, 10% of memory left free"); empty when there are none.
std::string describe_constraints(const PlanConstraints& c);
Json constraints_json(const PlanConstraints& c);

struct TuneSetup {
  ModelSpec model;
  ClusterSpec cluster;
  TuneOptions options;
};

// Checks the objective (the parser checked the numbers) and loads the specs.
Result<TuneSetup> prepare_tune(const TuneCliOptions& opt);

// One line saying how to run the baselines a budget left out (StrategyOutcome::not_run), which
// the budget options name; empty when every baseline ran.
std::string not_run_hint(const std::vector<StrategyOutcome>& baselines);

// The price of interruptions of a chosen plan, as one line ("interruptions: ...") and as JSON;
// the line is empty when no node the plan uses can be interrupted.
std::string preemption_line(const PreemptionEstimate& e, double expected_dollars_per_million,
                            double on_demand_dollars_per_million);
Json preemption_json(const PreemptionEstimate& e);

// tune() with a one-line progress bar on stderr: only on a terminal, only once the search has
// run for a second, never with --quiet; cleared when the search ends.
Result<TuneResult> tune_with_progress(const TuneSetup& setup, bool quiet);

}  // namespace motley::cli
