// What `motley report` and `motley compare --html` share: a plan simulated with its timeline
// and everything the HTML page says about it (layers, prices, the lower bound), gathered once.
// Thread-compatible.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cost_options.h"
#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"
#include "motley/report/html_report.h"
#include "motley/sim/sim_result.h"
#include "motley/tune/tune.h"

namespace motley::cli {

struct PlanReport {
  Plan plan;
  ModelSpec model;   // the plan's: its layers are what the page names
  ModelSpec priced;  // what the cost model prices: the model, or a measured profile of it
  ClusterSpec cluster;
  std::unique_ptr<AnalyticCostModel> cost;
  SimResult result;  // with the timeline
  std::optional<Seconds> lower_bound;
  ReportCost prices;
  std::vector<ReportLayer> layers;
};

// Simulates `plan` (already validated) with the timeline under `stack`, priced with `priced`
// (the model, or a profile standing in for it layer for layer), prices it and computes the
// lower bound of its batch shape; both without the optimizer step unless `optimizer_step`.
Result<PlanReport> prepare_plan_report(Plan plan, ModelSpec model, ModelSpec priced,
                                       ClusterSpec cluster, const StackChoice& stack,
                                       bool optimizer_step = true);

// The page's input over `report` (which must outlive it).
HtmlReportInput html_input(const PlanReport& report, std::string generator);

// The strategies of a comparison as the page's rows, each feasible plan simulated once more
// under `stack` for its bubble and its fullest device's memory (outcomes carry times only).
Result<std::vector<ReportStrategy>> report_strategies(const std::vector<StrategyOutcome>& outcomes,
                                                      const ModelSpec& model,
                                                      const ClusterSpec& cluster,
                                                      const StackChoice& stack);

}  // namespace motley::cli
