// Simulated tasks per second (compute, transfers) of the pipeline simulator on the plans a
// tuner evaluates most: 1F1B and zero-bubble orders, p in {4, 8, 16, 32}, m in {16, 64, 256},
// eight devices per node, messages with latency and bandwidth so that links are shared.
// Items are simulated tasks, so time per item staying flat across sizes means linear time.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "motley/cost/fixed_cost_model.h"
#include "motley/schedule/schedule.h"
#include "motley/sim/simulator.h"

namespace motley {
namespace {

struct Fixture {
  FixedCostModel cost;
  Plan plan;
};

FixedCostSpec bench_spec(int stages) {
  FixedCostSpec spec;
  for (int s = 0; s < stages; ++s) {
    FixedLayer layer;
    // Slightly unequal stages, as after a real partition.
    const double scale = 1.0 + 0.01 * (s % 5);
    layer.times = {Seconds(1e-3 * scale), Seconds(1.1e-3 * scale), Seconds(0.9e-3 * scale),
                   Seconds(0)};
    layer.boundary = Bytes(16e6);
    layer.weights = Bytes(1e9);
    layer.gradients = Bytes(2e9);
    layer.optimizer_state = Bytes(12e9);
    layer.activations = {Bytes(4e9), Bytes(1e9), Bytes(0.1e9)};
    spec.layers.push_back(layer);
  }
  return spec;
}

Fixture make_fixture(ScheduleKind kind, int p, int64_t m) {
  const int per_node = std::min(p, 8);
  const std::vector<std::string> nodes((p + per_node - 1) / per_node, "H100-SXM");
  const LinkSpec intra{LinkKind::kNvlink, gigabytes_per_second(450), microseconds(3)};
  const LinkSpec inter{LinkKind::kInfiniband, gigabytes_per_second(50), microseconds(5)};
  const int chunks = stages_per_group(kind, 2);
  const int stages = p * chunks;
  Fixture fx{FixedCostModel(make_fixed_cluster(nodes, per_node, intra, inter), bench_spec(stages)),
             Plan{}};

  ScheduleRequest request;
  request.num_groups = p;
  request.num_stages = stages;
  request.stage_group = default_stage_group(kind, p, 2);
  request.micro_batches = m;
  for (int s = 0; s < stages; ++s) {
    request.stage_times.push_back(
        fx.cost.compute({s, s + 1}, DeviceGroup{{request.stage_group[s]}}, RecomputePolicy::kNone));
  }
  Result<GroupOrders> orders = generate_schedule(kind, request);
  if (!orders.is_ok()) {
    std::fprintf(stderr, "%s\n", orders.status().message().c_str());
    return fx;
  }
  fx.plan.seq_len = 4096;
  fx.plan.global_batch = m;
  for (int s = 0; s < stages; ++s)
    fx.plan.stages.push_back(Stage{s, s + 1, RecomputePolicy::kNone});
  Replica rep;
  rep.micro_batches = m;
  rep.stage_group = request.stage_group;
  for (int g = 0; g < p; ++g) rep.groups.push_back(DeviceGroupSchedule{{g}, orders.value()[g]});
  fx.plan.replicas.push_back(rep);
  return fx;
}

void BM_Simulate(benchmark::State& state, ScheduleKind kind) {
  const int p = static_cast<int>(state.range(0));
  const int64_t m = state.range(1);
  const Fixture fx = make_fixture(kind, p, m);
  if (fx.plan.replicas.empty()) {
    state.SkipWithError("the schedule generator failed");
    return;
  }
  Simulator simulator;
  SimOptions options;
  int64_t tasks = 0;
  for (auto _ : state) {
    Result<SimResult> result = simulator.run(options, fx.plan, fx.cost);
    if (!result.is_ok()) {
      state.SkipWithError(result.status().message().c_str());
      return;
    }
    tasks = result.value().tasks;
    benchmark::DoNotOptimize(result.value().iteration_time);
  }
  state.SetItemsProcessed(state.iterations() * tasks);
  state.counters["tasks"] = static_cast<double>(tasks);
  state.counters["time_per_task"] = benchmark::Counter(
      static_cast<double>(state.iterations() * tasks),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert, benchmark::Counter::kIs1000);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int p : {4, 8, 16, 32}) {
    for (int m : {16, 64, 256}) b->Args({p, m});
  }
  b->ArgNames({"p", "m"});
}

BENCHMARK_CAPTURE(BM_Simulate, 1f1b, ScheduleKind::k1f1b)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Simulate, zb_h1, ScheduleKind::kZbH1)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Simulate, zb_v, ScheduleKind::kZbV)->Apply(shapes);

}  // namespace
}  // namespace motley

BENCHMARK_MAIN();
