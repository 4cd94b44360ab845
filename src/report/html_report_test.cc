#include "motley/report/html_report.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "report_fixture.h"

namespace motley {
namespace {

using report_testing::count;
using report_testing::two_nodes;
using report_testing::two_replica_plan;
using report_testing::two_replica_result;

// The fixture's replicas run the same tasks at the same times; only device 6 of replica 1 peaks
// higher. The case gives it replica 0's peak, so the two replicas draw alike.
struct HtmlCase {
  HtmlCase() { result.devices[4].peak_memory = result.devices[1].peak_memory; }
  Plan plan = two_replica_plan();
  SimResult result = two_replica_result();
  Topology topology{two_nodes()};
  HtmlReportInput input() const {
    HtmlReportInput in;
    in.plan = &plan;
    in.result = &result;
    in.topology = &topology;
    return in;
  }
};

// Replica 1's tasks all shifted by `ms`: the replicas no longer draw alike.
void shift_replica(SimResult* result, int replica, double ms) {
  for (SimTask& t : result->timeline) {
    if (t.replica == replica) {
      t.start += milliseconds(ms);
      t.end += milliseconds(ms);
    }
  }
}

std::vector<std::pair<int, int>> row_keys(const Json& data, const std::string& source) {
  std::vector<std::pair<int, int>> keys;
  for (const Json& row : data["timeline"]["rows"]) {
    if (row["source"] == source) keys.emplace_back(row["replica"], row["stage"]);
  }
  return keys;
}

TEST(HtmlReportTest, FoldsReplicasThatDrawAlike) {
  HtmlCase c;
  EXPECT_EQ(fold_identical_replicas(c.plan, c.result, c.topology), (std::vector<int>{0, 0}));
  const Json data = html_report_data(c.input());
  // One replica's two groups and the all-reduce row; the fold is stated.
  EXPECT_EQ(row_keys(data, "simulated"),
            (std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {-1, -1}}));
  ASSERT_EQ(data["folds"].size(), 1u);
  EXPECT_EQ(data["folds"][0]["replicas"], "0,1");
  EXPECT_EQ(data["folds"][0]["count"], 2);
  EXPECT_EQ(data["timeline"]["rows"][0]["folded"], "0,1");
  EXPECT_EQ(data["devices"].size(), 3u);  // replica 0's three devices
  EXPECT_EQ(data["layout"]["replicas"].size(), 1u);
  EXPECT_EQ(data["layout"]["replicas"][0]["count"], 2);
}

TEST(HtmlReportTest, KeepsReplicasThatDiffer) {
  HtmlCase shifted;
  shift_replica(&shifted.result, 1, 0.25);
  EXPECT_EQ(fold_identical_replicas(shifted.plan, shifted.result, shifted.topology),
            (std::vector<int>{0, 1}));
  HtmlCase uneven;
  uneven.plan.replicas[1].micro_batches = 3;
  EXPECT_EQ(fold_identical_replicas(uneven.plan, uneven.result, uneven.topology),
            (std::vector<int>{0, 1}));
  const SimResult over = two_replica_result();  // device 6 over its capacity
  EXPECT_EQ(fold_identical_replicas(two_replica_plan(), over, Topology(two_nodes())),
            (std::vector<int>{0, 1}));
  HtmlCase busier;
  busier.result.devices.back().busy += milliseconds(1);
  EXPECT_EQ(fold_identical_replicas(busier.plan, busier.result, busier.topology),
            (std::vector<int>{0, 1}));
  // A time equal to within a part in 10^9 of the iteration is the same time.
  HtmlCase tiny;
  shift_replica(&tiny.result, 1, 1e-9);
  EXPECT_EQ(fold_identical_replicas(tiny.plan, tiny.result, tiny.topology),
            (std::vector<int>{0, 0}));
}

TEST(HtmlReportTest, RowsFollowReplicaAndStageNotDeviceIds) {
  HtmlCase c;
  shift_replica(&c.result, 1, 0.25);
  // Stage 0 of replica 0 on the highest device id: rows still start with it.
  c.plan.replicas[0].groups[0].devices = {7};
  const Json data = html_report_data(c.input());
  EXPECT_EQ(row_keys(data, "simulated"),
            (std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {-1, -1}}));
  EXPECT_EQ(data["timeline"]["rows"][0]["devices"], "7");
  EXPECT_EQ(data["timeline"]["rows"][1]["devices"], "4,5");
  EXPECT_EQ(data["timeline"]["rows"][1]["tp"], 2);
  EXPECT_EQ(data["timeline"]["rows"].back()["collective"], true);
}

TEST(HtmlReportTest, EventsCarryTimesStageMicroBatchAndTheirTransfers) {
  HtmlCase c;
  const Json data = html_report_data(c.input());
  const Json& first = data["timeline"]["rows"][0];  // replica 0, group 0 (device 0)
  // F s0 mb0 [0, 1 ms], as [kind, start us, end us, stage, micro-batch, flags]; critical.
  EXPECT_EQ(first["events"][0], Json::parse("[0, 0.0, 1000.0, 0, 0, 1]"));
  int transfers = 0;
  for (const Json& e : first["events"]) transfers += (e[5].get<int>() & 4) != 0 ? 1 : 0;
  EXPECT_EQ(transfers, 2);  // the two activations it sent
  EXPECT_EQ(data["timeline"]["iteration_us"], 12000.0);
  EXPECT_EQ(data["summary"]["iteration_s"], 0.012);
  EXPECT_EQ(data["summary"]["context_parallel"], 1);
  EXPECT_EQ(data["summary"]["expert_parallel"], 1);
}

TEST(HtmlReportTest, MeasuredRowsSitUnderTheirSimulatedRows) {
  HtmlCase c;
  HtmlReportInput in = c.input();
  ReportMeasured m;
  m.source = "trace.json";
  m.step = "step 3";
  m.iteration_s = 0.015;
  // Tracks listed in another order than the page's: groups 1 then 0 of replica 0.
  for (int group : {1, 0}) {
    TimelineTrack t;
    t.name = "rank";
    t.replica = 0;
    t.group = group;
    t.first_stage = group;
    m.timeline.tracks.push_back(t);
    TimelineEvent e;
    e.track = static_cast<int>(m.timeline.tracks.size()) - 1;
    e.start = milliseconds(1);
    e.end = milliseconds(3);
    e.args = Json{{"stage", group}, {"micro_batch", 0}};
    m.timeline.events.push_back(e);
  }
  m.timeline.span = milliseconds(15);
  m.devices.push_back(ReportMeasured::DeviceError{0, 1, 0.012, 0.015, -20.0});
  in.measured = m;
  const Json data = html_report_data(in);
  const Json& rows = data["timeline"]["rows"];
  // A measured run folds nothing: replica 1 is drawn too.
  ASSERT_EQ(rows.size(), 7u);
  const std::vector<std::string> sources = {"simulated", "measured",  "simulated", "measured",
                                            "simulated", "simulated", "simulated"};
  for (size_t i = 0; i < sources.size(); ++i) EXPECT_EQ(rows[i]["source"], sources[i]) << i;
  EXPECT_EQ(rows[1]["group"], 0);
  EXPECT_EQ(rows[3]["group"], 1);
  EXPECT_EQ(rows[3]["error_pct"], -20.0);
  EXPECT_FALSE(rows[1].contains("error_pct"));
  EXPECT_EQ(rows[1]["events"][0], Json::parse("[0, 1000.0, 3000.0, 0, 0, 0]"));
  EXPECT_EQ(data["timeline"]["span_us"], 15000.0);
  EXPECT_EQ(data["summary"]["measured_iteration_s"], 0.015);
  EXPECT_DOUBLE_EQ(data["summary"]["iteration_error_pct"].get<double>(), -20.0);
}

TEST(HtmlReportTest, LayoutNamesLayersLinksAndTheSlowest) {
  HtmlCase c;
  HtmlReportInput in = c.input();
  in.layers = {{"embedding", "embedding", 1000}, {"head", "head", 3000}};
  const Json data = html_report_data(in);
  const Json& stages = data["layout"]["replicas"][0]["stages"];
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0]["embedding"], true);
  EXPECT_EQ(stages[1]["head"], true);
  EXPECT_EQ(stages[1]["parameters"], 3000.0);
  EXPECT_EQ(stages[1]["layers"], "head");
  EXPECT_EQ(stages[1]["tp"], 2);
  // Stage 0 (device 0, node a) to stage 1 (device 4, node b): across the 50 GB/s NICs.
  const Json& links = data["layout"]["replicas"][0]["links"];
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0]["crosses_nodes"], true);
  EXPECT_EQ(links[0]["bandwidth_Bps"], c.topology.path(0, 4).bandwidth.value());
  EXPECT_EQ(links[0]["slowest"], true);
  // Replica 0 to replica 1, device 0 to device 1: inside node a.
  EXPECT_EQ(data["layout"]["data_parallel_link"]["crosses_nodes"], false);
}

TEST(HtmlReportTest, StrategiesAndCostOnlyWhenGiven) {
  HtmlCase c;
  EXPECT_FALSE(html_report_data(c.input()).contains("strategies"));
  EXPECT_FALSE(html_report_data(c.input()).contains("cost"));
  HtmlReportInput in = c.input();
  in.lower_bound_s = 0.006;
  in.strategies = {ReportStrategy{"motley", true, "d", 0.012, 341333, 0.2, 0.5, 1.5, 2.5, 0.98},
                   ReportStrategy{"metis", false, "no plan fits"}};
  in.cost.dollars_per_hour = 12;
  in.cost.on_demand_dollars_per_hour = 24;
  const Json data = html_report_data(in);
  ASSERT_EQ(data["strategies"].size(), 2u);
  EXPECT_EQ(data["strategies"][0]["efficiency"], 0.5);
  EXPECT_FALSE(data["strategies"][1].contains("iteration_s"));
  EXPECT_EQ(data["cost"]["dollars_per_hour"], 12.0);
  EXPECT_EQ(data["summary"]["efficiency"], 0.5);
}

TEST(HtmlReportTest, PageIsOneFileAndNamesCannotBreakOut) {
  HtmlCase c;
  c.plan.model.name = "m</script><script>alert(1)</script><!--";
  const std::string page = html_report(c.input());
  // Only the page's own two script elements open and close.
  EXPECT_EQ(count(page, "<script"), 2);
  EXPECT_EQ(count(page, "</script>"), 2);
  EXPECT_EQ(count(page, "<!--"), 0);
  EXPECT_NE(page.find("<title>m&lt;/script&gt;&lt;script&gt;"), std::string::npos);
  // Nothing is fetched: no external reference, and the policy forbids any.
  EXPECT_EQ(count(page, "src="), 0);
  EXPECT_EQ(count(page, "<link"), 0);
  EXPECT_EQ(count(page, "https://"), 0);
  EXPECT_NE(page.find("default-src 'none'"), std::string::npos);
  // The data element parses back to what html_report_data gives.
  const std::string open = "<script type=\"application/json\" id=\"motley-data\">";
  const size_t begin = page.find(open) + open.size();
  const Json back = Json::parse(page.substr(begin, page.find("</script>", begin) - begin));
  EXPECT_EQ(back, html_report_data(c.input()));
}

}  // namespace
}  // namespace motley
