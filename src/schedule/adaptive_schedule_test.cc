#include "motley/schedule/adaptive_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "motley/plan/dependencies.h"
#include "motley/plan/validate.h"
#include "motley/sim/simulator.h"
#include "test_util.h"

// In the test helpers' namespace, so they need no using-declarations.
namespace motley::schedule_testing {
namespace {

AdaptiveRequest uniform_request(int p, int64_t m, double budget_bytes) {
  AdaptiveRequest r;
  r.num_groups = p;
  r.micro_batches = m;
  for (int s = 0; s < p; ++s) {
    r.stage_group.push_back(s);
    r.stage_times.push_back(
        ComputeTimes{milliseconds(1), milliseconds(1), milliseconds(1), Seconds(0)});
    r.activation_bytes.push_back(Bytes(1e9));
    r.memory_budget.push_back(Bytes(budget_bytes));
  }
  r.transfer_time.assign(p - 1, Seconds(0));
  return r;
}

// One replica, stage s = layer s, group g = device g, with the given orders.
Plan plan_of(const AdaptiveRequest& r, const GroupOrders& orders) {
  Plan plan;
  plan.seq_len = 128;
  plan.global_batch = r.micro_batches;
  for (size_t s = 0; s < r.stage_group.size(); ++s) {
    plan.stages.push_back(Stage{static_cast<int>(s), static_cast<int>(s) + 1});
  }
  Replica rep;
  rep.micro_batches = r.micro_batches;
  rep.stage_group = r.stage_group;
  for (int g = 0; g < r.num_groups; ++g) rep.groups.push_back(DeviceGroupSchedule{{g}, orders[g]});
  plan.replicas.push_back(rep);
  return plan;
}

FixedCostSpec spec_of(const AdaptiveRequest& r) {
  FixedCostSpec spec;
  for (size_t s = 0; s < r.stage_group.size(); ++s) {
    const ComputeTimes& t = r.stage_times[s];
    FixedLayer l = layer_ms(0, 0, 0);
    l.times = {t.forward, t.backward_input, t.backward_weight, t.recompute};
    l.activations = {r.activation_bytes[s], r.activation_bytes[s], r.activation_bytes[s]};
    if (!r.recomputed_bytes.empty()) {  // what a single recompute keeps and takes
      l.times.recompute = r.recompute_time[s];
      l.activations[static_cast<int>(RecomputePolicy::kFull)] = r.recomputed_bytes[s];
    }
    spec.layers.push_back(l);
  }
  return spec;
}

SimOptions compute_only() {
  SimOptions o;
  o.gradient_all_reduce = false;
  o.optimizer_step = OptimizerStepModel::kNone;
  return o;
}

TEST(AdaptiveScheduleTest, TwoStagesDeferWeightsIntoTheGap) {
  // F = B = W = 1 ms, free transfers, no memory limit: group 0 runs both forwards, waits for
  // the first gradient, and fills the gap before the second with W0; group 1 alternates F and
  // B and runs its W's at the end. 7 ms = m(F+B+W) + (p-1)max(F+B-W, F, B), ZB-H1's optimum.
  const AdaptiveRequest r = uniform_request(2, 2, 1e12);
  Result<GroupOrders> orders = adaptive_schedule(r);
  ASSERT_TRUE(orders.is_ok()) << orders.status().message();
  EXPECT_EQ(order_text(orders.value()[0]), "0F0 0F1 0I0 0W0 0I1 0W1");
  EXPECT_EQ(order_text(orders.value()[1]), "1F0 1I0 1F1 1I1 1W0 1W1");
  FixedCostModel cost(fixed_cluster({"H100-SXM"}, 2), spec_of(r));
  Result<SimResult> sim = simulate(compute_only(), plan_of(r, orders.value()), cost);
  ASSERT_TRUE(sim.is_ok()) << sim.status().message();
  EXPECT_NEAR(sim->iteration_time.value(), 7e-3, 1e-15);
}

TEST(AdaptiveScheduleTest, MemoryBudgetLimitsMicroBatchesInFlight) {
  // Room for one micro-batch's activations per group: every group finishes a micro-batch's W
  // before admitting the next.
  const AdaptiveRequest r = uniform_request(2, 3, 1e9);
  Result<GroupOrders> orders = adaptive_schedule(r);
  ASSERT_TRUE(orders.is_ok()) << orders.status().message();
  EXPECT_EQ(order_text(orders.value()[0]), "0F0 0I0 0W0 0F1 0I1 0W1 0F2 0I2 0W2");
  EXPECT_EQ(peak_in_flight_per_group(orders.value()), (std::vector<int64_t>{1, 1}));
}

TEST(AdaptiveScheduleTest, ForwardFirstFillsMemoryBeforeBackwards) {
  // Forward-first with room for two micro-batches: group 0 runs two forwards, then must free
  // memory (I0 W0) before the third.
  AdaptiveRequest r = uniform_request(2, 3, 2e9);
  r.priority = AdaptivePriority::kForwardFirst;
  Result<GroupOrders> orders = adaptive_schedule(r);
  ASSERT_TRUE(orders.is_ok()) << orders.status().message();
  EXPECT_EQ(orders.value()[0][0], (Action{ActionKind::kForward, 0, 0}));
  EXPECT_EQ(orders.value()[0][1], (Action{ActionKind::kForward, 0, 1}));
  EXPECT_EQ(peak_in_flight_per_group(orders.value()), (std::vector<int64_t>{2, 2}));
}

// Four chunks interleaved on two groups, a budget of one and a quarter micro-batches' share of
// a group: a micro-batch holds one small chunk at a time, so several are in flight at once
// (admission by the micro-batch's whole share would allow one), always within the budget.
TEST(AdaptiveScheduleTest, DeepInterleavingKeepsSeveralMicroBatchesInFlight) {
  AdaptiveRequest r = uniform_request(2, 8, 5e9);
  r.stage_group = {0, 1, 0, 1, 0, 1, 0, 1};
  r.stage_times.assign(8,
                       ComputeTimes{milliseconds(1), milliseconds(1), milliseconds(1), Seconds(0)});
  r.activation_bytes.assign(8, Bytes(1e9));
  r.transfer_time.assign(7, Seconds(0));
  for (AdaptivePriority priority :
       {AdaptivePriority::kBackwardFirst, AdaptivePriority::kAlternate}) {
    r.priority = priority;
    Result<GroupOrders> orders = adaptive_schedule(r);
    ASSERT_TRUE(orders.is_ok()) << orders.status().message();
    for (int g = 0; g < 2; ++g) {
      std::vector<int> chunks_live(8, 0);
      double live = 0, peak = 0;
      int most_in_flight = 0;
      for (const Action& a : orders.value()[g]) {
        if (a.kind == ActionKind::kForward) {
          live += 1e9;
          ++chunks_live[a.micro_batch];
        }
        if (a.kind == ActionKind::kBackwardWeight) {
          live -= 1e9;
          --chunks_live[a.micro_batch];
        }
        peak = std::max(peak, live);
        most_in_flight = std::max(
            most_in_flight, static_cast<int>(std::count_if(chunks_live.begin(), chunks_live.end(),
                                                           [](int c) { return c > 0; })));
      }
      EXPECT_LE(peak, 5e9) << "group " << g;
      EXPECT_GE(most_in_flight, 2) << "group " << g;
    }
  }
}

// Two chunks on two groups, 1 GB per stage and micro-batch, a budget of 4 GB (two micro-batches'
// whole share), forward-first, group 1's forward 3 ms. At 2 ms group 0 holds micro-batches 0 and
// 1 on stage 0 and micro-batch 0's stage 2 is not ready before 4 ms. F(0, 2) leaves 1 GB free,
// which is what micro-batch 0 still needs here (its stage 2), and micro-batch 1's stage 2 can
// use what micro-batch 0 frees: a safe state, so it runs. Reserving every older micro-batch's
// remaining need at once (3 GB + 2 GB > 4 GB) would leave group 0 idle until 4 ms. F(0, 3) at
// 3 ms would leave micro-batch 0 nothing, so it waits.
TEST(AdaptiveScheduleTest, AForwardRunsWhereTheOlderMicroBatchesCanStillFinish) {
  AdaptiveRequest r = uniform_request(2, 4, 4e9);
  r.stage_group = {0, 1, 0, 1};
  r.stage_times.assign(4,
                       ComputeTimes{milliseconds(1), milliseconds(1), milliseconds(1), Seconds(0)});
  r.stage_times[1].forward = milliseconds(3);
  r.stage_times[3].forward = milliseconds(3);
  r.activation_bytes.assign(4, Bytes(1e9));
  r.transfer_time.assign(3, Seconds(0));
  r.priority = AdaptivePriority::kForwardFirst;
  Result<GroupOrders> orders = adaptive_schedule(r);
  ASSERT_TRUE(orders.is_ok()) << orders.status().message();
  const std::string text = order_text(orders.value()[0]);
  EXPECT_EQ(text.substr(0, 15), "0F0 0F1 0F2 2F0") << text;
  double live = 0, peak = 0;
  for (const Action& a : orders.value()[0]) {
    if (a.kind == ActionKind::kForward) live += 1e9;
    if (a.kind == ActionKind::kBackwardWeight) live -= 1e9;
    peak = std::max(peak, live);
  }
  EXPECT_EQ(peak, 4e9);
}

// Under the alternating rule a group runs a forward after a backward and a backward after a
// forward wherever both are ready: 1F1B's steady state, on two stages.
TEST(AdaptiveScheduleTest, AlternatingRuleTakesForwardsAndBackwardsInTurn) {
  AdaptiveRequest r = uniform_request(2, 4, 1e12);
  r.priority = AdaptivePriority::kAlternate;
  r.weight_fill = WeightFill::kAlways;
  Result<GroupOrders> orders = adaptive_schedule(r);
  ASSERT_TRUE(orders.is_ok()) << orders.status().message();
  EXPECT_EQ(order_text(orders.value()[1]), "1F0 1I0 1F1 1I1 1F2 1I2 1F3 1I3 1W0 1W1 1W2 1W3");
}

TEST(AdaptiveScheduleTest, FusedBackwardWhenNotSplit) {
  AdaptiveRequest r = uniform_request(2, 2, 1e12);
  r.split_backward = false;
  Result<GroupOrders> orders = adaptive_schedule(r);
  ASSERT_TRUE(orders.is_ok()) << orders.status().message();
  // 1F1B's order: (m + p - 1)(F + B + W) = 9 ms.
  EXPECT_EQ(order_text(orders.value()[0]), "0F0 0F1 0B0 0B1");
  EXPECT_EQ(order_text(orders.value()[1]), "1F0 1B0 1F1 1B1");
}

TEST(AdaptiveScheduleTest, ReportsAGroupThatCannotHoldOneMicroBatch) {
  AdaptiveRequest r = uniform_request(2, 2, 1e12);
  r.memory_budget[1] = Bytes(0.5e9);
  Result<GroupOrders> orders = adaptive_schedule(r);
  ASSERT_FALSE(orders.is_ok());
  EXPECT_EQ(orders.status().code(), StatusCode::kInfeasible);
  // Sizes in GiB with six decimals, as printf's %f writes them.
  EXPECT_EQ(orders.status().message(),
            "adaptive schedule: group 1 needs 0.931323 GiB of activations for one micro-batch but "
            "its budget is 0.465661 GiB");
}

TEST(AdaptiveScheduleTest, RejectsInconsistentRequests) {
  AdaptiveRequest r = uniform_request(2, 2, 1e12);
  r.stage_group = {0, 0};
  Result<GroupOrders> orders = adaptive_schedule(r);
  ASSERT_FALSE(orders.is_ok());
  EXPECT_EQ(orders.status().message(), "adaptive schedule: group 1 runs no stage");
  r = uniform_request(2, 2, 1e12);
  r.transfer_time.clear();
  orders = adaptive_schedule(r);
  ASSERT_FALSE(orders.is_ok());
  EXPECT_EQ(orders.status().code(), StatusCode::kInvalidArgument);
}

// A random request of up to four groups on one of six stage shapes, with budgets of one to
// four micro-batches' activations per group.
AdaptiveRequest random_request(std::mt19937& rng, int trial) {
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  const int p = 1 + static_cast<int>(rng() % 4);
  const int shape = static_cast<int>(rng() % 6);
  std::vector<int> stage_group;
  for (int s = 0; s < p; ++s) stage_group.push_back(s);
  if (shape == 1) {  // V
    for (int s = p - 1; s >= 0; --s) stage_group.push_back(s);
  } else if (shape == 2) {  // interleaved, two chunks
    for (int s = 0; s < p; ++s) stage_group.push_back(s);
  } else if (shape == 3) {  // two consecutive stages per group
    stage_group.clear();
    for (int s = 0; s < p; ++s) stage_group.insert(stage_group.end(), {s, s});
  } else if (shape == 4) {  // interleaved, three or four chunks
    const int chunks = 3 + static_cast<int>(rng() % 2);
    for (int k = 1; k < chunks; ++k) {
      for (int s = 0; s < p; ++s) stage_group.push_back(s);
    }
  } else if (shape == 5) {  // zigzag, three or four chunks
    const int chunks = 3 + static_cast<int>(rng() % 2);
    for (int k = 1; k < chunks; ++k) {
      for (int s = 0; s < p; ++s) stage_group.push_back(k % 2 ? p - 1 - s : s);
    }
  }
  AdaptiveRequest r;
  r.num_groups = p;
  r.stage_group = stage_group;
  r.micro_batches = 1 + static_cast<int>(rng() % 9);
  const size_t stages = stage_group.size();
  for (size_t s = 0; s < stages; ++s) {
    r.stage_times.push_back(ComputeTimes{milliseconds(uniform(0.2, 2)),
                                         milliseconds(uniform(0.2, 2)), milliseconds(uniform(0, 2)),
                                         Seconds(0)});
    r.activation_bytes.push_back(Bytes(uniform(0.5, 2) * 1e9));
    if (s + 1 < stages) r.transfer_time.push_back(milliseconds(uniform(0, 0.5)));
  }
  std::vector<double> reserve(p, 0);
  for (size_t s = 0; s < stages; ++s) reserve[stage_group[s]] += r.activation_bytes[s].value();
  for (int g = 0; g < p; ++g) r.memory_budget.push_back(Bytes(reserve[g] * uniform(1, 4)));
  r.priority = trial % 3 == 0   ? AdaptivePriority::kForwardFirst
               : trial % 3 == 1 ? AdaptivePriority::kBackwardFirst
                                : AdaptivePriority::kAlternate;
  r.weight_fill = trial % 5 < 3 ? WeightFill::kIfItFits : WeightFill::kAlways;
  return r;
}

// The orders of `r` are complete, deadlock-free (validate_plan), within each group's budget
// (single recomputes keeping recomputed_bytes until their R) and simulate.
void expect_valid_within_memory(const AdaptiveRequest& r, int trial) {
  Result<GroupOrders> orders = adaptive_schedule(r);
  ASSERT_TRUE(orders.is_ok()) << "trial " << trial << ": " << orders.status().message();
  const Plan plan = plan_of(r, orders.value());
  const int p = r.num_groups;
  const size_t stages = r.stage_group.size();
  auto recomputed = [&](size_t s) {
    return r.recomputed_bytes.empty() ? r.activation_bytes[s] : r.recomputed_bytes[s];
  };
  const ClusterSpec cluster = fixed_cluster({"H100-SXM"}, p);
  ValidateOptions options;
  options.check_spec_hashes = false;
  options.footprint = [&](int, int, int s) {
    return StageFootprint{Bytes(0), r.activation_bytes[s], recomputed(s)};
  };
  Status valid = validate_plan(plan, tiny_model(static_cast<int>(stages)), cluster, options);
  ASSERT_TRUE(valid.is_ok()) << "trial " << trial << ": " << valid.message();
  // Live activations never exceed the group's budget.
  for (int g = 0; g < p; ++g) {
    const RecomputedMicroBatches single(plan.stages, orders.value()[g]);
    double live = 0, peak = 0;
    for (const Action& a : orders.value()[g]) {
      live += single.change(a, r.activation_bytes[a.stage].value(), recomputed(a.stage).value());
      peak = std::max(peak, live);
    }
    EXPECT_LE(peak, r.memory_budget[g].value() * (1 + 1e-9)) << "trial " << trial;
  }
  FixedCostModel cost(cluster, spec_of(r));
  Result<SimResult> sim = simulate(compute_only(), plan, cost);
  ASSERT_TRUE(sim.is_ok()) << "trial " << trial << ": " << sim.status().message();
  for (const DeviceStats& d : sim->devices) {
    EXPECT_LE(d.peak_memory.value(), r.memory_budget[d.device].value() * (1 + 1e-9))
        << "trial " << trial;
  }
}

// Random shapes (one stage per group, V, interleaved and zigzags of up to four chunks,
// consecutive stages on one group), times, transfers, budgets and priorities: every order is
// complete, deadlock-free (validate_plan), within its memory budget, and simulates.
TEST(AdaptiveScheduleTest, RandomRequestsGiveValidOrdersWithinMemory) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 240; ++trial) {
    expect_valid_within_memory(random_request(rng, trial), trial);
  }
}

// The same with single recomputes allowed (forwards keeping 5-50 % of their activations) and
// budgets down to the least one micro-batch needs that way, below one micro-batch's whole
// activations on many groups: the orders still finish, within memory.
TEST(AdaptiveScheduleTest, RandomRequestsWithSingleRecomputesStayWithinMemory) {
  std::mt19937 rng(11);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  int recomputing = 0;
  for (int trial = 0; trial < 240; ++trial) {
    AdaptiveRequest r = random_request(rng, trial);
    const size_t stages = r.stage_group.size();
    for (size_t s = 0; s < stages; ++s) {
      r.recomputed_bytes.push_back(r.activation_bytes[s] * uniform(0.05, 0.5));
      r.recompute_time.push_back(r.stage_times[s].forward);
    }
    std::vector<double> full, first;
    for (size_t s = 0; s < stages; ++s) {
      full.push_back(r.activation_bytes[s].value());
      first.push_back(r.recomputed_bytes[s].value());
    }
    for (int g = 0; g < r.num_groups; ++g) {
      const double least = least_activation_need(r.stage_group, full, first, g);
      r.memory_budget[g] = Bytes(least * uniform(1, 3));
    }
    expect_valid_within_memory(r, trial);
    Result<GroupOrders> orders = adaptive_schedule(r);
    ASSERT_TRUE(orders.is_ok());
    for (const std::vector<Action>& order : orders.value()) {
      recomputing += std::count_if(order.begin(), order.end(), [](const Action& a) {
                       return a.kind == ActionKind::kRecompute;
                     }) > 0;
    }
  }
  EXPECT_GT(recomputing, 100);  // groups that recompute some micro-batch
}

// One micro-batch alone: its forwards keep what they may, then each backward's R takes the
// rest from the deepest stage, whose backward frees it before the next R.
TEST(AdaptiveScheduleTest, LeastNeedIsTheWalkOfOneMicroBatch) {
  // Stages 0 and 2 on group 0 (10 and 30 bytes, 1 and 3 kept), stage 1 on group 1.
  const std::vector<int> stage_group = {0, 1, 0};
  const std::vector<double> full = {10, 20, 30}, first = {1, 2, 3};
  // 1 + 3, then R of stage 2: 4 + 27 = 31, freed to 1, then R of stage 0: 1 + 9 = 10.
  EXPECT_EQ(least_activation_need(stage_group, full, first, 0), 31);
  EXPECT_EQ(least_activation_need(stage_group, full, full, 0), 40);
  EXPECT_EQ(least_activation_need(stage_group, full, first, 1), 20);
}

// Group 0 has room for one micro-batch's activations, and group 1 takes 3 ms a pass where
// group 0 takes 1: without single recomputes group 0 runs each micro-batch through before the
// next; with them, its forwards keep a tenth in the waits long enough for a forward and its
// recompute, and the iteration is shorter.
TEST(AdaptiveScheduleTest, SingleRecomputesFillTheWaitThatMemoryImposes) {
  AdaptiveRequest r = uniform_request(2, 4, 1e12);
  r.memory_budget[0] = Bytes(1.3e9);
  r.stage_times[1] = ComputeTimes{milliseconds(3), milliseconds(3), milliseconds(3), Seconds(0)};
  const ClusterSpec cluster = fixed_cluster({"H100-SXM"}, 2);
  auto iteration = [&](const AdaptiveRequest& request) {
    Result<GroupOrders> orders = adaptive_schedule(request);
    EXPECT_TRUE(orders.is_ok()) << orders.status().message();
    FixedCostModel cost(cluster, spec_of(request));
    Result<SimResult> sim = simulate(compute_only(), plan_of(request, orders.value()), cost);
    EXPECT_TRUE(sim.is_ok()) << sim.status().message();
    return std::make_pair(orders.value(), sim->iteration_time);
  };
  const auto [plain, plain_time] = iteration(r);
  EXPECT_EQ(order_text(plain[0]), "0F0 0I0 0W0 0F1 0I1 0W1 0F2 0I2 0W2 0F3 0I3 0W3");
  r.recomputed_bytes.assign(2, Bytes(0.1e9));
  r.recompute_time.assign(2, milliseconds(1));
  expect_valid_within_memory(r, 0);
  const auto [single, single_time] = iteration(r);
  EXPECT_NE(order_text(single[0]).find("0R"), std::string::npos) << order_text(single[0]);
  EXPECT_LT(single_time, plain_time) << order_text(single[0]);
}

}  // namespace
}  // namespace motley::schedule_testing
