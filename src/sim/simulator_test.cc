#include "motley/sim/simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "motley/cost/analytic_cost_model.h"
#include "motley/cost/fixed_cost_model.h"
#include "motley/plan/plan_json.h"
#include "sim_test_util.h"

namespace motley {
namespace {

using sim_testing::expect_relative;
using sim_testing::kFreeInter;
using sim_testing::kFreeIntra;

using ::testing::HasSubstr;

// ---------------------------------------------------------------- helpers

// "0F0 0F1 0B0" -> actions (tests only: a typo fails the test).
std::vector<Action> acts(const std::string& text) {
  std::vector<Action> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    Result<Action> a = parse_action(word);
    EXPECT_TRUE(a.is_ok()) << word;
    if (a.is_ok()) out.push_back(a.value());
  }
  return out;
}

// One layer per stage, all with the same times; free communication unless given.
FixedCostSpec uniform_spec(int layers, FixedLayerTimes t, Bytes boundary = Bytes(0)) {
  FixedCostSpec spec;
  for (int i = 0; i < layers; ++i) {
    FixedLayer l;
    l.times = t;
    l.boundary = boundary;
    spec.layers.push_back(l);
  }
  return spec;
}

// One replica, stage s = layer s on group (s % groups) = device (s % groups).
Plan pipeline_plan(int stages, int groups, int64_t micro_batches,
                   const std::vector<std::vector<Action>>& orders) {
  Plan plan;
  plan.micro_batch_size = 1;
  plan.seq_len = 1000;
  plan.global_batch = micro_batches;
  for (int s = 0; s < stages; ++s) plan.stages.push_back(Stage{s, s + 1, RecomputePolicy::kNone});
  Replica rep;
  rep.micro_batches = micro_batches;
  for (int s = 0; s < stages; ++s) rep.stage_group.push_back(s % groups);
  for (int g = 0; g < groups; ++g) rep.groups.push_back(DeviceGroupSchedule{{g}, orders[g]});
  plan.replicas.push_back(rep);
  return plan;
}

void backward(std::vector<Action>& out, int stage, int j, bool split) {
  if (split) {
    out.push_back({ActionKind::kBackwardInput, stage, j});
    out.push_back({ActionKind::kBackwardWeight, stage, j});
  } else {
    out.push_back({ActionKind::kBackward, stage, j});
  }
}

std::vector<Action> gpipe_order(int rank, int m, bool split) {
  std::vector<Action> out;
  for (int j = 0; j < m; ++j) out.push_back({ActionKind::kForward, rank, j});
  for (int j = 0; j < m; ++j) backward(out, rank, j, split);
  return out;
}

// 1F1B: min(p - rank - 1, m) warm-up forwards, then one forward and one backward, then the
// remaining backwards.
std::vector<Action> one_f_one_b_order(int p, int rank, int m, bool split) {
  std::vector<Action> out;
  const int warmup = std::min(p - rank - 1, m);
  int f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({ActionKind::kForward, rank, f});
  while (f < m) {
    out.push_back({ActionKind::kForward, rank, f++});
    backward(out, rank, b++, split);
  }
  while (b < m) backward(out, rank, b++, split);
  return out;
}

SimOptions compute_only() {
  SimOptions options;
  options.gradient_all_reduce = false;
  options.optimizer_step = OptimizerStepModel::kNone;
  return options;
}

SimResult run_ok(const SimOptions& options, const Plan& plan, const CostModel& cost) {
  Result<SimResult> r = simulate(options, plan, cost);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? r.value() : SimResult{};
}

std::vector<std::string> names(const std::vector<SimTask>& tasks) {
  std::vector<std::string> out;
  for (const SimTask& t : tasks) out.push_back(sim_task_name(t));
  return out;
}

// ---------------------------------------------------------------- closed forms

struct PM {
  int p;
  int m;
};
const PM kShapes[] = {{1, 1}, {2, 1}, {2, 2},  {2, 5}, {3, 3},
                      {4, 4}, {4, 7}, {4, 16}, {8, 3}, {8, 32}};

// Dyadic times (exact sums) and non-dyadic ones (rounding, hence the 1e-12 tolerance).
const FixedLayerTimes kLayerTimes[] = {
    {Seconds(1.0), Seconds(2.0), Seconds(1.5), Seconds(0)},
    {Seconds(1.1), Seconds(2.3), Seconds(0.7), Seconds(0)},
};

// With fused backwards (B + W in one action) GPipe and 1F1B take (m + p - 1)(F + B + W).
// With B and W split and each W right after its B, the gradient leaves after B, so each of
// the p - 1 hops of the final backward chain costs B instead of B + W:
// m(F + B + W) + (p - 1)(F + B). (GPipe: the forwards end at (m + p - 1)F, the backward
// chain then needs (p - 1)B to reach rank 0, which runs its m B+W back to back. 1F1B: the
// last rank never starves, so its last B starts at (p - 1)F + m(F + B + W) - B - W; the chain
// adds (p - 1)B to reach rank 0, plus that rank's B and W.)
double closed_form(const PM& s, const FixedLayerTimes& t, bool split) {
  const double f = t.forward.value(), b = t.backward_input.value(), w = t.backward_weight.value();
  return split ? s.m * (f + b + w) + (s.p - 1) * (f + b) : (s.m + s.p - 1) * (f + b + w);
}

TEST(SimulateClosedForm, GPipe) {
  for (const FixedLayerTimes& t : kLayerTimes) {
    const double round = (t.forward + t.backward_input + t.backward_weight).value();
    for (const PM& s : kShapes) {
      for (bool split : {false, true}) {
        const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, s.p, kFreeIntra, kFreeInter),
                                  uniform_spec(s.p, t));
        std::vector<std::vector<Action>> orders;
        for (int r = 0; r < s.p; ++r) orders.push_back(gpipe_order(r, s.m, split));
        const SimResult res = run_ok(compute_only(), pipeline_plan(s.p, s.p, s.m, orders), cost);
        SCOPED_TRACE("p=" + std::to_string(s.p) + " m=" + std::to_string(s.m) +
                     (split ? " split" : " fused"));
        const double total = closed_form(s, t, split);
        expect_relative(res.iteration_time.value(), total);
        // Every device computes m rounds; the rest is bubble.
        expect_relative(res.bubble_fraction, (total - s.m * round) / total);
      }
    }
  }
}

TEST(SimulateClosedForm, OneFOneB) {
  for (const FixedLayerTimes& t : kLayerTimes) {
    const double round = (t.forward + t.backward_input + t.backward_weight).value();
    for (const PM& s : kShapes) {
      for (bool split : {false, true}) {
        const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, s.p, kFreeIntra, kFreeInter),
                                  uniform_spec(s.p, t));
        std::vector<std::vector<Action>> orders;
        for (int r = 0; r < s.p; ++r) orders.push_back(one_f_one_b_order(s.p, r, s.m, split));
        const SimResult res = run_ok(compute_only(), pipeline_plan(s.p, s.p, s.m, orders), cost);
        SCOPED_TRACE("p=" + std::to_string(s.p) + " m=" + std::to_string(s.m) +
                     (split ? " split" : " fused"));
        const double total = closed_form(s, t, split);
        expect_relative(res.iteration_time.value(), total);
        ASSERT_EQ(res.devices.size(), static_cast<size_t>(s.p));
        for (const DeviceStats& d : res.devices) {
          expect_relative(d.busy.value(), s.m * round);
          expect_relative(d.idle.value(), total - s.m * round);
          EXPECT_EQ(d.exposed_communication, Seconds(0));
        }
      }
    }
  }
}

// ---------------------------------------------------------------- hand-computed cases

// p = 2, m = 2, 1F1B with fused backwards; stage 0 takes F = B = 1, stage 1 F = B = 3.
//   group 0: F0 [0,1]  F1 [1,2]                B0 [7,8]                 B1 [13,14]
//   group 1:       F0 [1,4]  B0 [4,7]  F1 [7,10]  B1 [10,13]
// Iteration 14; busy 4 and 12; idle 10 and 2.
FixedCostSpec unequal_spec() {
  FixedCostSpec spec = uniform_spec(2, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)});
  spec.layers[1].times = {Seconds(3), Seconds(3), Seconds(0), Seconds(0)};
  return spec;
}

TEST(Simulate, UnequalStagesByHand) {
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 2, kFreeIntra, kFreeInter),
                            unequal_spec());
  const Plan plan = pipeline_plan(2, 2, 2, {acts("0F0 0F1 0B0 0B1"), acts("1F0 1B0 1F1 1B1")});
  SimOptions options = compute_only();
  options.record_timeline = true;
  const SimResult res = run_ok(options, plan, cost);
  EXPECT_EQ(res.iteration_time, Seconds(14));
  ASSERT_EQ(res.devices.size(), 2u);
  EXPECT_EQ(res.devices[0].busy, Seconds(4));
  EXPECT_EQ(res.devices[0].idle, Seconds(10));
  EXPECT_EQ(res.devices[1].busy, Seconds(12));
  EXPECT_EQ(res.devices[1].idle, Seconds(2));
  EXPECT_DOUBLE_EQ(res.bubble_fraction, 12.0 / 28.0);
  EXPECT_DOUBLE_EQ(res.throughput_tokens_per_s, 2 * 1000 / 14.0);
  // 8 compute tasks and one (free) message per micro-batch each way.
  EXPECT_EQ(res.tasks, 12);
  ASSERT_EQ(res.timeline.size(), 12u);
  EXPECT_EQ(sim_task_name(res.timeline[2]), "B s0 mb0");
  EXPECT_EQ(res.timeline[2].start, Seconds(7));
  EXPECT_EQ(res.timeline[2].end, Seconds(8));
  EXPECT_EQ(res.timeline[6].start, Seconds(7));  // group 1's F1
  EXPECT_EQ(res.timeline[6].end, Seconds(10));

  EXPECT_THAT(names(res.critical_path),
              ::testing::ElementsAre("F s0 mb0", "act s0 mb0 g0->g1", "F s1 mb0", "B s1 mb0",
                                     "F s1 mb1", "B s1 mb1", "grad s1 mb1 g1->g0", "B s0 mb1"));
  EXPECT_EQ(res.critical_path.back().end, Seconds(14));
}

// The same two stages on an H100 and an A100 node, the A100's times given per device type:
// layer 1 takes F = B = 3 on the A100 (1 by default), so the hand timeline above holds.
TEST(Simulate, TwoDeviceTypesUseTheirOwnTimes) {
  FixedCostSpec spec = uniform_spec(2, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)});
  spec.device_times.push_back({"A100-80GB",
                               {FixedLayerTimes{Seconds(2), Seconds(2), Seconds(0), Seconds(0)},
                                FixedLayerTimes{Seconds(3), Seconds(3), Seconds(0), Seconds(0)}}});
  const FixedCostModel cost(
      make_fixed_cluster({"H100-SXM", "A100-80GB"}, 1, kFreeIntra, kFreeInter), spec);
  const Plan plan = pipeline_plan(2, 2, 2, {acts("0F0 0F1 0B0 0B1"), acts("1F0 1B0 1F1 1B1")});
  const SimResult res = run_ok(compute_only(), plan, cost);
  EXPECT_EQ(res.iteration_time, Seconds(14));
  EXPECT_EQ(res.devices[1].busy, Seconds(12));
  EXPECT_EQ(res.devices[0].capacity, cost.topology().device_type(0).memory);
  EXPECT_EQ(cost.topology().device_type(1).name, "A100-80GB");
  EXPECT_EQ(res.devices[1].capacity, cost.topology().device_type(1).memory);
}

// p = 2 on two nodes joined by a link of latency 0.5 s and 1e9 B/s; 2.5e8 boundary bytes take
// 0.75 s. F = 1, fused B = 2, m = 2, 1F1B:
//   g0: F0 [0,1] F1 [1,2]                       B0 [5.5,7.5]             B1 [8.5,10.5]
//   act0 [1,1.75]  act1 [2,2.75] (the channel is free again at 1.75)
//   g1: F0 [1.75,2.75] B0 [2.75,4.75] F1 [4.75,5.75] B1 [5.75,7.75]
//   grad0 [4.75,5.5]  grad1 [7.75,8.5]
// Exposed: g1 waits 0.75 for act0; g0 waits 0.75 for each gradient.
TEST(Simulate, SlowLinkByHand) {
  const LinkSpec slow{LinkKind::kEthernet, BytesPerSecond(1e9), Seconds(0.5)};
  const FixedCostModel cost(
      make_fixed_cluster({"H100-SXM", "H100-SXM"}, 1, kFreeIntra, slow),
      uniform_spec(2, {Seconds(1), Seconds(2), Seconds(0), Seconds(0)}, Bytes(2.5e8)));
  const Plan plan = pipeline_plan(2, 2, 2, {acts("0F0 0F1 0B0 0B1"), acts("1F0 1B0 1F1 1B1")});
  SimOptions options = compute_only();
  options.record_timeline = true;
  const SimResult res = run_ok(options, plan, cost);
  EXPECT_EQ(res.iteration_time, Seconds(10.5));
  EXPECT_EQ(res.devices[0].exposed_communication, Seconds(1.5));
  EXPECT_EQ(res.devices[1].exposed_communication, Seconds(0.75));
  EXPECT_EQ(res.devices[0].busy, Seconds(6));
  // The second activation waits for the first on their channel, then for its producer.
  const SimTask& act1 = res.timeline[9];
  EXPECT_EQ(sim_task_name(act1), "act s0 mb1 g0->g1");
  EXPECT_EQ(act1.start, Seconds(2));
  EXPECT_EQ(act1.end, Seconds(2.75));
  EXPECT_EQ(act1.device, 0);
  EXPECT_EQ(act1.peer_device, 1);
}

// Two replicas of p = 2 across two nodes; each replica's stages sit on different nodes, so
// both replicas' activations cross node 0's NIC (tx) and node 1's NIC (rx) together.
// Boundary 1e9 bytes over 1e9 B/s links, no latency, F = B = 1 (fused), m = 1:
// alone a message takes 1 s; two at once each get half the bandwidth and take 2 s.
TEST(Simulate, TwoTransfersShareALinkEquallyByHand) {
  const LinkSpec inter{LinkKind::kInfiniband, BytesPerSecond(1e9), Seconds(0)};
  const FixedCostModel cost(
      make_fixed_cluster({"H100-SXM", "H100-SXM"}, 2, kFreeIntra, inter),
      uniform_spec(2, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)}, Bytes(1e9)));
  Plan plan = pipeline_plan(2, 2, 1, {acts("0F0 0B0"), acts("1F0 1B0")});
  plan.replicas[0].groups[0].devices = {0};
  plan.replicas[0].groups[1].devices = {2};
  Replica second = plan.replicas[0];
  second.groups[0].devices = {1};
  second.groups[1].devices = {3};
  plan.replicas.push_back(second);
  plan.global_batch = 2;
  SimOptions options = compute_only();
  options.record_timeline = true;
  const SimResult res = run_ok(options, plan, cost);
  // F [0,1]; activations [1,3]; F [3,4]; B [4,5]; gradients [5,7]; B [7,8].
  EXPECT_EQ(res.iteration_time, Seconds(8));
  for (const SimTask& t : res.timeline) {
    if (t.kind == SimTaskKind::kSendActivation) {
      EXPECT_EQ(t.start, Seconds(1));
      EXPECT_EQ(t.end, Seconds(3));
    }
  }
  // One replica alone: 1 + 1 + 1 + 1 + 1 + 1.
  plan.replicas.pop_back();
  EXPECT_EQ(run_ok(compute_only(), plan, cost).iteration_time, Seconds(6));
}

// As above, but replica 1 runs on A100s that take F = 1.5 for stage 0, so its activation
// starts 0.5 s after replica 0's: replica 0's message runs alone on [1, 1.5] (5e8 bytes),
// shares on [1.5, 2.5] (5e8 bytes at 5e8 B/s) and ends at 2.5; replica 1's sends 5e8 bytes
// shared, then the other 5e8 alone on [2.5, 3].
TEST(Simulate, StaggeredTransfersReRateWhenOneStartsOrEnds) {
  const LinkSpec inter{LinkKind::kInfiniband, BytesPerSecond(1e9), Seconds(0)};
  ClusterSpec cluster = make_fixed_cluster({"H100-SXM", "H100-SXM"}, 1, kFreeIntra, inter);
  for (NodeSpec& node : cluster.nodes) node.devices.push_back(NodeDevices{"A100-80GB", 1});
  FixedCostSpec spec =
      uniform_spec(2, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)}, Bytes(1e9));
  spec.device_times.push_back({"A100-80GB",
                               {FixedLayerTimes{Seconds(1.5), Seconds(1), Seconds(0), Seconds(0)},
                                FixedLayerTimes{Seconds(1), Seconds(1), Seconds(0), Seconds(0)}}});
  const FixedCostModel cost(cluster, spec);
  Plan plan = pipeline_plan(2, 2, 1, {acts("0F0 0B0"), acts("1F0 1B0")});
  plan.replicas[0].groups[1].devices = {2};  // H100 on node 1
  Replica second = plan.replicas[0];
  second.groups[0].devices = {1};  // A100 on node 0
  second.groups[1].devices = {3};  // A100 on node 1
  plan.replicas.push_back(second);
  plan.global_batch = 2;
  SimOptions options = compute_only();
  options.record_timeline = true;
  const SimResult res = run_ok(options, plan, cost);
  int seen = 0;
  for (const SimTask& t : res.timeline) {
    if (t.kind != SimTaskKind::kSendActivation) continue;
    ++seen;
    if (t.replica == 0) {
      EXPECT_EQ(t.start, Seconds(1));
      EXPECT_DOUBLE_EQ(t.end.value(), 2.5);
    } else {
      EXPECT_EQ(t.start, Seconds(1.5));
      EXPECT_DOUBLE_EQ(t.end.value(), 3.0);
    }
  }
  EXPECT_EQ(seen, 2);
}

// Two replicas of p = 2 on one node; replica 0 runs m = 2, replica 1 m = 1 (heterogeneous
// data parallelism), F = B = 1 fused, free p2p. Each stage's gradients are 1e9 bytes; a
// 2-device ring all-reduce over 1e9 B/s ports with no latency takes 2(k-1)/k * 1e9 / 1e9 = 1,
// issued in `buckets` buckets; a fixed optimizer step of 0.5 s. Simulated with the timeline.
SimResult run_uneven_data_parallel(int buckets) {
  const LinkSpec intra{LinkKind::kNvlink, BytesPerSecond(1e9), Seconds(0)};
  FixedCostSpec spec = uniform_spec(2, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)});
  for (FixedLayer& l : spec.layers) l.gradients = Bytes(1e9);
  spec.gradient_buckets = buckets;
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 4, intra, kFreeInter), spec);
  Plan plan = pipeline_plan(2, 2, 2, {acts("0F0 0F1 0B0 0B1"), acts("1F0 1B0 1F1 1B1")});
  Replica second;
  second.micro_batches = 1;
  second.stage_group = {0, 1};
  second.groups = {DeviceGroupSchedule{{2}, acts("0F0 0B0")},
                   DeviceGroupSchedule{{3}, acts("1F0 1B0")}};
  plan.replicas.push_back(second);
  plan.global_batch = 3;
  SimOptions options;
  options.optimizer_step = OptimizerStepModel::kFixed;
  options.optimizer_step_time = Seconds(0.5);
  options.record_timeline = true;
  return run_ok(options, plan, cost);
}

// run_uneven_data_parallel(1), by hand:
//   replica 0: g0 F0 [0,1] F1 [1,2] B0 [3,4] B1 [5,6]; g1 F0 [1,2] B0 [2,3] F1 [3,4] B1 [4,5]
//   replica 1: g0 F0 [0,1] B0 [3,4];                  g1 F0 [1,2] B0 [2,3]
//   all-reduce s1 after both replicas' last s1 backward (5): [5,6], overlapping replica 0's
//   stage-0 B1; all-reduce s0 after 6: [6,7].
//   optimizer steps (fixed 0.5): stage-1 groups [6,6.5], stage-0 groups [7,7.5].
TEST(Simulate, DataParallelAllReduceOverlapsComputeByHand) {
  const SimResult res = run_uneven_data_parallel(1);
  EXPECT_EQ(res.iteration_time, Seconds(7.5));
  EXPECT_DOUBLE_EQ(res.throughput_tokens_per_s, 3 * 1000 / 7.5);
  for (const SimTask& t : res.timeline) {
    if (t.kind == SimTaskKind::kGradientAllReduce) {
      EXPECT_EQ(t.start, Seconds(t.stage == 1 ? 5 : 6)) << sim_task_name(t);
      EXPECT_EQ(t.end, Seconds(t.stage == 1 ? 6 : 7)) << sim_task_name(t);
    }
    if (t.kind == SimTaskKind::kOptimizerStep) {
      const double start = t.group == 1 ? 6 : 7;
      EXPECT_EQ(t.start, Seconds(start)) << sim_task_name(t) << " r" << t.replica;
      EXPECT_EQ(t.end, Seconds(start + 0.5));
    }
  }
  ASSERT_EQ(res.devices.size(), 4u);
  // Every optimizer step waited 1 s on its all-reduce after the last backward was done.
  for (const DeviceStats& d : res.devices) {
    EXPECT_EQ(d.exposed_communication, Seconds(1)) << "device " << d.device;
  }
  EXPECT_EQ(res.devices[0].busy, Seconds(4.5));  // replica 0 group 0: 4 + the step
  EXPECT_EQ(res.devices[2].busy, Seconds(2.5));  // replica 1 group 0
  EXPECT_THAT(names(res.critical_path),
              ::testing::ElementsAre("F s0 mb0", "act s0 mb0 g0->g1", "F s1 mb0", "B s1 mb0",
                                     "F s1 mb1", "B s1 mb1", "grad s1 mb1 g1->g0", "B s0 mb1",
                                     "allreduce s0", "optimizer g0"));
}

// The case above with each stage's gradients reduced in 4 buckets under its last backward
// (1 s): the all-reduce of 1 s leaves max(1/4, 1 - 1 * 3/4) = 0.25 s after it. s1 [5, 5.25],
// s0 [6, 6.25]; the steps follow.
TEST(Simulate, BucketedAllReduceLeavesOnlyItsLastBucketAfterTheBackward) {
  const SimResult res = run_uneven_data_parallel(4);
  EXPECT_EQ(res.iteration_time, Seconds(6.75));
  int seen = 0;
  for (const SimTask& t : res.timeline) {
    if (t.kind != SimTaskKind::kGradientAllReduce) continue;
    ++seen;
    EXPECT_EQ(t.start, Seconds(t.stage == 1 ? 5 : 6)) << sim_task_name(t);
    EXPECT_EQ(t.end, Seconds(t.stage == 1 ? 5.25 : 6.25)) << sim_task_name(t);
  }
  EXPECT_EQ(seen, 2);
}

// One stage (layer 0) on devices 0 and 1 as two replicas of `m` micro-batches each in the
// order `order`, priced by `spec` with 1e9 B/s between the two devices.
struct TwoReplicas {
  FixedCostModel cost;
  Plan plan;
};
TwoReplicas two_replicas(const FixedCostSpec& spec, int64_t m, const std::string& order) {
  const LinkSpec intra{LinkKind::kNvlink, BytesPerSecond(1e9), Seconds(0)};
  TwoReplicas out{FixedCostModel(make_fixed_cluster({"H100-SXM"}, 2, intra, kFreeInter), spec),
                  pipeline_plan(1, 1, m, {acts(order)})};
  Replica second = out.plan.replicas[0];
  second.groups[0].devices = {1};
  out.plan.replicas.push_back(second);
  out.plan.global_batch = 2 * m;
  return out;
}

// ZeRO-1 over two replicas of one stage (F = B = 1, 1e9 bytes of gradients, 5e8 of weights,
// 1e9 B/s ports): a reduce-scatter of the gradients, (k-1)/k * 1e9 / 1e9 = 0.5 s, and an
// all-gather of the weights, 0.25 s. In one bucket each, both follow the backward: 0.75 s. In
// 4 gradient buckets under the 1 s backward, max(0.125, 0.5 - 0.75) = 0.125; in 2 weight
// buckets under the 1 s first forward, max(0.125, 0.25 - 0.5) = 0.125.
TEST(Simulate, ZeroOneReducesScattersAndGathersTheWeightsInBuckets) {
  for (const bool buckets : {false, true}) {
    FixedCostSpec spec = uniform_spec(1, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)});
    spec.layers[0].gradients = Bytes(1e9);
    spec.layers[0].weights = Bytes(5e8);
    if (buckets) {
      spec.gradient_buckets = 4;
      spec.parameter_gather_buckets = 2;
    }
    auto [cost, plan] = two_replicas(spec, 1, "0F0 0B0");
    plan.zero_stage = 1;
    SimOptions options;
    options.optimizer_step = OptimizerStepModel::kNone;
    options.record_timeline = true;
    const SimResult res = run_ok(options, plan, cost);
    const double sync = buckets ? 0.25 : 0.75;
    EXPECT_DOUBLE_EQ(res.iteration_time.value(), 2 + sync) << "buckets " << buckets;
    plan.zero_stage = 0;  // a whole all-reduce: 2 (k-1)/k * 1e9 / 1e9 = 1 s, or 0.25 in 4
    EXPECT_DOUBLE_EQ(run_ok(options, plan, cost).iteration_time.value(), buckets ? 2.25 : 3.0);
  }
}

// ZeRO-2 and -3 over two replicas of one stage, two micro-batches each (F = B = 1 s, 4e9 bytes
// of gradients and of weights, 1e9 B/s ports, one bucket): a reduce-scatter and an all-gather
// each take (k-1)/k * 4e9 / 1e9 = 2 s. ZeRO-1 (and no ZeRO, an all-reduce of 4 s): 4 s of
// compute, then 2 + 2 s of sync = 8 s. ZeRO-2: the first B also reduce-scatters its gradients,
// 1 s beyond itself (B0 [1, 3]); the last one's is the sync's: 5 + 2 + 2 = 9 s. ZeRO-3: every F
// and B also waits 1 s for its gathered weights (F0 [0, 2], B0 [2, 5], F1 [5, 7], B1 [7, 9]) and
// the sync gathers nothing: 9 + 2 = 11 s.
TEST(Simulate, ZeroTwoAndThreeReduceEveryMicroBatchAndGatherBeforeEveryPass) {
  FixedCostSpec spec = uniform_spec(1, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)});
  spec.layers[0].gradients = Bytes(4e9);
  spec.layers[0].weights = Bytes(4e9);
  auto [cost, plan] = two_replicas(spec, 2, "0F0 0B0 0F1 0B1");
  SimOptions options;
  options.optimizer_step = OptimizerStepModel::kNone;
  options.record_timeline = true;
  for (const auto& [stage, expected] :
       std::vector<std::pair<int, double>>{{0, 8}, {1, 8}, {2, 9}, {3, 11}}) {
    plan.zero_stage = stage;
    const SimResult res = run_ok(options, plan, cost);
    EXPECT_DOUBLE_EQ(res.iteration_time.value(), expected) << "ZeRO-" << stage;
    if (stage != 3) continue;
    std::vector<std::pair<double, double>> compute;
    for (const SimTask& t : res.timeline) {
      if (t.group == 0 && t.replica == 0 && is_compute(t.kind)) {
        compute.emplace_back(t.start.value(), t.end.value());
      }
    }
    EXPECT_THAT(compute, ::testing::ElementsAre(std::pair{0.0, 2.0}, std::pair{2.0, 5.0},
                                                std::pair{5.0, 7.0}, std::pair{7.0, 9.0}));
  }
}

// Expert parallelism over two replicas of one MoE stage (F = B = 1 s, 2e9 bytes dispatched per
// micro-batch, 1e9 B/s ports): each all-to-all takes (k-1)/k * 2e9 / 1e9 = 1 s, and every F
// and every B sends the tokens to their experts and back: 3 s each, 6 s in all against 2 s
// with every expert on every replica.
TEST(Simulate, ExpertParallelismAddsTwoAllToAllsToEveryForwardAndBackward) {
  FixedCostSpec spec = uniform_spec(1, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)});
  spec.layers[0].expert_dispatch = Bytes(2e9);
  auto [cost, plan] = two_replicas(spec, 1, "0F0 0B0");
  SimOptions options;
  options.optimizer_step = OptimizerStepModel::kNone;
  EXPECT_DOUBLE_EQ(run_ok(options, plan, cost).iteration_time.value(), 2.0);
  plan.expert_parallel = 2;
  EXPECT_DOUBLE_EQ(run_ok(options, plan, cost).iteration_time.value(), 6.0);
}

// Context parallelism over two replicas of one stage (F = B = 1 s, of which the attention core
// is 1 s forward and 2 s backward; 1e9 B/s ports): ring attention takes two steps, the second
// waiting for the other member's keys and values. With 3e9 bytes a step takes max(1/2, 3) s
// forward and max(2/2, 6) s backward (keys, values and their gradients), so F takes
// 1 + (3 - 0.5) = 3.5 s and B 1 + (6 - 1) = 6 s; with 5e8 bytes the transfers hide behind the
// attention (0.5 s and 1 s) and the iteration is the 2 s of compute.
TEST(Simulate, ContextParallelismAddsTheRingStepsTheAttentionDoesNotHide) {
  FixedCostSpec spec = uniform_spec(1, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)});
  spec.layers[0].context_exchange = {Bytes(3e9), Seconds(1), Seconds(2)};
  auto [cost, plan] = two_replicas(spec, 1, "0F0 0B0");
  plan.context_parallel = 2;
  plan.global_batch = 1;
  SimOptions options;
  options.optimizer_step = OptimizerStepModel::kNone;
  options.gradient_all_reduce = false;
  EXPECT_DOUBLE_EQ(run_ok(options, plan, cost).iteration_time.value(), 9.5);
  spec.layers[0].context_exchange.bytes = Bytes(5e8);
  auto [hidden, same] = two_replicas(spec, 1, "0F0 0B0");
  same.context_parallel = 2;
  same.global_batch = 1;
  EXPECT_DOUBLE_EQ(run_ok(options, same, hidden).iteration_time.value(), 2.0);
  plan.context_parallel = 1;  // without it the exchange bytes mean nothing
  plan.global_batch = 2;
  EXPECT_DOUBLE_EQ(run_ok(options, plan, cost).iteration_time.value(), 2.0);
}

// A head tied to the embedding on another device: after both last backwards, their gradients
// (1e9 bytes) are all-reduced between the two devices, 2 (k - 1) / k * 1e9 B / 1e9 B/s = 1 s,
// before the optimizer steps. F = B = 1, one micro-batch: 4 s of compute, then 1 s of sum; on
// one device, or untied, nothing is summed.
TEST(Simulate, TiedLayersOnTwoGroupsSumTheirGradientsBeforeTheStep) {
  const LinkSpec intra{LinkKind::kNvlink, BytesPerSecond(1e9), Seconds(0)};
  FixedCostSpec spec = uniform_spec(2, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)});
  spec.layers[1].gradients = Bytes(1e9);
  spec.tied = CostModel::TiedLayers{0, 1};
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 2, intra, kFreeInter), spec);
  SimOptions options;
  options.optimizer_step = OptimizerStepModel::kNone;
  options.record_timeline = true;
  const Plan two = pipeline_plan(2, 2, 1, {acts("0F0 0B0"), acts("1F0 1B0")});
  const SimResult res = run_ok(options, two, cost);
  EXPECT_DOUBLE_EQ(res.iteration_time.value(), 5.0);
  const SimTask& sum = res.timeline.back();
  EXPECT_EQ(sum.kind, SimTaskKind::kTiedGradientSum);
  EXPECT_EQ(sim_task_name(sum), "tied sum g0<->g1");
  EXPECT_DOUBLE_EQ(sum.start.value(), 4.0);
  // Not the groups' compute: their busy time is their F and B alone.
  EXPECT_DOUBLE_EQ(res.devices[0].busy.value(), 2.0);

  const Plan one = pipeline_plan(2, 1, 1, {acts("0F0 1F0 1B0 0B0")});
  EXPECT_DOUBLE_EQ(run_ok(options, one, cost).iteration_time.value(), 4.0);
  FixedCostSpec untied = spec;
  untied.tied.reset();
  const FixedCostModel plain(make_fixed_cluster({"H100-SXM"}, 2, intra, kFreeInter), untied);
  EXPECT_DOUBLE_EQ(run_ok(options, two, plain).iteration_time.value(), 4.0);
}

// A fused backward takes the profile's fused time, split ones B and W: one measured layer of
// F = 1, B = 2, W = 3 and fused backward 4 ms, two micro-batches on one device: 2 (1 + 4) fused,
// 2 (1 + 2 + 3) split.
TEST(Simulate, FusedBackwardTakesTheMeasuredFusedTime) {
  ModelSpec model;
  model.name = "measured";
  Layer layer;
  layer.name = "block";
  layer.kind = LayerKind::kMeasured;
  MeasuredLayer m;
  m.measured_on = "H100-SXM";
  m.times = MeasuredTimes{milliseconds(1), milliseconds(2), milliseconds(3), std::nullopt,
                          milliseconds(4)};
  m.seq_len = 1000;
  m.micro_batch_size = 1;
  layer.measured = m;
  model.layers.push_back(layer);
  AnalyticCostOptions options;
  options.workload.seq_len = 1000;
  options.workload.micro_batch_size = 1;
  const ClusterSpec cluster = make_fixed_cluster({"H100-SXM"}, 1, kFreeIntra, kFreeInter);
  Result<std::unique_ptr<AnalyticCostModel>> cost =
      AnalyticCostModel::create(model, cluster, options, "measured");
  ASSERT_TRUE(cost.is_ok()) << cost.status().message();
  SimOptions sim;
  sim.optimizer_step = OptimizerStepModel::kNone;
  const Plan fused = pipeline_plan(1, 1, 2, {acts("0F0 0B0 0F1 0B1")});
  expect_relative(run_ok(sim, fused, **cost).iteration_time.value(), 10e-3);
  const Plan split = pipeline_plan(1, 1, 2, {acts("0F0 0I0 0W0 0F1 0I1 0W1")});
  expect_relative(run_ok(sim, split, **cost).iteration_time.value(), 12e-3);
}

TEST(Simulate, MemoryBoundOptimizerStepReadsGradientsStateAndWritesWeights) {
  FixedCostSpec spec = uniform_spec(1, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)});
  spec.layers[0].weights = Bytes(1e9);
  spec.layers[0].gradients = Bytes(2e9);
  spec.layers[0].optimizer_state = Bytes(6e9);
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 1, kFreeIntra, kFreeInter), spec);
  const Plan plan = pipeline_plan(1, 1, 1, {acts("0F0 0B0")});
  SimOptions options;  // memory-bound step by default
  const SimResult res = run_ok(options, plan, cost);
  const double bandwidth = cost.topology().device_type(0).memory_bandwidth.value();
  expect_relative(res.iteration_time.value(), 2 + (2e9 + 2 * 6e9 + 1e9) / bandwidth);
}

// ---------------------------------------------------------------- memory

TEST(Simulate, OneFOneBRankZeroHoldsPMicroBatchesOfActivations) {
  const int p = 4, m = 8;
  FixedCostSpec spec = uniform_spec(p, {Seconds(1), Seconds(1), Seconds(1), Seconds(0)});
  for (FixedLayer& l : spec.layers) {
    l.weights = Bytes(10);
    l.gradients = Bytes(20);
    l.optimizer_state = Bytes(30);
    l.activations = {Bytes(100), Bytes(50), Bytes(5)};
  }
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, p, kFreeIntra, kFreeInter), spec);
  for (bool split : {false, true}) {
    std::vector<std::vector<Action>> orders;
    for (int r = 0; r < p; ++r) orders.push_back(one_f_one_b_order(p, r, m, split));
    const SimResult res = run_ok(compute_only(), pipeline_plan(p, p, m, orders), cost);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(res.devices[r].fixed_memory, Bytes(60));
      EXPECT_EQ(res.devices[r].peak_in_flight, p - r);
      EXPECT_EQ(res.devices[r].peak_memory, Bytes(60 + 100 * (p - r)));
    }
    EXPECT_TRUE(res.fits_memory);
  }
  // GPipe holds all m.
  std::vector<std::vector<Action>> orders;
  for (int r = 0; r < p; ++r) orders.push_back(gpipe_order(r, m, false));
  Plan plan = pipeline_plan(p, p, m, orders);
  for (Stage& s : plan.stages) s.recompute = RecomputePolicy::kFull;
  const SimResult res = run_ok(compute_only(), plan, cost);
  EXPECT_EQ(res.devices[0].peak_memory, Bytes(60 + 5 * m));
}

TEST(Simulate, ReportsWhenAPeakDoesNotFit) {
  FixedCostSpec spec = uniform_spec(1, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)});
  spec.layers[0].activations[0] = Bytes(50 * kGiB);
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 1, kFreeIntra, kFreeInter), spec);
  const SimResult res =
      run_ok(compute_only(), pipeline_plan(1, 1, 2, {acts("0F0 0F1 0B0 0B1")}), cost);
  EXPECT_EQ(res.devices[0].peak_memory, Bytes(100 * kGiB));
  EXPECT_FALSE(res.fits_memory);
}

// ---------------------------------------------------------------- recompute

TEST(Simulate, RecomputeIsAddedToTheBackwardUnlessThePlanListsIt) {
  // F = 1, B = 2, W = 3, R = 0.5 on one stage, m = 1.
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 1, kFreeIntra, kFreeInter),
                            uniform_spec(1, {Seconds(1), Seconds(2), Seconds(3), Seconds(0.5)}));
  Plan plan = pipeline_plan(1, 1, 1, {acts("0F0 0I0 0W0")});
  EXPECT_EQ(run_ok(compute_only(), plan, cost).iteration_time, Seconds(6));
  plan.stages[0].recompute = RecomputePolicy::kSelective;
  EXPECT_EQ(run_ok(compute_only(), plan, cost).iteration_time, Seconds(6.5));
  plan.replicas[0].groups[0].actions = acts("0F0 0R0 0I0 0W0");
  SimOptions options = compute_only();
  options.record_timeline = true;
  const SimResult res = run_ok(options, plan, cost);
  EXPECT_EQ(res.iteration_time, Seconds(6.5));
  EXPECT_EQ(sim_task_name(res.timeline[1]), "R s0 mb0");
  EXPECT_EQ(res.timeline[1].end, Seconds(1.5));
  EXPECT_EQ(res.timeline[2].end, Seconds(3.5));  // I after R, without the recompute again
}

// Per-layer recompute: a stage of three layers recomputing only layer 1 (in full) pays that
// layer's recompute and keeps that layer's input only; the others keep everything.
TEST(Simulate, PerLayerRecomputePaysAndSavesForItsLayersOnly) {
  FixedCostSpec spec = uniform_spec(3, {Seconds(1), Seconds(2), Seconds(3), Seconds(0.5)});
  spec.layers[1].times.recompute = Seconds(0.25);
  for (FixedLayer& l : spec.layers) l.activations = {Bytes(100), Bytes(50), Bytes(5)};
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 1, kFreeIntra, kFreeInter), spec);
  Plan plan = pipeline_plan(1, 1, 2, {acts("0F0 0F1 0R0 0I0 0W0 0R1 0I1 0W1")});
  plan.stages[0].layer_end = 3;
  plan.stages[0].recompute_layers = {1};
  SimOptions options = compute_only();
  options.record_timeline = true;
  const SimResult res = run_ok(options, plan, cost);
  // Per micro-batch: F 3, R 0.25 (layer 1 alone), I 6, W 9.
  EXPECT_EQ(res.iteration_time, Seconds(2 * (3 + 0.25 + 6 + 9)));
  EXPECT_EQ(res.timeline[2].end - res.timeline[2].start, Seconds(0.25));
  // Two micro-batches in flight, each keeping 100 + 5 + 100.
  EXPECT_EQ(res.devices[0].peak_memory, Bytes(2 * 205));
  // Layer 1 recomputing with the stage's others under selective: 50 + 5 + 50 kept.
  plan.stages[0].recompute = RecomputePolicy::kSelective;
  const SimResult selective = run_ok(options, plan, cost);
  EXPECT_EQ(selective.devices[0].peak_memory, Bytes(2 * 105));
  EXPECT_EQ(selective.timeline[2].end - selective.timeline[2].start, Seconds(0.5 + 0.25 + 0.5));
}

// An R on a stage that keeps its activations recomputes that micro-batch alone: its F keeps
// what a full recompute keeps (5 a layer here), its R takes the full recompute's time and
// brings the micro-batch back to what the stage keeps (100 a layer) until its W; the others
// keep everything from their F.
TEST(Simulate, RecomputingOneMicroBatchKeepsItsInputUntilItsRecompute) {
  FixedCostSpec spec = uniform_spec(2, {Seconds(1), Seconds(2), Seconds(3), Seconds(0.5)});
  for (FixedLayer& l : spec.layers) l.activations = {Bytes(100), Bytes(50), Bytes(5)};
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 1, kFreeIntra, kFreeInter), spec);
  Plan plan = pipeline_plan(1, 1, 3, {acts("0F0 0F1 0F2 0R0 0I0 0W0 0I1 0W1 0I2 0W2")});
  plan.stages[0].layer_end = 2;
  SimOptions options = compute_only();
  options.record_timeline = true;
  const SimResult res = run_ok(options, plan, cost);
  // Per micro-batch F 2, I 4, W 6; one R of both layers, 1.
  EXPECT_EQ(res.iteration_time, Seconds(3 * (2 + 4 + 6) + 1));
  EXPECT_EQ(sim_task_name(res.timeline[3]), "R s0 mb0");
  EXPECT_EQ(res.timeline[3].end - res.timeline[3].start, Seconds(1));
  // After the three F: 10 + 200 + 200; the R brings micro-batch 0 to 200 as well.
  EXPECT_EQ(res.devices[0].peak_memory, Bytes(3 * 200));
  EXPECT_EQ(res.devices[0].peak_in_flight, 3);
  // Recomputed after micro-batch 1 has freed its activations, the peak is the three F's.
  plan.replicas[0].groups[0].actions = acts("0F0 0F1 0F2 0I1 0W1 0R0 0I0 0W0 0I2 0W2");
  EXPECT_EQ(run_ok(options, plan, cost).devices[0].peak_memory, Bytes(10 + 200 + 200));
}

// ---------------------------------------------------------------- errors

TEST(Simulate, DeadlockIsInfeasibleAndNamesAStuckTask) {
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 2, kFreeIntra, kFreeInter),
                            uniform_spec(2, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)}));
  // Group 1 lists its backward of mb 0 before the forward it needs.
  const Plan plan = pipeline_plan(2, 2, 1, {acts("0F0 0B0"), acts("1B0 1F0")});
  Result<SimResult> r = simulate(compute_only(), plan, cost);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInfeasible);
  EXPECT_THAT(r.status().message(), HasSubstr("plan: field 'replicas[0].groups["));
  EXPECT_THAT(r.status().message(), HasSubstr("deadlock"));
}

TEST(Simulate, BadReferencesNameTheField) {
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 2, kFreeIntra, kFreeInter),
                            uniform_spec(2, {Seconds(1), Seconds(1), Seconds(0), Seconds(0)}));
  SimOptions options = compute_only();
  options.source = "p.json";

  Plan plan = pipeline_plan(2, 2, 1, {acts("0F0 0B0"), acts("1F0 1B3")});
  Result<SimResult> r = simulate(options, plan, cost);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "p.json: field 'replicas[0].groups[1].actions[1].micro_batch': 1B3 on device group 1 "
            "(device 1): micro-batch 3 does not exist; the replica has only micro-batch 0");

  plan = pipeline_plan(2, 2, 1, {acts("0F0 0B0"), acts("1F0 0B0")});
  EXPECT_EQ(simulate(options, plan, cost).status().message(),
            "p.json: field 'replicas[0].groups[1].actions[1].stage': 0B0 on device group 1 "
            "(device 1): stage 0 runs on device group 0 (device 0), so its actions belong in that "
            "group's list");

  plan = pipeline_plan(2, 2, 1, {acts("0F0 0B0 0F0"), acts("1F0 1B0")});
  EXPECT_EQ(simulate(options, plan, cost).status().message(),
            "p.json: field 'replicas[0].groups[0].actions[2]': device group 0 (device 0) lists "
            "0F0 (stage 0, micro-batch 0) twice (actions 0 and 2); each runs exactly once");

  plan = pipeline_plan(2, 2, 1, {acts("0F0 0I0"), acts("1F0 1B0")});
  EXPECT_EQ(simulate(options, plan, cost).status().message(),
            "p.json: field 'replicas[0].groups[0].actions': stage 0, micro-batch 0 has an "
            "input-gradient backward (0I0) but no weight-gradient backward: device group 0 "
            "(device 0) must list 0W0");

  plan = pipeline_plan(2, 2, 1, {acts("0F0 0B0"), acts("1F0 1B0")});
  plan.replicas[0].groups[1].devices = {7};
  EXPECT_EQ(simulate(options, plan, cost).status().message(),
            "p.json: field 'replicas[0].groups[1].devices[0]': device group 1 (device 7), which "
            "runs stage 1, uses device 7, but the cost model's cluster has devices 0-1");
}

// The simulator object reuses its workspace: a second, smaller run is unaffected by the first.
TEST(Simulator, ReusedWorkspaceGivesTheSameAnswers) {
  Simulator sim;
  const FixedCostModel cost(
      make_fixed_cluster({"H100-SXM"}, 8, kFreeIntra, kFreeInter),
      uniform_spec(8, {Seconds(1), Seconds(2), Seconds(1), Seconds(0)}, Bytes(1e9)));
  for (int p : {8, 2, 4}) {
    std::vector<std::vector<Action>> orders;
    for (int r = 0; r < p; ++r) orders.push_back(one_f_one_b_order(p, r, 6, true));
    const Plan plan = pipeline_plan(p, p, 6, orders);
    Result<SimResult> a = sim.run(compute_only(), plan, cost);
    ASSERT_TRUE(a.is_ok());
    const SimResult b = run_ok(compute_only(), plan, cost);
    EXPECT_EQ(a.value().iteration_time, b.iteration_time);
    EXPECT_EQ(a.value().critical_path, b.critical_path);
  }
}

// Embedding + block, block, and the head split in two vocabulary shards (rows [0, 500) on group
// 0, [500, 1000) on group 1); every layer takes 1 s per pass, the head 2 s (1 s per shard).
FixedCostSpec shard_spec(Bytes boundary) {
  FixedCostSpec spec = uniform_spec(4, {Seconds(1), Seconds(1), Seconds(1), Seconds(0)}, boundary);
  spec.layers[3].times = {Seconds(2), Seconds(2), Seconds(2), Seconds(0)};
  spec.layers[3].boundary = Bytes(4);  // the loss
  return spec;
}

Plan shard_plan() {
  Plan plan;
  plan.micro_batch_size = 1;
  plan.seq_len = 1000;
  plan.global_batch = 2;
  plan.stages = {Stage{0, 2}, Stage{2, 3}, Stage{3, 4, RecomputePolicy::kNone, 0, 500},
                 Stage{3, 4, RecomputePolicy::kNone, 500, 1000}};
  Replica rep;
  rep.micro_batches = 2;
  rep.stage_group = {0, 1, 0, 1};
  rep.groups = {DeviceGroupSchedule{{0}, acts("0F0 0F1 2F0 2F1 2I0 2W0 2I1 2W1 0I0 0W0 0I1 0W1")},
                DeviceGroupSchedule{{1}, acts("1F0 3F0 1F1 3F1 3I0 3W0 1I0 1W0 3I1 3W1 1I1 1W1")}};
  plan.replicas = {rep};
  return plan;
}

// Each shard takes half the head's time; a shard's backward waits for both shards' forwards,
// and the stage before them for both shards' input gradients. By hand (free links):
//   group 0: 0F0 [0,2] 0F1 [2,4] 2F0 [4,5] 2F1 [5,6] 2I0 [6,7] 2W0 [7,8] 2I1 [8,9] 2W1 [9,10]
//            0I0 [10,12] 0W0 [12,14] 0I1 [14,16] 0W1 [16,18]
//   group 1: 1F0 [2,3] 3F0 [3,4] 1F1 [4,5] 3F1 [5,6] 3I0 [6,7] 3W0 [7,8] 1I0 [8,9] 1W0 [9,10]
//            3I1 [10,11] 3W1 [11,12] 1I1 [12,13] 1W1 [13,14]
TEST(Simulate, VocabularyShardsByHand) {
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 2, kFreeIntra, kFreeInter),
                            shard_spec(Bytes(0)));
  SimOptions options = compute_only();
  options.record_timeline = true;
  const SimResult res = run_ok(options, shard_plan(), cost);
  EXPECT_EQ(res.iteration_time, Seconds(18));
  ASSERT_EQ(res.devices.size(), 2u);
  EXPECT_EQ(res.devices[0].busy, Seconds(18));  // never idle
  EXPECT_EQ(res.devices[1].busy, Seconds(12));
  // 24 actions; per micro-batch 4 activations or statistics and 2 gradients cross.
  EXPECT_EQ(res.tasks, 36);
  for (const SimTask& t : res.timeline) {
    if (sim_task_name(t) == "I s1 mb0") {
      EXPECT_EQ(t.start, Seconds(8));
    }
    if (sim_task_name(t) == "I s3 mb1") {
      EXPECT_EQ(t.start, Seconds(10));
    }
  }
}

// A shard's forward sends three fp32 numbers per token (the statistics of its rows' logits); a
// shard's input gradient is the hidden state's size, not the loss's.
TEST(Simulate, VocabularyShardMessagesCarryStatisticsAndHiddenGradients) {
  const LinkSpec slow{LinkKind::kInfiniband, BytesPerSecond(1e6), Seconds(0)};
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 2, slow, slow),
                            shard_spec(Bytes(1000)));
  SimOptions options = compute_only();
  options.record_timeline = true;
  const SimResult res = run_ok(options, shard_plan(), cost);
  int seen = 0;
  for (const SimTask& t : res.timeline) {
    const std::string name = sim_task_name(t);
    if (name == "act s3 mb0 g1->g0") {
      expect_relative((t.end - t.start).value(), 1000 * 3 * 4 / 1e6);
      ++seen;
    }
    if (name == "grad s2 mb0 g0->g1") {
      expect_relative((t.end - t.start).value(), 1000 / 1e6);
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2);
}

// The embedding split too: stages 0 and 1 its two shards (rows [0, 500) on group 0, [500, 1000)
// on group 1), stage 2 = layer 1 on group 0, stage 3 = layer 2 on group 1, stages 4 and 5 the
// head's shards. Every pass takes 1 s, each shard's too (the split layers take 2 s whole). By
// hand (free links):
//   group 0: 0F0 [0,1] 2F0 [1,2] 0F1 [2,3] 2F1 [3,4] 4F0 [4,5] 4I0 [5,6] 4W0 [6,7] 4F1 [7,8]
//            4I1 [8,9] 4W1 [9,10] 2I0 [10,11] 2W0 [11,12] 0I0 [12,13] 0W0 [13,14]
//            2I1 [14,15] 2W1 [15,16] 0I1 [16,17] 0W1 [17,18]
//   group 1: 1F0 [0,1] 1F1 [1,2] 3F0 [2,3] 5F0 [3,4] 3F1 [4,5] 5F1 [5,6] 5I0 [6,7] 5W0 [7,8]
//            3I0 [8,9] 3W0 [9,10] 5I1 [10,11] 5W1 [11,12] 3I1 [12,13] 3W1 [13,14]
//            1I0 [14,15] 1W0 [15,16] 1I1 [16,17] 1W1 [17,18]
// Stage 2's forward waits for both embedding shards; each embedding shard's backward for stage
// 2's input gradient.
TEST(Simulate, EmbeddingShardsByHand) {
  FixedCostSpec spec = uniform_spec(4, {Seconds(1), Seconds(1), Seconds(1), Seconds(0)}, Bytes(0));
  for (int layer : {0, 3}) {
    spec.layers[layer].times = {Seconds(2), Seconds(2), Seconds(2), Seconds(0)};
  }
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, 2, kFreeIntra, kFreeInter), spec);
  Plan plan;
  plan.micro_batch_size = 1;
  plan.seq_len = 1000;
  plan.global_batch = 2;
  plan.stages = {Stage{0, 1, RecomputePolicy::kNone, 0, 500},
                 Stage{0, 1, RecomputePolicy::kNone, 500, 1000},
                 Stage{1, 2},
                 Stage{2, 3},
                 Stage{3, 4, RecomputePolicy::kNone, 0, 500},
                 Stage{3, 4, RecomputePolicy::kNone, 500, 1000}};
  Replica rep;
  rep.micro_batches = 2;
  rep.stage_group = {0, 1, 0, 1, 0, 1};
  rep.groups = {
      DeviceGroupSchedule{
          {0}, acts("0F0 2F0 0F1 2F1 4F0 4I0 4W0 4F1 4I1 4W1 2I0 2W0 0I0 0W0 2I1 2W1 0I1 0W1")},
      DeviceGroupSchedule{
          {1}, acts("1F0 1F1 3F0 5F0 3F1 5F1 5I0 5W0 3I0 3W0 5I1 5W1 3I1 3W1 1I0 1W0 1I1 1W1")}};
  plan.replicas = {rep};
  SimOptions options = compute_only();
  options.record_timeline = true;
  const SimResult res = run_ok(options, plan, cost);
  EXPECT_EQ(res.iteration_time, Seconds(18));
  ASSERT_EQ(res.devices.size(), 2u);
  EXPECT_EQ(res.devices[0].busy, Seconds(18));
  EXPECT_EQ(res.devices[1].busy, Seconds(18));
  int seen = 0;
  for (const SimTask& t : res.timeline) {
    if (sim_task_name(t) == "F s2 mb0") {
      EXPECT_EQ(t.start, Seconds(1));
      ++seen;
    }
    if (sim_task_name(t) == "I s1 mb0") {
      EXPECT_EQ(t.start, Seconds(14));
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2);
}

}  // namespace
}  // namespace motley
