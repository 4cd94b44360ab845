// GradientBuckets: when each bucket leaves (from inside the backward once its layer's gradients
// are final, in the order every member of its set shares), what travels (local shards, or
// full-size contributions whose rows each rank keeps), and the posting order the members of a
// set share on a plan with two replicas. Ranks run as threads over the in-process transport.
#include "gradient_buckets.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <thread>

#include "test_util.h"

namespace motley::internal {
namespace {

using testing::RecordingTransport;

at::Tensor param(int64_t n) { return at::ones({n}).requires_grad_(true); }

TensorSlice whole(const at::Tensor& p) {
  TensorSlice s;
  s.full_shape = p.sizes().vec();
  s.rows = at::arange(p.size(0), at::kLong);
  s.grad_rows = s.rows;
  s.value_rows = s.rows;
  return s;
}

// One rank alone; layer 2's parameter `a` and layer 1's `b` and `c`, all accumulated for the
// last time by the list's one action, a W.
struct OneRank {
  InProcessNetwork network{1};
  RecordingTransport transport{network.endpoint(0)};
  at::Tensor a = param(3), b = param(4), c = param(5);
  std::vector<Action> actions = {Action{ActionKind::kBackwardWeight, 0, 0}};
  GradientSumSets sets() const {
    return {{{0},
             {GradientSum{a, whole(a), false, 2}, GradientSum{b, whole(b), false, 1},
              GradientSum{c, whole(c), false, 1}}}};
  }
  std::unique_ptr<GradientBuckets> buckets(bool post_from_hooks) {
    return std::make_unique<GradientBuckets>(
        sets(), actions, std::map<int, std::vector<at::Tensor>>{{0, {a, b, c}}},
        /*last_stage=*/1, /*loss_in_backward=*/false, std::vector<int>{}, [] { return 0.0; },
        post_from_hooks, transport);
  }
  static void backward(const at::Tensor& p) {
    torch::autograd::backward({(p * 2).sum()}, {}, false, false, {p});
  }
};

TEST(GradientBuckets,
     ABucketLeavesInsideTheBackwardAfterTheLayersAboveOrWithoutHooksAfterItsAction) {
  OneRank r;
  auto buckets = r.buckets(/*post_from_hooks=*/true);
  EXPECT_EQ(buckets->rank_sets(), (std::vector<std::vector<int>>{{0}}));
  buckets->begin_step();
  buckets->begin_action(0);
  OneRank::backward(r.b);
  OneRank::backward(r.c);
  // Layer 1 is final, but layer 2's bucket goes first on every member: nothing left yet.
  EXPECT_TRUE(r.transport.sums().empty());
  OneRank::backward(r.a);
  // Layer 2 final: it leaves, and layer 1 right behind it — both before the action ends.
  ASSERT_EQ(r.transport.sums().size(), 2u);
  EXPECT_EQ(r.transport.sums()[0].shapes, (std::vector<std::vector<int64_t>>{{3}}));
  EXPECT_EQ(r.transport.sums()[1].shapes, (std::vector<std::vector<int64_t>>{{4}, {5}}));
  EXPECT_TRUE(r.transport.sums()[0].posted);
  buckets->end_action(0);
  StepTrace trace(true);
  trace.begin();
  std::optional<double> loss;
  ASSERT_TRUE(buckets->finish(&loss, trace).is_ok());
  EXPECT_FALSE(loss.has_value());
  std::vector<std::string> names;
  for (const TraceEvent& e : trace.take()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"sum layer 2 gradients", "sum layer 1 gradients"}));

  // Next step, layer 1 not reached: its bucket leaves once the action is over, with zeros.
  buckets->begin_step();
  buckets->begin_action(0);
  r.a.mutable_grad().zero_();
  OneRank::backward(r.a);
  EXPECT_EQ(r.transport.sums().size(), 3u);
  r.b.mutable_grad() = at::Tensor();
  buckets->end_action(0);
  EXPECT_EQ(r.transport.sums().size(), 4u);
  ASSERT_TRUE(buckets->finish(&loss, trace).is_ok());
  EXPECT_TRUE(at::equal(r.b.grad(), at::zeros({4})));

  // Without hooks (an after_action hook slows actions after they ran) a bucket leaves only
  // after its action.
  OneRank later;
  auto deferred = later.buckets(/*post_from_hooks=*/false);
  deferred->begin_step();
  deferred->begin_action(0);
  for (const at::Tensor& p : {later.a, later.b, later.c}) OneRank::backward(p);
  EXPECT_TRUE(later.transport.sums().empty());
  deferred->end_action(0);
  EXPECT_EQ(later.transport.sums().size(), 2u);
  ASSERT_TRUE(deferred->finish(&loss, trace).is_ok());
}

// Two ranks: `p` a plain shard (summed elementwise); `q` rows [0, 2) of a [3, 2] tensor on rank
// 0 and rows [1, 3) on rank 1 (row 1 replicated), summed at full size; and the loss.
TEST(GradientBuckets, ShardsSumElementwiseFullSizeSumsKeepTheirRowsAndTheLossIsSummed) {
  InProcessNetwork network(2);
  std::vector<at::Tensor> p_grad(2), q_grad(2);
  std::vector<std::optional<double>> loss(2);
  std::vector<std::vector<RecordingTransport::Sum>> sums(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      RecordingTransport transport(network.endpoint(rank));
      at::Tensor p = at::zeros({2, 2}).requires_grad_(true);
      at::Tensor q = at::zeros({2, 2}).requires_grad_(true);
      TensorSlice q_slice;
      q_slice.full_shape = {3, 2};
      q_slice.rows = at::arange(rank, rank + 2, at::kLong);
      q_slice.grad_rows = at::arange(2, at::kLong);
      q_slice.value_rows = at::arange(2, at::kLong);
      q_slice.exclusive = false;
      const GradientSumSets sets = {
          {{0, 1}, {GradientSum{p, whole(p), false, 1}, GradientSum{q, q_slice, true, 0}}}};
      // The last stage's F, then its fused B.
      const std::vector<Action> actions = {Action{ActionKind::kForward, 0, 0},
                                           Action{ActionKind::kBackward, 0, 0}};
      GradientBuckets buckets(
          sets, actions, {{0, {p, q}}}, /*last_stage=*/0, /*loss_in_backward=*/false, {0, 1},
          [rank] { return rank + 1.5; }, true, transport);
      buckets.begin_step();
      buckets.begin_action(0);
      buckets.end_action(0);
      buckets.begin_action(1);
      p.mutable_grad() = at::arange(4, at::kFloat).reshape({2, 2}) * (rank + 1);
      q.mutable_grad() = at::arange(4, at::kFloat).reshape({2, 2}) + 10 * rank;
      buckets.end_action(1);
      StepTrace trace(false);
      ASSERT_TRUE(buckets.finish(&loss[rank], trace).is_ok());
      p_grad[rank] = p.grad();
      q_grad[rank] = q.grad();
      sums[rank] = transport.sums();
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(loss[rank], 1.5 + 2.5);
    EXPECT_TRUE(at::equal(p_grad[rank], at::arange(4, at::kFloat).reshape({2, 2}) * 3));
    // The loss first, then layer 1 (p, as it is), then layer 0 (q, full size).
    ASSERT_EQ(sums[rank].size(), 3u);
    EXPECT_EQ(sums[rank][0].shapes, (std::vector<std::vector<int64_t>>{{1}}));
    EXPECT_EQ(sums[rank][1].shapes, (std::vector<std::vector<int64_t>>{{2, 2}}));
    EXPECT_EQ(sums[rank][2].shapes, (std::vector<std::vector<int64_t>>{{3, 2}}));
  }
  // Full rows: [0 1] from rank 0; [2 3] + [10 11] from both; [12 13] from rank 1.
  EXPECT_TRUE(at::equal(q_grad[0], at::tensor({0.0f, 1.0f, 12.0f, 14.0f}).reshape({2, 2})));
  EXPECT_TRUE(at::equal(q_grad[1], at::tensor({12.0f, 14.0f, 12.0f, 13.0f}).reshape({2, 2})));
}

// ZB-H1 over two stages and two replicas: each stage's sums run over its two holders, which
// post them in one order — the loss first on the last stage, then decreasing layer — with the
// same tensors.
TEST(GradientBuckets, TheMembersOfASetPostItsSumsInOneOrder) {
  testing::single_threaded();
  const ModelSpec model = testing::preset("tiny-llama");
  const Plan plan = testing::uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 3, 2});
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  InProcessNetwork network(4);
  std::vector<std::vector<RecordingTransport::Sum>> sums(4);
  std::vector<std::vector<std::string>> order(4);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] {
      RecordingTransport transport(network.endpoint(rank));
      ExecOptions options = testing::exec_options();
      options.record_trace = true;
      auto executor = RankExecutor::create(options, plan, model, *tokens, transport);
      ASSERT_TRUE(executor.is_ok()) << executor.status().message();
      auto result = (*executor)->step();
      ASSERT_TRUE(result.is_ok()) << result.status().message();
      sums[rank] = transport.sums();
      Seconds posted(0);
      for (const TraceEvent& e : result->events) {
        if (e.kind != TraceEvent::Kind::kGradientSum) continue;
        EXPECT_GE(e.start, posted) << "rank " << rank << ": " << e.name << " posted out of order";
        posted = e.start;
        order[rank].push_back(e.name);
      }
    });
  }
  for (auto& t : threads) t.join();
  // Stage 0 holds the embedding and blocks 1 and 2; stage 1 blocks 3 and 4 and the head.
  const std::vector<std::string> first = {"sum layer 2 gradients", "sum layer 1 gradients",
                                          "sum layer 0 gradients"};
  const std::vector<std::string> last = {"sum loss", "sum layer 5 gradients",
                                         "sum layer 4 gradients", "sum layer 3 gradients"};
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(order[rank], rank % 2 == 0 ? first : last) << "rank " << rank;
    ASSERT_EQ(sums[rank].size(), order[rank].size());
    for (const RecordingTransport::Sum& s : sums[rank]) {
      EXPECT_TRUE(s.posted);
      EXPECT_EQ(s.ranks, rank % 2 == 0 ? (std::vector<int>{0, 2}) : (std::vector<int>{1, 3}));
    }
  }
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(sums[rank].size(), sums[rank + 2].size());
    for (size_t i = 0; i < sums[rank].size(); ++i) {
      EXPECT_EQ(sums[rank][i].shapes, sums[rank + 2][i].shapes) << "rank " << rank << " sum " << i;
    }
  }
}

}  // namespace
}  // namespace motley::internal
