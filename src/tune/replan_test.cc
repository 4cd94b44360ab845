// Replanning (replan.h): the cluster that remains or grows, the device map, the survivors of a
// plan, and a replan that keeps the global batch and starts from the survivors.
#include "motley/tune/replan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../schedule/test_util.h"
#include "candidate.h"
#include "motley/plan/spec_hash.h"
#include "motley/sim/simulator.h"
#include "tune_test_util.h"

namespace motley::tune_internal::tune_testing {
namespace {

using schedule_testing::fixed_cluster;
using schedule_testing::tiny_model;

// Three nodes of two devices: two of H100s, one of A100s.
ClusterSpec three_nodes() { return fixed_cluster({"H100-SXM", "H100-SXM", "A100-80GB"}, 2); }

// Measurements follow their devices to their new ids; one that crossed a lost device is gone.
TEST(Replan, MeasurementsFollowTheirDevices) {
  ClusterSpec cluster = three_nodes();
  cluster.measured_links = {{2, 3, microseconds(5), gigabytes_per_second(10)},
                            {1, 2, microseconds(9), gigabytes_per_second(20)}};
  MeasuredCollective pair;
  pair.op = "all_reduce";
  pair.ranks = 2;
  pair.devices = {5, 4};
  pair.samples = {{Bytes(1024), microseconds(30), {}, {}}};
  MeasuredCollective across = pair;
  across.ranks = 3;
  across.devices = {0, 2, 4};
  cluster.measured_collectives = {pair, across};
  Result<ClusterSpec> fewer = cluster_without(cluster, {cluster.nodes[0].name});
  ASSERT_TRUE(fewer.is_ok()) << fewer.status().message();
  ASSERT_EQ(fewer->measured_links.size(), 1u);
  EXPECT_EQ(fewer->measured_links[0].src, 0);
  EXPECT_EQ(fewer->measured_links[0].dst, 1);
  ASSERT_EQ(fewer->measured_collectives.size(), 1u);
  EXPECT_EQ(fewer->measured_collectives[0].devices, (std::vector<int>{3, 2}));
}

TEST(Replan, LosingAndGainingNodesNamesWhatIsWrong) {
  const ClusterSpec cluster = three_nodes();
  const std::string last = cluster.nodes[2].name;
  Result<ClusterSpec> fewer = cluster_without(cluster, {last});
  ASSERT_TRUE(fewer.is_ok()) << fewer.status().message();
  EXPECT_EQ(fewer->nodes.size(), 2u);
  EXPECT_EQ(device_map(cluster, *fewer), (std::vector<int>{0, 1, 2, 3, -1, -1}));

  EXPECT_EQ(cluster_without(cluster, {"nowhere"}).status().message(),
            "--lost: cluster '" + cluster.name + "' has no node 'nowhere'; its nodes: " +
                cluster.nodes[0].name + ", " + cluster.nodes[1].name + ", " + last);
  EXPECT_EQ(cluster_without(cluster, {last, last}).status().message(),
            "--lost: node '" + last + "' is named twice");
  EXPECT_NE(cluster_without(cluster, {cluster.nodes[0].name, cluster.nodes[1].name, last})
                .status()
                .message()
                .find("that is every node"),
            std::string::npos);

  // The lost node back, under another name: the devices that stayed keep their ids.
  ClusterSpec arriving;
  arriving.name = "arriving";
  arriving.nodes = {cluster.nodes[2]};
  arriving.nodes[0].name = "spare";
  Result<ClusterSpec> more = cluster_with(*fewer, arriving);
  ASSERT_TRUE(more.is_ok()) << more.status().message();
  EXPECT_EQ(device_map(cluster, *more), (std::vector<int>{0, 1, 2, 3, -1, -1}));
  EXPECT_EQ(device_map(*fewer, *more), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(cluster_with(cluster, arriving).status().code(), StatusCode::kOk);
  arriving.nodes[0].name = cluster.nodes[1].name;
  EXPECT_EQ(cluster_with(cluster, arriving).status().message(),
            "--gained: node '" + cluster.nodes[1].name +
                "' of cluster 'arriving' is already a node of cluster '" + cluster.name +
                "'; give the new nodes names of their own");
}

TEST(Replan, TheSurvivorsAreTheReplicasLeftWhole) {
  Plan plan;
  plan.stages = {Stage{0, 4}, Stage{4, 8}};
  for (const std::vector<int>& devices : {std::vector<int>{0, 1}, std::vector<int>{2, 3}}) {
    Replica r;
    r.micro_batches = 4;
    r.stage_group = {0, 1};
    r.groups = {DeviceGroupSchedule{{devices[0]}, {Action{}}},
                DeviceGroupSchedule{{devices[1]}, {Action{}}}};
    plan.replicas.push_back(r);
  }
  EXPECT_EQ(device_layers(plan, 1), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(layer_ranges({0, 1, 2, 5, 7, 8}), "0-2, 5, 7-8");
  EXPECT_EQ(layer_ranges({}), "-");
  // Device 1 is gone and device 3 is now device 1.
  const std::optional<Plan> kept = surviving_structure(plan, {0, -1, 2, 1});
  ASSERT_TRUE(kept.has_value());
  ASSERT_EQ(kept->replicas.size(), 1u);
  EXPECT_EQ(kept->replicas[0].groups[0].devices, std::vector<int>{2});
  EXPECT_EQ(kept->replicas[0].groups[1].devices, std::vector<int>{1});
  EXPECT_TRUE(kept->replicas[0].groups[0].actions.empty());
  EXPECT_FALSE(surviving_structure(plan, {-1, 0, -1, 1}).has_value());
}

TEST(Replan, ANodeLostKeepsTheGlobalBatchAndStartsFromTheSurvivors) {
  // The old plan: one replica of two stages on each node, 4 micro-batches each.
  const TuneOptions options = fixed_options(12, uniform_spec(8));
  Fixture fx(tiny_model(8), three_nodes(), options);
  const ClusterSpec& cluster = fx.cluster;
  const ModelSpec& model = fx.model;
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  for (int node = 0; node < 3; ++node) {
    c.replicas.push_back(
        PipelineSpec{{{2 * node}, {2 * node + 1}}, {0, 4, 8}, std::vector<RecomputePolicy>(2), 4});
  }
  Result<Plan> old_plan = assemble(*fx.ctx, c);
  ASSERT_TRUE(old_plan.is_ok()) << old_plan.status().message();
  Result<SimResult> old_sim = simulate(SimOptions{}, *old_plan, fx.ctx->cost(1));
  ASSERT_TRUE(old_sim.is_ok());

  Result<ClusterSpec> fewer = cluster_without(cluster, {cluster.nodes[2].name});
  ASSERT_TRUE(fewer.is_ok());
  ReplanOptions replan_options;
  replan_options.tune = options;
  Result<ReplanResult> r = replan(*old_plan, model, cluster, *fewer, replan_options);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const Plan& plan = r->tuned.plan;
  EXPECT_EQ(plan.global_batch, 12);
  EXPECT_EQ(plan.cluster.hash, cluster_ref(*fewer).hash);
  for (const Replica& replica : plan.replicas) {
    for (const DeviceGroupSchedule& g : replica.groups) {
      for (int d : g.devices) EXPECT_LT(d, 4);
    }
  }
  EXPECT_NEAR(r->old_iteration_time.value(), old_sim->iteration_time.value(),
              1e-12 * old_sim->iteration_time.value());
  // Four devices instead of six, and none faster: the new plan cannot beat the old one.
  EXPECT_GE(r->tuned.simulation.iteration_time.value(), r->old_iteration_time.value());

  // The devices of the lost node are gone; the others say what they held and hold.
  ASSERT_EQ(r->devices.size(), 6u);
  for (int d = 0; d < 6; ++d) {
    EXPECT_EQ(r->devices[d].old_device, d);
    EXPECT_EQ(r->devices[d].new_device, d < 4 ? d : -1);
    const std::vector<int> held =
        d % 2 == 0 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{4, 5, 6, 7};
    EXPECT_EQ(r->devices[d].old_layers, held);
  }
  // The replicas of nodes 0 and 1 survive whole and take the lost one's micro-batches.
  EXPECT_EQ(r->old_replicas, 3);
  EXPECT_TRUE(r->warm_started);
  EXPECT_EQ(r->surviving_replicas, 2);
  ASSERT_EQ(r->tuned.warm_starts.size(), 1u);
  const StrategyOutcome& kept = r->tuned.warm_starts[0];
  ASSERT_TRUE(kept.feasible) << kept.detail;
  ASSERT_EQ(kept.plan.replicas.size(), 2u);
  EXPECT_EQ(kept.plan.replicas[0].micro_batches, 6);
  EXPECT_EQ(kept.plan.replicas[1].micro_batches, 6);
  EXPECT_EQ(kept.plan.replicas[1].groups[1].devices, std::vector<int>{3});
  // The search may return the survivors themselves, never anything slower.
  EXPECT_LE(r->tuned.simulation.iteration_time.value(), kept.iteration_time.value());
}

// ZeRO-3 runs every replica's micro-batches in lockstep. Fifteen micro-batches over the two
// replicas that survive cannot be shared evenly, so the warm start keeps their structure with
// the distributed optimizer instead; where the options fix ZeRO-3 it is refused, saying why,
// and the search goes on without it.
TEST(Replan, SurvivorsThatCannotShareTheBatchEvenlyLeaveZeroThreeForZeroOne) {
  TuneOptions options = fixed_options(15, uniform_spec(8));
  Fixture fx(tiny_model(8), three_nodes(), options);
  const ClusterSpec& cluster = fx.cluster;
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  c.zero_stage = 3;
  for (int node = 0; node < 3; ++node) {
    c.replicas.push_back(
        PipelineSpec{{{2 * node}, {2 * node + 1}}, {0, 4, 8}, std::vector<RecomputePolicy>(2), 5});
  }
  Result<Plan> old_plan = assemble(*fx.ctx, c);
  ASSERT_TRUE(old_plan.is_ok()) << old_plan.status().message();
  ASSERT_EQ(old_plan->zero_stage, 3);
  Result<ClusterSpec> fewer = cluster_without(cluster, {cluster.nodes[2].name});
  ASSERT_TRUE(fewer.is_ok());

  ReplanOptions free;
  free.tune = options;
  Result<ReplanResult> r = replan(*old_plan, fx.model, cluster, *fewer, free);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->tuned.warm_starts.size(), 1u);
  const StrategyOutcome& kept = r->tuned.warm_starts[0];
  ASSERT_TRUE(kept.feasible) << kept.detail;
  EXPECT_EQ(kept.plan.zero_stage, 1);
  ASSERT_EQ(kept.plan.replicas.size(), 2u);
  EXPECT_EQ(kept.plan.replicas[0].micro_batches + kept.plan.replicas[1].micro_batches, 15);
  EXPECT_LE(r->tuned.simulation.iteration_time.value(), kept.iteration_time.value());

  ReplanOptions fixed = free;
  fixed.tune.zero_stage = 3;
  r = replan(*old_plan, fx.model, cluster, *fewer, fixed);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->tuned.warm_starts.size(), 1u);
  EXPECT_FALSE(r->tuned.warm_starts[0].feasible);
  EXPECT_NE(r->tuned.warm_starts[0].detail.find("2 replicas cannot share 15 micro-batches"),
            std::string::npos)
      << r->tuned.warm_starts[0].detail;
  EXPECT_EQ(r->tuned.plan.zero_stage, 3);
}

}  // namespace
}  // namespace motley::tune_internal::tune_testing
