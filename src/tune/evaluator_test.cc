// Evaluating candidates: the cache, results in input order whatever the thread count, the two
// budgets, and screening's extrapolation where the exact answer is known.
#include "evaluator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "tune_test_util.h"

namespace motley::tune_internal::tune_testing {
namespace {

// Four layers of 1 + 1 + 1 ms with nothing to store or send: times in closed form.
FixedCostSpec plain(int layers) {
  FixedCostSpec spec;
  for (int i = 0; i < layers; ++i) spec.layers.push_back(layer_ms(1, 1, 1));
  return spec;
}

// One pipeline over devices 0 and 1 with the first stage ending at `cut`.
Candidate cut_at(int cut, int64_t micro_batches, int layers = 4) {
  Candidate c;
  c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
  c.replicas = {
      PipelineSpec{{{0}, {1}}, {0, cut, layers}, std::vector<RecomputePolicy>(2), micro_batches}};
  return c;
}

std::vector<double> times(const std::vector<std::shared_ptr<const Evaluation>>& evals) {
  std::vector<double> out;
  for (const auto& e : evals) out.push_back(e->ok ? e->iteration_time : -1);
  return out;
}

TEST(EvaluatorTest, OneF1BOfEqualStagesTakesMPlusPMinusOneRounds) {
  // Two stages of 2 layers (6 ms per micro-batch each), 32 micro-batches: (32 + 1) x 6 ms.
  // Screening simulates 4p = 8 of them and adds the other 24 at the 6 ms period: the same.
  Fixture fx(4, {"H100-SXM"}, 2, 32, plain(4));
  Evaluator evaluator(*fx.ctx, fx.ctx->now() + Seconds(3600));
  const Candidate c = cut_at(2, 32);
  auto full = evaluator.evaluate({c}, Fidelity::kFull)[0];
  auto screen = evaluator.evaluate({c}, Fidelity::kScreen)[0];
  ASSERT_TRUE(full->ok) << full->status.message();
  ASSERT_TRUE(screen->ok) << screen->status.message();
  EXPECT_NEAR(full->iteration_time, 33 * 6e-3, 1e-12);
  EXPECT_NEAR(screen->iteration_time, 33 * 6e-3, 1e-12);
  // The busy time of each group is extrapolated alike: 32 micro-batches of 6 ms.
  ASSERT_EQ(screen->groups.size(), 1u);
  EXPECT_NEAR(screen->groups[0][0].busy, 32 * 6e-3, 1e-12);
  EXPECT_NEAR(full->groups[0][1].busy, 32 * 6e-3, 1e-12);
}

// Replicas that must run in lockstep but cannot are refused before any simulation, as any
// infeasible candidate: a search move that made one must not reach the answer.
TEST(EvaluatorTest, ReplicasThatCannotRunInLockstepAreRefused) {
  Fixture fx(4, {"H100-SXM", "H100-SXM"}, 2, 6, plain(4));
  Evaluator evaluator(*fx.ctx, fx.ctx->now() + Seconds(3600));
  auto two = [](int64_t first, int64_t second) {
    Candidate c = cut_at(2, first);
    c.replicas.push_back(
        PipelineSpec{{{2}, {3}}, {0, 2, 4}, std::vector<RecomputePolicy>(2), second});
    return c;
  };
  Candidate sharded = two(4, 2);
  sharded.zero_stage = 2;
  Candidate split = two(3, 3);
  split.expert_parallel = 2;
  split.context_parallel = 2;
  const Candidate fine = two(4, 2);
  auto evals = evaluator.evaluate({sharded, split, fine}, Fidelity::kFull);
  EXPECT_FALSE(evals[0]->ok);
  EXPECT_EQ(evals[0]->status.message(), "candidate: ZeRO-2 needs equal micro-batch counts");
  EXPECT_FALSE(evals[1]->ok);
  EXPECT_EQ(evals[1]->status.message(),
            "candidate: expert and context parallelism both group the replicas");
  EXPECT_TRUE(evals[2]->ok) << evals[2]->status.message();
  EXPECT_EQ(evaluator.simulated(), 3);
}

TEST(EvaluatorTest, ScreeningTwoReplicasStandsForAllOfThem) {
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
  Evaluator evaluator(*fx.ctx, fx.ctx->now() + Seconds(3600));
  auto full = evaluator.evaluate({c}, Fidelity::kFull)[0];
  auto screen = evaluator.evaluate({c}, Fidelity::kScreen)[0];
  ASSERT_TRUE(full->ok) << full->status.message();
  ASSERT_TRUE(screen->ok) << screen->status.message();
  EXPECT_NEAR(screen->iteration_time, full->iteration_time, 1e-9 * full->iteration_time);
  EXPECT_EQ(screen->groups.size(), 2u);
  EXPECT_EQ(full->groups.size(), 4u);
  EXPECT_EQ(evaluator.simulated(), 2);
}

TEST(EvaluatorTest, CacheHitsAreNotSimulatedAgain) {
  Fixture fx(4, {"H100-SXM"}, 2, 8, plain(4));
  Evaluator evaluator(*fx.ctx, fx.ctx->now() + Seconds(3600));
  const Candidate a = cut_at(1, 8), b = cut_at(2, 8);
  auto first = evaluator.evaluate({a, a, b});
  EXPECT_EQ(evaluator.simulated(), 2);  // a repeat inside a batch is simulated once
  EXPECT_EQ(first[0].get(), first[1].get());
  auto again = evaluator.evaluate({b, a});
  EXPECT_EQ(evaluator.simulated(), 2);
  EXPECT_EQ(again[0].get(), first[2].get());
  EXPECT_EQ(again[1].get(), first[0].get());
  // Screening is cached apart from whole simulations.
  evaluator.evaluate({a}, Fidelity::kScreen);
  EXPECT_EQ(evaluator.simulated(), 3);
  EXPECT_EQ(evaluator.best_iteration_time(),
            std::min(first[0]->iteration_time, first[2]->iteration_time));
}

TEST(EvaluatorTest, ResultsComeInInputOrderWhateverTheThreads) {
  // Eight layers, every cut: each batch position gets its own candidate's time.
  std::vector<Candidate> batch;
  for (int cut = 1; cut < 8; ++cut) batch.push_back(cut_at(cut, 8, 8));
  TuneOptions options = fixed_options(8, plain(8));
  std::vector<std::vector<double>> results;
  for (int threads : {1, 2, 4}) {
    options.threads = threads;
    Fixture fx(tiny_model(8), fixed_cluster({"H100-SXM"}, 2), options);
    Evaluator evaluator(*fx.ctx, fx.ctx->now() + Seconds(3600));
    results.push_back(times(evaluator.evaluate(batch)));
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  // Position by position, what each candidate gives alone.
  Fixture one(8, {"H100-SXM"}, 2, 8, plain(8));
  for (size_t i = 0; i < batch.size(); ++i) {
    Evaluator alone(*one.ctx, one.ctx->now() + Seconds(3600));
    EXPECT_EQ(times(alone.evaluate({batch[i]}))[0], results[0][i]) << "cut " << i + 1;
  }
  // The balanced cut is the fastest: (8 + 1) x 12 ms.
  EXPECT_NEAR(results[0][3], 9 * 12e-3, 1e-12);
}

TEST(EvaluatorTest, EvaluationBudgetTakesTheFirstCandidatesOfABatch) {
  TuneOptions options = fixed_options(8, plain(4));
  options.max_evaluations = 2;
  options.threads = 2;
  Fixture fx(tiny_model(4), fixed_cluster({"H100-SXM"}, 2), options);
  Evaluator evaluator(*fx.ctx, fx.ctx->now() + Seconds(3600));
  EXPECT_FALSE(evaluator.out_of_time());
  auto evals = evaluator.evaluate({cut_at(1, 8), cut_at(2, 8), cut_at(3, 8)});
  EXPECT_TRUE(evals[0]->ok);
  EXPECT_TRUE(evals[1]->ok);
  ASSERT_FALSE(evals[2]->ok);
  EXPECT_EQ(evals[2]->status.message(), "not evaluated: the evaluation budget ran out");
  EXPECT_EQ(evaluator.simulated(), 2);
  EXPECT_EQ(evaluator.unreached(), 1);
  EXPECT_EQ(evaluator.unreached_why(), "the evaluation budget ran out");
  EXPECT_TRUE(evaluator.out_of_time());
  // What was evaluated is still served; nothing new is.
  EXPECT_TRUE(evaluator.evaluate({cut_at(2, 8)})[0]->ok);
  EXPECT_FALSE(evaluator.evaluate({cut_at(3, 8)})[0]->ok);
  EXPECT_EQ(evaluator.simulated(), 2);
}

TEST(EvaluatorTest, DeadlineOnTheContextsClock) {
  // The fixture's clock stands at 0: a deadline at 0 has passed, one at 1 s has not.
  Fixture fx(4, {"H100-SXM"}, 2, 8, plain(4));
  Evaluator late(*fx.ctx, Seconds(0));
  EXPECT_TRUE(late.out_of_time());
  auto e = late.evaluate({cut_at(2, 8)})[0];
  ASSERT_FALSE(e->ok);
  EXPECT_EQ(e->status.message(), "not evaluated: the time budget ran out");
  EXPECT_EQ(late.simulated(), 0);
  EXPECT_EQ(late.unreached(), 1);
  EXPECT_EQ(late.unreached_why(), "the time budget ran out");
  Evaluator early(*fx.ctx, Seconds(1));
  EXPECT_EQ(early.unreached(), 0);
  EXPECT_FALSE(early.out_of_time());
  EXPECT_TRUE(early.evaluate({cut_at(2, 8)})[0]->ok);
}

// What follows the search is held back from the deadline once a plan is found: the longest
// whole simulation plus reserve_for()'s count at the mean one, at most half the budget. On a
// clock that advances a second at every reading a simulation takes one second.
TEST(EvaluatorTest, ReserveHoldsBackTheWholeSimulationsThatFollowTheSearch) {
  TuneOptions options = fixed_options(8, plain(4));
  options.threads = 1;
  auto readings = std::make_shared<int64_t>(0);
  options.clock = [readings] { return Seconds(static_cast<double>((*readings)++)); };
  Fixture fx(tiny_model(4), fixed_cluster({"H100-SXM"}, 2), options);
  const Seconds start = fx.ctx->now();
  Evaluator evaluator(*fx.ctx, start + Seconds(1000));
  evaluator.reserve_for(3);
  EXPECT_EQ(evaluator.reserve(), Seconds(0));  // nothing to finish yet
  ASSERT_TRUE(evaluator.evaluate({cut_at(2, 8)}, Fidelity::kScreen)[0]->ok);
  EXPECT_EQ(evaluator.reserve(), Seconds(0));  // no whole simulation to measure by
  ASSERT_TRUE(evaluator.evaluate({cut_at(2, 8)})[0]->ok);
  EXPECT_EQ(evaluator.reserve(), Seconds(1 + 3 * 1));
  evaluator.reserve_for(10000);
  // (The evaluator was made one reading after `start`.)
  EXPECT_EQ(evaluator.reserve(), Seconds(0.5 * 999));
  // A few readings in, the search still has the half of the budget the reserve leaves it.
  EXPECT_FALSE(evaluator.out_of_time());
  evaluator.reserve_for(0);
  EXPECT_EQ(evaluator.reserve(), Seconds(1));
  // Past the deadline less the reserve, the search is out of time.
  const Seconds r = fx.ctx->now();
  Evaluator late(*fx.ctx, r + Seconds(20));  // made at r + 1: half its budget is 9.5 s
  late.reserve_for(4);
  ASSERT_TRUE(late.evaluate({cut_at(3, 8)})[0]->ok);  // readings r + 2 to r + 4: one second
  EXPECT_EQ(late.reserve(), Seconds(1 + 4));
  while (fx.ctx->now() < r + Seconds(15)) {
  }
  EXPECT_TRUE(late.out_of_time());  // read at r + 16: 16 + 5 >= 20
  late.reserve_for(0);
  EXPECT_FALSE(late.out_of_time());  // read at r + 17: 17 + 1 < 20
}

// The search's answer is simulated past the deadline; the evaluation budget still holds.
TEST(EvaluatorTest, PastTheDeadlineOnlyWhenAsked) {
  TuneOptions options = fixed_options(8, plain(4));
  options.max_evaluations = 1;
  Fixture fx(tiny_model(4), fixed_cluster({"H100-SXM"}, 2), options);
  Evaluator late(*fx.ctx, Seconds(0));
  EXPECT_FALSE(late.evaluate({cut_at(2, 8)})[0]->ok);
  EXPECT_EQ(late.simulated(), 0);
  auto e = late.evaluate({cut_at(2, 8)}, Fidelity::kFull, Deadline::kIgnore)[0];
  EXPECT_TRUE(e->ok) << e->status.message();
  EXPECT_EQ(late.simulated(), 1);
  e = late.evaluate({cut_at(3, 8)}, Fidelity::kFull, Deadline::kIgnore)[0];
  ASSERT_FALSE(e->ok);
  EXPECT_EQ(e->status.message(), "not evaluated: the evaluation budget ran out");
}

TEST(EvaluatorTest, BestScreenedAreTheFastestScreenedCandidates) {
  Fixture fx(8, {"H100-SXM"}, 2, 8, plain(8));
  Evaluator evaluator(*fx.ctx, fx.ctx->now() + Seconds(3600));
  std::vector<Candidate> batch;
  for (int cut = 1; cut < 8; ++cut) batch.push_back(cut_at(cut, 8, 8));
  evaluator.evaluate(batch, Fidelity::kScreen);
  evaluator.evaluate({cut_at(5, 8, 8)});  // whole simulations do not count
  const std::vector<Candidate> best = evaluator.best_screened(3);
  ASSERT_EQ(best.size(), 3u);
  EXPECT_EQ(best[0], batch[3]);  // 4 + 4 layers
  // Then the cuts one layer off the middle, the earlier key first on equal times.
  EXPECT_EQ(best[1].replicas[0].bounds[1] + best[2].replicas[0].bounds[1], 8);
}

}  // namespace
}  // namespace motley::tune_internal::tune_testing
