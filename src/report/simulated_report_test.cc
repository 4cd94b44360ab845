// The three views of a real simulation (make_uniform_plan, AnalyticCostModel, simulate):
// nothing is lost or duplicated between SimResult::timeline and the outputs.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "motley/cost/analytic_cost_model.h"
#include "motley/model/presets.h"
#include "motley/report/chrome_trace.h"
#include "motley/report/summary.h"
#include "motley/report/svg_timeline.h"
#include "motley/schedule/uniform_plan.h"
#include "motley/sim/simulator.h"
#include "report_fixture.h"

namespace motley {
namespace {

using report_testing::count;

TEST(SimulatedReportTest, EveryTaskAppearsInEveryView) {
  Result<ModelSpec> model = model_preset("tiny-llama");
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  Result<ClusterSpec> cluster = cluster_preset("h100x16");
  ASSERT_TRUE(cluster.is_ok()) << cluster.status().message();
  AnalyticCostOptions cost_options;
  cost_options.workload.seq_len = 256;
  Result<std::unique_ptr<AnalyticCostModel>> analytic =
      AnalyticCostModel::create(model.value(), cluster.value(), cost_options, "tiny-llama");
  ASSERT_TRUE(analytic.is_ok()) << analytic.status().message();
  const CostModel& cost = *analytic.value();
  UniformPlanOptions o;
  o.kind = ScheduleKind::kZbV;
  o.stages = 2;
  o.virtual_stages = 2;
  o.tensor_parallel = 2;
  o.data_parallel = 4;
  o.micro_batches = 4;
  o.seq_len = 256;
  Result<Plan> plan = make_uniform_plan(o, model.value(), cluster.value(), cost);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  SimOptions sim;
  sim.record_timeline = true;
  Result<SimResult> res = simulate(sim, plan.value(), cost);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  const Topology& topology = cost.topology();

  std::map<SimTaskKind, int> kinds;
  int link_copies = 0;
  for (const SimTask& t : res->timeline) {
    ++kinds[t.kind];
    if (t.kind == SimTaskKind::kSendActivation || t.kind == SimTaskKind::kSendGradient) {
      link_copies += static_cast<int>(topology.path(t.device, t.peer_device).links.size());
    }
  }
  // 4 replicas x 4 stages x 4 micro-batches of F, B and W; 4 all-reduces; 8 optimizer steps.
  EXPECT_EQ(kinds[SimTaskKind::kForward], 64);
  EXPECT_EQ(kinds[SimTaskKind::kBackwardInput], 64);
  EXPECT_EQ(kinds[SimTaskKind::kBackwardWeight], 64);
  EXPECT_EQ(kinds[SimTaskKind::kGradientAllReduce], 4);
  EXPECT_EQ(kinds[SimTaskKind::kOptimizerStep], 8);
  const int transfers = kinds[SimTaskKind::kSendActivation] + kinds[SimTaskKind::kSendGradient];
  EXPECT_GT(transfers, 0);

  const std::string svg = svg_timeline(plan.value(), res.value(), topology);
  EXPECT_EQ(count(svg, "<rect class=\"task F\""), 64);
  EXPECT_EQ(count(svg, "<rect class=\"task B\""), 64);
  EXPECT_EQ(count(svg, "<rect class=\"task W\""), 64);
  EXPECT_EQ(count(svg, "<rect class=\"task opt\""), 8);
  EXPECT_EQ(count(svg, "<rect class=\"task allreduce\""), 4);
  EXPECT_EQ(count(svg, "<rect class=\"task send\""), transfers);  // once each, in the strips
  EXPECT_EQ(count(svg, "<rect class=\"row\""), 9);  // 8 tensor-parallel groups, all-reduce

  Result<Json> trace = parse_json(chrome_trace_json(plan.value(), res.value(), topology), "trace");
  ASSERT_TRUE(trace.is_ok()) << trace.status().message();
  int xs = 0;
  for (const Json& e : trace.value()["traceEvents"]) xs += e["ph"] == "X";
  EXPECT_EQ(xs, 64 * 3 + 4 + 8 + link_copies);

  const std::string summary = simulation_summary(plan.value(), res.value(), topology);
  EXPECT_EQ(count(summary, "  H100-SXM  "), 16);  // one table row per device
}

}  // namespace
}  // namespace motley
