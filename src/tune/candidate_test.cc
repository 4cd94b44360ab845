// Tests of the tuner's internal pieces: the context's tensor-parallel degrees, micro-batch
// splitting, and screening's extrapolation (the assembler's own tests: schedule/assemble_test).
#include "candidate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "../schedule/test_util.h"
#include "evaluator.h"
#include "motley/sim/simulator.h"
#include "space.h"

namespace motley::tune_internal {
namespace {

using schedule_testing::fixed_cluster;
using schedule_testing::layer_ms;
using schedule_testing::tiny_model;

// Owns what a Context refers to.
struct Fixture {
  Fixture(int layers, std::vector<std::string> nodes, int per_node, int64_t global_batch,
          FixedCostSpec spec)
      : model(tiny_model(layers)), cluster(fixed_cluster(nodes, per_node)) {
    options.global_batch = global_batch;
    options.micro_batch_size = 1;
    options.cost_model = [spec](const ModelSpec&, const ClusterSpec& c, const Workload&) {
      return std::unique_ptr<CostModel>(new FixedCostModel(c, spec));
    };
    Result<std::unique_ptr<Context>> made = Context::create(options, model, cluster);
    MOTLEY_CHECK(made.is_ok(), made.status().message());
    ctx = std::move(made.value());
  }
  ModelSpec model;
  ClusterSpec cluster;
  TuneOptions options;
  std::unique_ptr<Context> ctx;
};

FixedCostSpec uniform_spec(int layers) {
  FixedCostSpec spec;
  for (int i = 0; i < layers; ++i) spec.layers.push_back(layer_ms(1, 1, 1, 1, 1));
  return spec;
}

// Tensor-parallel degrees must tile the node and split every layer evenly: 2 key/value heads
// allow t = 1 and 2 on a node of 8, whatever the node would allow.
TEST(ContextTest, TensorParallelDegreesSplitTheHeads) {
  ModelSpec model = tiny_model(4);
  for (Layer& l : model.layers) l.attention->num_kv_heads = 2;
  TuneOptions options;
  options.global_batch = 8;
  options.micro_batch_size = 1;
  const FixedCostSpec spec = uniform_spec(4);
  options.cost_model = [spec](const ModelSpec&, const ClusterSpec& c, const Workload&) {
    return std::unique_ptr<CostModel>(new FixedCostModel(c, spec));
  };
  const ClusterSpec cluster = fixed_cluster({"H100-SXM"}, 8);
  auto ctx = Context::create(options, model, cluster);
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
  ASSERT_EQ((*ctx)->types().size(), 1u);
  EXPECT_EQ((*ctx)->types()[0].tp_degrees, (std::vector<int>{1, 2}));
  model.layers[0].attention->num_kv_heads = 4;
  for (Layer& l : model.layers) l.attention->num_kv_heads = 4;
  auto four = Context::create(options, model, cluster);
  ASSERT_TRUE(four.is_ok());
  EXPECT_EQ((*four)->types()[0].tp_degrees, (std::vector<int>{1, 2, 4}));  // 4 query heads
}

TEST(SplitMicroBatchesTest, FasterReplicaGetsMore) {
  // Times m and 2m: nine micro-batches split 6 + 3, both finishing at 6.
  EXPECT_EQ(split_micro_batches({1, 2}, {0, 0}, 9), (std::vector<int64_t>{6, 3}));
  // Every replica gets at least one, whatever its speed.
  EXPECT_EQ(split_micro_batches({1, 100}, {0, 0}, 5), (std::vector<int64_t>{4, 1}));
  // Equal replicas: the earlier one first on ties.
  EXPECT_EQ(split_micro_batches({1, 1, 1}, {0, 0, 0}, 7), (std::vector<int64_t>{3, 2, 2}));
}

TEST(EvaluatorTest, ScreeningMatchesTheWholePlanOnUniformStages) {
  // Four identical replicas of two stages with 32 micro-batches each: screening simulates two
  // replicas and 8 micro-batches, and extrapolates the rest at F + B + W per micro-batch. With
  // free transfers 1F1B's time is (m + p - 1)(F + B + W), linear in m, and the all-reduce is
  // priced over all four replicas either way, so both agree.
  FixedCostSpec spec = uniform_spec(4);
  for (FixedLayer& l : spec.layers) l.gradients = Bytes(1e9);
  Fixture fx(4, {"H100-SXM", "H100-SXM", "H100-SXM", "H100-SXM"}, 2, 128, spec);
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  for (int r = 0; r < 4; ++r) {
    c.replicas.push_back(
        PipelineSpec{{{2 * r}, {2 * r + 1}}, {0, 2, 4}, std::vector<RecomputePolicy>(2), 32});
  }
  Evaluator evaluator(*fx.ctx, std::chrono::steady_clock::now() + std::chrono::hours(1));
  auto full = evaluator.evaluate({c}, Fidelity::kFull)[0];
  auto screen = evaluator.evaluate({c}, Fidelity::kScreen)[0];
  ASSERT_TRUE(full->ok) << full->status.message();
  ASSERT_TRUE(screen->ok) << screen->status.message();
  EXPECT_NEAR(screen->iteration_time, full->iteration_time, 1e-9 * full->iteration_time);
  EXPECT_EQ(screen->groups.size(), 2u);
  EXPECT_EQ(full->groups.size(), 4u);
  EXPECT_EQ(evaluator.simulated(), 2);
  // A second request is served from the cache.
  evaluator.evaluate({c, c}, Fidelity::kFull);
  EXPECT_EQ(evaluator.simulated(), 2);
}

}  // namespace
}  // namespace motley::tune_internal
