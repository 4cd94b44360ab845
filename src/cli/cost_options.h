// The options every command that prices a plan shares: which software stack the cost model
// assumes (--stack NAME, or a fitted one from --calibration FILE, else the cluster's, else
// megatron-core), and the cost-model options of a plan built from them. Thread-compatible.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley::cli {

struct StackChoice {
  std::string stack;        // a built-in stack's name
  std::string calibration;  // a motley.calibration/1 file
};

// Adds --stack and --calibration (which exclude each other) to `cmd`.
void add_stack_options(CLI::App* cmd, StackChoice* choice);

// --calibration's stack, else --stack's, else the cluster's `software_stack`, else the default.
Result<SoftwareStack> resolve_stack(const StackChoice& choice, const ClusterSpec& cluster);

// The stack a made plan is priced with: --calibration's, else --stack's, else the one the plan
// records (Plan::software_stack, checked here; errors name `source` and the field), else
// resolve_stack's.
Result<SoftwareStack> resolve_plan_stack(const StackChoice& choice, const Plan& plan,
                                         const ClusterSpec& cluster, const std::string& source);

// Whether a made plan is priced with the optimizer step: as its prediction was (a plan from
// motley plan --no-optimizer-step records that it was not), true where it records none.
bool plan_optimizer_step(const Plan& plan);

// Writes `stack` into the plan, so that the file prices the same wherever it is read.
void record_stack(const SoftwareStack& stack, Plan* plan);

// The cost-model options a plan is priced with: its workload, its sequence parallelism, the
// stack resolve_plan_stack gives (`source` names the plan in errors).
Result<AnalyticCostOptions> plan_cost_options(const Plan& plan, const ModelSpec& model,
                                              const ClusterSpec& cluster, const StackChoice& choice,
                                              const std::string& source);

// validate_plan with each stage's memory priced by `cost` (weights, optimizer state, ZeRO-1
// over the plan's replicas, activations per micro-batch): whether the plan runs, memory
// included. Errors carry `source` as context.
Status validate_priced_plan(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster,
                            const AnalyticCostModel& cost, const std::string& source);

}  // namespace motley::cli
