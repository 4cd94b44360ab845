// Whole runs through the entry points: in-process threads, a failing rank, and real Gloo
// process groups on localhost.
#include "motley/exec/train.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "motley/core/json.h"
#include "motley/exec/executor.h"
#include "motley/exec/gloo_transport.h"
#include "test_util.h"

namespace motley {
namespace {

using testing::exec_options;
using testing::free_port;
using testing::kSteps;
using testing::preset;
using testing::run_reference;
using testing::uniform_plan;
using testing::WorldResult;

TEST(Train, InProcessRunReportsTheReferenceLosses) {
  const ModelSpec model = preset("tiny-moe");
  const Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 3, 2});
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  testing::single_threaded();
  TrainOptions options;
  options.exec = exec_options();
  options.steps = kSteps;
  std::mutex mu;
  std::vector<int> reporting_ranks;
  options.on_step = [&](int rank, const StepResult&) {
    std::lock_guard<std::mutex> lock(mu);
    reporting_ranks.push_back(rank);
  };
  auto report = train_in_process(options, plan, model, *tokens);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  const WorldResult reference =
      run_reference(plan, model, *tokens, kSteps, GradientOrder::kSequential);
  ASSERT_EQ(report->losses.size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LT(std::abs(report->losses[s] - reference.losses[s]) / reference.losses[s], 1e-5);
  }
  // Ranks 1 and 3 run the last stage of replicas 0 and 1; each reports every step.
  std::sort(reporting_ranks.begin(), reporting_ranks.end());
  EXPECT_EQ(reporting_ranks, (std::vector<int>{1, 1, 1, 3, 3, 3}));
}

TEST(Train, AFailingRankStopsTheRunWithItsError) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 3, 1, 3, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 3), "corpus");
  TrainOptions options;
  options.exec = exec_options();
  options.exec.stage_factory = [&](int stage, ParameterStore& store) {
    if (stage == 1) return Result<std::unique_ptr<StageModule>>(internal_error("stage 1 broke"));
    return make_transformer_stage(model, plan.stages[stage].layer_begin,
                                  plan.stages[stage].layer_end,
                                  StageModuleOptions{0, plan.seq_len, {}}, store);
  };
  auto report = train_in_process(options, plan, model, *tokens);
  ASSERT_FALSE(report.is_ok());
  EXPECT_EQ(report.status().message(), "stage 1 broke");
}

TEST(Train, ResumingFromACheckpointContinuesTheRunExactly) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 3, 1, 3, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  testing::single_threaded();
  TrainOptions straight;
  straight.exec = exec_options();
  straight.steps = 4;
  auto full = train_in_process(straight, plan, model, *tokens);
  ASSERT_TRUE(full.is_ok()) << full.status().message();
  ASSERT_EQ(full->losses.size(), 4u);
  EXPECT_EQ(full->first_step, 0);
  EXPECT_EQ(full->step_times.size(), 4u);

  const std::string dir = ::testing::TempDir() + "/motley_train_resume";
  std::filesystem::remove_all(dir);
  TrainOptions first = straight;
  first.steps = 3;
  first.checkpoint_dir = dir;
  first.checkpoint_every = 2;
  // After the third step (index 2) and before its own save, the periodic save of step 2 is there.
  std::optional<int64_t> manifest_step_seen_at_third_step;
  first.on_rank_step = [&](int rank, const StepResult& result, Seconds) {
    if (rank != 0 || result.step != 2) return;
    auto manifest = read_json_file(dir + "/step-00000002/manifest.json");
    if (manifest.is_ok()) manifest_step_seen_at_third_step = (*manifest)["step"].get<int64_t>();
  };
  auto head = train_in_process(first, plan, model, *tokens);
  ASSERT_TRUE(head.is_ok()) << head.status().message();
  EXPECT_EQ(manifest_step_seen_at_third_step, std::optional<int64_t>(2));

  TrainOptions rest = straight;
  rest.steps = 1;
  rest.resume_from = dir;
  std::mutex mu;
  int rank_steps = 0;
  rest.on_rank_step = [&](int, const StepResult& result, Seconds) {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(result.step, 3);
    ++rank_steps;
  };
  auto tail = train_in_process(rest, plan, model, *tokens);
  ASSERT_TRUE(tail.is_ok()) << tail.status().message();
  EXPECT_EQ(tail->first_step, 3);
  EXPECT_EQ(rank_steps, 3);  // every rank, once
  ASSERT_EQ(head->losses.size(), 3u);
  ASSERT_EQ(tail->losses.size(), 1u);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(head->losses[s], full->losses[s]);
  EXPECT_EQ(tail->losses[0], full->losses[3]);  // same plan: bit-identical
  std::filesystem::remove_all(dir);
}

TEST(Train, AMissingCheckpointIsNotFound) {
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 2, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 3), "corpus");
  TrainOptions options;
  options.exec = exec_options();
  options.resume_from = ::testing::TempDir() + "/motley_no_such_checkpoint";
  auto report = train_in_process(options, plan, model, *tokens);
  ASSERT_FALSE(report.is_ok());
  EXPECT_EQ(report.status().code(), StatusCode::kNotFound);
  EXPECT_NE(report.status().message().find("motley_no_such_checkpoint: no checkpoint here (no "
                                           "'latest' pointer and no manifest.json)"),
            std::string::npos)
      << report.status().message();
}

// Every rank of `plan` as a thread with its own TCPStore client and ProcessGroupGloo on
// localhost, messages matched as `matching` says, for kSteps steps: each rank's losses (set on
// the ranks holding the loss) and final parameters.
std::vector<testing::RankRun> run_gloo_world(const Plan& plan, const ModelSpec& model,
                                             const TokenStream& tokens, MessageMatching matching) {
  testing::single_threaded();
  const int world = testing::world_size(plan);
  const int port = free_port();
  std::vector<testing::RankRun> out(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions gloo;
      gloo.rank = rank;
      gloo.world_size = world;
      gloo.master_port = port;
      gloo.hostname = "127.0.0.1";
      gloo.transport.matching = matching;
      auto transport = connect_gloo(gloo);
      ASSERT_TRUE(transport.is_ok()) << transport.status().message();
      auto executor = RankExecutor::create(exec_options(), plan, model, tokens, **transport);
      ASSERT_TRUE(executor.is_ok()) << executor.status().message();
      for (int s = 0; s < kSteps; ++s) {
        auto result = (*executor)->step();
        ASSERT_TRUE(result.is_ok()) << result.status().message();
        out[rank].losses.push_back(result->loss);
      }
      out[rank].parameters = (*executor)->parameters();
      EXPECT_TRUE((*transport)->barrier().is_ok());
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(Gloo, ExecutorMatchesTheReferenceBitForBit) {
  // ZB-H1 over 2 groups, two replicas, so activations, gradients and the cross-replica
  // all-reduce all cross Gloo. A two-member ring sums a + b, as the in-process fabric does.
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::kZbH1, 2, 1, 4, 2});
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  const std::vector<testing::RankRun> ranks =
      run_gloo_world(plan, model, *tokens, MessageMatching::kByTag);
  ASSERT_EQ(ranks.size(), 4u);
  std::vector<std::vector<double>> losses(4);
  for (int rank = 0; rank < 4; ++rank) {
    for (const std::optional<double>& loss : ranks[rank].losses) {
      if (loss) losses[rank].push_back(*loss);
    }
  }
  EXPECT_TRUE(losses[0].empty());
  EXPECT_TRUE(losses[2].empty());
  ASSERT_EQ(losses[1].size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(losses[1], losses[3]);
  const WorldResult sequential =
      run_reference(plan, model, *tokens, kSteps, GradientOrder::kSequential);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LT(std::abs(losses[1][s] - sequential.losses[s]) / sequential.losses[s], 1e-5);
  }
  const WorldResult same_order =
      run_reference(plan, model, *tokens, kSteps, GradientOrder::kByReplica);
  size_t compared = 0;
  for (int rank = 0; rank < 4; ++rank) {
    for (const NamedTensor& p : ranks[rank].parameters) {
      EXPECT_TRUE(at::equal(p.tensor, same_order.parameters.at(p.name))) << p.name;
      EXPECT_TRUE(at::equal(p.tensor.grad(), same_order.parameters.at(p.name).grad())) << p.name;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2 * same_order.parameters.size());  // every parameter, on both replicas
}

TEST(Gloo, MessagesMatchedInOrderOverOneGroupPerDirectionTrainTheSameBits) {
  // NCCL's way (MessageMatching::kInOrder): each link direction is its own two-rank group and
  // tags are dropped. A V shape on two groups sends activations and gradients both ways on one
  // link; two replicas add the all-reduce. The same bits as the in-process run matched by tag.
  const ModelSpec model = preset("tiny-llama");
  const Plan plan = uniform_plan(model, {ScheduleKind::kZbV, 2, 2, 4, 2});
  auto tokens = TokenStream::from_text(synthetic_corpus(1 << 14, 3), "corpus");
  const std::vector<testing::RankRun> by_tag = testing::run_ranks(plan, model, *tokens, kSteps);
  const std::vector<testing::RankRun> in_order =
      run_gloo_world(plan, model, *tokens, MessageMatching::kInOrder);
  ASSERT_EQ(in_order.size(), by_tag.size());
  for (size_t rank = 0; rank < by_tag.size(); ++rank) {
    EXPECT_EQ(in_order[rank].losses, by_tag[rank].losses) << "rank " << rank;
    ASSERT_EQ(in_order[rank].parameters.size(), by_tag[rank].parameters.size()) << rank;
    for (size_t i = 0; i < by_tag[rank].parameters.size(); ++i) {
      EXPECT_TRUE(at::equal(in_order[rank].parameters[i].tensor, by_tag[rank].parameters[i].tensor))
          << "rank " << rank << " " << by_tag[rank].parameters[i].name;
    }
  }
}

}  // namespace
}  // namespace motley
