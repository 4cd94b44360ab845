// Identical replicas simulated once must report exactly what simulating every replica reports:
// the same iteration, the same statistics for every device, the same timeline task for task.
// Replicas that share a link, or differ in hardware or order, must not be folded together.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "motley/cost/analytic_cost_model.h"
#include "motley/model/presets.h"
#include "motley/schedule/uniform_plan.h"
#include "motley/sim/simulator.h"

namespace motley {
namespace {

auto task_key(const SimTask& t) {
  return std::tuple(t.start.value(), t.end.value(), t.replica, t.group, t.stage, t.micro_batch,
                    static_cast<int>(t.kind), t.peer_group, t.device, t.peer_device);
}

std::vector<SimTask> sorted(std::vector<SimTask> tasks) {
  std::sort(tasks.begin(), tasks.end(),
            [](const SimTask& a, const SimTask& b) { return task_key(a) < task_key(b); });
  return tasks;
}

class ReplicaFoldingTest : public ::testing::Test {
 protected:
  void use(const std::string& model, const ClusterSpec& cluster) {
    Result<ModelSpec> m = model_preset(model);
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = m.value();
    cluster_ = cluster;
    AnalyticCostOptions options;
    options.workload.seq_len = 4096;
    options.workload.micro_batch_size = 1;
    Result<std::unique_ptr<AnalyticCostModel>> cost =
        AnalyticCostModel::create(model_, cluster_, options, model_.name);
    ASSERT_TRUE(cost.is_ok()) << cost.status().message();
    cost_ = std::move(cost.value());
  }
  void use_preset(const std::string& model, const std::string& cluster) {
    Result<ClusterSpec> c = cluster_preset(cluster);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    use(model, c.value());
  }

  Plan make(UniformPlanOptions o) {
    o.seq_len = 4096;
    Result<Plan> plan = make_uniform_plan(o, model_, cluster_, *cost_);
    EXPECT_TRUE(plan.is_ok()) << plan.status().message();
    return plan.is_ok() ? plan.value() : Plan{};
  }

  // Simulates `plan` folded and whole, requires every figure to be equal, and returns how many
  // replicas the folded run simulated.
  int64_t expect_same_as_whole(const Plan& plan) {
    SimOptions options;
    options.record_timeline = true;
    Result<SimResult> folded = simulate(options, plan, *cost_);
    options.fold_identical_replicas = false;
    Result<SimResult> whole = simulate(options, plan, *cost_);
    EXPECT_TRUE(folded.is_ok()) << folded.status().message();
    EXPECT_TRUE(whole.is_ok()) << whole.status().message();
    if (!folded.is_ok() || !whole.is_ok()) return -1;
    const SimResult& f = folded.value();
    const SimResult& w = whole.value();
    EXPECT_EQ(w.replicas_simulated, static_cast<int64_t>(plan.replicas.size()));
    EXPECT_EQ(f.iteration_time, w.iteration_time);
    EXPECT_EQ(f.throughput_tokens_per_s, w.throughput_tokens_per_s);
    EXPECT_EQ(f.bubble_fraction, w.bubble_fraction);
    EXPECT_EQ(f.fits_memory, w.fits_memory);
    EXPECT_EQ(f.devices.size(), w.devices.size());
    for (size_t i = 0; i < std::min(f.devices.size(), w.devices.size()); ++i) {
      const DeviceStats& a = f.devices[i];
      const DeviceStats& b = w.devices[i];
      EXPECT_EQ(std::tie(a.device, a.replica, a.group), std::tie(b.device, b.replica, b.group));
      EXPECT_EQ(a.busy, b.busy) << "device " << b.device;
      EXPECT_EQ(a.idle, b.idle) << "device " << b.device;
      EXPECT_EQ(a.exposed_communication, b.exposed_communication) << "device " << b.device;
      EXPECT_EQ(a.fixed_memory, b.fixed_memory) << "device " << b.device;
      EXPECT_EQ(a.peak_memory, b.peak_memory) << "device " << b.device;
      EXPECT_EQ(a.peak_in_flight, b.peak_in_flight) << "device " << b.device;
      EXPECT_EQ(a.capacity, b.capacity) << "device " << b.device;
    }
    EXPECT_EQ(sorted(f.timeline), sorted(w.timeline));
    // Ties between identical replicas may put another replica's copy of a task on the path.
    EXPECT_EQ(f.critical_path.size(), w.critical_path.size());
    for (size_t i = 0; i < std::min(f.critical_path.size(), w.critical_path.size()); ++i) {
      const SimTask& a = f.critical_path[i];
      const SimTask& b = w.critical_path[i];
      EXPECT_EQ(std::tuple(a.kind, a.group, a.stage, a.micro_batch, a.start, a.end),
                std::tuple(b.kind, b.group, b.stage, b.micro_batch, b.start, b.end))
          << "critical path task " << i;
    }
    EXPECT_LE(f.tasks, w.tasks);
    return f.replicas_simulated;
  }

  ModelSpec model_;
  ClusterSpec cluster_;
  std::unique_ptr<AnalyticCostModel> cost_;
};

// Two H100 replicas and two A100 replicas, each inside its own node: one of each is simulated.
TEST_F(ReplicaFoldingTest, ReplicasOfTheSameHardwareRunOnceAndReportAsAll) {
  use_preset("llama-3-8b", "h100-a100");
  for (ScheduleKind kind :
       {ScheduleKind::k1f1b, ScheduleKind::kZbH1, ScheduleKind::kZbV, ScheduleKind::kInterleaved}) {
    SCOPED_TRACE(schedule_kind_name(kind));
    UniformPlanOptions o;
    o.kind = kind;
    o.stages = 8;
    o.virtual_stages = kind == ScheduleKind::kInterleaved ? 2 : 1;
    o.micro_batches = 16;
    const Plan plan = make(o);
    ASSERT_EQ(plan.replicas.size(), 4u);
    EXPECT_EQ(expect_same_as_whole(plan), 2);
  }
}

// Tensor parallelism, ZeRO-1 and recompute change the priced stages, not the rule.
TEST_F(ReplicaFoldingTest, TensorParallelReplicasWithShardedOptimizerFoldToo) {
  use_preset("llama-3-8b", "h100-a100");
  UniformPlanOptions o;
  o.kind = ScheduleKind::k1f1b;
  o.stages = 4;
  o.tensor_parallel = 2;
  o.micro_batches = 8;
  o.zero_stage = 1;
  o.recompute = RecomputePolicy::kSelective;
  const Plan plan = make(o);
  ASSERT_EQ(plan.replicas.size(), 4u);
  EXPECT_EQ(expect_same_as_whole(plan), 2);
}

// Pipelines across nodes with one NIC per node: the two replicas' messages cross the same NICs
// and slow each other down, so neither may stand for the other.
TEST_F(ReplicaFoldingTest, ReplicasThatShareALinkAreSimulatedEach) {
  ClusterSpec c;
  c.name = "shared-nics";
  c.network = LinkSpec{LinkKind::kInfiniband, gigabytes_per_second(25), microseconds(2)};
  for (int n = 0; n < 4; ++n) {
    NodeSpec node;
    node.name = "n" + std::to_string(n);
    node.devices = {NodeDevices{"H100-SXM", 2}};
    node.interconnect = LinkSpec{LinkKind::kNvlink, gigabytes_per_second(450), microseconds(2)};
    node.pcie = LinkSpec{LinkKind::kPcie, gigabytes_per_second(50), microseconds(1)};
    node.nic = LinkSpec{LinkKind::kInfiniband, gigabytes_per_second(25), microseconds(1)};
    node.nic_count = 1;
    c.nodes.push_back(node);
  }
  use("llama-3-8b", c);
  UniformPlanOptions o;
  o.kind = ScheduleKind::k1f1b;
  o.stages = 4;
  o.micro_batches = 8;
  Plan plan = make(o);
  ASSERT_EQ(plan.replicas.size(), 2u);
  // Replica k's stage r on device 2r + k: both pipelines hop node to node over the one NIC.
  for (int k = 0; k < 2; ++k) {
    for (int r = 0; r < 4; ++r) plan.replicas[k].groups[r].devices = {2 * r + k};
  }
  EXPECT_EQ(expect_same_as_whole(plan), 2);

  // Each pipeline inside its own pair of nodes: nothing shared, one simulated for both.
  for (int k = 0; k < 2; ++k) {
    for (int r = 0; r < 4; ++r) plan.replicas[k].groups[r].devices = {4 * k + r};
  }
  EXPECT_EQ(expect_same_as_whole(plan), 1);
}

// The same devices and stages with another order (GPipe instead of 1F1B), or another
// micro-batch count, simulate differently: no folding.
TEST_F(ReplicaFoldingTest, ReplicasWithOtherOrdersOrCountsAreSimulatedEach) {
  use_preset("llama-3-8b", "h100x16");
  UniformPlanOptions o;
  o.kind = ScheduleKind::k1f1b;
  o.stages = 8;
  o.micro_batches = 8;
  Plan plan = make(o);
  ASSERT_EQ(plan.replicas.size(), 2u);
  EXPECT_EQ(expect_same_as_whole(plan), 1);

  o.kind = ScheduleKind::kGpipe;
  const Plan gpipe = make(o);
  Plan mixed = plan;
  mixed.replicas[1] = gpipe.replicas[1];
  EXPECT_EQ(expect_same_as_whole(mixed), 2);

  o.kind = ScheduleKind::k1f1b;
  o.micro_batches = 4;
  const Plan fewer = make(o);
  Plan uneven = plan;
  uneven.replicas[1] = fewer.replicas[1];
  uneven.global_batch = 12;
  EXPECT_EQ(expect_same_as_whole(uneven), 2);
}

}  // namespace
}  // namespace motley
