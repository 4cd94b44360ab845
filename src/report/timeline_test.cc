#include "motley/report/timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "report_fixture.h"

namespace motley {
namespace {

using report_testing::two_nodes;
using report_testing::two_replica_plan;
using report_testing::two_replica_result;

TEST(TimelineTest, IdListsCollapseRunsOfThreeOrMore) {
  EXPECT_EQ(format_id_list({5, 4}), "4,5");
  EXPECT_EQ(format_id_list({7, 6, 5, 4, 3, 2, 1, 0}), "0-7");
  EXPECT_EQ(format_id_list({9, 0, 1, 2, 3, 6, 8}), "0-3,6,8,9");
  EXPECT_EQ(format_id_list({}), "");
}

TEST(TimelineTest, LanesSeparateOverlapsAndReuseFreedLanes) {
  std::vector<TimelineEvent> events(5);
  const double times[][2] = {{0, 2}, {1, 3}, {2, 4}, {3, 5}, {0.5, 6}};
  for (size_t i = 0; i < events.size(); ++i) {
    events[i].start = Seconds(times[i][0]);
    events[i].end = Seconds(times[i][1]);
  }
  std::vector<const TimelineEvent*> ptrs;
  for (const TimelineEvent& e : events) ptrs.push_back(&e);
  int lanes = 0;
  const std::vector<int> lane = assign_lanes(ptrs, &lanes);
  // [0,2) lane 0; [0.5,6) lane 1; [1,3) lane 2; [2,4) reuses lane 0 (it starts where [0,2)
  // ends); [3,5) reuses lane 2.
  EXPECT_EQ(lane, (std::vector<int>{0, 2, 0, 2, 1}));
  EXPECT_EQ(lanes, 3);

  int none = 0;
  EXPECT_TRUE(assign_lanes({}, &none).empty());
  EXPECT_EQ(none, 1);
}

TEST(TimelineTest, TracksAreComputeInPipelineOrderThenAllReduceThenLinks) {
  const Topology topology(two_nodes());
  const Timeline tl = timeline_from_simulation(two_replica_plan(), two_replica_result(), topology);
  ASSERT_GE(tl.tracks.size(), 5u);
  // Replica by replica, each in stage order: not device 0, 1, 4-5, 6-7.
  EXPECT_EQ(tl.tracks[0].name, "device 0 (H100-SXM)");
  EXPECT_EQ(tl.tracks[1].name, "replica 0 group 1: devices 4,5 (H100-SXM)");
  EXPECT_EQ(tl.tracks[2].name, "device 1 (H100-SXM)");
  EXPECT_EQ(tl.tracks[3].name, "replica 1 group 1: devices 6,7 (H100-SXM)");
  EXPECT_EQ(tl.tracks[1].replica, 0);
  EXPECT_EQ(tl.tracks[2].replica, 1);
  EXPECT_EQ(tl.tracks[1].first_stage, 1);
  EXPECT_EQ(tl.tracks[2].first_stage, 0);
  EXPECT_EQ(tl.tracks[4].name, "all-reduce");
  EXPECT_EQ(tl.tracks[4].role, TrackRole::kCollective);
  // The link tracks: exactly the links the fixture's transfers cross, by id.
  std::vector<int> links;
  for (int src : {0, 1}) {
    for (const auto& [a, b] : {std::pair{src, 4 + 2 * src}, std::pair{4 + 2 * src, src}}) {
      for (int l : topology.path(a, b).links) links.push_back(l);
    }
  }
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  ASSERT_EQ(tl.tracks.size(), 5 + links.size());
  for (size_t i = 0; i < links.size(); ++i) {
    EXPECT_EQ(tl.tracks[5 + i].role, TrackRole::kLink);
    EXPECT_EQ(tl.tracks[5 + i].name, topology.links()[links[i]].name);
    EXPECT_EQ(tl.tracks[5 + i].sort_key, links[i]);
  }
  EXPECT_EQ(tl.span, milliseconds(12));
}

TEST(TimelineTest, EventsCarryNamesArgsLabelsAndCriticalFlags) {
  const Topology topology(two_nodes());
  const SimResult res = two_replica_result();
  const Timeline tl = timeline_from_simulation(two_replica_plan(), res, topology);
  std::map<std::string, int> per_name;
  for (const TimelineEvent& e : tl.events) ++per_name[e.name + "@" + tl.tracks[e.track].name];
  // Compute tasks: once each, on their group's track.
  EXPECT_EQ(per_name["F s0 mb1@device 1 (H100-SXM)"], 1);
  EXPECT_EQ(per_name["B s1 mb0@replica 1 group 1: devices 6,7 (H100-SXM)"], 1);
  EXPECT_EQ(per_name["optimizer g1@replica 0 group 1: devices 4,5 (H100-SXM)"], 1);

  const TimelineEvent* f = nullptr;
  const TimelineEvent* f_r1 = nullptr;
  for (const TimelineEvent& e : tl.events) {
    if (e.name == "F s1 mb1" && e.args["replica"] == 0) f = &e;
    if (e.name == "F s1 mb1" && e.args["replica"] == 1) f_r1 = &e;
  }
  ASSERT_NE(f, nullptr);
  ASSERT_NE(f_r1, nullptr);
  EXPECT_EQ(f->kind, TimelineKind::kForward);
  EXPECT_EQ(f->start, milliseconds(4.5));
  EXPECT_EQ(f->end, milliseconds(5.5));
  EXPECT_EQ(f->label, "1");
  EXPECT_EQ(f->args["stage"], 1);
  EXPECT_EQ(f->args["micro_batch"], 1);
  EXPECT_EQ(f->args["group"], 1);
  EXPECT_TRUE(f->critical);
  EXPECT_EQ(f->args["critical_path"], true);
  EXPECT_FALSE(f_r1->critical);  // the same task of the other replica is not on the path
  EXPECT_FALSE(f_r1->args.contains("critical_path"));

  // A transfer: one copy per link of its path, the first primary, each naming its link.
  const PathLinks path = topology.path(0, 4).links;
  ASSERT_FALSE(path.empty());
  std::vector<const TimelineEvent*> copies;
  for (const TimelineEvent& e : tl.events) {
    if (e.name == "act s0 mb0 g0->g1" && e.args["replica"] == 0) copies.push_back(&e);
  }
  ASSERT_EQ(copies.size(), path.size());
  for (size_t i = 0; i < copies.size(); ++i) {
    EXPECT_EQ(copies[i]->kind, TimelineKind::kTransfer);
    EXPECT_EQ(copies[i]->primary, i == 0);
    EXPECT_EQ(tl.tracks[copies[i]->track].name, topology.links()[path[i]].name);
    EXPECT_EQ(copies[i]->args["link"], topology.links()[path[i]].name);
    EXPECT_EQ(tl.tracks[copies[i]->source_track].name, "device 0 (H100-SXM)");
    EXPECT_EQ(copies[i]->args["payload"], "activation");
    EXPECT_EQ(copies[i]->args["to_device"], 4);
    EXPECT_TRUE(copies[i]->critical);
  }

  // All-reduces on their own track, labelled with the stage.
  int all_reduces = 0;
  for (const TimelineEvent& e : tl.events) {
    if (e.kind != TimelineKind::kAllReduce) continue;
    ++all_reduces;
    EXPECT_EQ(tl.tracks[e.track].name, "all-reduce");
    std::string expected = "s";
    expected += std::to_string(e.args["stage"].get<int>());
    EXPECT_EQ(e.label, expected);
  }
  EXPECT_EQ(all_reduces, 2);
}

// Groups running several stages number them as chunks in increasing stage order.
TEST(TimelineTest, ChunksFollowTheGroupsStagesInOrder) {
  Plan plan;
  plan.stages = {Stage{0, 1}, Stage{1, 2}, Stage{2, 3}, Stage{3, 4}};
  Replica rep;
  rep.micro_batches = 1;
  rep.stage_group = {0, 1, 1, 0};  // V shape: group 0 runs stages 0 and 3
  rep.groups = {DeviceGroupSchedule{{0}, {}}, DeviceGroupSchedule{{1}, {}}};
  plan.replicas = {rep};
  SimResult res;
  for (int s : {0, 3}) {
    SimTask t;
    t.kind = SimTaskKind::kForward;
    t.stage = s;
    t.group = 0;
    t.device = 0;
    t.start = Seconds(s);
    t.end = Seconds(s + 1);
    res.timeline.push_back(t);
  }
  const Topology topology(report_testing::two_nodes());
  const Timeline tl = timeline_from_simulation(plan, res, topology);
  ASSERT_EQ(tl.events.size(), 2u);
  EXPECT_EQ(tl.events[0].chunk, 0);
  EXPECT_EQ(tl.events[1].chunk, 1);
  EXPECT_EQ(tl.span, Seconds(4));  // the last event's end when it exceeds the iteration time
  EXPECT_EQ(tl.tracks[0].name, "device 0 (H100-SXM)");  // one replica: no replica prefix
}

// A task naming a group the plan lacks still gets a track rather than being lost.
TEST(TimelineTest, UnknownGroupsGetTheirOwnTrack) {
  SimResult res;
  SimTask t;
  t.replica = 3;
  t.group = 9;
  t.device = 2;
  t.end = Seconds(1);
  res.timeline.push_back(t);
  const Topology topology(report_testing::two_nodes());
  const Timeline tl = timeline_from_simulation(Plan{}, res, topology);
  ASSERT_EQ(tl.tracks.size(), 1u);
  EXPECT_EQ(tl.tracks[0].name, "replica 3 group 9");
  EXPECT_EQ(tl.events[0].track, 0);
}

SimTask forward(int replica, int group, int stage, int device, double start_s) {
  SimTask t;
  t.kind = SimTaskKind::kForward;
  t.replica = replica;
  t.group = group;
  t.stage = stage;
  t.device = device;
  t.start = Seconds(start_s);
  t.end = Seconds(start_s + 1);
  return t;
}

// Rows read in pipeline order even when the first stage sits on higher-numbered devices than
// the next one, and when a replica's group indices do not follow its stages.
TEST(TimelineTest, ComputeTracksFollowTheStagesNotTheDeviceIds) {
  Plan plan;
  plan.stages = {Stage{0, 1}, Stage{1, 2}};
  Replica r0;
  r0.micro_batches = 1;
  r0.stage_group = {0, 1};
  r0.groups = {DeviceGroupSchedule{{5}, {}}, DeviceGroupSchedule{{1}, {}}};
  Replica r1;
  r1.micro_batches = 1;
  r1.stage_group = {1, 0};  // group 1 runs stage 0
  r1.groups = {DeviceGroupSchedule{{0}, {}}, DeviceGroupSchedule{{6, 7}, {}}};
  plan.replicas = {r0, r1};
  SimResult res;
  res.timeline = {forward(0, 0, 0, 5, 0), forward(0, 1, 1, 1, 2), forward(1, 1, 0, 6, 0),
                  forward(1, 0, 1, 0, 2)};
  SimTask send = forward(0, 0, 0, 5, 1);
  send.kind = SimTaskKind::kSendActivation;
  send.peer_group = 1;
  send.peer_device = 1;
  res.timeline.push_back(send);
  const Topology topology(report_testing::two_nodes());
  const Timeline tl = timeline_from_simulation(plan, res, topology);

  ASSERT_GE(tl.tracks.size(), 5u);
  EXPECT_EQ(tl.tracks[0].name, "device 5 (H100-SXM)");                        // replica 0, stage 0
  EXPECT_EQ(tl.tracks[1].name, "device 1 (H100-SXM)");                        // replica 0, stage 1
  EXPECT_EQ(tl.tracks[2].name, "replica 1 group 1: devices 6,7 (H100-SXM)");  // stage 0
  EXPECT_EQ(tl.tracks[3].name, "device 0 (H100-SXM)");                        // stage 1
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(tl.tracks[i].role, TrackRole::kCompute);
    EXPECT_EQ(tl.tracks[i].replica, i / 2);
    EXPECT_EQ(tl.tracks[i].first_stage, i % 2);
  }
  for (size_t i = 4; i < tl.tracks.size(); ++i) EXPECT_EQ(tl.tracks[i].role, TrackRole::kLink);
  // Events follow their tracks through the reordering.
  for (const TimelineEvent& e : tl.events) {
    if (e.kind == TimelineKind::kTransfer) {
      EXPECT_EQ(e.source_track, 0);
      continue;
    }
    const int replica = e.args["replica"].get<int>();
    const int stage = e.args["stage"].get<int>();
    EXPECT_EQ(e.track, 2 * replica + stage) << e.name;
  }
}

// Without a plan, tracks are still grouped by replica and ordered by the stages they ran.
TEST(TimelineTest, TracksWithoutAPlanFollowTheirTasksStages) {
  SimResult res;
  res.timeline = {forward(1, 0, 0, 3, 0), forward(0, 0, 1, 0, 2), forward(0, 1, 0, 3, 0),
                  forward(0, 0, 2, 0, 3)};
  const Topology topology(report_testing::two_nodes());
  const Timeline tl = timeline_from_simulation(Plan{}, res, topology);
  ASSERT_EQ(tl.tracks.size(), 3u);
  EXPECT_EQ(tl.tracks[0].name, "replica 0 group 1");  // ran stage 0
  EXPECT_EQ(tl.tracks[1].name, "replica 0 group 0");  // ran stages 1 and 2
  EXPECT_EQ(tl.tracks[1].first_stage, 1);
  EXPECT_EQ(tl.tracks[2].name, "replica 1 group 0");
}

// order_tracks is usable on any timeline: a measured one states replicas and stages itself.
TEST(TimelineTest, OrderTracksRenumbersEvents) {
  Timeline tl;
  tl.tracks = {TimelineTrack{"link", TrackRole::kLink, 0, -1, -1},
               TimelineTrack{"rank 0", TrackRole::kCompute, 0, 0, 1},
               TimelineTrack{"rank 1", TrackRole::kCompute, 1, 0, 0},
               TimelineTrack{"rank 2", TrackRole::kCompute, 2, 0, -1}};
  for (int t = 0; t < 4; ++t) {
    TimelineEvent e;
    e.track = t;
    e.name = tl.tracks[t].name;
    e.source_track = t == 0 ? 1 : -1;
    tl.events.push_back(e);
  }
  order_tracks(&tl);
  ASSERT_EQ(tl.tracks.size(), 4u);
  EXPECT_EQ(tl.tracks[0].name, "rank 1");
  EXPECT_EQ(tl.tracks[1].name, "rank 0");
  EXPECT_EQ(tl.tracks[2].name, "rank 2");  // stage unknown: after the known ones
  EXPECT_EQ(tl.tracks[3].name, "link");
  for (const TimelineEvent& e : tl.events) EXPECT_EQ(tl.tracks[e.track].name, e.name);
  EXPECT_EQ(tl.events[0].source_track, 1);  // "rank 0", wherever it moved
}

}  // namespace
}  // namespace motley
