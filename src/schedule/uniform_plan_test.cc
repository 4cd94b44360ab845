#include "motley/schedule/uniform_plan.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "motley/model/presets.h"
#include "motley/plan/spec_hash.h"
#include "motley/plan/validate.h"

namespace motley {
namespace {

// Every layer takes 1 ms forward, 2 ms input gradient and 1 ms weight gradient on devices
// 0-3 and twice that on the others; a transfer between devices takes `hop`.
class LayerCountCostModel final : public CostModel {
 public:
  explicit LayerCountCostModel(const ClusterSpec& cluster, Seconds hop = Seconds(0))
      : topology_(cluster), hop_(hop) {}
  ComputeTimes compute(LayerRange layers, const DeviceGroup& group,
                       RecomputePolicy) const override {
    const double scale = layers.size() * 1e-3 * (group.devices.front() < 4 ? 1 : 2);
    return ComputeTimes{Seconds(scale), Seconds(2 * scale), Seconds(scale), Seconds(0)};
  }
  StageMemory stage_memory(LayerRange, const DeviceGroup&, const MemoryOptions&) const override {
    return StageMemory{};
  }
  Bytes boundary_bytes(int) const override { return Bytes(0); }
  Seconds p2p_time(int src, int dst, Bytes) const override {
    return src == dst ? Seconds(0) : hop_;
  }
  Seconds collective_time(Collective, const std::vector<int>&, Bytes,
                          CollectiveAlgorithm) const override {
    return Seconds(0);
  }
  const Topology& topology() const override { return topology_; }

 private:
  Topology topology_;
  Seconds hop_;
};

class UniformPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<ModelSpec> model = model_preset("llama-3-8b");  // embedding, 32 blocks, head
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    model_ = model.value();
    ASSERT_EQ(model_.layers.size(), 34u);
    Result<ClusterSpec> cluster = cluster_preset("h100x8");
    ASSERT_TRUE(cluster.is_ok()) << cluster.status().message();
    cluster_ = cluster.value();
    cost_ = std::make_unique<LayerCountCostModel>(cluster_);
  }

  Result<Plan> make(const UniformPlanOptions& o) {
    return make_uniform_plan(o, model_, cluster_, *cost_);
  }

  std::vector<int> layer_counts(const Plan& plan) {
    std::vector<int> out;
    for (const Stage& s : plan.stages) out.push_back(s.layer_end - s.layer_begin);
    return out;
  }

  ModelSpec model_;
  ClusterSpec cluster_;
  std::unique_ptr<LayerCountCostModel> cost_;
};

TEST_F(UniformPlanTest, OneFOneBWithDataParallelReplicas) {
  UniformPlanOptions o;
  o.kind = ScheduleKind::k1f1b;
  o.stages = 4;
  o.micro_batches = 8;
  o.micro_batch_size = 2;
  Result<Plan> plan = make(o);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  const Plan& p = plan.value();
  // 34 layers over 4 stages: 8 each and the remainder 2 on the first two stages.
  EXPECT_EQ(layer_counts(p), (std::vector<int>{9, 9, 8, 8}));
  EXPECT_EQ(p.stages[1].layer_begin, 9);
  ASSERT_EQ(p.replicas.size(), 2u);  // 8 devices / 4 stages
  EXPECT_EQ(p.global_batch, 2 * 8 * 2);
  EXPECT_EQ(p.seq_len, model_.default_seq_len);
  EXPECT_EQ(p.schedule, "1f1b");
  EXPECT_EQ(p.model, model_ref(model_));
  EXPECT_EQ(p.cluster, cluster_ref(cluster_));
  EXPECT_FALSE(p.predicted.has_value());
  for (int k = 0; k < 2; ++k) {
    const Replica& rep = p.replicas[k];
    EXPECT_EQ(rep.micro_batches, 8);
    EXPECT_EQ(rep.stage_group, (std::vector<int>{0, 1, 2, 3}));
    ScheduleRequest request;
    request.num_groups = 4;
    request.num_stages = 4;
    request.stage_group = rep.stage_group;
    request.micro_batches = 8;
    const GroupOrders expected = generate_schedule(ScheduleKind::k1f1b, request).value();
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(rep.groups[r].devices, (std::vector<int>{4 * k + r}));
      EXPECT_EQ(rep.groups[r].actions, expected[r]);
    }
  }
  EXPECT_TRUE(validate_plan(p, model_, cluster_, ValidateOptions{}).is_ok());
}

TEST_F(UniformPlanTest, InterleavedAndVShapes) {
  UniformPlanOptions o;
  o.kind = ScheduleKind::kInterleaved;
  o.stages = 8;
  o.virtual_stages = 2;
  o.micro_batches = 16;
  Result<Plan> plan = make(o);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  // 34 layers over 16 stages: 2 each, 3 on the first two.
  std::vector<int> counts(16, 2);
  counts[0] = counts[1] = 3;
  EXPECT_EQ(layer_counts(plan.value()), counts);
  ASSERT_EQ(plan.value().replicas.size(), 1u);
  EXPECT_EQ(plan.value().replicas[0].stage_group, default_stage_group(o.kind, 8, 2));
  EXPECT_TRUE(validate_plan(plan.value(), model_, cluster_, ValidateOptions{}).is_ok());

  for (ScheduleKind kind : {ScheduleKind::kZbV, ScheduleKind::kDualPipeV}) {
    o.kind = kind;
    o.stages = 4;
    o.virtual_stages = 1;  // read as 2
    o.micro_batches = 8;
    Result<Plan> v = make(o);
    ASSERT_TRUE(v.is_ok()) << v.status().message();
    EXPECT_EQ(v.value().stages.size(), 8u);
    EXPECT_EQ(v.value().replicas.size(), 2u);
    EXPECT_EQ(v.value().replicas[1].stage_group, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
    EXPECT_EQ(v.value().schedule, schedule_kind_name(kind));
    EXPECT_TRUE(validate_plan(v.value(), model_, cluster_, ValidateOptions{}).is_ok());
  }
}

// Groups of two devices; the second replica (devices 4-7) runs twice as slow, and the ZB
// estimate uses each replica's own times: with every stage twice as slow the orders are the
// same, so both replicas get the generator's order for their own stage times.
TEST_F(UniformPlanTest, TensorParallelGroupsAndPerReplicaTimes) {
  UniformPlanOptions o;
  o.kind = ScheduleKind::kZbH1;
  o.stages = 2;
  o.tensor_parallel = 2;
  o.micro_batches = 4;
  o.seq_len = 1024;
  o.recompute = RecomputePolicy::kSelective;
  Result<Plan> plan = make(o);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  const Plan& p = plan.value();
  ASSERT_EQ(p.replicas.size(), 2u);
  EXPECT_EQ(p.seq_len, 1024);
  EXPECT_EQ(p.stages[0].recompute, RecomputePolicy::kSelective);
  EXPECT_EQ(p.replicas[0].groups[1].devices, (std::vector<int>{2, 3}));
  EXPECT_EQ(p.replicas[1].groups[0].devices, (std::vector<int>{4, 5}));
  for (int k = 0; k < 2; ++k) {
    ScheduleRequest request;
    request.num_groups = 2;
    request.num_stages = 2;
    request.stage_group = {0, 1};
    request.micro_batches = 4;
    for (int s = 0; s < 2; ++s) {
      request.stage_times.push_back(
          cost_->compute(LayerRange{p.stages[s].layer_begin, p.stages[s].layer_end},
                         DeviceGroup{p.replicas[k].groups[s].devices}, RecomputePolicy::kNone));
    }
    const GroupOrders expected = generate_schedule(ScheduleKind::kZbH1, request).value();
    EXPECT_EQ(p.replicas[k].groups[0].actions, expected[0]);
    EXPECT_EQ(p.replicas[k].groups[1].actions, expected[1]);
  }
  EXPECT_TRUE(validate_plan(p, model_, cluster_, ValidateOptions{}).is_ok());
}

// Megatron-LM's rank order puts replica k's group r at group r * replicas + k: the replicas
// of a stage side by side; the orders and bounds are the pipeline order's.
TEST_F(UniformPlanTest, MegatronRankOrderPutsAStagesReplicasTogether) {
  UniformPlanOptions o;
  o.kind = ScheduleKind::k1f1b;
  o.stages = 2;
  o.tensor_parallel = 2;
  o.micro_batches = 4;
  Result<Plan> pipeline = make(o);
  o.megatron_rank_order = true;
  Result<Plan> megatron = make(o);
  ASSERT_TRUE(pipeline.is_ok() && megatron.is_ok()) << megatron.status().message();
  ASSERT_EQ(megatron->replicas.size(), 2u);
  const std::vector<std::vector<int>> pipeline_groups = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  const std::vector<std::vector<int>> megatron_groups = {{0, 1}, {4, 5}, {2, 3}, {6, 7}};
  for (int k = 0; k < 2; ++k) {
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(pipeline->replicas[k].groups[r].devices, pipeline_groups[k * 2 + r]);
      EXPECT_EQ(megatron->replicas[k].groups[r].devices, megatron_groups[k * 2 + r]);
      EXPECT_EQ(megatron->replicas[k].groups[r].actions, pipeline->replicas[k].groups[r].actions);
    }
  }
  EXPECT_EQ(layer_counts(megatron.value()), layer_counts(pipeline.value()));
  EXPECT_TRUE(validate_plan(megatron.value(), model_, cluster_, ValidateOptions{}).is_ok());
}

TEST_F(UniformPlanTest, WholeClusterAndExplicitDataParallel) {
  UniformPlanOptions o;
  o.kind = ScheduleKind::kGpipe;
  o.micro_batches = 4;
  Result<Plan> all = make(o);  // stages 0: one pipeline over the 8 devices
  ASSERT_TRUE(all.is_ok()) << all.status().message();
  EXPECT_EQ(all.value().stages.size(), 8u);
  EXPECT_EQ(all.value().replicas.size(), 1u);

  o.stages = 3;
  o.data_parallel = 2;  // devices 0-5; 6 and 7 stay idle
  Result<Plan> part = make(o);
  ASSERT_TRUE(part.is_ok()) << part.status().message();
  EXPECT_EQ(part.value().replicas.size(), 2u);
  EXPECT_EQ(part.value().replicas[1].groups[2].devices, (std::vector<int>{5}));
  EXPECT_EQ(part.value().global_batch, 2 * 4);
  EXPECT_TRUE(validate_plan(part.value(), model_, cluster_, ValidateOptions{}).is_ok());
}

TEST_F(UniformPlanTest, MegatronPartitionSplitsTheDecoderBlocks) {
  UniformPlanOptions o;
  o.kind = ScheduleKind::k1f1b;
  o.stages = 8;
  o.micro_batches = 8;
  o.partition = LayerSplit::kMegatron;
  Result<Plan> plan = make(o);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  // 32 blocks, 4 per stage; the embedding joins the first stage and the head the last.
  EXPECT_EQ(layer_counts(plan.value()), (std::vector<int>{5, 4, 4, 4, 4, 4, 4, 5}));
  EXPECT_EQ(plan.value().schedule, "1f1b");
  // The orders are the generator's, whatever the split.
  ScheduleRequest request;
  request.num_groups = 8;
  request.num_stages = 8;
  request.stage_group = default_stage_group(o.kind, 8, 1);
  request.micro_batches = 8;
  const GroupOrders expected = generate_schedule(o.kind, request).value();
  for (int r = 0; r < 8; ++r) EXPECT_EQ(plan.value().replicas[0].groups[r].actions, expected[r]);
  EXPECT_TRUE(validate_plan(plan.value(), model_, cluster_, ValidateOptions{}).is_ok());

  // Interleaved: 4 groups x 2 chunks, in pipeline order.
  o.kind = ScheduleKind::kInterleaved;
  o.stages = 4;
  o.virtual_stages = 2;
  plan = make(o);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  EXPECT_EQ(layer_counts(plan.value()), (std::vector<int>{5, 4, 4, 4, 4, 4, 4, 5}));
  EXPECT_EQ(plan.value().replicas[0].stage_group, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
}

void expect_invalid(const Result<Plan>& plan, const std::string& part) {
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find(part), std::string::npos) << plan.status().message();
}

TEST_F(UniformPlanTest, Errors) {
  UniformPlanOptions o;
  o.kind = ScheduleKind::k1f1b;
  o.stages = 3;
  o.micro_batches = 4;
  expect_invalid(make(o),
                 "'stages' (3) x 'tensor_parallel' (1) = 3 devices per replica does "
                 "not divide cluster 'h100x8' (8 devices)");
  o.stages = 4;
  o.virtual_stages = 2;
  expect_invalid(make(o), "'virtual_stages' is 2 but 1f1b runs one stage per group");
  o.kind = ScheduleKind::kInterleaved;
  o.virtual_stages = 1;
  expect_invalid(make(o), "the interleaved schedule needs at least 2 chunks per group");
  o.virtual_stages = 5;  // 4 x 5 = 20 stages from 34 layers: fine; 8 x 5 = 40 is not
  o.stages = 8;
  expect_invalid(make(o), "model 'llama-3-8b' has 34 layers, fewer than the 40 stages");
  o.kind = ScheduleKind::k1f1b;
  o.virtual_stages = 1;
  o.stages = 4;
  o.micro_batches = 0;
  expect_invalid(make(o), "'micro_batches' must be positive, got 0");
  o.micro_batches = 4;
  o.data_parallel = 3;
  expect_invalid(make(o), "'data_parallel' (3) x 'stages' (4) x 'tensor_parallel' (1) needs 12");
  o.data_parallel = 0;
  o.stages = -1;
  expect_invalid(make(o), "'stages' must be 0 (the whole cluster) or positive, got -1");
  o.stages = 4;
  o.kind = ScheduleKind::kInterleaved;
  o.virtual_stages = 2;
  o.micro_batches = 6;
  expect_invalid(make(o), "micro_batches (6) must be a multiple of num_groups (4)");
  o.micro_batches = 8;
  o.stages = 8;
  o.virtual_stages = 5;
  o.partition = LayerSplit::kMegatron;
  expect_invalid(make(o),
                 "model 'llama-3-8b' has 32 decoder layers, fewer than the 40 stages of 8 groups "
                 "x 5 chunks (the megatron partition splits the decoder layers)");
}

}  // namespace
}  // namespace motley
