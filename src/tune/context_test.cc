// The context every part of the search shares: the option checks and their messages, the
// micro-batch sizes allowed, and what it derives from the cluster (types, tensor-parallel
// degrees, relative speeds, prices).
#include "context.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tune_test_util.h"

namespace motley::tune_internal::tune_testing {
namespace {

// The message check_options gives for `change` applied to valid options, or "" when none.
template <class Change>
std::string refusal(Change change, ModelSpec model = tiny_model(4),
                    ClusterSpec cluster = fixed_cluster({"H100-SXM"}, 4)) {
  TuneOptions o;
  o.global_batch = 16;
  change(o);
  const Status s = check_options(o, model, cluster);
  if (s.is_ok()) return "";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  return s.message();
}

TEST(ContextTest, OptionChecksNameTheOptionAndWhatIsAllowed) {
  EXPECT_EQ(refusal([](TuneOptions&) {}), "");
  EXPECT_EQ(refusal([](TuneOptions& o) { o.global_batch = -2; }),
            "tune options: 'global_batch' must be a positive number of sequences, got -2");
  EXPECT_EQ(refusal([](TuneOptions& o) { o.seq_len = -1; }),
            "tune options: 'seq_len' must be 0 (the model's) or positive, got -1");
  EXPECT_EQ(refusal([](TuneOptions& o) { o.micro_batch_size = -1; }),
            "tune options: 'micro_batch_size' must be 0 (auto) or positive, got -1");
  EXPECT_EQ(refusal([](TuneOptions& o) { o.micro_batch_size = 3; }),
            "tune options: 'micro_batch_size' (3) must divide 'global_batch' (16)");
  EXPECT_EQ(refusal([](TuneOptions& o) { o.threads = 0; }),
            "tune options: 'threads' must be at least 1, got 0");
  EXPECT_EQ(refusal([](TuneOptions& o) { o.time_budget = Seconds(0); }),
            "tune options: 'time_budget' must be a positive number of seconds");
  EXPECT_EQ(refusal([](TuneOptions& o) { o.max_evaluations = -5; }),
            "tune options: 'max_evaluations' must be 0 (no limit) or positive, got -5");
  EXPECT_EQ(refusal([](TuneOptions& o) { o.strategy = "fastest"; }),
            "tune options: 'strategy' is 'fastest'; expected " +
                join_alternatives(tune_strategy_names()));
  EXPECT_EQ(refusal([](TuneOptions& o) {
              o.exhaustive = true;
              o.strategy = "metis";
            }),
            "tune options: 'exhaustive' applies to strategy 'motley' only, not 'metis'");
  EXPECT_EQ(refusal([](TuneOptions& o) { o.exhaustive = true; }, tiny_model(4),
                    fixed_cluster({"H100-SXM", "H100-SXM"}, 8)),
            "tune options: 'exhaustive' needs at most 8 devices and 16 layers; cluster 'fixed' "
            "has 16 devices and model 'tiny' 4 layers");
  EXPECT_EQ(refusal([](TuneOptions&) {}, tiny_model(0)),
            "tune options: model 'tiny' has no layers");
  ClusterSpec empty = fixed_cluster({"H100-SXM"}, 4);
  empty.nodes.clear();
  EXPECT_EQ(refusal([](TuneOptions&) {}, tiny_model(4), empty),
            "tune options: cluster 'fixed' has no devices");
}

TEST(ContextTest, MicroBatchSizesAreTheGivenOneOrThoseOfOneTwoFourThatDivide) {
  TuneOptions o;
  o.global_batch = 16;
  EXPECT_EQ(allowed_micro_batch_sizes(o), (std::vector<int64_t>{1, 2, 4}));
  o.global_batch = 6;
  EXPECT_EQ(allowed_micro_batch_sizes(o), (std::vector<int64_t>{1, 2}));
  o.global_batch = 9;
  EXPECT_EQ(allowed_micro_batch_sizes(o), (std::vector<int64_t>{1}));
  o.micro_batch_size = 3;
  EXPECT_EQ(allowed_micro_batch_sizes(o), (std::vector<int64_t>{3}));
  // The context builds one cost model per size; the baselines use the smallest.
  o = TuneOptions{};
  o.global_batch = 8;
  o.cost_model = fixed_factory(uniform_spec(4));
  Fixture fx(tiny_model(4), fixed_cluster({"H100-SXM"}, 2), o);
  EXPECT_EQ(fx.ctx->micro_batch_sizes(), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(fx.ctx->baseline_micro_batch_size(), 1);
  EXPECT_EQ(fx.ctx->seq_len(), 128);  // the model's default
}

TEST(ContextTest, TensorParallelDegreesSplitTheHeads) {
  // Tensor-parallel degrees must tile the node and split every layer evenly: 2 key/value heads
  // allow t = 1 and 2 on a node of 8, whatever the node would allow.
  ModelSpec model = tiny_model(4);
  for (Layer& l : model.layers) l.attention->num_kv_heads = 2;
  const TuneOptions options = fixed_options(8, uniform_spec(4));
  const ClusterSpec cluster = fixed_cluster({"H100-SXM"}, 8);
  auto ctx = Context::create(options, model, cluster);
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
  ASSERT_EQ((*ctx)->types().size(), 1u);
  EXPECT_EQ((*ctx)->types()[0].tp_degrees, (std::vector<int>{1, 2}));
  for (Layer& l : model.layers) l.attention->num_kv_heads = 4;
  auto four = Context::create(options, model, cluster);
  ASSERT_TRUE(four.is_ok());
  EXPECT_EQ((*four)->types()[0].tp_degrees, (std::vector<int>{1, 2, 4}));  // 4 query heads
  // Nodes of 6 devices: 4 does not tile them.
  auto six = Context::create(options, model, fixed_cluster({"H100-SXM"}, 6));
  ASSERT_TRUE(six.is_ok());
  EXPECT_EQ((*six)->types()[0].tp_degrees, (std::vector<int>{1, 2}));
}

TEST(ContextTest, TypesNodesSpeedsAndPrices) {
  // Two H100 nodes and one A100 node of two devices each; layers take twice as long on an A100.
  FixedCostSpec spec = two_speeds(4);
  ClusterSpec cluster = fixed_cluster({"H100-SXM", "A100-80GB", "H100-SXM"}, 2);
  cluster.nodes[0].price_per_hour = 7.2;
  cluster.nodes[1].price_per_hour = 3.6;
  Fixture fx(tiny_model(4), cluster, fixed_options(8, spec));
  const Context& ctx = *fx.ctx;
  EXPECT_EQ(ctx.num_devices(), 6);
  EXPECT_EQ(ctx.num_layers(), 4);
  ASSERT_EQ(ctx.types().size(), 2u);  // in the order the cluster first shows them
  const TypeInfo& h100 = ctx.types()[0];
  const TypeInfo& a100 = ctx.types()[1];
  EXPECT_EQ(h100.name, "H100-SXM");
  EXPECT_EQ(h100.count, 4);
  EXPECT_EQ(h100.nodes, (std::vector<int>{0, 2}));
  EXPECT_EQ(h100.node_devices, (std::vector<std::vector<int>>{{0, 1}, {4, 5}}));
  EXPECT_EQ(a100.name, "A100-80GB");
  EXPECT_EQ(a100.node_devices, (std::vector<std::vector<int>>{{2, 3}}));
  EXPECT_EQ(ctx.type_of(3), 1);
  EXPECT_EQ(ctx.type_of(4), 0);
  EXPECT_EQ(h100.tp_degrees, (std::vector<int>{1, 2}));
  // Whole-model F + B + W: 12 ms against 24 ms.
  EXPECT_DOUBLE_EQ(h100.relative_speed, 1.0);
  EXPECT_DOUBLE_EQ(a100.relative_speed, 0.5);
  // A node's price is shared by its devices.
  EXPECT_DOUBLE_EQ(ctx.price_per_second(1), 7.2 / 2 / 3600);
  EXPECT_DOUBLE_EQ(ctx.price_per_second(2), 3.6 / 2 / 3600);
  EXPECT_EQ(ctx.price_per_second(5), 0.0);
  EXPECT_EQ(ctx.capacity(2), a100.type->memory);
}

TEST(ContextTest, ClockIsTheInjectedOneOrTheSteadyClock) {
  TuneOptions o;
  o.clock = [] { return Seconds(42); };
  EXPECT_EQ(clock_now(o), Seconds(42));
  o.clock = nullptr;
  const Seconds a = clock_now(o);
  const Seconds b = clock_now(o);
  EXPECT_LE(a, b);  // monotonic
}

}  // namespace
}  // namespace motley::tune_internal::tune_testing
