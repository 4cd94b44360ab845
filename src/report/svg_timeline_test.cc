#include "motley/report/svg_timeline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <set>

#include "report_fixture.h"

namespace motley {
namespace {

using report_testing::count;
using report_testing::two_nodes;
using report_testing::two_replica_plan;
using report_testing::two_replica_result;

// A small XML well-formedness check: every element closes in order, attribute values are
// quoted, text holds no raw '<' or unescaped '&'. Returns "" or what is wrong.
std::string xml_problem(const std::string& xml) {
  std::vector<std::string> open;
  size_t i = 0;
  int roots = 0;
  while (i < xml.size()) {
    if (xml[i] != '<') {
      if (xml[i] == '&') {
        const size_t semi = xml.find(';', i);
        if (semi == std::string::npos || semi - i > 6) return "bare & at " + std::to_string(i);
      }
      ++i;
      continue;
    }
    const size_t end = xml.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.starts_with("?")) {
      if (!tag.ends_with("?")) return "bad declaration";
      continue;
    }
    // Quotes balance inside the tag.
    size_t quotes = 0;
    for (char c : tag) quotes += c == '"';
    if (quotes % 2 != 0) return "unbalanced quotes in <" + tag + ">";
    if (tag.find('<') != std::string::npos) return "'<' inside <" + tag + ">";
    if (tag.starts_with("/")) {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "unexpected </" + name + ">";
      open.pop_back();
      continue;
    }
    const bool self_closing = tag.ends_with("/");
    const std::string name = tag.substr(0, tag.find_first_of(" /"));
    if (open.empty()) ++roots;
    if (!self_closing) open.push_back(name);
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  if (roots != 1) return "expected one root element, got " + std::to_string(roots);
  return "";
}

// The numbers drawn inside boxes, in document order.
std::vector<std::string> box_texts(const std::string& svg) {
  std::vector<std::string> out;
  const std::regex re("<text class=\"mb\"[^>]*>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

std::vector<std::string> tick_labels(const std::string& svg) {
  std::vector<std::string> out;
  const std::regex re("<text class=\"tick-label\"[^>]*>([^<]*)</text>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

TEST(SvgTimelineTest, AxisTicksUseOneTwoFiveSteps) {
  AxisTicks t = time_axis_ticks(milliseconds(123.4), 10);  // 12.34 ms per tick at least
  EXPECT_EQ(t.step_ms, 20);
  EXPECT_EQ(t.ticks_ms, (std::vector<double>{0, 20, 40, 60, 80, 100, 120}));
  EXPECT_EQ(t.decimals, 0);

  t = time_axis_ticks(milliseconds(100), 10);  // exactly 10 steps of 10 ms
  EXPECT_EQ(t.step_ms, 10);
  EXPECT_EQ(t.ticks_ms.size(), 11u);
  EXPECT_EQ(t.ticks_ms.back(), 100);

  t = time_axis_ticks(milliseconds(0.42), 5);  // 0.084 ms -> 0.1 ms steps
  EXPECT_NEAR(t.step_ms, 0.1, 1e-15);
  EXPECT_EQ(t.decimals, 1);
  ASSERT_EQ(t.ticks_ms.size(), 5u);
  EXPECT_NEAR(t.ticks_ms[4], 0.4, 1e-12);

  t = time_axis_ticks(Seconds(3), 8);  // 375 ms -> 500 ms
  EXPECT_EQ(t.step_ms, 500);
  EXPECT_EQ(t.ticks_ms, (std::vector<double>{0, 500, 1000, 1500, 2000, 2500, 3000}));

  t = time_axis_ticks(Seconds(0), 10);  // nothing to show: one tick at 0
  EXPECT_EQ(t.ticks_ms, (std::vector<double>{0}));
}

TEST(SvgTimelineTest, SimulatedIterationIsWellFormedWithOneBoxPerComputeTask) {
  const Topology topology(two_nodes());
  const SimResult res = two_replica_result();
  const std::string svg = svg_timeline(two_replica_plan(), res, topology);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_TRUE(svg.starts_with("<?xml"));
  // Self-contained: no external references, no stylesheets.
  EXPECT_EQ(svg.find("href"), std::string::npos);
  EXPECT_EQ(svg.find("<style"), std::string::npos);
  EXPECT_EQ(svg.find("@import"), std::string::npos);

  // 8 forwards, 8 fused backwards, 4 optimizer steps; 8 transfers drawn once each in the send
  // strips of their senders; 2 all-reduces.
  EXPECT_EQ(count(svg, "<rect class=\"task F\""), 8);
  EXPECT_EQ(count(svg, "<rect class=\"task BW\""), 8);
  EXPECT_EQ(count(svg, "<rect class=\"task opt\""), 4);
  EXPECT_EQ(count(svg, "<rect class=\"task send\""), 8);
  EXPECT_EQ(count(svg, "<rect class=\"task allreduce\""), 2);
  EXPECT_EQ(count(svg, "<rect class=\"row\""), 5);  // 4 compute rows and the all-reduce row

  // Title and subtitle carry the headline numbers.
  EXPECT_NE(svg.find("Simulated iteration: gpipe, tiny on two-nodes"), std::string::npos);
  EXPECT_NE(svg.find("iteration 12.0 ms"), std::string::npos);
  EXPECT_NE(svg.find("341 K tokens/s"), std::string::npos);
  EXPECT_NE(svg.find("bubble 41.7%"), std::string::npos);
  EXPECT_NE(svg.find("OVER MEMORY CAPACITY"), std::string::npos);
  // The legend names the kinds present, and only those.
  EXPECT_NE(svg.find(">F</text>"), std::string::npos);
  EXPECT_NE(svg.find(">B (fused)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">send</text>"), std::string::npos);
  EXPECT_NE(svg.find(">all-reduce</text>"), std::string::npos);
  EXPECT_NE(svg.find(">optimizer</text>"), std::string::npos);
  EXPECT_NE(svg.find(">idle</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">W (weight grad)</text>"), std::string::npos);
  // Row labels.
  EXPECT_NE(svg.find(">replica 1 group 1: devices 6,7 (H100-SXM)</text>"), std::string::npos);
}

// Rows in pipeline order, replica by replica: one gap between the replicas, not one between
// every pair of rows as when devices 0 and 1 (the replicas' first stages) came first.
TEST(SvgTimelineTest, ComputeRowsReadInPipelineOrder) {
  const Topology topology(two_nodes());
  SvgOptions options;
  options.all_reduce_row = false;
  const std::string svg = svg_timeline(two_replica_plan(), two_replica_result(), topology, options);
  const std::regex label("<text class=\"label\" x=\"[^\"]*\" y=\"([^\"]*)\"[^>]*>([^<]*)</text>");
  std::vector<std::string> names;
  std::vector<double> ys;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator();
       ++it) {
    ys.push_back(std::stod((*it)[1].str()));
    names.push_back((*it)[2].str());
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "device 0 (H100-SXM)", "replica 0 group 1: devices 4,5 (H100-SXM)",
                       "device 1 (H100-SXM)", "replica 1 group 1: devices 6,7 (H100-SXM)"}));
  ASSERT_EQ(ys.size(), 4u);
  const double row = ys[1] - ys[0];
  EXPECT_GT(row, 0);
  EXPECT_NEAR(ys[2] - ys[1], row + 6, 1e-6);  // the gap between replicas
  EXPECT_NEAR(ys[3] - ys[2], row, 1e-6);
}

TEST(SvgTimelineTest, LinkRowsAreOptional) {
  const Topology topology(two_nodes());
  SvgOptions options;
  options.link_rows = true;
  options.send_strips = false;
  options.all_reduce_row = false;
  const std::string svg = svg_timeline(two_replica_plan(), two_replica_result(), topology, options);
  EXPECT_EQ(xml_problem(svg), "");
  // Every transfer on every link of its path.
  int copies = 0;
  for (int r = 0; r < 2; ++r) {
    copies += 2 * static_cast<int>(topology.path(r, 4 + 2 * r).links.size());
    copies += 2 * static_cast<int>(topology.path(4 + 2 * r, r).links.size());
  }
  EXPECT_EQ(count(svg, "<rect class=\"task send\""), copies);
  EXPECT_EQ(count(svg, "<rect class=\"task allreduce\""), 0);
  EXPECT_NE(svg.find(">a nic0 tx</text>"), std::string::npos);
}

// One track, span 10 ms: a box of 5 ms holds its number, a box of 1 us does not.
TEST(SvgTimelineTest, NumbersOnlyInBoxesWideEnough) {
  Timeline tl;
  tl.tracks = {TimelineTrack{"device 0 (H100-SXM)", TrackRole::kCompute, 0, 0}};
  tl.span = milliseconds(10);
  TimelineEvent wide;
  wide.name = "F s0 mb7";
  wide.label = "7";
  wide.start = milliseconds(1);
  wide.end = milliseconds(6);
  TimelineEvent narrow = wide;
  narrow.name = "F s0 mb8";
  narrow.label = "8";
  narrow.start = milliseconds(7);
  narrow.end = milliseconds(7.001);
  tl.events = {wide, narrow};
  SvgOptions options;
  options.width_px = 1000;
  const std::string svg = render_svg_timeline(tl, "t", "", options);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(box_texts(svg), (std::vector<std::string>{"7"}));
  // The narrow box still shows: one pixel wide.
  const std::regex narrow_rect("<rect class=\"task F\" x=\"[0-9.]+\" y=\"[0-9.]+\" width=\"1\"");
  EXPECT_TRUE(std::regex_search(svg, narrow_rect));
  // No <title> when tooltips are off.
  options.tooltips = false;
  EXPECT_EQ(render_svg_timeline(tl, "t", "", options).find("<title>"), std::string::npos);
}

TEST(SvgTimelineTest, AxisLabelsAreTheTicksInMilliseconds) {
  Timeline tl;
  tl.tracks = {TimelineTrack{"device 0 (H100-SXM)", TrackRole::kCompute, 0, 0}};
  tl.span = milliseconds(123.4);
  SvgOptions options;
  options.width_px = 1200;  // about 1030 px of plot: 11 ticks at most, so 20 ms steps
  const std::string svg = render_svg_timeline(tl, "t", "", options);
  EXPECT_EQ(tick_labels(svg),
            (std::vector<std::string>{"0", "20", "40", "60", "80", "100", "120"}));
  EXPECT_NE(svg.find(">time (ms)</text>"), std::string::npos);
}

// Row heights shrink with the number of rows, down to the minimum.
TEST(SvgTimelineTest, RowHeightAdaptsToTheNumberOfRows) {
  for (const auto& [rows, height] : {std::pair{4, 30}, std::pair{64, 15}, std::pair{200, 10}}) {
    Timeline tl;
    tl.span = milliseconds(1);
    for (int i = 0; i < rows; ++i) {
      tl.tracks.push_back(TimelineTrack{"device " + std::to_string(i), TrackRole::kCompute, i, 0});
      TimelineEvent e;
      e.track = i;
      e.end = milliseconds(1);
      tl.events.push_back(e);
    }
    const std::string svg = render_svg_timeline(tl, "t", "", SvgOptions{});
    EXPECT_EQ(xml_problem(svg), "");
    EXPECT_EQ(count(svg, "<rect class=\"row\""), rows);
    const std::regex re("<rect class=\"row\"[^>]* height=\"" + std::to_string(height) + "\"");
    EXPECT_EQ(
        std::distance(std::sregex_iterator(svg.begin(), svg.end(), re), std::sregex_iterator()),
        rows)
        << rows << " rows";
  }
}

TEST(SvgTimelineTest, TextIsEscaped) {
  Timeline tl;
  tl.tracks = {TimelineTrack{"gpu <0> & \"1\"", TrackRole::kCompute, 0, 0}};
  tl.span = milliseconds(1);
  const std::string svg = render_svg_timeline(tl, "a < b & c", "", SvgOptions{});
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("gpu &lt;0&gt; &amp; &quot;1&quot;"), std::string::npos);
  EXPECT_NE(svg.find("a &lt; b &amp; c"), std::string::npos);
}

TEST(SvgTimelineTest, ColoursAreDistinctAndChunksShaded) {
  std::set<std::string> colours;
  for (int k = 0; k < kTimelineKindCount; ++k) {
    colours.insert(svg_color(static_cast<TimelineKind>(k)));
  }
  EXPECT_EQ(colours.size(), static_cast<size_t>(kTimelineKindCount));
  EXPECT_STREQ(svg_color(TimelineKind::kForward), "#56b4e9");

  Timeline tl;
  tl.tracks = {TimelineTrack{"device 0", TrackRole::kCompute, 0, 0}};
  tl.span = milliseconds(2);
  TimelineEvent e;
  e.end = milliseconds(1);
  tl.events.push_back(e);
  e.start = milliseconds(1);
  e.end = milliseconds(2);
  e.chunk = 1;
  tl.events.push_back(e);
  const std::string svg = render_svg_timeline(tl, "t", "", SvgOptions{});
  // #56b4e9 darkened by a quarter: (0x56, 0xb4, 0xe9) * 3/4 = (0x40, 0x87, 0xae).
  EXPECT_EQ(count(svg, "fill=\"#56b4e9\""), 2);  // the box and its legend swatch
  EXPECT_EQ(count(svg, "fill=\"#4087ae\""), 2);  // the box and the "darker" legend swatch
  EXPECT_NE(svg.find("darker: 2nd, 4th, ... chunk"), std::string::npos);
}

// Without a recorded timeline the rows are still drawn, empty; with nothing at all the image
// is still a valid SVG with an axis.
TEST(SvgTimelineTest, EmptyTimelinesStillRender) {
  const Topology topology(two_nodes());
  SimResult res = two_replica_result();
  res.timeline.clear();
  const std::string svg = svg_timeline(two_replica_plan(), res, topology);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count(svg, "<rect class=\"row\""), 4);
  EXPECT_EQ(count(svg, "<rect class=\"task"), 0);
  // 12 ms over about 1370 px at no less than 90 px per tick: 1 ms steps.
  EXPECT_EQ(tick_labels(svg), (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8",
                                                        "9", "10", "11", "12"}));

  const std::string bare = svg_timeline(Plan{}, SimResult{}, topology);
  EXPECT_EQ(xml_problem(bare), "");
  EXPECT_EQ(tick_labels(bare), (std::vector<std::string>{"0"}));
}

}  // namespace
}  // namespace motley
