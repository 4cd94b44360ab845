#include "motley/schedule/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "motley/plan/plan_json.h"

namespace motley {
namespace {

// ---- Test-side tools, independent of the generator's own estimate -----------------------

struct Times {
  double f = 1, b = 1, w = 1;
};

// The iteration time of `orders` when every action starts as soon as its group is free and its
// inputs are done (communication free): F(s,j) after F(s-1,j); B(s,j) (split or fused) after
// F(s,j) and the backward of (s+1,j); W(s,j) after B(s,j). nullopt when the orders deadlock.
std::optional<double> iteration_time(const GroupOrders& orders, int stages,
                                     const std::vector<Times>& times) {
  std::map<std::tuple<ActionKind, int, int>, double> end;
  std::map<std::pair<int, int>, bool> split;
  for (const auto& order : orders) {
    for (const Action& a : order) {
      if (a.kind == ActionKind::kBackwardInput) split[{a.stage, a.micro_batch}] = true;
    }
  }
  const auto done = [&](ActionKind k, int s, int j) -> std::optional<double> {
    auto it = end.find({k, s, j});
    if (it == end.end()) return std::nullopt;
    return it->second;
  };
  const auto backward_of = [&](int s, int j) {
    return done(split[{s, j}] ? ActionKind::kBackwardInput : ActionKind::kBackward, s, j);
  };
  std::vector<size_t> next(orders.size(), 0);
  std::vector<double> free_at(orders.size(), 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t g = 0; g < orders.size(); ++g) {
      while (next[g] < orders[g].size()) {
        const Action& a = orders[g][next[g]];
        std::vector<std::optional<double>> inputs;
        double duration = 0;
        const Times& t = times[a.stage];
        switch (a.kind) {
          case ActionKind::kForward:
            if (a.stage > 0)
              inputs.push_back(done(ActionKind::kForward, a.stage - 1, a.micro_batch));
            duration = t.f;
            break;
          case ActionKind::kBackwardInput:
          case ActionKind::kBackward:
            inputs.push_back(done(ActionKind::kForward, a.stage, a.micro_batch));
            if (a.stage + 1 < stages) inputs.push_back(backward_of(a.stage + 1, a.micro_batch));
            duration = a.kind == ActionKind::kBackward ? t.b + t.w : t.b;
            break;
          case ActionKind::kBackwardWeight:
            inputs.push_back(done(ActionKind::kBackwardInput, a.stage, a.micro_batch));
            duration = t.w;
            break;
          case ActionKind::kRecompute:
            ADD_FAILURE() << "no generator emits recompute actions";
            return std::nullopt;
        }
        double start = free_at[g];
        bool ready = true;
        for (const auto& in : inputs) {
          if (!in) {
            ready = false;
            break;
          }
          start = std::max(start, *in);
        }
        if (!ready) break;
        free_at[g] = start + duration;
        end[{a.kind, a.stage, a.micro_batch}] = free_at[g];
        ++next[g];
        progress = true;
      }
    }
  }
  for (size_t g = 0; g < orders.size(); ++g) {
    if (next[g] < orders[g].size()) return std::nullopt;
  }
  return *std::max_element(free_at.begin(), free_at.end());
}

// Per group, the idle time between its first action's start and its last action's end (the
// ZB paper's per-stage bubble), under iteration_time's timing rule. Split backwards only.
std::vector<double> span_idle(const GroupOrders& orders, const std::vector<Times>& times) {
  std::map<std::tuple<ActionKind, int, int>, double> end;
  std::vector<size_t> next(orders.size(), 0);
  std::vector<double> free_at(orders.size(), 0), first(orders.size(), -1), busy(orders.size(), 0);
  const int stages = static_cast<int>(times.size());
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t g = 0; g < orders.size(); ++g) {
      while (next[g] < orders[g].size()) {
        const Action& a = orders[g][next[g]];
        std::vector<std::tuple<ActionKind, int, int>> inputs;
        double duration = times[a.stage].f;
        if (a.kind == ActionKind::kForward) {
          if (a.stage > 0) inputs.push_back({ActionKind::kForward, a.stage - 1, a.micro_batch});
        } else if (a.kind == ActionKind::kBackwardWeight) {
          inputs.push_back({ActionKind::kBackwardInput, a.stage, a.micro_batch});
          duration = times[a.stage].w;
        } else {
          inputs.push_back({ActionKind::kForward, a.stage, a.micro_batch});
          if (a.stage + 1 < stages) {
            inputs.push_back({ActionKind::kBackwardInput, a.stage + 1, a.micro_batch});
          }
          duration = times[a.stage].b;
        }
        double start = free_at[g];
        bool ready = true;
        for (const auto& in : inputs) {
          auto it = end.find(in);
          if (it == end.end()) {
            ready = false;
            break;
          }
          start = std::max(start, it->second);
        }
        if (!ready) break;
        if (first[g] < 0) first[g] = start;
        free_at[g] = start + duration;
        busy[g] += duration;
        end[{a.kind, a.stage, a.micro_batch}] = free_at[g];
        ++next[g];
        progress = true;
      }
    }
  }
  std::vector<double> idle;
  for (size_t g = 0; g < orders.size(); ++g) idle.push_back(free_at[g] - first[g] - busy[g]);
  return idle;
}

std::vector<Times> uniform(int stages, double f, double b, double w) {
  return std::vector<Times>(stages, Times{f, b, w});
}

std::vector<ComputeTimes> compute_times(const std::vector<Times>& times) {
  std::vector<ComputeTimes> out;
  for (const Times& t : times) {
    out.push_back(ComputeTimes{Seconds(t.f), Seconds(t.b), Seconds(t.w), Seconds(0)});
  }
  return out;
}

// Every (stage, micro-batch) has one F and one fused backward, or one B and one W; each group
// runs only its stages, and F, then B, then W on it.
void expect_well_formed(const GroupOrders& orders, const std::vector<int>& stage_group, int m,
                        bool split) {
  const int stages = static_cast<int>(stage_group.size());
  std::map<std::tuple<ActionKind, int, int>, int> position;
  for (size_t g = 0; g < orders.size(); ++g) {
    for (size_t i = 0; i < orders[g].size(); ++i) {
      const Action& a = orders[g][i];
      ASSERT_GE(a.stage, 0);
      ASSERT_LT(a.stage, stages);
      ASSERT_GE(a.micro_batch, 0);
      ASSERT_LT(a.micro_batch, m);
      EXPECT_EQ(stage_group[a.stage], static_cast<int>(g)) << action_to_string(a);
      EXPECT_TRUE(position.emplace(std::make_tuple(a.kind, a.stage, a.micro_batch), i).second)
          << "duplicate " << action_to_string(a) << " on group " << g;
    }
  }
  for (int s = 0; s < stages; ++s) {
    for (int j = 0; j < m; ++j) {
      const auto at = [&](ActionKind k) {
        auto it = position.find({k, s, j});
        return it == position.end() ? -1 : it->second;
      };
      const int f = at(ActionKind::kForward);
      ASSERT_GE(f, 0) << "missing F of stage " << s << " micro-batch " << j;
      if (split) {
        const int b = at(ActionKind::kBackwardInput);
        const int w = at(ActionKind::kBackwardWeight);
        ASSERT_GE(b, 0) << "missing B of stage " << s << " micro-batch " << j;
        ASSERT_GE(w, 0) << "missing W of stage " << s << " micro-batch " << j;
        EXPECT_LT(f, b);
        EXPECT_LT(b, w);
      } else {
        const int b = at(ActionKind::kBackward);
        ASSERT_GE(b, 0) << "missing fused backward of stage " << s << " micro-batch " << j;
        EXPECT_LT(f, b);
      }
    }
  }
  const size_t expected = static_cast<size_t>(stages) * m * (split ? 3 : 2);
  EXPECT_EQ(position.size(), expected);
}

// DualPipeV mixes fused and split backwards; it must have one of the two forms per cell.
void expect_well_formed_mixed(const GroupOrders& orders, const std::vector<int>& stage_group,
                              int m) {
  const int stages = static_cast<int>(stage_group.size());
  std::map<std::tuple<ActionKind, int, int>, int> count;
  for (size_t g = 0; g < orders.size(); ++g) {
    for (const Action& a : orders[g]) {
      EXPECT_EQ(stage_group[a.stage], static_cast<int>(g));
      ++count[{a.kind, a.stage, a.micro_batch}];
    }
  }
  for (int s = 0; s < stages; ++s) {
    for (int j = 0; j < m; ++j) {
      EXPECT_EQ((count[{ActionKind::kForward, s, j}]), 1);
      const int fused = count[{ActionKind::kBackward, s, j}];
      const int input = count[{ActionKind::kBackwardInput, s, j}];
      const int weight = count[{ActionKind::kBackwardWeight, s, j}];
      EXPECT_TRUE((fused == 1 && input == 0 && weight == 0) ||
                  (fused == 0 && input == 1 && weight == 1))
          << "stage " << s << " micro-batch " << j;
    }
  }
}

std::vector<std::string> strings(const std::vector<Action>& actions) {
  std::vector<std::string> out;
  for (const Action& a : actions) out.push_back(action_to_string(a));
  return out;
}

ScheduleRequest request(ScheduleKind kind, int p, int v, int m,
                        const std::vector<Times>& times = {}) {
  ScheduleRequest r;
  r.num_groups = p;
  r.stage_group = default_stage_group(kind, p, v);
  r.num_stages = static_cast<int>(r.stage_group.size());
  r.micro_batches = m;
  r.stage_times = compute_times(times);
  return r;
}

GroupOrders generate(ScheduleKind kind, const ScheduleRequest& r) {
  Result<GroupOrders> orders = generate_schedule(kind, r);
  EXPECT_TRUE(orders.is_ok()) << orders.status().message();
  return orders.is_ok() ? orders.value() : GroupOrders{};
}

// The ZB-H1 of the paper's Figure 3 written directly: rank r runs 1F1B's warm-up of p-1-r
// forwards, then F, B and, from its r-th B on, the W of its oldest B.
GroupOrders textbook_zb_h1(int p, int m) {
  GroupOrders out(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(p - 1 - r, m);
    auto& o = out[r];
    for (int j = 0; j < warmup; ++j) o.push_back({ActionKind::kForward, r, j});
    int w = 0;
    for (int i = 0; i < m; ++i) {
      if (i + warmup < m) o.push_back({ActionKind::kForward, r, i + warmup});
      o.push_back({ActionKind::kBackwardInput, r, i});
      if (i >= r) o.push_back({ActionKind::kBackwardWeight, r, w++});
    }
    while (w < m) o.push_back({ActionKind::kBackwardWeight, r, w++});
  }
  return out;
}

const Times kTimeCases[] = {{1, 1, 1}, {1, 2, 1}, {2, 1, 1},   {2, 3, 0.5}, {1, 1, 2},
                            {3, 1, 2}, {1, 3, 0}, {0.5, 2, 3}, {2, 2, 4}};

// ---- Names and placements ----------------------------------------------------------------

TEST(ScheduleKindTest, NamesRoundTrip) {
  const std::vector<std::string> names = schedule_kind_names();
  EXPECT_EQ(names, (std::vector<std::string>{"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2",
                                             "zb-v", "dualpipev"}));
  for (const std::string& name : names) {
    std::optional<ScheduleKind> kind = parse_schedule_kind(name);
    ASSERT_TRUE(kind.has_value()) << name;
    EXPECT_EQ(schedule_kind_name(*kind), name);
  }
  EXPECT_EQ(parse_schedule_kind("ZB_H1"), ScheduleKind::kZbH1);
  EXPECT_EQ(parse_schedule_kind("DualPipeV"), ScheduleKind::kDualPipeV);
  EXPECT_FALSE(parse_schedule_kind("zb-h3").has_value());
  EXPECT_TRUE(splits_backward(ScheduleKind::kZbV));
  EXPECT_FALSE(splits_backward(ScheduleKind::kInterleaved));
}

TEST(ScheduleKindTest, DefaultStageGroups) {
  EXPECT_EQ(default_stage_group(ScheduleKind::k1f1b, 4, 1), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(default_stage_group(ScheduleKind::kInterleaved, 2, 3),
            (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(default_stage_group(ScheduleKind::kZbV, 3, 1), (std::vector<int>{0, 1, 2, 2, 1, 0}));
  EXPECT_EQ(default_stage_group(ScheduleKind::kDualPipeV, 2, 2), (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(stages_per_group(ScheduleKind::kInterleaved, 3), 3);
  EXPECT_EQ(stages_per_group(ScheduleKind::kZbV, 1), 2);
  EXPECT_EQ(stages_per_group(ScheduleKind::kZbH2, 4), 1);
}

// ---- Exact orders written out by hand ------------------------------------------------------

TEST(ExactOrderTest, OneFOneBTwoStagesThreeMicroBatches) {
  const GroupOrders orders = generate(ScheduleKind::k1f1b, request(ScheduleKind::k1f1b, 2, 1, 3));
  ASSERT_EQ(orders.size(), 2u);
  EXPECT_EQ(strings(orders[0]),
            (std::vector<std::string>{"0F0", "0F1", "0B0", "0F2", "0B1", "0B2"}));
  EXPECT_EQ(strings(orders[1]),
            (std::vector<std::string>{"1F0", "1B0", "1F1", "1B1", "1F2", "1B2"}));
}

TEST(ExactOrderTest, GpipeTwoStagesTwoMicroBatches) {
  const GroupOrders orders = generate(ScheduleKind::kGpipe, request(ScheduleKind::kGpipe, 2, 1, 2));
  EXPECT_EQ(strings(orders[0]), (std::vector<std::string>{"0F0", "0F1", "0B0", "0B1"}));
  EXPECT_EQ(strings(orders[1]), (std::vector<std::string>{"1F0", "1F1", "1B0", "1B1"}));
}

// Megatron-LM with p = 2, v = 2, m = 4: the k-th forward runs chunk (k mod 4) / 2 on
// micro-batch (k / 4) * 2 + k mod 2, backwards the chunks in reverse; warm-up on rank r is
// (2 - r - 1) * 2 + (2 - 1) * 2 = 4 - 2r. Rank 0 holds stages 0 and 2, rank 1 stages 1 and 3.
TEST(ExactOrderTest, InterleavedMatchesMegatron) {
  const GroupOrders orders =
      generate(ScheduleKind::kInterleaved, request(ScheduleKind::kInterleaved, 2, 2, 4));
  EXPECT_EQ(strings(orders[0]),
            (std::vector<std::string>{"0F0", "0F1", "2F0", "2F1",                // warm-up
                                      "0F2", "2B0", "0F3", "2B1", "2F2", "0B0",  // steady
                                      "2F3", "0B1", "2B2", "2B3", "0B2", "0B3"}));
  EXPECT_EQ(strings(orders[1]),
            (std::vector<std::string>{"1F0", "1F1", "3F0", "3B0", "3F1", "3B1", "1F2", "1B0", "1F3",
                                      "1B1", "3F2", "3B2", "3F3", "3B3", "1B2", "1B3"}));
}

TEST(ExactOrderTest, ZbH1TwoStagesThreeMicroBatches) {
  const GroupOrders orders = generate(ScheduleKind::kZbH1, request(ScheduleKind::kZbH1, 2, 1, 3));
  // Rank 0 runs W right after each B; rank 1 defers one W (its first W follows its second B).
  EXPECT_EQ(strings(orders[0]), (std::vector<std::string>{"0F0", "0F1", "0I0", "0W0", "0F2", "0I1",
                                                          "0W1", "0I2", "0W2"}));
  EXPECT_EQ(strings(orders[1]), (std::vector<std::string>{"1F0", "1I0", "1F1", "1I1", "1W0", "1F2",
                                                          "1I2", "1W1", "1W2"}));
}

// With F = B = W the generator's W placement reproduces the paper's ZB-H1 exactly.
TEST(ExactOrderTest, ZbH1EqualsTextbookWhenPassesAreEqual) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = p; m <= 3 * p; ++m) {
      const GroupOrders orders =
          generate(ScheduleKind::kZbH1, request(ScheduleKind::kZbH1, p, 1, m));
      EXPECT_EQ(orders, textbook_zb_h1(p, m)) << "p=" << p << " m=" << m;
    }
  }
}

// ZB-V's F and B order is PyTorch's ScheduleZBVZeroBubble (p = 2, m = 3): rank 0 runs stages
// 0 and 3, rank 1 stages 1 and 2.
TEST(ExactOrderTest, ZbVForwardBackwardOrderMatchesPyTorch) {
  const GroupOrders orders = generate(ScheduleKind::kZbV, request(ScheduleKind::kZbV, 2, 2, 3));
  std::vector<std::vector<std::string>> fb(2);
  for (int g = 0; g < 2; ++g) {
    for (const Action& a : orders[g]) {
      if (a.kind != ActionKind::kBackwardWeight) fb[g].push_back(action_to_string(a));
    }
  }
  // Rank 0: 3 F of stage 0; no (F1, F0) pairs; 2 x (F3, I3); stable (F0 if left, I0, F3, I3)
  // until f3 == f0 == 3; cool-down 2 x I0.
  EXPECT_EQ(fb[0], (std::vector<std::string>{"0F0", "0F1", "0F2", "3F0", "3I0", "3F1", "3I1", "0I0",
                                             "3F2", "3I2", "0I1", "0I2"}));
  // Rank 1: 1 F of stage 1; one (F2, F1) pair; 1 x (F2, I2); stable; cool-down (I1, I2), I1.
  EXPECT_EQ(fb[1], (std::vector<std::string>{"1F0", "2F0", "1F1", "2F1", "2I0", "1F2", "1I0", "2F2",
                                             "2I1", "1I1", "2I2", "1I2"}));
}

// DeepSeek's DualPipeV for p = 1, m = 2 (one rank, stages 0 and 1): step 2 is F0 F1; step 4
// runs once (F0, fused B1, F1, fused B0); step 6 splits the second backward (r = 0 is even, so
// from B0 of its only iteration); step 8 pops that W.
TEST(ExactOrderTest, DualPipeVOneRank) {
  const GroupOrders orders =
      generate(ScheduleKind::kDualPipeV, request(ScheduleKind::kDualPipeV, 1, 2, 2));
  EXPECT_EQ(strings(orders[0]), (std::vector<std::string>{"0F0", "1F0", "0F1", "1B0", "1F1", "0B0",
                                                          "1B1", "0I1", "0W1"}));
}

// With a slow first stage the later stages see their forwards arrive late; W fills those gaps
// instead of being deferred as in the textbook order. Stage 0 has F = 3, the others 1; every
// B and W takes 1. Stage 2: F0 [4,5], B0 [5,6], then F1 arrives at 7, so W0 runs in [6,7].
// The iteration still takes 3 * (3 + 1 + 1) = 15, stage 0's own work.
TEST(ExactOrderTest, ZbH1PlacesWeightPassesIntoGaps) {
  const std::vector<Times> times = {{3, 1, 1}, {1, 1, 1}, {1, 1, 1}};
  const GroupOrders orders =
      generate(ScheduleKind::kZbH1, request(ScheduleKind::kZbH1, 3, 1, 3, times));
  EXPECT_EQ(strings(orders[0]), (std::vector<std::string>{"0F0", "0F1", "0F2", "0I0", "0W0", "0I1",
                                                          "0W1", "0I2", "0W2"}));
  EXPECT_EQ(strings(orders[1]), (std::vector<std::string>{"1F0", "1F1", "1I0", "1W0", "1F2", "1I1",
                                                          "1W1", "1I2", "1W2"}));
  EXPECT_EQ(strings(orders[2]), (std::vector<std::string>{"2F0", "2I0", "2W0", "2F1", "2I1", "2W1",
                                                          "2F2", "2I2", "2W2"}));
  EXPECT_NE(orders, textbook_zb_h1(3, 3));
  EXPECT_EQ(iteration_time(orders, 3, times).value_or(-1), 15.0);
}

// ---- Structure, deadlock freedom and memory for many shapes --------------------------------

TEST(StructureTest, EveryKindIsWellFormedAndDeadlockFree) {
  for (int p = 1; p <= 5; ++p) {
    for (int m = 1; m <= 3 * p + 1; ++m) {
      for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::k1f1b, ScheduleKind::kZbH1,
                                ScheduleKind::kZbH2, ScheduleKind::kZbV}) {
        const ScheduleRequest r = request(kind, p, 2, m);
        const GroupOrders orders = generate(kind, r);
        SCOPED_TRACE(std::string(schedule_kind_name(kind)) + " p=" + std::to_string(p) +
                     " m=" + std::to_string(m));
        expect_well_formed(orders, r.stage_group, m, splits_backward(kind));
        EXPECT_TRUE(iteration_time(orders, r.num_stages, uniform(r.num_stages, 1, 1, 1)))
            << "deadlock";
      }
      for (int v = 2; v <= 3 && m % p == 0; ++v) {
        const ScheduleRequest r = request(ScheduleKind::kInterleaved, p, v, m);
        const GroupOrders orders = generate(ScheduleKind::kInterleaved, r);
        expect_well_formed(orders, r.stage_group, m, false);
        EXPECT_TRUE(iteration_time(orders, r.num_stages, uniform(r.num_stages, 1, 1, 1)));
      }
      if (m >= 2 * p) {
        const ScheduleRequest r = request(ScheduleKind::kDualPipeV, p, 2, m);
        const GroupOrders orders = generate(ScheduleKind::kDualPipeV, r);
        expect_well_formed_mixed(orders, r.stage_group, m);
        EXPECT_TRUE(iteration_time(orders, r.num_stages, uniform(r.num_stages, 1, 1, 1)));
      }
    }
  }
}

// Groups numbered differently from the pipeline order: the orders follow the stages.
TEST(StructureTest, PermutedGroups) {
  ScheduleRequest r = request(ScheduleKind::kZbV, 3, 2, 6);
  r.stage_group = {2, 0, 1, 1, 0, 2};
  const GroupOrders orders = generate(ScheduleKind::kZbV, r);
  expect_well_formed(orders, r.stage_group, 6, true);
  const GroupOrders plain = generate(ScheduleKind::kZbV, request(ScheduleKind::kZbV, 3, 2, 6));
  EXPECT_EQ(orders[2], plain[0]);
  EXPECT_EQ(orders[0], plain[1]);
  EXPECT_EQ(orders[1], plain[2]);
}

TEST(MemoryTest, PeakInFlightPerGroup) {
  for (int p = 1; p <= 5; ++p) {
    for (int m : {p, 2 * p, 3 * p + 1}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const auto peaks = [&](ScheduleKind kind, int v) {
        return peak_in_flight_per_group(generate(kind, request(kind, p, v, m)));
      };
      std::vector<int64_t> gpipe(p, m), one_f_one_b, zb_h1(p, std::min(p, m)), zb_v(p, 2 * p);
      for (int r = 0; r < p; ++r) one_f_one_b.push_back(std::min(p - r, m));
      EXPECT_EQ(peaks(ScheduleKind::kGpipe, 1), gpipe);
      EXPECT_EQ(peaks(ScheduleKind::k1f1b, 1), one_f_one_b);
      EXPECT_EQ(peaks(ScheduleKind::kZbH1, 1), zb_h1);
      EXPECT_EQ(peaks(ScheduleKind::kZbV, 2), zb_v);
      if (m >= 2 * p - 1) {
        EXPECT_EQ(peaks(ScheduleKind::kZbH2, 1), std::vector<int64_t>(p, 2 * p - 1));
      }
      if (m >= 2 * p) {
        EXPECT_EQ(peaks(ScheduleKind::kDualPipeV, 2), std::vector<int64_t>(p, 2 * p + 1));
      }
      for (int v = 2; v <= 3 && m % p == 0; ++v) {
        std::vector<int64_t> expected;
        for (int r = 0; r < p; ++r) {
          expected.push_back(
              m == p ? int64_t{v} * m
                     : std::min<int64_t>(int64_t{v} * m, 2 * (p - r - 1) + (v - 1) * p + 1));
        }
        EXPECT_EQ(peaks(ScheduleKind::kInterleaved, v), expected) << "v=" << v;
      }
    }
  }
}

TEST(MemoryTest, ZeroBubbleKindsShortenTheirWarmUpUnderALimit) {
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2}) {
    ScheduleRequest r = request(kind, 4, 1, 9);
    r.max_in_flight = {2, 1, 3, 0};
    const GroupOrders orders = generate(kind, r);
    expect_well_formed(orders, r.stage_group, 9, true);
    const std::vector<int64_t> peaks = peak_in_flight_per_group(orders);
    EXPECT_LE(peaks[0], 2);
    EXPECT_EQ(peaks[1], 1);
    EXPECT_LE(peaks[2], 3);
    EXPECT_TRUE(iteration_time(orders, 4, uniform(4, 1, 1, 1)));
  }
  // One micro-batch in flight everywhere: F, B, W for each micro-batch in turn.
  ScheduleRequest r = request(ScheduleKind::kZbH1, 2, 1, 2);
  r.max_in_flight = {1, 1};
  const GroupOrders orders = generate(ScheduleKind::kZbH1, r);
  EXPECT_EQ(strings(orders[0]),
            (std::vector<std::string>{"0F0", "0I0", "0W0", "0F1", "0I1", "0W1"}));
}

TEST(MemoryTest, FixedOrdersReportAnUnmetLimit) {
  ScheduleRequest r = request(ScheduleKind::k1f1b, 4, 1, 8);
  r.max_in_flight = {3, 0, 0, 0};
  Result<GroupOrders> orders = generate_schedule(ScheduleKind::k1f1b, r);
  ASSERT_FALSE(orders.is_ok());
  EXPECT_EQ(orders.status().code(), StatusCode::kInfeasible);
  EXPECT_NE(orders.status().message().find("device group 0 holds up to 4"), std::string::npos)
      << orders.status().message();
  EXPECT_NE(orders.status().message().find("max_in_flight[0] is 3"), std::string::npos);

  ScheduleRequest v = request(ScheduleKind::kZbV, 2, 2, 6);
  v.max_in_flight = {0, 3};
  Result<GroupOrders> zbv = generate_schedule(ScheduleKind::kZbV, v);
  ASSERT_FALSE(zbv.is_ok());
  EXPECT_EQ(zbv.status().code(), StatusCode::kInfeasible);
  EXPECT_NE(zbv.status().message().find("device group 1 must hold 4"), std::string::npos)
      << zbv.status().message();
}

// ---- Closed forms on uniform stages (docs/schedules.md) -------------------------------------

TEST(ClosedFormTest, GpipeAndOneFOneB) {
  for (const Times& t : kTimeCases) {
    for (int p = 1; p <= 5; ++p) {
      for (int m = 1; m <= 3 * p + 1; ++m) {
        const double expected = (m + p - 1) * (t.f + t.b + t.w);
        for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::k1f1b}) {
          const GroupOrders orders = generate(kind, request(kind, p, 1, m));
          EXPECT_DOUBLE_EQ(iteration_time(orders, p, uniform(p, t.f, t.b, t.w)).value_or(-1),
                           expected)
              << schedule_kind_name(kind) << " p=" << p << " m=" << m;
        }
      }
    }
  }
}

// F, B, W per chunk: m v (F+B+W) + (p-1)(F+B+W), i.e. a bubble of (p-1)/v of a device's
// per-micro-batch work.
TEST(ClosedFormTest, Interleaved) {
  for (const Times& t : kTimeCases) {
    for (int p = 1; p <= 4; ++p) {
      for (int v = 2; v <= 4; ++v) {
        for (int m = p; m <= 4 * p; m += p) {
          const GroupOrders orders =
              generate(ScheduleKind::kInterleaved, request(ScheduleKind::kInterleaved, p, v, m));
          const double expected = (m * v + p - 1) * (t.f + t.b + t.w);
          EXPECT_DOUBLE_EQ(
              iteration_time(orders, p * v, uniform(p * v, t.f, t.b, t.w)).value_or(-1), expected)
              << "p=" << p << " v=" << v << " m=" << m;
        }
      }
    }
  }
}

TEST(ClosedFormTest, ZbH1) {
  for (const Times& t : kTimeCases) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = p; m <= 3 * p + 1; ++m) {
        const std::vector<Times> times = uniform(p, t.f, t.b, t.w);
        const GroupOrders orders =
            generate(ScheduleKind::kZbH1, request(ScheduleKind::kZbH1, p, 1, m, times));
        const double expected =
            m * (t.f + t.b + t.w) + (p - 1) * std::max({t.f + t.b - t.w, t.f, t.b});
        EXPECT_DOUBLE_EQ(iteration_time(orders, p, times).value_or(-1), expected)
            << "F=" << t.f << " B=" << t.b << " W=" << t.w << " p=" << p << " m=" << m;
      }
    }
  }
}

TEST(ClosedFormTest, ZbH2) {
  for (const Times& t : kTimeCases) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 2 * p - 1; m <= 3 * p + 1; ++m) {
        const std::vector<Times> times = uniform(p, t.f, t.b, t.w);
        const GroupOrders orders =
            generate(ScheduleKind::kZbH2, request(ScheduleKind::kZbH2, p, 1, m, times));
        const double expected =
            m * (t.f + t.b + t.w) + (p - 1) * std::max({t.f, t.b - t.f, t.f + t.b - 2 * t.w});
        EXPECT_DOUBLE_EQ(iteration_time(orders, p, times).value_or(-1), expected)
            << "F=" << t.f << " B=" << t.b << " W=" << t.w << " p=" << p << " m=" << m;
      }
    }
  }
}

// With F = B = W every group of ZB-H2 is busy from its first action to its last (the paper's
// "zero bubble", a parallelogram); ZB-H1 leaves (p-1-r) F idle inside group r's span.
TEST(ClosedFormTest, ZbH2HasNoIdleInsideAnyGroupsSpan) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 2 * p - 1; m <= 3 * p; ++m) {
      const std::vector<Times> times = uniform(p, 1, 1, 1);
      EXPECT_EQ(
          span_idle(generate(ScheduleKind::kZbH2, request(ScheduleKind::kZbH2, p, 1, m)), times),
          std::vector<double>(p, 0.0))
          << "p=" << p << " m=" << m;
      std::vector<double> h1;
      for (int r = 0; r < p; ++r) h1.push_back(p - 1 - r);
      EXPECT_EQ(
          span_idle(generate(ScheduleKind::kZbH1, request(ScheduleKind::kZbH1, p, 1, m)), times),
          h1);
    }
  }
}

// F, B, W per chunk (half a device's share of the model).
TEST(ClosedFormTest, ZbV) {
  for (const Times& t : kTimeCases) {
    if (t.w < std::max(t.f, t.b)) continue;  // the formula's condition
    for (int p = 1; p <= 6; ++p) {
      for (int m = p; m <= 3 * p + 1; ++m) {
        const std::vector<Times> times = uniform(2 * p, t.f, t.b, t.w);
        const GroupOrders orders =
            generate(ScheduleKind::kZbV, request(ScheduleKind::kZbV, p, 2, m, times));
        const double expected = 2 * m * (t.f + t.b + t.w) + (p - 1) * std::max(t.f, t.b);
        EXPECT_DOUBLE_EQ(iteration_time(orders, 2 * p, times).value_or(-1), expected)
            << "F=" << t.f << " B=" << t.b << " W=" << t.w << " p=" << p << " m=" << m;
      }
    }
  }
}

TEST(ClosedFormTest, DualPipeV) {
  for (const Times& t : kTimeCases) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 2 * p; m <= 3 * p + 2; ++m) {
        const std::vector<Times> times = uniform(2 * p, t.f, t.b, t.w);
        const GroupOrders orders =
            generate(ScheduleKind::kDualPipeV, request(ScheduleKind::kDualPipeV, p, 2, m));
        const double q = p - 1;
        const double expected = 2 * m * (t.f + t.b + t.w) + q * std::max(t.b - t.w, 0.0) +
                                std::max({q * t.b - t.f, q * t.f, q * (2 * t.f - t.b - t.w)});
        EXPECT_DOUBLE_EQ(iteration_time(orders, 2 * p, times).value_or(-1), expected)
            << "F=" << t.f << " B=" << t.b << " W=" << t.w << " p=" << p << " m=" << m;
      }
    }
  }
}

// ---- Request errors ----------------------------------------------------------------------

void expect_error(ScheduleKind kind, const ScheduleRequest& r, const std::string& part) {
  Result<GroupOrders> orders = generate_schedule(kind, r);
  ASSERT_FALSE(orders.is_ok());
  EXPECT_EQ(orders.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(orders.status().message().find(part), std::string::npos) << orders.status().message();
  EXPECT_EQ(
      orders.status().message().rfind(std::string(schedule_kind_name(kind)) + " schedule: ", 0), 0u)
      << orders.status().message();
}

TEST(RequestErrorTest, Messages) {
  expect_error(ScheduleKind::kInterleaved, request(ScheduleKind::kInterleaved, 4, 2, 6),
               "micro_batches (6) must be a multiple of num_groups (4)");
  expect_error(ScheduleKind::kDualPipeV, request(ScheduleKind::kDualPipeV, 3, 2, 5),
               "micro_batches (5) must be at least 2 * num_groups (6)");
  expect_error(ScheduleKind::k1f1b, request(ScheduleKind::k1f1b, 2, 1, 0),
               "micro_batches must be between 1 and");

  ScheduleRequest not_v = request(ScheduleKind::kZbV, 2, 2, 4);
  not_v.stage_group = {0, 1, 0, 1};
  expect_error(ScheduleKind::kZbV, not_v,
               "stage_group[2] is 0 but stage 2 must run on the group of stage 1 (group 1)");

  ScheduleRequest chunks = request(ScheduleKind::k1f1b, 2, 1, 4);
  chunks.stage_group = {0, 1, 0, 1};
  chunks.num_stages = 4;
  expect_error(ScheduleKind::k1f1b, chunks, "num_stages is 4 but this schedule runs one stage");

  ScheduleRequest one_chunk = request(ScheduleKind::kInterleaved, 2, 1, 4);
  one_chunk.stage_group = {0, 1};
  one_chunk.num_stages = 2;
  expect_error(ScheduleKind::kInterleaved, one_chunk, "with v >= 2 chunks per group");

  ScheduleRequest twice = request(ScheduleKind::kGpipe, 2, 1, 4);
  twice.stage_group = {1, 1};
  expect_error(ScheduleKind::kGpipe, twice,
               "stage_group[1] is group 1, which already runs stage 0");

  ScheduleRequest range = request(ScheduleKind::kGpipe, 2, 1, 4);
  range.stage_group = {0, 2};
  expect_error(ScheduleKind::kGpipe, range,
               "stage_group[1] is 2; expected a group between 0 and 1");

  ScheduleRequest times = request(ScheduleKind::kZbH1, 2, 1, 4, uniform(3, 1, 1, 1));
  expect_error(ScheduleKind::kZbH1, times, "stage_times has 3 entries but num_stages is 2");

  ScheduleRequest negative = request(ScheduleKind::kZbH1, 2, 1, 4, uniform(2, 1, -1, 1));
  expect_error(ScheduleKind::kZbH1, negative,
               "stage_times[0].backward_input must be a finite, non-negative time, got -1.000000");

  ScheduleRequest limit = request(ScheduleKind::kZbH2, 2, 1, 4);
  limit.max_in_flight = {1};
  expect_error(ScheduleKind::kZbH2, limit, "max_in_flight has 1 entries but num_groups is 2");
}

// A transfer time changes only the estimate that places W; the orders stay well formed.
TEST(RequestTest, TransferTimeKeepsOrdersValid) {
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2, ScheduleKind::kZbV}) {
    ScheduleRequest r = request(kind, 4, 2, 8);
    r.p2p_time = Seconds(0.7);
    const GroupOrders orders = generate(kind, r);
    expect_well_formed(orders, r.stage_group, 8, true);
  }
}

}  // namespace
}  // namespace motley
