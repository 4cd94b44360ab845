// The simulator on the schedule module's generators, against each schedule's exact iteration
// time for identical stages with free communication, as docs/schedules.md states them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "motley/cost/fixed_cost_model.h"
#include "motley/schedule/schedule.h"
#include "motley/sim/simulator.h"
#include "sim_test_util.h"

namespace motley {
namespace {

using sim_testing::expect_relative;
using sim_testing::kFreeInter;
using sim_testing::kFreeIntra;

// Per-device times of one micro-batch through the device's whole share of the model; a device
// holding c chunks spends F / c per chunk.
struct Times {
  double f, b, w;
};
const Times kTimes[] = {{1, 1, 1}, {1, 2, 1.5}, {1.1, 2.3, 0.7}, {2, 1, 0.5}};

struct Case {
  int p;
  int64_t m;
};

// Simulates `kind` on p devices, stage s = layer s, each chunk taking times / chunks.
double simulate_schedule(ScheduleKind kind, int p, int v, int64_t m, Times t,
                         std::vector<DeviceStats>* devices = nullptr) {
  const int chunks = stages_per_group(kind, v);
  const int stages = p * chunks;
  FixedCostSpec spec;
  for (int s = 0; s < stages; ++s) {
    FixedLayer layer;
    layer.times = {Seconds(t.f / chunks), Seconds(t.b / chunks), Seconds(t.w / chunks), Seconds(0)};
    spec.layers.push_back(layer);
  }
  const FixedCostModel cost(make_fixed_cluster({"H100-SXM"}, p, kFreeIntra, kFreeInter), spec);

  ScheduleRequest request;
  request.num_groups = p;
  request.num_stages = stages;
  request.stage_group = default_stage_group(kind, p, v);
  request.micro_batches = m;
  for (int s = 0; s < stages; ++s) {
    request.stage_times.push_back(
        cost.compute({s, s + 1}, DeviceGroup{{request.stage_group[s]}}, RecomputePolicy::kNone));
  }
  Result<GroupOrders> orders = generate_schedule(kind, request);
  EXPECT_TRUE(orders.is_ok()) << orders.status().message();
  if (!orders.is_ok()) return -1;

  Plan plan;
  plan.seq_len = 1;
  plan.global_batch = m;
  for (int s = 0; s < stages; ++s) plan.stages.push_back(Stage{s, s + 1, RecomputePolicy::kNone});
  Replica rep;
  rep.micro_batches = m;
  rep.stage_group = request.stage_group;
  for (int g = 0; g < p; ++g) rep.groups.push_back(DeviceGroupSchedule{{g}, orders.value()[g]});
  plan.replicas.push_back(rep);

  SimOptions options;
  options.gradient_all_reduce = false;
  options.optimizer_step = OptimizerStepModel::kNone;
  Result<SimResult> res = simulate(options, plan, cost);
  EXPECT_TRUE(res.is_ok()) << res.status().message();
  if (!res.is_ok()) return -1;
  if (devices != nullptr) *devices = res.value().devices;
  return res.value().iteration_time.value();
}

std::string trace(int p, int64_t m, Times t) {
  return "p=" + std::to_string(p) + " m=" + std::to_string(m) + " F=" + std::to_string(t.f) +
         " B=" + std::to_string(t.b) + " W=" + std::to_string(t.w);
}

TEST(ScheduleClosedForm, GPipeAndOneFOneBTakeMPlusPMinusOneRounds) {
  const Case cases[] = {{1, 3}, {2, 2}, {4, 4}, {4, 9}, {8, 8}, {8, 24}};
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::k1f1b}) {
    for (const Times& t : kTimes) {
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(schedule_kind_name(kind)) + " " + trace(c.p, c.m, t));
        expect_relative(simulate_schedule(kind, c.p, 1, c.m, t),
                        (c.m + c.p - 1) * (t.f + t.b + t.w));
      }
    }
  }
}

// Megatron-LM interleaved 1F1B, v chunks per device, m a multiple of p:
// m(F + B + W) + (p - 1)(F + B + W) / v.
TEST(ScheduleClosedForm, InterleavedShrinksTheBubbleByV) {
  const Case cases[] = {{2, 2}, {2, 6}, {4, 4}, {4, 8}, {4, 16}, {8, 16}};
  for (int v : {2, 3, 4}) {
    for (const Times& t : kTimes) {
      for (const Case& c : cases) {
        SCOPED_TRACE("v=" + std::to_string(v) + " " + trace(c.p, c.m, t));
        const double round = t.f + t.b + t.w;
        expect_relative(simulate_schedule(ScheduleKind::kInterleaved, c.p, v, c.m, t),
                        c.m * round + (c.p - 1) * round / v);
      }
    }
  }
}

// ZB-H1 for m >= p: m(F + B + W) + (p - 1) max(F + B - W, F, B) (docs/schedules.md). The
// paper's (p - 1)(F + B - W) is the case W <= min(F, B). One case outside it by hand:
// p = 2, m = 2, F = 1, B = 2, W = 1.5: rank 1's second B ends at 7 at the earliest (F0 at
// [1,2], then F0..B1 take 6 more), and rank 0 still needs B1 + W1 = 3.5 after it, so the
// paper's 10.5 would need rank 0's W0 done by 7; but its B0 cannot start before 4 (after
// rank 1's B0) and ends at 6, so W0 ends at 7.5 at the earliest: 11 = 9 + max(1.5, 1, 2).
TEST(ScheduleClosedForm, ZbH1) {
  expect_relative(simulate_schedule(ScheduleKind::kZbH1, 2, 1, 2, {1, 2, 1.5}), 11);
  const Case cases[] = {{2, 2}, {2, 5}, {3, 7}, {4, 4}, {4, 8}, {4, 13}, {8, 8}, {8, 32}};
  const Times times[] = {{1, 1, 1},   {1.1, 2.3, 0.7}, {2, 1, 0.5}, {1, 1.5, 0.25},
                         {1, 2, 1.5}, {1, 0.5, 0.75},  {2, 1, 3},   {1, 1, 2}};
  for (const Times& t : times) {
    for (const Case& c : cases) {
      SCOPED_TRACE(trace(c.p, c.m, t));
      expect_relative(simulate_schedule(ScheduleKind::kZbH1, c.p, 1, c.m, t),
                      c.m * (t.f + t.b + t.w) + (c.p - 1) * std::max({t.f + t.b - t.w, t.f, t.b}));
    }
  }
}

// ZB-H2 for m >= 2p - 1: m(F + B + W) + (p - 1) max(F, B - F, F + B - 2W).
TEST(ScheduleClosedForm, ZbH2) {
  const Case cases[] = {{2, 3}, {2, 8}, {3, 5}, {4, 7}, {4, 12}, {8, 15}, {8, 32}};
  const Times times[] = {{1, 1, 1},   {1.1, 2.3, 0.7}, {2, 1, 0.5}, {1, 3, 0.25},
                         {1, 2, 1.5}, {1, 0.5, 0.75},  {2, 1, 3}};
  for (const Times& t : times) {
    for (const Case& c : cases) {
      SCOPED_TRACE(trace(c.p, c.m, t));
      expect_relative(
          simulate_schedule(ScheduleKind::kZbH2, c.p, 1, c.m, t),
          c.m * (t.f + t.b + t.w) + (c.p - 1) * std::max({t.f, t.b - t.f, t.f + t.b - 2 * t.w}));
    }
  }
}

// The V schedules' formulas are in chunk (stage) times: each device holds two chunks, so the
// device times given to simulate_schedule are twice these.
double simulate_v(ScheduleKind kind, const Case& c, Times chunk) {
  return simulate_schedule(kind, c.p, 2, c.m, {2 * chunk.f, 2 * chunk.b, 2 * chunk.w});
}

// ZB-V for m >= p and W >= max(F, B): 2m(F + B + W) + (p - 1) max(F, B).
TEST(ScheduleClosedForm, ZbV) {
  const Case cases[] = {{2, 2}, {2, 7}, {3, 3}, {4, 4}, {4, 9}, {6, 13}, {8, 16}};
  const Times times[] = {{1, 1, 1}, {1, 0.5, 1.5}, {0.7, 1.1, 1.3}, {2, 1, 2}, {0.5, 2, 3}};
  for (const Times& t : times) {
    ASSERT_GE(t.w, std::max(t.f, t.b));
    for (const Case& c : cases) {
      SCOPED_TRACE(trace(c.p, c.m, t));
      expect_relative(simulate_v(ScheduleKind::kZbV, c, t),
                      2 * c.m * (t.f + t.b + t.w) + (c.p - 1) * std::max(t.f, t.b));
    }
  }
}

// DualPipeV for m >= 2p: 2m(F + B + W) + (p - 1) max(B - W, 0)
//   + max((p - 1)B - F, (p - 1)F, (p - 1)(2F - B - W)).
TEST(ScheduleClosedForm, DualPipeV) {
  const Case cases[] = {{2, 4}, {2, 9}, {3, 6}, {4, 8}, {4, 11}, {6, 12}, {8, 16}};
  const Times times[] = {{1, 1, 1},   {1.1, 2.3, 0.7}, {2, 1, 0.5},  {1, 3, 0.25},
                         {1, 2, 1.5}, {1, 0.5, 0.75},  {3, 0.5, 0.5}};
  for (const Times& t : times) {
    for (const Case& c : cases) {
      SCOPED_TRACE(trace(c.p, c.m, t));
      const double q = c.p - 1;
      expect_relative(simulate_v(ScheduleKind::kDualPipeV, c, t),
                      2 * c.m * (t.f + t.b + t.w) + q * std::max(t.b - t.w, 0.0) +
                          std::max({q * t.b - t.f, q * t.f, q * (2 * t.f - t.b - t.w)}));
    }
  }
}

}  // namespace
}  // namespace motley
