#include "motley/report/summary.h"

#include <gtest/gtest.h>

#include <sstream>

#include "report_fixture.h"

namespace motley {
namespace {

using report_testing::two_nodes;
using report_testing::two_replica_plan;
using report_testing::two_replica_result;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The line starting with `prefix` (after leading spaces), or "".
std::string line_with(const std::string& text, const std::string& prefix) {
  for (const std::string& l : lines(text)) {
    const size_t first = l.find_first_not_of(' ');
    if (first != std::string::npos && l.compare(first, prefix.size(), prefix) == 0) return l;
  }
  return "";
}

// Splits a table row on runs of two or more spaces.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  size_t spaces = 0;
  for (char c : line) {
    if (c == ' ') {
      ++spaces;
      continue;
    }
    if (spaces >= 2 && !cell.empty()) {
      out.push_back(cell);
      cell.clear();
    } else if (spaces == 1) {
      cell += ' ';
    }
    spaces = 0;
    cell += c;
  }
  if (!cell.empty()) out.push_back(cell);
  return out;
}

TEST(SummaryTest, HeadlineMetricsWithUnits) {
  const Topology topology(two_nodes());
  const std::string s = simulation_summary(two_replica_plan(), two_replica_result(), topology);
  EXPECT_EQ(lines(s)[0], "Simulated iteration: gpipe, tiny on two-nodes");
  EXPECT_EQ(cells(line_with(s, "iteration time")),
            (std::vector<std::string>{"iteration time", "12.0 ms"}));
  // 4 sequences x 1024 tokens / 12 ms = 341 333 tokens/s.
  EXPECT_EQ(cells(line_with(s, "throughput"))[1],
            "341 K tokens/s (4 sequences x 1024 tokens per iteration)");
  EXPECT_EQ(cells(line_with(s, "bubble"))[1],
            "41.7% of device time idle (idle / (iteration time x 6 devices))");
  EXPECT_EQ(cells(line_with(s, "layout"))[1],
            "6 devices, 2 replicas of 2 device groups, 2 stages, 2 micro-batches per replica");
  EXPECT_EQ(cells(line_with(s, "memory"))[1], "OVER CAPACITY on 1 of 6 devices");
  EXPECT_EQ(cells(line_with(s, "tasks simulated"))[1], "30");
}

TEST(SummaryTest, DeviceTableRows) {
  const Topology topology(two_nodes());
  const std::string s = simulation_summary(two_replica_plan(), two_replica_result(), topology);
  EXPECT_EQ(cells(line_with(s, "device  type")),
            (std::vector<std::string>{"device", "type", "replica", "group", "stages", "busy",
                                      "util", "idle", "exposed comm", "peak memory / capacity"}));
  // Device 0: busy 7 of 12 ms, 60 of 80 GiB.
  EXPECT_EQ(cells(line_with(s, "0  H100-SXM")),
            (std::vector<std::string>{"0", "H100-SXM", "0", "0", "0", "7.00 ms", "58.3%", "5.00 ms",
                                      "1.00 ms", "60.0 GiB / 80.0 GiB (75%)"}));
  EXPECT_EQ(cells(line_with(s, "6  H100-SXM")),
            (std::vector<std::string>{"6", "H100-SXM", "1", "1", "1", "7.00 ms", "58.3%", "5.00 ms",
                                      "500 us", "88.0 GiB / 80.0 GiB (110%) OVER"}));
  EXPECT_EQ(line_with(s, "Over memory capacity"),
            "Over memory capacity: device 6 (88.0 GiB / 80.0 GiB (110%))");

  SummaryOptions options;
  options.device_table = false;
  EXPECT_EQ(
      line_with(simulation_summary(two_replica_plan(), two_replica_result(), topology, options),
                "device  type"),
      "");
}

// The fixture's critical path: F 3 ms, fused B 6 ms, send 1 ms, all-reduce 1 ms, optimizer
// 1 ms; compute on device 0 4 ms, on the group of devices 4,5 6 ms.
TEST(SummaryTest, CriticalPathByKindAndDevice) {
  const Topology topology(two_nodes());
  const std::string s = simulation_summary(two_replica_plan(), two_replica_result(), topology);
  EXPECT_EQ(line_with(s, "Critical path"),
            "Critical path: 10 tasks, F s0 mb0 at 0 s to optimizer g0 at 12.0 ms");
  EXPECT_EQ(cells(line_with(s, "by kind"))[1],
            "B (fused) 6.00 ms (50.0%), F 3.00 ms (25.0%), all-reduce 1.00 ms (8.3%), "
            "optimizer 1.00 ms (8.3%), send 1.00 ms (8.3%)");
  EXPECT_EQ(cells(line_with(s, "compute by device"))[1],
            "replica 0 group 1: devices 4,5 (H100-SXM) 6.00 ms (50.0%), device 0 (H100-SXM) "
            "4.00 ms (33.3%)");
  EXPECT_EQ(cells(line_with(s, "communication"))[1], "2.00 ms (16.7%)");
  EXPECT_EQ(line_with(s, "not covered by tasks"), "");  // the chain has no gaps

  SummaryOptions options;
  options.critical_path_top = 1;
  EXPECT_EQ(cells(line_with(
                simulation_summary(two_replica_plan(), two_replica_result(), topology, options),
                "compute by device"))[1],
            "replica 0 group 1: devices 4,5 (H100-SXM) 6.00 ms (50.0%), ... (1 more)");
}

TEST(SummaryTest, EmptyResultsStillSummarize) {
  const Topology topology(two_nodes());
  SimResult res;
  const std::string s = simulation_summary(Plan{}, res, topology);
  EXPECT_EQ(cells(line_with(s, "iteration time"))[1], "0 s");
  EXPECT_EQ(cells(line_with(s, "memory"))[1], "fits on every device");
  EXPECT_EQ(line_with(s, "Critical path"), "Critical path: not recorded");
}

}  // namespace
}  // namespace motley
