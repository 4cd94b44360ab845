// HTML report: one self-contained page (inline style, script and data; no network, no external
// script or font) that shows a plan's simulated iteration — the timeline with zoom, pan and
// hover, measured rows beside the simulated ones when a measured run is given, the layout of
// replicas x stages x device groups with their links, per-device utilization and memory, the
// strategies compared and the cost. Identical replicas are folded into one, so the page of a
// plan of thousands of devices stays small. The caller gathers the inputs (the plan's layers,
// prices, a comparison, a measured timeline) as plain data; this module runs nothing and writes
// no file. The page's structure and what the script expects are documented in
// docs/report-formats.md ("HTML report"). Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/plan/plan.h"
#include "motley/report/timeline.h"
#include "motley/sim/sim_result.h"

namespace motley {

// One layer of the plan's model, as the layout names it.
struct ReportLayer {
  std::string name;  // "decoder.7", "head"
  std::string kind;  // layer_kind_name: "embedding", "decoder_block", "head", ...
  double parameters = 0;
};

// One row of a comparison (motley compare's table).
struct ReportStrategy {
  std::string name;
  bool feasible = false;
  std::string detail;
  double iteration_s = 0;
  double tokens_per_s = 0;
  double bubble_fraction = 0;
  double peak_memory_ratio = 0;  // the fullest device's peak over its capacity
  double dollars_per_million_tokens = 0;
  double on_demand_dollars_per_million_tokens = 0;
  double goodput = 1;
  bool not_run = false;  // a budget was spent before it started (StrategyOutcome::not_run)
};

// What the plan costs to run. Prices per hour are of the devices the plan uses.
struct ReportCost {
  double dollars_per_hour = 0;
  double on_demand_dollars_per_hour = 0;
  double dollars_per_million_tokens = 0;
  double on_demand_dollars_per_million_tokens = 0;
  bool interruptible = false;  // some node used is spot (or states its failures)
  double goodput = 1;          // of the checkpoint interval, when interruptible
  double mean_hours_between_interruptions = 0;
  double checkpoint_interval_s = 0;
};

// A measured run of the same plan: one step of it as a Timeline whose compute tracks name the
// plan's replica and group (TimelineTrack::replica, first_stage, and `group` below), and the
// error of the simulated step per device.
struct ReportMeasured {
  std::string source;  // the trace file
  std::string step;    // which step is drawn: "step 4 (the median of 5)"
  Timeline timeline;
  std::vector<int> track_group;  // per track of `timeline`: the plan's group; -1: not a group
  double iteration_s = 0;        // the measured iteration (the median over the steps used)
  struct DeviceError {
    int replica = 0;
    int group = 0;
    double predicted_s = 0;
    double measured_s = 0;
    std::optional<double> error_pct;  // (predicted - measured) / measured, in percent
  };
  std::vector<DeviceError> devices;
};

struct HtmlReportInput {
  std::string title;      // empty: "<model> on <cluster>: <schedule>"
  std::string generator;  // "motley report", "motley compare", shown in the footer
  const Plan* plan = nullptr;
  const SimResult* result = nullptr;  // simulated with SimOptions::record_timeline
  const Topology* topology = nullptr;
  std::vector<ReportLayer> layers;  // the model's layers, indexed as the plan's stages are
  std::optional<double> lower_bound_s;
  ReportCost cost;
  std::vector<ReportStrategy> strategies;  // empty: no comparison section
  std::optional<ReportMeasured> measured;
};

// Replicas whose every compute row (each group's tasks: kind, stage, micro-batch, start and
// end to 1e-9 of the iteration) and every device's statistics equal those of an earlier
// replica with the same device types per group. Index: replica; value: the replica it folds
// into (itself when it is drawn).
std::vector<int> fold_identical_replicas(const Plan& plan, const SimResult& result,
                                         const Topology& topology);

// The data the page's script draws, as a JSON object (docs/report-formats.md): summary,
// timeline rows in replica-then-stage order with measured rows after their simulated ones,
// layout, devices, strategies, cost. REQUIRES: plan, result and topology set.
Json html_report_data(const HtmlReportInput& input);

// The whole page. REQUIRES: as html_report_data.
std::string html_report(const HtmlReportInput& input);

}  // namespace motley
