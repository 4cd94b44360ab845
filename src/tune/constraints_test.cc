// The layout a user fixes (PlanConstraints) holds for every strategy's plan, and the
// megatron-tuned sweep is never slower than the default layouts it starts from.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "motley/tune/megatron.h"
#include "motley/tune/tune.h"
#include "tune_test_util.h"

namespace motley::tune_internal::tune_testing {
namespace {

// Every feasible plan of the result: motley's and each baseline's.
std::vector<const Plan*> all_plans(const TuneResult& r) {
  std::vector<const Plan*> out{&r.plan};
  for (const StrategyOutcome& b : r.baselines) {
    if (b.feasible) out.push_back(&b.plan);
  }
  return out;
}

// 8 layers on two nodes of four H100s.
struct EightOnTwoNodes {
  ModelSpec model = tiny_model(8);
  ClusterSpec cluster = fixed_cluster({"H100-SXM", "H100-SXM"}, 4);
  TuneOptions options = fixed_options(16, uniform_spec(8));
};

TEST(PlanConstraintsTest, EveryStrategyKeepsTheFixedDegrees) {
  EightOnTwoNodes c;
  c.options.constraints.tensor_parallel = 2;
  c.options.constraints.pipeline_parallel = 2;
  c.options.constraints.data_parallel = 2;
  Result<TuneResult> r = tune(c.options, c.model, c.cluster);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  int feasible = 0;
  for (const Plan* plan : all_plans(r.value())) {
    ++feasible;
    ASSERT_EQ(plan->replicas.size(), 2u);
    for (const Replica& rep : plan->replicas) {
      ASSERT_EQ(rep.groups.size(), 2u);
      for (const DeviceGroupSchedule& g : rep.groups) EXPECT_EQ(g.devices.size(), 2u);
    }
  }
  EXPECT_GE(feasible, 4);  // motley and most baselines find a plan of that shape
}

TEST(PlanConstraintsTest, AFixedDepthMayLeaveDevicesIdle) {
  EightOnTwoNodes c;
  c.options.constraints.pipeline_parallel = 3;
  c.options.constraints.data_parallel = 1;
  c.options.constraints.tensor_parallel = 1;
  Result<TuneResult> r = tune(c.options, c.model, c.cluster);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  for (const Plan* plan : all_plans(r.value())) {
    ASSERT_EQ(plan->replicas.size(), 1u);
    EXPECT_EQ(plan->replicas[0].groups.size(), 3u);
  }
}

TEST(PlanConstraintsTest, ExcludedDevicesAreNeverUsed) {
  EightOnTwoNodes c;
  c.options.constraints.excluded_devices = {0, 5};
  Result<TuneResult> r = tune(c.options, c.model, c.cluster);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  for (const Plan* plan : all_plans(r.value())) {
    for (const Replica& rep : plan->replicas) {
      for (const DeviceGroupSchedule& g : rep.groups) {
        for (int d : g.devices) EXPECT_TRUE(d != 0 && d != 5) << "device " << d;
      }
    }
  }
  // The bound spreads the work over the six devices left: it is 8/6 of the whole cluster's.
  TuneOptions all = c.options;
  all.constraints = PlanConstraints{};
  const double six = iteration_lower_bound(c.options, c.model, c.cluster).value().value();
  const double eight = iteration_lower_bound(all, c.model, c.cluster).value().value();
  EXPECT_GT(six, eight);
}

TEST(PlanConstraintsTest, OnlyTheNamedScheduleFamiliesRun) {
  EightOnTwoNodes c;
  c.options.constraints.schedules = {"zb-h1"};
  Result<TuneResult> r = tune(c.options, c.model, c.cluster);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  for (const Plan* plan : all_plans(r.value())) EXPECT_EQ(plan->schedule, "zb-h1");
  for (const StrategyOutcome& b : r.value().baselines) {
    if (b.strategy == "megatron-1f1b") {
      EXPECT_FALSE(b.feasible);
      EXPECT_NE(b.detail.find("leave out 1f1b"), std::string::npos) << b.detail;
    }
  }
}

TEST(PlanConstraintsTest, GpipeRunsWhenItIsTheOnlyFamily) {
  EightOnTwoNodes c;
  c.options.constraints.schedules = {"gpipe"};
  Result<TuneResult> r = tune(c.options, c.model, c.cluster);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value().plan.schedule, "gpipe");
}

TEST(PlanConstraintsTest, HeadroomKeepsEveryPeakBelowItsShare) {
  // 8 layers of 8 GB each: 64 GB fits one 80 GB device, but not under a 30 % headroom (56 GB).
  FixedCostSpec spec;
  for (int i = 0; i < 8; ++i) spec.layers.push_back(layer_ms(1, 1, 1, 8, 0.5));
  ModelSpec model = tiny_model(8);
  TuneOptions options = fixed_options(4, spec);
  const ClusterSpec one = fixed_cluster({"H100-SXM"}, 1);
  ASSERT_TRUE(tune(options, model, one).is_ok());
  options.constraints.memory_headroom = 0.3;
  Result<TuneResult> refused = tune(options, model, one);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInfeasible);

  Result<TuneResult> r = tune(options, model, fixed_cluster({"H100-SXM"}, 2));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  for (const DeviceStats& d : r.value().simulation.devices) {
    EXPECT_LE(d.peak_memory.value(), 0.7 * d.capacity.value() * (1 + 1e-12))
        << "device " << d.device;
  }
}

TEST(PlanConstraintsTest, RefusesConstraintsNoClusterMeets) {
  EightOnTwoNodes c;
  auto refused = [&](PlanConstraints k, const std::string& field) {
    TuneOptions o = c.options;
    o.constraints = k;
    Result<TuneResult> r = tune(o, c.model, c.cluster);
    ASSERT_FALSE(r.is_ok()) << field;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  };
  refused(PlanConstraints{3, 0, 0, {}, {}, 0}, "tensor_parallel");
  refused(PlanConstraints{0, 9, 0, {}, {}, 0}, "pipeline_parallel");
  refused(PlanConstraints{2, 2, 4, {}, {}, 0}, "tensor x pipeline x data");
  refused(PlanConstraints{0, 0, 0, {"fast"}, {}, 0}, "schedules");
  refused(PlanConstraints{0, 0, 0, {}, {3, 3}, 0}, "excluded_devices");
  refused(PlanConstraints{0, 0, 0, {}, {8}, 0}, "excluded_devices");
  refused(PlanConstraints{0, 0, 0, {}, {0, 1, 2, 3, 4, 5, 6, 7}, 0}, "excluded_devices");
  refused(PlanConstraints{0, 0, 0, {}, {}, 1.0}, "memory_headroom");
  // TP 8 needs nodes of eight devices.
  refused(PlanConstraints{8, 0, 0, {}, {}, 0}, "tensor_parallel");
}

TEST(MegatronTunedTest, NeverSlowerThanTheDefaultLayoutsAndMotleyNeverSlowerThanIt) {
  // Two speeds of device, so the default layout is far from the best a sweep finds.
  ModelSpec model = tiny_model(8);
  ClusterSpec cluster = fixed_cluster({"H100-SXM", "A100-80GB"}, 4);
  TuneOptions options = fixed_options(32, two_speeds(8));
  options.micro_batch_size = 0;  // the sweep covers micro-batch sizes too
  Result<TuneResult> r = tune(options, model, cluster);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  double tuned = 0;
  std::vector<double> defaults;
  for (const StrategyOutcome& b : r.value().baselines) {
    if (!b.feasible) continue;
    if (b.strategy == "megatron-tuned") tuned = b.iteration_time.value();
    if (b.strategy == "megatron-1f1b" || b.strategy == "megatron-interleaved") {
      defaults.push_back(b.iteration_time.value());
    }
  }
  ASSERT_GT(tuned, 0);
  ASSERT_FALSE(defaults.empty());
  for (double d : defaults) EXPECT_LE(tuned, d * (1 + 1e-12));
  EXPECT_LE(r.value().simulation.iteration_time.value(), tuned * (1 + 1e-12));
  ASSERT_TRUE(r.value().explanation.megatron_tuned.has_value());
  EXPECT_DOUBLE_EQ(r.value().explanation.megatron_tuned->value(), tuned);
}

TEST(MegatronTunedTest, ItsPlanIsOneMegatronCanRun) {
  EightOnTwoNodes c;
  c.options.micro_batch_size = 0;
  c.options.strategy = "megatron-tuned";
  Result<TuneResult> r = tune(c.options, c.model, c.cluster);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const Plan& plan = r.value().plan;
  // Identical replicas, one TP degree, devices in Megatron-LM's rank order: replica k's group
  // r on devices [(r d + k) t, (r d + k + 1) t).
  const int d = static_cast<int>(plan.replicas.size());
  const int t = static_cast<int>(plan.replicas[0].groups[0].devices.size());
  for (int k = 0; k < d; ++k) {
    const Replica& rep = plan.replicas[k];
    EXPECT_EQ(rep.micro_batches, plan.replicas[0].micro_batches);
    for (int r = 0; r < static_cast<int>(rep.groups.size()); ++r) {
      ASSERT_EQ(rep.groups[r].devices.size(), static_cast<size_t>(t));
      for (int i = 0; i < t; ++i) EXPECT_EQ(rep.groups[r].devices[i], (r * d + k) * t + i);
    }
  }
  EXPECT_TRUE(plan.schedule == "1f1b" || plan.schedule.rfind("interleaved", 0) == 0)
      << plan.schedule;
}

// The closest Megatron plan of a zero-bubble plan is the plan itself under 1F1B, and of a
// V-shaped one the same stages interleaved: the devices, TP groups, layer split and the first
// pipeline rank's stages stay, and Megatron's arguments express it whole.
TEST(ClosestMegatronPlanTest, KeepsThePlansLayoutWithMegatronsStageMapAndOrder) {
  EightOnTwoNodes c;
  for (const char* strategy : {"zb-h1", "zb-v"}) {
    SCOPED_TRACE(strategy);
    c.options.strategy = strategy;
    Result<TuneResult> r = tune(c.options, c.model, c.cluster);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const Plan& plan = r->plan;
    ASSERT_FALSE(megatron_arguments(plan, c.model, c.cluster).not_expressed.empty());
    Result<StrategyOutcome> closest = closest_megatron_plan(plan, c.model, c.cluster, c.options);
    ASSERT_TRUE(closest.is_ok()) << closest.status().message();
    ASSERT_EQ(closest->strategy, "megatron-layout") << closest->detail;
    const Plan& kept = closest->plan;
    EXPECT_TRUE(megatron_arguments(kept, c.model, c.cluster).not_expressed.empty());
    ASSERT_EQ(kept.stages.size(), plan.stages.size());
    for (size_t s = 0; s < plan.stages.size(); ++s) {
      EXPECT_EQ(kept.stages[s].layer_begin, plan.stages[s].layer_begin);
      EXPECT_EQ(kept.stages[s].layer_end, plan.stages[s].layer_end);
    }
    ASSERT_EQ(kept.replicas.size(), plan.replicas.size());
    for (size_t rep = 0; rep < plan.replicas.size(); ++rep) {
      const Replica& a = plan.replicas[rep];
      const Replica& b = kept.replicas[rep];
      const int p = static_cast<int>(a.groups.size());
      ASSERT_EQ(static_cast<int>(b.groups.size()), p);
      for (size_t s = 0; s < plan.stages.size(); ++s) {
        EXPECT_EQ(b.stage_group[s], static_cast<int>(s) % p);
        if (static_cast<int>(s) < p) {
          EXPECT_EQ(b.groups[b.stage_group[s]].devices, a.groups[a.stage_group[s]].devices);
        }
      }
    }
    EXPECT_EQ(kept.schedule,
              plan.stages.size() == plan.replicas[0].groups.size() ? "1f1b" : "interleaved(v=2)");
    ASSERT_TRUE(kept.predicted.has_value());
    EXPECT_DOUBLE_EQ(kept.predicted->iteration_time.value(), closest->iteration_time.value());
  }
}

// ZeRO-2 and -3 are Megatron-FSDP's sharding strategies, which run without a pipeline only;
// expert parallelism is --expert-model-parallel-size.
TEST(MegatronArgumentsTest, MapZeroStagesAndExpertParallelism) {
  EightOnTwoNodes c;
  c.options.strategy = "megatron-1f1b";
  c.options.constraints.tensor_parallel = 1;
  for (int pp : {1, 2}) {
    SCOPED_TRACE(pp);
    c.options.constraints.pipeline_parallel = pp;
    Result<TuneResult> r = tune(c.options, c.model, c.cluster);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    Plan plan = r->plan;
    ASSERT_EQ(plan.replicas[0].groups.size(), static_cast<size_t>(pp));
    plan.zero_stage = 3;
    plan.expert_parallel = 2;
    const MegatronArguments args = megatron_arguments(plan, c.model, c.cluster);
    auto has = [&](const std::string& flag, const std::string& value) {
      const auto it = std::find(args.arguments.begin(), args.arguments.end(), flag);
      return it != args.arguments.end() &&
             (value.empty() || (it + 1 != args.arguments.end() && *(it + 1) == value));
    };
    EXPECT_TRUE(has("--use-distributed-optimizer", ""));
    EXPECT_TRUE(has("--expert-model-parallel-size", "2"));
    bool listed = false;
    for (const std::string& why : args.not_expressed) {
      listed = listed || why.find("ZeRO-3 with pipeline parallelism") != std::string::npos;
    }
    EXPECT_EQ(has("--use-megatron-fsdp", ""), pp == 1);
    EXPECT_EQ(has("--data-parallel-sharding-strategy", "optim_grads_params"), pp == 1);
    EXPECT_EQ(listed, pp > 1);
  }
}

// Context parallelism is --context-parallel-size with the ring (p2p) exchange; Megatron's DP is
// the replicas over it, and its rank order tp-cp-dp-pp takes replica dp x CP + cp as data rank
// dp, context rank cp: the plan's replicas in order. The closest Megatron plan keeps it.
TEST(MegatronArgumentsTest, ContextParallelismIsTheContextParallelSize) {
  EightOnTwoNodes c;
  c.options.strategy = "megatron-1f1b";
  c.options.constraints.tensor_parallel = 2;
  c.options.constraints.pipeline_parallel = 1;
  c.options.context_parallel = 2;
  Result<TuneResult> r = tune(c.options, c.model, c.cluster);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const Plan& plan = r->plan;
  ASSERT_EQ(plan.context_parallel, 2);
  ASSERT_EQ(plan.replicas.size(), 4u);
  const MegatronArguments args = megatron_arguments(plan, c.model, c.cluster);
  EXPECT_EQ(args.context_parallel, 2);
  EXPECT_EQ(args.data_parallel, 2);
  std::string flags;
  for (const std::string& a : args.arguments) flags += a + " ";
  EXPECT_NE(flags.find("--context-parallel-size 2 --cp-comm-type p2p "), std::string::npos)
      << flags;
  EXPECT_NE(flags.find("--global-batch-size " + std::to_string(plan.global_batch) + " "),
            std::string::npos)
      << flags;
  std::vector<int> expected;
  for (const Replica& rep : plan.replicas) {
    for (int d : rep.groups[0].devices) expected.push_back(d);
  }
  EXPECT_EQ(args.rank_devices, expected);
  Result<StrategyOutcome> closest = closest_megatron_plan(plan, c.model, c.cluster, c.options);
  ASSERT_TRUE(closest.is_ok()) << closest.status().message();
  EXPECT_EQ(closest->plan.context_parallel, 2);
}

// Per-layer recompute of the first N layers of every stage is Megatron's block method; any
// other choice of layers is listed as not expressed, and the closest plan recomputes the first
// N of every stage.
TEST(MegatronArgumentsTest, PerLayerRecomputeIsTheBlockMethodWhereItCanBe) {
  EightOnTwoNodes c;
  c.options.strategy = "megatron-1f1b";
  c.options.constraints.tensor_parallel = 1;
  c.options.constraints.pipeline_parallel = 2;
  Result<TuneResult> r = tune(c.options, c.model, c.cluster);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  Plan plan = r->plan;
  ASSERT_EQ(plan.stages.size(), 2u);
  for (Stage& s : plan.stages) {
    s.recompute = RecomputePolicy::kNone;
    s.recompute_layers = {s.layer_begin, s.layer_begin + 1};
  }
  auto flags = [](const MegatronArguments& args) {
    std::string out;
    for (const std::string& a : args.arguments) out += a + " ";
    return out;
  };
  MegatronArguments args = megatron_arguments(plan, c.model, c.cluster);
  EXPECT_NE(flags(args).find("--recompute-granularity full --recompute-method block "
                             "--recompute-num-layers 2 "),
            std::string::npos)
      << flags(args);
  for (const std::string& why : args.not_expressed) {
    EXPECT_EQ(why.find("recompute"), std::string::npos) << why;
  }
  plan.stages[1].recompute_layers = {plan.stages[1].layer_begin + 1};
  args = megatron_arguments(plan, c.model, c.cluster);
  bool listed = false;
  for (const std::string& why : args.not_expressed) {
    listed = listed || why.find(
                           "per-layer recompute of other layers than the first 2 of every "
                           "stage") != std::string::npos;
  }
  EXPECT_TRUE(listed);
  Result<StrategyOutcome> closest = closest_megatron_plan(plan, c.model, c.cluster, c.options);
  ASSERT_TRUE(closest.is_ok()) << closest.status().message();
  ASSERT_EQ(closest->strategy, "megatron-layout") << closest->detail;
  for (const Stage& s : closest->plan.stages) {
    EXPECT_EQ(s.recompute_layers, (std::vector<int>{s.layer_begin, s.layer_begin + 1}));
  }
  EXPECT_NE(closest->detail.find("the first 2 layer(s) of every stage recomputed"),
            std::string::npos)
      << closest->detail;
}

}  // namespace
}  // namespace motley::tune_internal::tune_testing
