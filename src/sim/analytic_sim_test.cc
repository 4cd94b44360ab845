// The simulator on AnalyticCostModel plans from make_uniform_plan: what it reports must be the
// cost model's own numbers wherever nothing overlaps.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "motley/core/json.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/model/presets.h"
#include "motley/model/profile.h"
#include "motley/schedule/uniform_plan.h"
#include "motley/sim/simulator.h"
#include "sim_test_util.h"

namespace motley {
namespace {

using sim_testing::expect_relative;
using sim_testing::kFreeInter;
using sim_testing::kFreeIntra;

class AnalyticSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ModelSpec> model = model_preset("llama-3-8b");
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    model_ = model.value();
    Result<ClusterSpec> cluster = cluster_preset("h100x16");  // two nodes of eight H100s
    ASSERT_TRUE(cluster.is_ok()) << cluster.status().message();
    cluster_ = cluster.value();
    AnalyticCostOptions options;
    options.workload.seq_len = 4096;
    options.workload.micro_batch_size = 1;
    Result<std::unique_ptr<AnalyticCostModel>> cost =
        AnalyticCostModel::create(model_, cluster_, options, model_.name);
    ASSERT_TRUE(cost.is_ok()) << cost.status().message();
    cost_ = std::move(cost.value());
  }

  Plan make(UniformPlanOptions o) {
    o.seq_len = 4096;
    Result<Plan> plan = make_uniform_plan(o, model_, cluster_, *cost_);
    EXPECT_TRUE(plan.is_ok()) << plan.status().message();
    return plan.is_ok() ? plan.value() : Plan{};
  }

  ModelSpec model_;
  ClusterSpec cluster_;
  std::unique_ptr<AnalyticCostModel> cost_;
};

// One device, no pipeline: m times the model's F + B + W, then the memory-bound optimizer step.
TEST_F(AnalyticSimTest, OneDeviceIsItsComputeThenItsOptimizerStep) {
  UniformPlanOptions o;
  o.kind = ScheduleKind::k1f1b;
  o.stages = 1;
  o.data_parallel = 1;
  o.micro_batches = 4;
  const Plan plan = make(o);
  ASSERT_EQ(plan.stages.size(), 1u);
  const LayerRange all{0, static_cast<int>(model_.layers.size())};
  const DeviceGroup group{{0}};
  const ComputeTimes t = cost_->compute(all, group, RecomputePolicy::kNone);
  MemoryOptions mem;
  mem.in_flight_micro_batches = 0;
  const StageMemory m = cost_->stage_memory(all, group, mem);
  // Mixed-precision AdamW in bf16 with fp32 gradients: 42 bytes of memory traffic per
  // parameter (timing-model.md, "The optimizer step") at the stack's memory-bound rate.
  double params = 0;
  for (const LayerCost& c : cost_->layer_costs()) params += static_cast<double>(c.stored_params);
  const double step = 42 * params /
                      (cost_->topology().device_type(0).memory_bandwidth.value() *
                       cost_->options().stack.memory_efficiency);
  expect_relative(cost_->optimizer_step_time(all, group, mem)->value(), step);

  Result<SimResult> res = simulate(SimOptions{}, plan, *cost_);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  expect_relative(res->iteration_time.value(), 4 * (t.forward + t.backward()).value() + step);
  ASSERT_EQ(res->devices.size(), 1u);
  // Peak: 1F1B on one stage frees each micro-batch before the next forward.
  expect_relative(res->devices[0].peak_memory.value(),
                  (m.total() + m.activations_per_micro_batch).value());
  EXPECT_EQ(res->devices[0].capacity, cost_->topology().device_type(0).memory);
}

// A profile that measured the optimizer step prices it as measured: one device, four
// micro-batches of F + B + W (1 + 2 + 1 ms per layer, two layers), then 2 x 0.5 ms of AdamW.
// A layer whose step is not measured adds its memory traffic.
TEST_F(AnalyticSimTest, AMeasuredOptimizerStepIsTakenAsMeasured) {
  const char* text = R"({"format": "motley.profile/2", "measured_on": "H100-SXM",
    "seq_len": 4096, "layers": [{"name": "block", "repeat": 2, "forward_s": 0.001,
    "backward_input_s": 0.002, "backward_weight_s": 0.001, "optimizer_s": 0.0005,
    "param_bytes": 1e9, "output_bytes": 1e6}]})";
  Result<Json> json = parse_json(text, "p.json");
  ASSERT_TRUE(json.is_ok()) << json.status().message();
  Result<ModelSpec> profile = profile_from_json(*json, "p.json");
  ASSERT_TRUE(profile.is_ok()) << profile.status().message();
  for (const bool measured : {true, false}) {
    ModelSpec m = *profile;
    if (!measured) m.layers[1].measured->optimizer_step.reset();
    AnalyticCostOptions options;
    options.workload.seq_len = 4096;
    Result<std::unique_ptr<AnalyticCostModel>> cost =
        AnalyticCostModel::create(m, cluster_, options, "p.json");
    ASSERT_TRUE(cost.is_ok()) << cost.status().message();
    UniformPlanOptions o;
    o.kind = ScheduleKind::k1f1b;
    o.stages = 1;
    o.data_parallel = 1;
    o.micro_batches = 4;
    o.seq_len = 4096;
    Result<Plan> plan = make_uniform_plan(o, m, cluster_, **cost);
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    Result<SimResult> res = simulate(SimOptions{}, *plan, **cost);
    ASSERT_TRUE(res.is_ok()) << res.status().message();
    double step = 1e-3;
    if (!measured) {
      MemoryOptions mem;
      mem.in_flight_micro_batches = 0;
      const double traffic =
          (*cost)->optimizer_step_time(LayerRange{1, 2}, DeviceGroup{{0}}, mem)->value();
      EXPECT_GT(traffic, 0);
      step = 0.5e-3 + traffic;
    }
    expect_relative(res->iteration_time.value(), 4 * 2 * 4e-3 + step);
  }
}

// A message alone on its path takes exactly the cost model's p2p time, inside a node and
// across the two nodes; tensor-parallel groups report every device.
TEST_F(AnalyticSimTest, ALoneMessageTakesTheCostModelsP2pTime) {
  UniformPlanOptions o;
  o.kind = ScheduleKind::kGpipe;
  o.stages = 2;
  o.tensor_parallel = 8;  // stage 0 on node 0, stage 1 on node 1
  o.data_parallel = 1;
  o.micro_batches = 1;
  const Plan plan = make(o);
  ASSERT_EQ(plan.replicas.size(), 1u);
  SimOptions options;
  options.record_timeline = true;
  Result<SimResult> res = simulate(options, plan, *cost_);
  ASSERT_TRUE(res.is_ok()) << res.status().message();
  EXPECT_EQ(res->devices.size(), 16u);
  int messages = 0;
  for (const SimTask& t : res->timeline) {
    if (t.kind != SimTaskKind::kSendActivation && t.kind != SimTaskKind::kSendGradient) continue;
    ++messages;
    // An activation is its stage's output; a gradient is its stage's input's.
    const Stage& st = plan.stages[t.stage];
    const Bytes bytes = cost_->boundary_bytes(
        t.kind == SimTaskKind::kSendActivation ? st.layer_end - 1 : st.layer_begin - 1);
    EXPECT_EQ(t.device, plan.replicas[0].groups[t.group].devices[0]);
    EXPECT_TRUE(cost_->topology().path(t.device, t.peer_device).crosses_nodes);
    // Each of the 8 TP ranks sends its eighth over its own NIC (scatter-gather): the message
    // takes the time of one share.
    const DeviceGroup src{plan.replicas[0].groups[t.group].devices};
    const DeviceGroup dst{plan.replicas[0].groups[t.peer_group].devices};
    const Bytes wire = cost_->pipeline_message(src, dst, bytes).bytes;
    EXPECT_DOUBLE_EQ(wire.value(), bytes.value() / 8);
    expect_relative((t.end - t.start).value(),
                    cost_->p2p_time(t.device, t.peer_device, wire).value());
  }
  EXPECT_EQ(messages, 2);
}

}  // namespace
}  // namespace motley
