// The executor against the sequential reference: every schedule, partition and replica layout
// must give the reference's losses and parameters. Ranks run as threads over the in-process
// transport.
#include "motley/exec/executor.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "motley/exec/data.h"
#include "motley/exec/reference.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/validate.h"
#include "test_util.h"

namespace motley {
namespace {

using testing::cluster_of;
using testing::DelayingTransport;
using testing::exec_options;
using testing::kSteps;
using testing::preset;
using testing::relative_difference;
using testing::run_reference;
using testing::uniform_plan;
using testing::WorldResult;

WorldResult run_world(const Plan& plan, const ModelSpec& model, const TokenStream& tokens,
                      int steps, bool delays = false,
                      TransportOptions transport_options = TransportOptions{}) {
  testing::single_threaded();
  const int world = testing::world_size(plan);
  InProcessNetwork network(world, transport_options);
  std::vector<std::vector<std::optional<double>>> losses(world);
  std::vector<std::vector<NamedTensor>> params(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Transport> transport = network.endpoint(rank);
      if (delays) transport = std::make_unique<DelayingTransport>(std::move(transport), 97 + rank);
      auto executor = RankExecutor::create(exec_options(), plan, model, tokens, *transport);
      ASSERT_TRUE(executor.is_ok()) << executor.status().message();
      for (int s = 0; s < steps; ++s) {
        auto result = (*executor)->step();
        ASSERT_TRUE(result.is_ok()) << result.status().message();
        EXPECT_EQ(result->step, s);
        losses[rank].push_back(result->loss);
      }
      params[rank] = (*executor)->parameters();
    });
  }
  for (auto& t : threads) t.join();

  WorldResult out;
  out.losses.assign(steps, 0.0);
  int rank = 0;
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    for (size_t g = 0; g < plan.replicas[r].groups.size(); ++g, ++rank) {
      const bool last = plan.replicas[r].stage_group.back() == static_cast<int>(g);
      for (int s = 0; s < steps && s < static_cast<int>(losses[rank].size()); ++s) {
        EXPECT_EQ(losses[rank][s].has_value(), last) << "rank " << rank;
        if (last) out.losses[s] = *losses[rank][s];  // every replica reports the same sum
      }
      for (const NamedTensor& p : params[rank]) {
        auto it = out.parameters.find(p.name);
        if (it == out.parameters.end()) {
          out.parameters[p.name] = p.tensor;
        } else {
          // Replicas (and tied copies) hold identical bits after identical reduced updates.
          EXPECT_TRUE(at::equal(it->second, p.tensor)) << p.name << " differs on rank " << rank;
        }
      }
    }
  }
  return out;
}

enum class Exactness {
  kTolerance,  // relative difference < 1e-5 against the sequential reference
  // Also bit-identical to the reference that sums gradients in the executor's order: every
  // rank runs its weight gradients in micro-batch order and no parameter is tied.
  kBitIdentical,
};

// The pipelined run against the reference: losses of every step, and every parameter and its
// last gradient (which AdamW's sign-like first steps would otherwise hide: a gradient scaled
// by any constant gives nearly the same update).
void expect_matches_reference(const Plan& plan, const ModelSpec& model, Exactness exactness,
                              bool delays = false) {
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  const WorldResult pipelined = run_world(plan, model, *tokens, kSteps, delays);
  const WorldResult reference =
      run_reference(plan, model, *tokens, kSteps, GradientOrder::kSequential);
  ASSERT_EQ(pipelined.losses.size(), reference.losses.size());
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LT(std::abs(pipelined.losses[s] - reference.losses[s]) / reference.losses[s], 1e-5)
        << "step " << s << ": " << pipelined.losses[s] << " vs " << reference.losses[s];
  }
  EXPECT_LT(reference.losses[2], reference.losses[0]);  // it trains
  ASSERT_EQ(pipelined.parameters.size(), reference.parameters.size());
  for (const auto& [name, tensor] : reference.parameters) {
    auto it = pipelined.parameters.find(name);
    ASSERT_NE(it, pipelined.parameters.end()) << name;
    EXPECT_LT(relative_difference(it->second, tensor), 1e-5) << name;
    ASSERT_TRUE(it->second.grad().defined() && tensor.grad().defined()) << name;
    // The last step's gradient is taken at parameters that already differ by rounding (AdamW
    // turns a rounding-level gradient element into a full step), so it gets a looser bound;
    // any error of scale or of a missing micro-batch is orders of magnitude above it.
    EXPECT_LT(relative_difference(it->second.grad(), tensor.grad()), 1e-4) << name << " gradient";
  }
  if (exactness == Exactness::kBitIdentical) {
    const WorldResult same_order =
        run_reference(plan, model, *tokens, kSteps, GradientOrder::kByReplica);
    for (const auto& [name, tensor] : same_order.parameters) {
      const at::Tensor& mine = pipelined.parameters.at(name);
      EXPECT_TRUE(at::equal(mine, tensor)) << name;
      EXPECT_TRUE(at::equal(mine.grad(), tensor.grad())) << name << " gradient";
    }
  }
}

TEST(Executor, GpipeMatchesReference) {
  const ModelSpec model = preset("tiny-llama");
  expect_matches_reference(uniform_plan(model, {ScheduleKind::kGpipe, 4, 1, 6, 1}), model,
                           Exactness::kBitIdentical);
}

TEST(Executor, OneFOneBMatchesReference) {
  const ModelSpec model = preset("tiny-llama");
  expect_matches_reference(uniform_plan(model, {ScheduleKind::k1f1b, 4, 1, 8, 1}), model,
                           Exactness::kBitIdentical);
}

TEST(Executor, OneFOneBWithFullRecomputeMatchesReference) {
  const ModelSpec model = preset("tiny-llama");
  expect_matches_reference(
      uniform_plan(model, {ScheduleKind::k1f1b, 3, 1, 5, 1, RecomputePolicy::kFull}), model,
      Exactness::kBitIdentical);
}

// Every other micro-batch recomputed alone (an R before its I, on stages that keep their
// activations): its F runs without a graph and its R runs it again; the numbers are the same.
TEST(Executor, ZeroBubbleH1RecomputingSingleMicroBatchesMatchesReference) {
  const ModelSpec model = preset("tiny-llama");
  Plan plan = uniform_plan(model, {ScheduleKind::kZbH1, 3, 1, 6, 1});
  for (DeviceGroupSchedule& g : plan.replicas[0].groups) {
    std::vector<Action> order;
    for (const Action& a : g.actions) {
      if (a.kind == ActionKind::kBackwardInput && a.micro_batch % 2 == 0) {
        order.push_back(Action{ActionKind::kRecompute, a.stage, a.micro_batch});
      }
      order.push_back(a);
    }
    g.actions = std::move(order);
  }
  expect_matches_reference(plan, model, Exactness::kBitIdentical);
}

TEST(Executor, InterleavedOneFOneBMatchesReference) {
  const ModelSpec model = preset("tiny-llama");
  expect_matches_reference(uniform_plan(model, {ScheduleKind::kInterleaved, 2, 3, 4, 1}), model,
                           Exactness::kBitIdentical);
}

TEST(Executor, ZeroBubbleH1MatchesReference) {
  const ModelSpec model = preset("tiny-moe");
  expect_matches_reference(uniform_plan(model, {ScheduleKind::kZbH1, 3, 1, 6, 1}), model,
                           Exactness::kBitIdentical);
}

TEST(Executor, ZeroBubbleVMatchesReference) {
  // V shape: group 0 runs the embedding and the head, whose matrix is tied.
  const ModelSpec model = preset("tiny-gemma");
  expect_matches_reference(uniform_plan(model, {ScheduleKind::kZbV, 3, 2, 6, 1}), model,
                           Exactness::kTolerance);
}

TEST(Executor, HybridMambaModelMatchesReference) {
  // tiny-hybrid: Mamba-2, attention and MLP split layers, eight layers over four stages.
  const ModelSpec model = preset("tiny-hybrid");
  expect_matches_reference(uniform_plan(model, {ScheduleKind::k1f1b, 4, 1, 4, 1}), model,
                           Exactness::kBitIdentical);
}

TEST(Executor, Mamba1HybridModelMatchesReference) {
  // tiny-hybrid with Mamba-1 mixers: with Jamba's inner norms under ZB-H1 (the weight
  // gradients in their own pass), without them under 1F1B.
  for (bool inner_norms : {true, false}) {
    SCOPED_TRACE(inner_norms ? "inner norms" : "no inner norms");
    const ModelSpec model = testing::mamba1_hybrid(inner_norms);
    const ScheduleKind kind = inner_norms ? ScheduleKind::kZbH1 : ScheduleKind::k1f1b;
    expect_matches_reference(uniform_plan(model, {kind, 4, 1, 4, 1}), model,
                             Exactness::kBitIdentical);
  }
}

TEST(Executor, LatentAttentionMatchesReference) {
  // Queries projected directly, 1F1B over four stages; through a bottleneck, with biases and
  // full recomputation over three.
  const ModelSpec direct = testing::mla_model(0);
  expect_matches_reference(uniform_plan(direct, {ScheduleKind::k1f1b, 4, 1, 6, 1}), direct,
                           Exactness::kBitIdentical);
  const ModelSpec bottleneck = testing::mla_model(24, /*bias=*/true);
  expect_matches_reference(
      uniform_plan(bottleneck, {ScheduleKind::k1f1b, 3, 1, 5, 1, RecomputePolicy::kFull}),
      bottleneck, Exactness::kBitIdentical);
}

TEST(Executor, DeepSeekV2LiteMiniatureMatchesReference) {
  // MLA with dense and MoE blocks (two shared experts), ZB-H1 over three stages.
  const ModelSpec model = testing::deepseek_v2_lite_miniature();
  expect_matches_reference(uniform_plan(model, {ScheduleKind::kZbH1, 3, 1, 6, 1}), model,
                           Exactness::kBitIdentical);
}

TEST(Executor, ContextParallelGroupsTrainAsTheirOneReplicaPlan) {
  // Two replicas in one context group run the same four micro-batches, each member half of
  // every sequence: the run is the one-replica plan's (context_parallel_test.cc has more).
  const ModelSpec model = preset("tiny-llama");
  const Plan one = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 1});
  Plan grouped = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 2});
  grouped.context_parallel = 2;
  grouped.global_batch = one.global_batch;
  EXPECT_EQ(distinct_micro_batches(grouped), 4);
  EXPECT_EQ(total_micro_batches(grouped), 8);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(global_micro_batch(grouped, 1, 1, j), global_micro_batch(one, 1, 0, j));
  }
  testing::expect_matches_reference(grouped, model);
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  const WorldResult alone = run_reference(one, model, *tokens, kSteps, GradientOrder::kSequential);
  const WorldResult split =
      run_reference(grouped, model, *tokens, kSteps, GradientOrder::kSequential);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LT(std::abs(split.losses[s] - alone.losses[s]) / alone.losses[s], 1e-6) << s;
  }
  for (const auto& [name, tensor] : alone.parameters) {
    EXPECT_LT(relative_difference(split.parameters.at(name), tensor), 1e-5) << name;
  }
}

TEST(Executor, TiedWeightsAcrossRanksAndReplicasMatchReference) {
  // 1F1B over 3 groups, two replicas: the tied matrix lives on ranks 0, 2, 3 and 5.
  const ModelSpec model = preset("tiny-gemma");
  expect_matches_reference(uniform_plan(model, {ScheduleKind::k1f1b, 3, 1, 4, 2}), model,
                           Exactness::kTolerance);
}

// Non-uniform stages ([0,1), [1,4), [4,6)); replica 0 runs them on three groups in a hand-made
// order mixing split and fused backwards, with an explicit recompute; replica 1 runs 5
// micro-batches (replica 0 runs 3) on two groups, the first holding the non-adjacent stages 0
// and 2.
Plan irregular_plan(const ModelSpec& model, const ClusterSpec& cluster) {
  const std::string text = R"json({
    "format": "motley.plan/1",
    "model": {"name": "tiny-llama", "hash": "0"},
    "cluster": {"name": "fixed", "hash": "0"},
    "micro_batch_size": 2, "seq_len": 16, "global_batch": 16,
    "stages": [
      {"layers": [0, 1]},
      {"layers": [1, 4], "recompute": "full"},
      {"layers": [4, 6]}
    ],
    "replicas": [
      {"micro_batches": 3, "stage_group": [0, 1, 2], "groups": [
        {"devices": [0], "actions": ["0F0", "0F1", "0F2", "0I0", "0W0", "0B1", "0I2", "0W2"]},
        {"devices": [1], "actions": ["1F0", "1F1", "1R0", "1I0", "1F2", "1W0", "1B1", "1I2",
                                     "1W2"]},
        {"devices": [2], "actions": ["2F0", "2B0", "2F1", "2I1", "2W1", "2F2", "2B2"]}
      ]},
      {"micro_batches": 5, "stage_group": [0, 1, 0], "groups": [
        {"devices": [3], "actions": ["0F0", "0F1", "0F2", "2F0", "2B0", "0F3", "2F1", "2I1",
                                     "0B0", "2W1", "0F4", "2F2", "2B2", "0B1", "2F3", "2B3",
                                     "0B2", "2F4", "2B4", "0B3", "0B4"]},
        {"devices": [4], "actions": ["1F0", "1F1", "1F2", "1B0", "1F3", "1B1", "1F4", "1B2",
                                     "1B3", "1B4"]}
      ]}
    ]
  })json";
  auto json = parse_json(text, "irregular");
  EXPECT_TRUE(json.is_ok());
  auto plan = plan_from_json(*json, "irregular");
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  ValidateOptions options;
  options.check_spec_hashes = false;
  Status valid = validate_plan(*plan, model, cluster, options);
  EXPECT_TRUE(valid.is_ok()) << valid.message();
  return *plan;
}

TEST(Executor, IrregularScheduleWithUnevenReplicasMatchesReference) {
  const ModelSpec model = preset("tiny-llama");
  expect_matches_reference(irregular_plan(model, cluster_of(5)), model, Exactness::kBitIdentical);
}

TEST(Executor, LargeMessagesAndRandomDelaysComplete) {
  // A wide model whose activations are 4 MiB per micro-batch (2 x 64 x 8192 floats), so no
  // message is small enough to slip through a buffer; random delays on every rank.
  const ModelSpec model = testing::wide_model(8192);
  for (ScheduleKind kind : {ScheduleKind::k1f1b, ScheduleKind::kZbV}) {
    const int v = kind == ScheduleKind::kZbV ? 2 : 1;
    const Plan plan = uniform_plan(model, {kind, 3, v, 6, 1}, /*micro_batch_size=*/2,
                                   /*seq_len=*/64);
    auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 5), "corpus");
    const WorldResult result = run_world(plan, model, *tokens, /*steps=*/1, /*delays=*/true);
    ASSERT_EQ(result.losses.size(), 1u);
    EXPECT_GT(result.losses[0], 0.0);
  }
}

TEST(Executor, RandomDelaysDoNotChangeTheResult) {
  const ModelSpec model = preset("tiny-llama");
  expect_matches_reference(uniform_plan(model, {ScheduleKind::kZbH1, 4, 1, 8, 1}), model,
                           Exactness::kBitIdentical, /*delays=*/true);
}

// A transport without tags (NCCL) matches each rank pair's messages in posting order. Every
// layout's messages must then pair up as they do by tag — the in-process network fails a run
// whose n-th send and n-th receive on a link carry different tags — and train the same bits:
// pipelines whose groups exchange both activations and gradients in one direction (V shape,
// interleaved, the irregular plan's non-adjacent stages), tensor-parallel groups (a rank sends
// to several ranks of the next group), vocabulary shards, replicas, random delays.
TEST(Executor, MessagesMatchedInOrderPairUpAsByTag) {
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  const ModelSpec llama = preset("tiny-llama");
  const ModelSpec gemma = preset("tiny-gemma");
  testing::UniformCase vocab{ScheduleKind::k1f1b, 2, 1, 4, 1, RecomputePolicy::kNone, 2};
  vocab.vocab_parallel = true;
  const std::vector<std::pair<Plan, const ModelSpec*>> plans = {
      {uniform_plan(llama, {ScheduleKind::kZbV, 2, 2, 6, 1}), &llama},
      {uniform_plan(gemma, {ScheduleKind::kZbV, 3, 2, 6, 2}), &gemma},
      {uniform_plan(llama, {ScheduleKind::kInterleaved, 2, 3, 4, 1}), &llama},
      {irregular_plan(llama, cluster_of(5)), &llama},
      {uniform_plan(llama, {ScheduleKind::kZbH1, 2, 1, 4, 1, RecomputePolicy::kNone, 2}), &llama},
      {uniform_plan(llama, vocab), &llama},
  };
  TransportOptions in_order;
  in_order.matching = MessageMatching::kInOrder;
  for (const auto& [plan, model] : plans) {
    SCOPED_TRACE(fmt::format("{} on {} ranks", plan.schedule, testing::world_size(plan)));
    const std::vector<testing::RankRun> by_tag = testing::run_ranks(plan, *model, *tokens, 2);
    const std::vector<testing::RankRun> ordered =
        testing::run_ranks(plan, *model, *tokens, 2, /*delays=*/true, in_order);
    ASSERT_EQ(ordered.size(), by_tag.size());
    for (size_t rank = 0; rank < by_tag.size(); ++rank) {
      EXPECT_EQ(ordered[rank].losses, by_tag[rank].losses) << "rank " << rank;
      ASSERT_EQ(ordered[rank].parameters.size(), by_tag[rank].parameters.size()) << rank;
      for (size_t i = 0; i < by_tag[rank].parameters.size(); ++i) {
        EXPECT_TRUE(
            at::equal(ordered[rank].parameters[i].tensor, by_tag[rank].parameters[i].tensor))
            << "rank " << rank << " " << by_tag[rank].parameters[i].name;
      }
    }
  }
}

// The check is not vacuous: two sends on one link whose receives are posted the other way round
// fail both ends naming the tags, where matching by tag delivers them.
TEST(Executor, InOrderMatchingRefusesReceivesPostedInAnotherOrder) {
  for (MessageMatching matching : {MessageMatching::kByTag, MessageMatching::kInOrder}) {
    TransportOptions options;
    options.matching = matching;
    InProcessNetwork network(2, options);
    auto sender = network.endpoint(0);
    auto receiver = network.endpoint(1);
    const at::Tensor a = at::full({2}, 1.0), b = at::full({2}, 2.0);
    at::Tensor into_b = at::zeros({2}), into_a = at::zeros({2});
    auto r1 = receiver->recv(into_b, 0, /*tag=*/8, "b");
    auto r2 = receiver->recv(into_a, 0, /*tag=*/7, "a");
    auto s1 = sender->send(a, 1, /*tag=*/7, "a");
    auto s2 = sender->send(b, 1, /*tag=*/8, "b");
    ASSERT_TRUE(r1.is_ok() && r2.is_ok() && s1.is_ok() && s2.is_ok());
    const Status first = (*r1)->wait();
    EXPECT_EQ((*s1)->wait().message(), first.message());
    EXPECT_EQ((*s2)->wait().is_ok(), first.is_ok());
    if (matching == MessageMatching::kByTag) {
      EXPECT_TRUE(first.is_ok()) << first.message();
      EXPECT_TRUE((*r2)->wait().is_ok());
      EXPECT_TRUE(at::equal(into_a, a) && at::equal(into_b, b));
    } else {
      EXPECT_EQ(first.code(), StatusCode::kIoError);
      EXPECT_NE(first.message().find("rank 0's next message to rank 1 has tag 7 but rank 1's next "
                                     "receive from it expects tag 8"),
                std::string::npos)
          << first.message();
    }
  }
}

TEST(Executor, MissingSenderFailsWithinTheTimeoutNamingPeerAndMessage) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 5), "corpus");
  testing::single_threaded();
  InProcessNetwork network(2, TransportOptions{Seconds(0.2)});
  // Rank 0 never runs; rank 1 waits for its first activation.
  auto transport = network.endpoint(1);
  auto executor = RankExecutor::create(exec_options(), plan, model, *tokens, *transport);
  ASSERT_TRUE(executor.is_ok()) << executor.status().message();
  auto result = (*executor)->step();
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kIoError);
  EXPECT_EQ(result.status().message(),
            "rank 1 (replica 0, device group 1), step 0: at 1F0: rank 1: timed out after 0.2 s "
            "waiting to receive the activation of stage 0, micro-batch 0 from rank 0 (tag 0); "
            "the peer never posted the matching send");
  // The executor stays failed.
  EXPECT_EQ((*executor)->step().status().message(), result.status().message());
}

TEST(Executor, RejectsAWorldOfTheWrongSize) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 5), "corpus");
  InProcessNetwork network(3);
  auto transport = network.endpoint(0);
  auto executor = RankExecutor::create(exec_options(), plan, model, *tokens, *transport);
  ASSERT_FALSE(executor.is_ok());
  EXPECT_EQ(executor.status().message(),
            "the plan has 2 devices (one rank each) but the transport's world has 3 ranks");
}

// The plan's structure is check_plan_structure's to report, against the model's layers, before
// any rank is laid out.
TEST(Executor, RejectsAPlanWhoseStructureDoesNotFitTheModel) {
  const ModelSpec model = preset("tiny-llama");
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 5), "corpus");
  InProcessNetwork network(2);
  auto transport = network.endpoint(0);
  auto error = [&](const Plan& plan) {
    auto executor = RankExecutor::create(exec_options(), plan, model, *tokens, *transport);
    EXPECT_FALSE(executor.is_ok());
    return executor.is_ok() ? std::string() : executor.status().message();
  };
  Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 1});
  plan.stages.back().layer_end += 1;
  EXPECT_EQ(error(plan),
            "field 'stages[1].layer_end': stage 1 (layers [3, 7)) ends past the last layer: "
            "model 'tiny-llama' has 6 layers");
  plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 1});
  plan.replicas[0].stage_group[1] = 2;
  EXPECT_EQ(error(plan),
            "field 'replicas[0].stage_group[1]': replica 0 places stage 1 on device group 2 but "
            "it has groups 0-1");
  plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 1});
  plan.replicas[0].groups[1].actions[0].stage = 5;
  EXPECT_EQ(error(plan),
            "field 'replicas[0].groups[1].actions[0].stage': 5F0 on device group 1 (device 1): "
            "stage 5 does not exist; the plan has stages 0-1");
}

TEST(Executor, TraceFollowsTheGroupOrder) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 3, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 3), "corpus");
  testing::single_threaded();
  InProcessNetwork network(2);
  std::vector<std::vector<TraceEvent>> events(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto transport = network.endpoint(rank);
      ExecOptions options = exec_options();
      options.record_trace = true;
      auto executor = RankExecutor::create(options, plan, model, *tokens, *transport);
      ASSERT_TRUE(executor.is_ok());
      auto result = (*executor)->step();
      ASSERT_TRUE(result.is_ok()) << result.status().message();
      events[rank] = result->events;
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> actions;
    std::vector<std::string> others;
    Seconds previous_end(0);
    std::vector<TraceEvent> sums;  // recorded when waited on, so out of order
    Seconds last_action_end(0), all_reduce_end(0);
    for (const TraceEvent& e : events[rank]) {
      if (e.kind == TraceEvent::Kind::kGradientSum) {
        sums.push_back(e);
        continue;
      }
      if (e.kind == TraceEvent::Kind::kAction) last_action_end = e.end;
      if (e.kind == TraceEvent::Kind::kAllReduce) all_reduce_end = e.end;
      EXPECT_LE(previous_end, e.start);
      EXPECT_LE(e.start, e.ready);
      EXPECT_LE(e.ready, e.end);
      previous_end = e.end;
      if (e.kind == TraceEvent::Kind::kAction) {
        ASSERT_TRUE(e.action.has_value());
        EXPECT_EQ(action_to_string(*e.action), e.name);
        actions.push_back(e.name);
      } else {
        EXPECT_EQ(e.ready, e.start);
        others.push_back(e.name);
      }
    }
    std::vector<std::string> planned;
    for (const Action& a : plan.replicas[0].groups[rank].actions) {
      planned.push_back(action_to_string(a));
    }
    EXPECT_EQ(actions, planned);
    // Rank 0 sends three activations, rank 1 three gradients; then the step's tail.
    const std::string sent = rank == 0 ? "send_activation 0/" : "send_gradient 1/";
    EXPECT_EQ(others, (std::vector<std::string>{sent + "0", sent + "1", sent + "2", "finish_sends",
                                                "all_reduce", "optimizer"}));
    // One sum per layer (three per stage) and the loss's on the last stage. The last W
    // finishes its layers' gradients one by one, and each layer's sum leaves from inside that
    // backward, before the action ends: the sums overlap the compute.
    ASSERT_EQ(sums.size(), rank == 0 ? 3u : 4u);
    int posted_inside = 0;
    for (const TraceEvent& e : sums) {
      EXPECT_LE(e.start, e.end);
      EXPECT_LE(e.end, all_reduce_end);
      if (e.start < last_action_end) ++posted_inside;
    }
    EXPECT_GE(posted_inside, 2) << "rank " << rank;
  }
}

}  // namespace
}  // namespace motley
