#include "motley/report/chrome_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "report_fixture.h"

namespace motley {
namespace {

using report_testing::two_nodes;
using report_testing::two_replica_plan;
using report_testing::two_replica_result;

// Thread names by (pid, tid) from the metadata events.
std::map<std::pair<int, int>, std::string> thread_names(const Json& doc) {
  std::map<std::pair<int, int>, std::string> names;
  for (const Json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      names[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"].get<std::string>();
    }
  }
  return names;
}

std::vector<Json> complete_events(const Json& doc) {
  std::vector<Json> out;
  for (const Json& e : doc["traceEvents"]) {
    if (e["ph"] == "X") out.push_back(e);
  }
  return out;
}

Json parse(const std::string& text) {
  Result<Json> doc = parse_json(text, "trace");
  EXPECT_TRUE(doc.is_ok()) << doc.status().message();
  return doc.is_ok() ? doc.value() : Json();
}

TEST(ChromeTraceTest, EveryTaskBecomesCompleteEventsOnItsTrack) {
  const Topology topology(two_nodes());
  const Plan plan = two_replica_plan();
  const SimResult res = two_replica_result();
  const Json doc = parse(chrome_trace_json(plan, res, topology));
  ASSERT_TRUE(doc.contains("traceEvents"));
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  const auto names = thread_names(doc);
  const std::vector<Json> xs = complete_events(doc);

  // Index the X events by (name, replica arg, thread name).
  std::multimap<std::string, Json> by_key;
  for (const Json& x : xs) {
    const std::string replica =
        x["args"].contains("replica") ? std::to_string(x["args"]["replica"].get<int>()) : "-";
    const std::string thread = names.at({x["pid"].get<int>(), x["tid"].get<int>()});
    by_key.emplace(x["name"].get<std::string>() + "|" + replica + "|" + thread, x);
  }

  size_t expected_events = 0;
  for (const SimTask& t : res.timeline) {
    const double ts = t.start.value() * 1e6;
    const double dur = t.end.value() * 1e6 - ts;
    const std::string replica = t.replica >= 0 ? std::to_string(t.replica) : "-";
    std::vector<std::string> threads;
    if (is_compute(t.kind)) {
      const std::vector<int>& devices = plan.replicas[t.replica].groups[t.group].devices;
      threads.push_back(devices.size() == 1 ? "device " + std::to_string(devices[0]) + " (H100-SXM)"
                                            : "replica " + std::to_string(t.replica) + " group " +
                                                  std::to_string(t.group) + ": devices " +
                                                  std::to_string(devices[0]) + "," +
                                                  std::to_string(devices[1]) + " (H100-SXM)");
    } else if (t.kind == SimTaskKind::kGradientAllReduce) {
      threads.push_back("all-reduce");
    } else {
      for (int l : topology.path(t.device, t.peer_device).links) {
        threads.push_back(topology.links()[l].name);
      }
    }
    for (const std::string& thread : threads) {
      ++expected_events;
      // Overlapping events on one track go to lanes "<track> #2", ...
      auto range = by_key.equal_range(sim_task_name(t) + "|" + replica + "|" + thread);
      int found = 0;
      for (auto it = range.first; it != range.second; ++it) ++found;
      if (found == 0) {
        for (int lane = 2; lane <= 4 && found == 0; ++lane) {
          range = by_key.equal_range(sim_task_name(t) + "|" + replica + "|" + thread + " #" +
                                     std::to_string(lane));
          for (auto it = range.first; it != range.second; ++it) ++found;
        }
      }
      ASSERT_EQ(found, 1) << sim_task_name(t) << " on " << thread;
      const Json& x = range.first->second;
      EXPECT_EQ(x["ts"].get<double>(), ts);
      EXPECT_EQ(x["dur"].get<double>(), dur);
      EXPECT_EQ(x["pid"], is_compute(t.kind) ? 1 : 2);
    }
  }
  EXPECT_EQ(xs.size(), expected_events);
}

TEST(ChromeTraceTest, ArgsColoursAndCategoriesFollowTheKind) {
  const Topology topology(two_nodes());
  const Json doc = parse(chrome_trace_json(two_replica_plan(), two_replica_result(), topology));
  std::map<std::string, Json> first;
  for (const Json& x : complete_events(doc)) first.emplace(x["name"].get<std::string>(), x);
  const Json& f = first.at("F s1 mb1");
  EXPECT_EQ(f["cname"], "rail_response");
  EXPECT_EQ(f["cat"], "F");
  EXPECT_EQ(f["args"]["stage"], 1);
  EXPECT_EQ(f["args"]["micro_batch"], 1);
  EXPECT_TRUE(f["args"].contains("replica"));
  EXPECT_EQ(first.at("B s0 mb0")["cname"], "rail_animation");
  EXPECT_EQ(first.at("act s0 mb1 g0->g1")["cname"], "cq_build_running");
  EXPECT_EQ(first.at("allreduce s1")["cname"], "background_memory_dump");
  EXPECT_EQ(first.at("optimizer g0")["cname"], "generic_work");
  // The remaining kinds, and all colours distinct.
  EXPECT_STREQ(chrome_color_name(TimelineKind::kBackwardInput), "rail_idle");
  EXPECT_STREQ(chrome_color_name(TimelineKind::kBackwardWeight), "rail_load");
  EXPECT_STREQ(chrome_color_name(TimelineKind::kRecompute), "detailed_memory_dump");
  std::set<std::string> colours;
  for (int k = 0; k < kTimelineKindCount; ++k) {
    colours.insert(chrome_color_name(static_cast<TimelineKind>(k)));
  }
  EXPECT_EQ(colours.size(), static_cast<size_t>(kTimelineKindCount));

  EXPECT_EQ(doc["otherData"]["model"], "tiny");
  EXPECT_EQ(doc["otherData"]["schedule"], "gpipe");
  EXPECT_EQ(doc["otherData"]["iteration_time_ms"].get<double>(), 0.012 * 1e3);
  EXPECT_EQ(doc["otherData"]["fits_memory"], false);
}

TEST(ChromeTraceTest, MetadataNamesAndOrdersEveryTrack) {
  const Topology topology(two_nodes());
  const Json doc = parse(chrome_trace_json(two_replica_plan(), two_replica_result(), topology));
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, int> sort_index;
  for (const Json& e : doc["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
    if (e["name"] == "thread_sort_index") {
      sort_index[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["sort_index"];
    }
  }
  EXPECT_EQ(processes, (std::map<int, std::string>{{1, "compute"}, {2, "communication"}}));
  const auto names = thread_names(doc);
  // Compute tracks first, in pipeline order replica by replica, with increasing sort indices.
  std::vector<std::string> compute;
  int previous = 0;
  for (const auto& [key, name] : names) {
    ASSERT_TRUE(sort_index.count(key)) << name;
    EXPECT_EQ(sort_index[key], key.second);
    EXPECT_GT(key.second, previous);
    previous = key.second;
    if (key.first == 1) compute.push_back(name);
  }
  EXPECT_EQ(compute, (std::vector<std::string>{
                         "device 0 (H100-SXM)", "replica 0 group 1: devices 4,5 (H100-SXM)",
                         "device 1 (H100-SXM)", "replica 1 group 1: devices 6,7 (H100-SXM)"}));
  // The two all-reduces overlap ([7.5, 10.5] and [10, 11] ms): two lanes.
  std::set<std::string> all;
  for (const auto& [key, name] : names) all.insert(name);
  EXPECT_TRUE(all.count("all-reduce"));
  EXPECT_TRUE(all.count("all-reduce #2"));
  // Both replicas' activations leave node "a" through its one NIC at the same time.
  EXPECT_TRUE(all.count("a nic0 tx #2")) << "lane names: the NIC track should have two lanes";
}

TEST(ChromeTraceTest, AnEmptyTimelineIsValidJsonWithTheComputeTracks) {
  const Topology topology(two_nodes());
  SimResult res = two_replica_result();
  res.timeline.clear();
  const std::string text = chrome_trace_json(two_replica_plan(), res, topology);
  const Json doc = parse(text);
  EXPECT_TRUE(complete_events(doc).empty());
  EXPECT_EQ(thread_names(doc).size(), 4u);  // the four compute streams, no link tracks

  // No plan, no result at all.
  const Json bare = parse(chrome_trace_json(Plan{}, SimResult{}, topology));
  EXPECT_TRUE(complete_events(bare).empty());
  EXPECT_TRUE(thread_names(bare).empty());
  EXPECT_TRUE(bare["traceEvents"].is_array());
}

TEST(ChromeTraceTest, OptionsDropLinkAndAllReduceTracks) {
  const Topology topology(two_nodes());
  TraceOptions options;
  options.link_tracks = false;
  options.all_reduce_track = false;
  options.pretty = true;
  const std::string text =
      chrome_trace_json(two_replica_plan(), two_replica_result(), topology, options);
  EXPECT_NE(text.find("\n  "), std::string::npos);  // indented
  const Json doc = parse(text);
  for (const Json& x : complete_events(doc)) EXPECT_EQ(x["pid"], 1) << x["name"];
  EXPECT_EQ(complete_events(doc).size(), 20u);  // 16 compute tasks + 4 optimizer steps
}

// The generic entry point takes any list of records: a measured trace reuses it.
TEST(ChromeTraceTest, GenericTimelinesConvertDirectly) {
  Timeline tl;
  tl.tracks = {TimelineTrack{"rank 0", TrackRole::kCompute, 0, 0},
               TimelineTrack{"nic <0> & \"x\"", TrackRole::kLink, 0, -1}};
  TimelineEvent e;
  e.track = 0;
  e.name = "F s0 mb0";
  e.kind = TimelineKind::kForward;
  e.start = microseconds(5);
  e.end = microseconds(7.5);
  e.args = {{"stage", 0}};
  tl.events.push_back(e);
  e.track = 1;
  e.name = "send";
  e.kind = TimelineKind::kTransfer;
  tl.events.push_back(e);
  e.track = 7;  // no such track: dropped
  tl.events.push_back(e);
  const Json doc = chrome_trace_document(tl, {{"source", "measured"}});
  const Json reparsed = parse(doc.dump());
  const std::vector<Json> xs = complete_events(reparsed);
  ASSERT_EQ(xs.size(), 2u);
  const double ts = microseconds(5).value() * 1e6;
  EXPECT_EQ(xs[0]["ts"].get<double>(), ts);
  EXPECT_EQ(xs[0]["dur"].get<double>(), microseconds(7.5).value() * 1e6 - ts);
  EXPECT_EQ(xs[0]["tid"], 1);
  EXPECT_EQ(xs[1]["tid"], 2);
  EXPECT_EQ(xs[1]["pid"], 2);
  EXPECT_EQ(thread_names(reparsed).at({2, 2}), "nic <0> & \"x\"");
  EXPECT_EQ(reparsed["otherData"]["source"], "measured");
}

// Every event of a document as its JSON text, sorted: equal documents up to event order.
std::vector<std::string> sorted_events(const Json& doc) {
  std::vector<std::string> out;
  for (const Json& e : doc["traceEvents"]) out.push_back(e.dump());
  std::sort(out.begin(), out.end());
  return out;
}

// Per-rank documents on one time axis merge into the document of the whole timeline: the same
// process metadata once, the same thread ids, names and sort indices (lanes included), the same
// events.
TEST(ChromeTraceMergeTest, PerTrackDocumentsMergeIntoTheWholeTimelinesDocument) {
  Timeline whole;
  for (int r = 0; r < 3; ++r) {
    whole.tracks.push_back(TimelineTrack{"rank " + std::to_string(r), TrackRole::kCompute, r, 0});
  }
  auto add = [&](int track, const std::string& name, double start_us, double end_us) {
    TimelineEvent e;
    e.track = track;
    e.name = name;
    e.start = microseconds(start_us);
    e.end = microseconds(end_us);
    e.args = {{"rank", track}};
    whole.events.push_back(e);
  };
  add(0, "0F0", 0, 10);
  add(0, "0B0", 30, 45);
  add(1, "1F0", 10, 20);
  add(1, "send", 15, 25);  // overlaps 1F0: rank 1 has two lanes
  add(1, "1B0", 20, 30);
  add(2, "2F0", 20, 30);
  const Json expected = chrome_trace_document(whole, {{"rank", 0}});

  std::vector<Json> parts;
  for (int r = 0; r < 3; ++r) {
    Timeline part;
    part.tracks = {whole.tracks[r]};
    for (TimelineEvent e : whole.events) {
      if (e.track != r) continue;
      e.track = 0;
      part.events.push_back(e);
    }
    parts.push_back(chrome_trace_document(part, {{"rank", r}}));
    ASSERT_TRUE(check_chrome_trace(parts.back()).is_ok());
  }
  const Json merged = merge_chrome_traces(parts);
  EXPECT_EQ(sorted_events(merged), sorted_events(expected));
  EXPECT_EQ(thread_names(merged).at({1, 3}), "rank 1 #2");
  EXPECT_EQ(merged["otherData"], (Json{{"rank", 0}}));
  EXPECT_EQ(merged["displayTimeUnit"], "ms");
  // Metadata comes first, as chrome_trace_document writes it.
  bool seen_complete = false;
  for (const Json& e : merged["traceEvents"]) {
    if (e["ph"] == "X") seen_complete = true;
    if (e["ph"] == "M") {
      EXPECT_FALSE(seen_complete) << e.dump();
    }
  }
}

TEST(ChromeTraceMergeTest, OneDocumentMergesIntoItself) {
  Timeline tl;
  tl.tracks = {TimelineTrack{"rank 0", TrackRole::kCompute, 0, 0}};
  const Json doc = chrome_trace_document(tl, {{"measured", true}});
  EXPECT_EQ(merge_chrome_traces({doc}), doc);
}

TEST(ChromeTraceMergeTest, CheckRejectsWhatIsNotATrace) {
  auto message = [](const Json& doc) { return check_chrome_trace(doc).message(); };
  EXPECT_NE(message(Json::array()).find("JSON object"), std::string::npos);
  EXPECT_NE(message(Json{{"events", Json::array()}}).find("traceEvents"), std::string::npos);
  const Json no_tid = {{"traceEvents", {{{"ph", "X"}, {"pid", 1}}}}};
  EXPECT_NE(message(no_tid).find("traceEvents[0]"), std::string::npos);
  const Json string_pid = {{"traceEvents", {{{"ph", "X"}, {"pid", "1"}, {"tid", 1}}}}};
  EXPECT_EQ(check_chrome_trace(string_pid).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(check_chrome_trace(Json{{"traceEvents", Json::array()}}).is_ok());
}

}  // namespace
}  // namespace motley
