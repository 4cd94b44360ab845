// report_samples OUT_DIR: simulates a few preset plans on the analytic cost model and writes
// each one's SVG timeline, Chrome trace and summary to OUT_DIR, for looking at the output.
#include <cstdio>
#include <memory>
#include <string>

#include "motley/cost/analytic_cost_model.h"
#include "motley/model/presets.h"
#include "motley/report/chrome_trace.h"
#include "motley/report/summary.h"
#include "motley/report/svg_timeline.h"
#include "motley/schedule/uniform_plan.h"
#include "motley/sim/simulator.h"

namespace motley {
namespace {

struct Sample {
  std::string name;
  std::string model;
  int nodes;  // of eight H100-SXM
  ScheduleKind kind;
  int stages;
  int virtual_stages;
  int64_t micro_batches;
  int data_parallel;
  int tensor_parallel;
};

Status run(const Sample& s, const std::string& dir) {
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec model, model_preset(s.model));
  MOTLEY_ASSIGN_OR_RETURN(ClusterSpec cluster, cluster_preset("h100x16"));
  const NodeSpec node = cluster.nodes.front();
  cluster.nodes.clear();
  for (int i = 0; i < s.nodes; ++i) {
    cluster.nodes.push_back(node);
    cluster.nodes.back().name = "h100-" + std::to_string(i);
  }
  cluster.name = "h100x" + std::to_string(8 * s.nodes);
  AnalyticCostOptions cost_options;
  cost_options.workload.seq_len = 4096;
  cost_options.workload.micro_batch_size = 1;
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<AnalyticCostModel> analytic,
                          AnalyticCostModel::create(model, cluster, cost_options, model.name));
  const CostModel& cost = *analytic;
  UniformPlanOptions o;
  o.kind = s.kind;
  o.stages = s.stages;
  o.virtual_stages = s.virtual_stages;
  o.micro_batches = s.micro_batches;
  o.data_parallel = s.data_parallel;
  o.tensor_parallel = s.tensor_parallel;
  o.seq_len = 4096;
  MOTLEY_ASSIGN_OR_RETURN(Plan plan, make_uniform_plan(o, model, cluster, cost));
  SimOptions sim;
  sim.record_timeline = true;
  MOTLEY_ASSIGN_OR_RETURN(SimResult result, simulate(sim, plan, cost));
  const Topology& topology = cost.topology();
  MOTLEY_RETURN_IF_ERROR(
      write_file_atomically(dir + "/" + s.name + ".svg", svg_timeline(plan, result, topology)));
  SvgOptions links;
  links.link_rows = true;
  links.mark_critical_path = true;
  MOTLEY_RETURN_IF_ERROR(write_file_atomically(dir + "/" + s.name + "-links.svg",
                                               svg_timeline(plan, result, topology, links)));
  MOTLEY_RETURN_IF_ERROR(write_file_atomically(dir + "/" + s.name + ".trace.json",
                                               chrome_trace_json(plan, result, topology)));
  const std::string summary = simulation_summary(plan, result, topology);
  MOTLEY_RETURN_IF_ERROR(write_file_atomically(dir + "/" + s.name + ".txt", summary));
  std::printf("%s\n%s\n", s.name.c_str(), summary.c_str());
  return Status::ok();
}

}  // namespace
}  // namespace motley

int main(int argc, char** argv) {
  using motley::ScheduleKind;
  if (argc != 2) {
    std::fprintf(stderr, "usage: report_samples OUT_DIR\n");
    return 2;
  }
  const motley::Sample samples[] = {
      {"interleaved-16", "llama-3-8b", 2, ScheduleKind::kInterleaved, 16, 2, 32, 1, 1},
      {"zbv-16", "llama-3-8b", 2, ScheduleKind::kZbV, 16, 2, 32, 1, 1},
      {"1f1b-nemotron-8", "nemotron-h-8b", 1, ScheduleKind::k1f1b, 8, 1, 16, 1, 1},
      {"interleaved-64", "llama-3-8b", 8, ScheduleKind::kInterleaved, 16, 2, 16, 4, 1},
      {"zbh1-tp2-16", "llama-3-8b", 2, ScheduleKind::kZbH1, 4, 1, 8, 2, 2},
  };
  for (const motley::Sample& s : samples) {
    const motley::Status status = run(s, argv[1]);
    if (!status.is_ok()) {
      std::fprintf(stderr, "%s: %s\n", s.name.c_str(), status.message().c_str());
      return 1;
    }
  }
  return 0;
}
