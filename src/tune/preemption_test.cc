// The price of interruptions (preemption.h): Young's and Daly's intervals, the goodput of Daly's
// model in closed form and against a search over intervals, checkpoint shares, the estimate of
// a job on spot nodes, and the planner's cost objective, budget and deadline built on them.
#include "motley/tune/preemption.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "tune_test_util.h"

namespace motley::tune_internal::tune_testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Preemption, YoungAndDalyIntervals) {
  // sqrt(2 * 60 * 3600) = sqrt(432000).
  EXPECT_NEAR(young_checkpoint_interval(Seconds(60), Seconds(3600)).value(), 657.2670690, 1e-6);
  // Daly: 657.267 * (1 + sqrt(1/120) / 3 + 1/1080) - 60.
  EXPECT_NEAR(daly_checkpoint_interval(Seconds(60), Seconds(3600)).value(), 617.87565, 1e-4);
  // A checkpoint as long as two MTBFs or longer: checkpoint every MTBF.
  EXPECT_EQ(daly_checkpoint_interval(Seconds(7200), Seconds(3600)), Seconds(3600));
  EXPECT_EQ(daly_checkpoint_interval(Seconds(1e5), Seconds(3600)), Seconds(3600));
  // With checkpoints small against the MTBF the two agree to first order.
  const double young = young_checkpoint_interval(Seconds(1), Seconds(1e6)).value();
  const double daly = daly_checkpoint_interval(Seconds(1), Seconds(1e6)).value();
  EXPECT_NEAR(daly / young, 1.0, 2e-3);
}

TEST(Preemption, GoodputClosedForms) {
  // Never interrupted: all of it is progress.
  EXPECT_EQ(checkpoint_goodput(Seconds(100), Seconds(10), Seconds(300), Seconds(kInf)), 1.0);
  // tau = M, no checkpoint or restart cost: M / (M (e - 1)).
  EXPECT_NEAR(checkpoint_goodput(Seconds(3600), Seconds(0), Seconds(0), Seconds(3600)),
              1.0 / (std::exp(1.0) - 1.0), 1e-12);
  // Interruptions so rare they never come: the checkpoints' share alone, tau / (tau + delta).
  EXPECT_NEAR(checkpoint_goodput(Seconds(90), Seconds(10), Seconds(300), Seconds(1e13)), 0.9, 1e-9);
  // The restart costs e^(R/M) of everything.
  const double without = checkpoint_goodput(Seconds(600), Seconds(30), Seconds(0), Seconds(7200));
  const double with = checkpoint_goodput(Seconds(600), Seconds(30), Seconds(720), Seconds(7200));
  EXPECT_NEAR(without / with, std::exp(0.1), 1e-12);
  // Interruptions far faster than the work: nothing gets done.
  EXPECT_EQ(checkpoint_goodput(Seconds(1e6), Seconds(10), Seconds(10), Seconds(1)), 0.0);
}

TEST(Preemption, DalysIntervalIsNearTheBestOfHisModel) {
  for (double delta : {5.0, 60.0, 600.0}) {
    for (double m : {1800.0, 36000.0, 360000.0}) {
      const Seconds restart(120);
      double best = 0, best_tau = 0;
      for (double tau = 1; tau < 20 * m; tau *= 1.001) {
        const double g = checkpoint_goodput(Seconds(tau), Seconds(delta), restart, Seconds(m));
        if (g > best) {
          best = g;
          best_tau = tau;
        }
      }
      const Seconds daly = daly_checkpoint_interval(Seconds(delta), Seconds(m));
      const double at_daly = checkpoint_goodput(daly, Seconds(delta), restart, Seconds(m));
      EXPECT_GT(at_daly, best * (1 - 2e-3)) << "delta " << delta << " M " << m;
      if (delta < m / 10) {
        EXPECT_NEAR(daly.value() / best_tau, 1.0, 0.05) << "delta " << delta << " M " << m;
      }
    }
  }
}

TEST(Preemption, CheckpointSharesSplitEachLayerOverItsHolders) {
  const std::vector<Bytes> layers = {Bytes(10), Bytes(20), Bytes(30)};
  // Two replicas of one stage on TP 2: each layer over four devices.
  std::vector<Bytes> even =
      checkpoint_shares({{LayerRange{0, 3}, {0, 1}}, {LayerRange{0, 3}, {2, 3}}}, layers, 5);
  EXPECT_EQ(even, (std::vector<Bytes>{Bytes(15), Bytes(15), Bytes(15), Bytes(15), Bytes(0)}));
  // Replica A: layer 0 on device 0, layers 1-2 on device 1; replica B: all on device 2.
  std::vector<Bytes> uneven = checkpoint_shares(
      {{LayerRange{0, 1}, {0}}, {LayerRange{1, 3}, {1}}, {LayerRange{0, 3}, {2}}}, layers, 3);
  EXPECT_EQ(uneven, (std::vector<Bytes>{Bytes(5), Bytes(25), Bytes(30)}));
}

// Two nodes of two devices: node 0 on demand, node 1 spot.
ClusterSpec spot_and_on_demand() {
  ClusterSpec c = fixed_cluster({"H100-SXM", "A100-80GB"}, 2);
  c.nodes[1].spot = true;
  return c;
}

TEST(Preemption, EstimateOfAJobOnASpotNode) {
  ClusterSpec c = spot_and_on_demand();
  c.nodes[1].mean_hours_between_preemptions = 10.0;
  c.checkpoint.write_bandwidth = gigabytes_per_second(2);
  c.checkpoint.restart = Seconds(100);
  // Node 0 writes 3 GB, node 1 4 GB: the slower node takes 2 s.
  const std::vector<Bytes> shares = {Bytes(1e9), Bytes(2e9), Bytes(3e9), Bytes(1e9)};
  const Seconds iteration(1.5);
  const PreemptionEstimate e = estimate_preemption(c, shares, iteration);
  EXPECT_EQ(e.interruptible_nodes, 1);
  EXPECT_DOUBLE_EQ(e.mean_time_between_interruptions.value(), 36000.0);
  EXPECT_DOUBLE_EQ(e.checkpoint_bytes.value(), 7e9);
  EXPECT_DOUBLE_EQ(e.checkpoint_time.value(), 2.0);
  EXPECT_DOUBLE_EQ(e.restart_time.value(), 102.0);
  // Whole iterations, the better of the two around Daly's optimum.
  const Seconds daly = daly_checkpoint_interval(Seconds(2), Seconds(36000));
  EXPECT_LE(std::abs(e.interval.value() - daly.value()), iteration.value());
  EXPECT_DOUBLE_EQ(e.interval.value(), 1.5 * static_cast<double>(e.interval_iterations));
  const double g = checkpoint_goodput(e.interval, Seconds(2), Seconds(102), Seconds(36000));
  EXPECT_DOUBLE_EQ(e.goodput, g);
  for (int64_t k : {e.interval_iterations - 1, e.interval_iterations + 1}) {
    EXPECT_LE(checkpoint_goodput(iteration * static_cast<double>(k), Seconds(2), Seconds(102),
                                 Seconds(36000)),
              g);
  }
  // Bought on demand, nothing interrupts it.
  const PreemptionEstimate on_demand = estimate_preemption(c, shares, iteration, true);
  EXPECT_FALSE(on_demand.interruptible());
  EXPECT_EQ(on_demand.goodput, 1.0);
  // A plan that leaves the spot node out is not interrupted either.
  const PreemptionEstimate without =
      estimate_preemption(c, {Bytes(1e9), Bytes(1e9), Bytes(0), Bytes(0)}, iteration);
  EXPECT_FALSE(without.interruptible());
}

TEST(Preemption, DefaultsOfSpotNodesAndStatedFailures) {
  ClusterSpec c = spot_and_on_demand();
  EXPECT_EQ(node_hours_between_preemptions(c.nodes[0]), std::nullopt);
  EXPECT_EQ(node_hours_between_preemptions(c.nodes[1]), kDefaultSpotHoursBetweenPreemptions);
  // An on-demand node that states failures is interrupted too: two rates add.
  c.nodes[0].mean_hours_between_preemptions = 40.0;
  c.nodes[1].mean_hours_between_preemptions = 10.0;
  const std::vector<Bytes> shares(4, Bytes(1e9));
  const PreemptionEstimate e = estimate_preemption(c, shares, Seconds(1));
  EXPECT_EQ(e.interruptible_nodes, 2);
  EXPECT_DOUBLE_EQ(e.mean_time_between_interruptions.value(), 3600.0 / (1.0 / 40 + 1.0 / 10));
  EXPECT_EQ(e.restart_time, kDefaultRestartTime + e.checkpoint_time);
  EXPECT_DOUBLE_EQ(e.checkpoint_time.value(), 2e9 / kDefaultCheckpointWriteBandwidth.value());
  // On demand, only the failures the on-demand node states remain.
  EXPECT_EQ(estimate_preemption(c, shares, Seconds(1), true).interruptible_nodes, 1);
}

// The devices a plan uses.
std::set<int> used_devices(const Plan& plan) {
  std::set<int> out;
  for (const Replica& r : plan.replicas) {
    for (const DeviceGroupSchedule& g : r.groups) out.insert(g.devices.begin(), g.devices.end());
  }
  return out;
}

// 8 layers of 1 ms per pass with 1 GB of weights each; A100s half as fast, a quarter the price.
}  // namespace
struct CostCase {
  ModelSpec model = tiny_model(8);
  ClusterSpec cluster = spot_and_on_demand();
  TuneOptions options = fixed_options(16, slower_on(uniform_spec(8), "A100-80GB", 2.0));
  CostCase() {
    cluster.nodes[0].price_per_hour = 8.0;
    cluster.nodes[1].price_per_hour = 2.0;
    options.objective = TuneObjective::kCost;
  }
};

namespace {
TEST(Preemption, TheCostObjectiveWeighsInterruptions) {
  CostCase reliable;
  reliable.cluster.nodes[1].mean_hours_between_preemptions = 1e6;
  Result<TuneResult> cheap = tune(reliable.options, reliable.model, reliable.cluster);
  ASSERT_TRUE(cheap.is_ok()) << cheap.status().message();
  // Half the speed at a quarter of the price: the spot A100s alone are the cheapest tokens.
  EXPECT_EQ(used_devices(cheap->plan), (std::set<int>{2, 3}));
  EXPECT_TRUE(cheap->preemption.interruptible());
  EXPECT_GT(cheap->preemption.goodput, 0.99);

  // Preempted every 36 s with 5 minutes to come back: no progress on them at all.
  CostCase fragile;
  fragile.cluster.nodes[1].mean_hours_between_preemptions = 0.01;
  Result<TuneResult> safe = tune(fragile.options, fragile.model, fragile.cluster);
  ASSERT_TRUE(safe.is_ok()) << safe.status().message();
  EXPECT_EQ(used_devices(safe->plan), (std::set<int>{0, 1}));
  EXPECT_FALSE(safe->preemption.interruptible());
  EXPECT_DOUBLE_EQ(safe->dollars_per_million_tokens, safe->on_demand_dollars_per_million_tokens);
}

TEST(Preemption, BudgetAndDeadlineConstrainEveryPlan) {
  CostCase c;
  c.options.objective = TuneObjective::kThroughput;
  // $5 an hour affords the A100 node alone.
  c.options.budget_per_hour = 5.0;
  Result<TuneResult> within = tune(c.options, c.model, c.cluster);
  ASSERT_TRUE(within.is_ok()) << within.status().message();
  EXPECT_EQ(used_devices(within->plan), (std::set<int>{2, 3}));
  c.options.budget_per_hour = 1.0;
  Result<TuneResult> none = tune(c.options, c.model, c.cluster);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("budget: its devices cost $"), std::string::npos)
      << none.status().message();

  c.options.budget_per_hour = 0;
  Result<TuneResult> fastest = tune(c.options, c.model, c.cluster);
  ASSERT_TRUE(fastest.is_ok()) << fastest.status().message();
  const double tokens_per_second = fastest->plan.predicted->throughput_tokens_per_s;
  const double hours = 3600.0 * tokens_per_second * fastest->preemption.goodput;
  // Exactly what the fastest plan trains in an hour meets a one-hour deadline; twice it does not.
  c.options.deadline = Seconds(3600);
  c.options.train_tokens = hours * 0.999;
  EXPECT_TRUE(tune(c.options, c.model, c.cluster).is_ok());
  c.options.train_tokens = hours * 2;
  Result<TuneResult> late = tune(c.options, c.model, c.cluster);
  ASSERT_FALSE(late.is_ok());
  EXPECT_NE(late.status().message().find("past the deadline of 1.0 h"), std::string::npos)
      << late.status().message();

  c.options.deadline = Seconds(0);
  EXPECT_EQ(tune(c.options, c.model, c.cluster).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace motley::tune_internal::tune_testing
