// Search time of tune() with its default options (time budget, 2 threads) on a 128-layer model
// (embedding, 126 Llama-3-8B decoder blocks, head) over clusters of half H100 and half A100
// nodes, as the devices (8 .. 1024 at 64 micro-batches) and the micro-batches (16 .. 1024 at
// 64 devices) grow. One tune() per measurement; counters give the plans evaluated, the
// predicted throughput and the efficiency against the lower bound.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/model/presets.h"
#include "motley/tune/tune.h"

namespace motley {
namespace {

ModelSpec model_128_layers() {
  Result<ModelSpec> base = model_preset("llama-3-8b");  // embed, 32 blocks, head
  MOTLEY_CHECK(base.is_ok(), base.status().message());
  ModelSpec m = base.value();
  m.name = "llama-3-8b-126-blocks";
  std::vector<Layer> layers{m.layers.front()};
  for (int i = 0; i < 126; ++i) {
    Layer block = m.layers[1];
    block.name = "layers." + std::to_string(i);
    layers.push_back(block);
  }
  layers.push_back(m.layers.back());
  m.layers = layers;
  return m;
}

ClusterSpec two_generations(int devices) {
  const int nodes = std::max(1, devices / 8);
  const int h100 = (nodes + 1) / 2, a100 = nodes - h100;
  std::string yaml = "name: bench-" + std::to_string(devices) +
                     "\nnetwork: {kind: infiniband, bandwidth_GBps: 50, latency_us: 2}\nnodes:\n"
                     "  - name: h100\n    count: " +
                     std::to_string(h100) +
                     "\n    devices: {type: H100-SXM, count: 8}\n    devices_per_pcie_switch: 2\n"
                     "    nic: {bandwidth_GBps: 50, count: 8}\n";
  if (a100 > 0) {
    yaml += "  - name: a100\n    count: " + std::to_string(a100) +
            "\n    devices: {type: A100-80GB, count: 8}\n    devices_per_pcie_switch: 2\n"
            "    nic: {bandwidth_GBps: 25, count: 8}\n";
  }
  Result<Json> doc = parse_yaml(yaml, "bench");
  MOTLEY_CHECK(doc.is_ok(), doc.status().message());
  Result<ClusterSpec> cluster = cluster_from_json(doc.value(), "bench");
  MOTLEY_CHECK(cluster.is_ok(), cluster.status().message());
  return cluster.value();
}

void BM_Tune(benchmark::State& state) {
  const int devices = static_cast<int>(state.range(0));
  const int64_t micro_batches = state.range(1);
  const ModelSpec model = model_128_layers();
  const ClusterSpec cluster = two_generations(devices);
  TuneOptions options;
  options.global_batch = micro_batches;
  options.micro_batch_size = 1;
  for (auto _ : state) {
    Result<TuneResult> r = tune(options, model, cluster);
    if (!r.is_ok()) {
      state.SkipWithError(r.status().message().c_str());
      return;
    }
    state.counters["evaluated"] = static_cast<double>(r->candidates_evaluated);
    state.counters["tokens_per_s"] = r->simulation.throughput_tokens_per_s;
    state.counters["efficiency"] = r->efficiency;
    state.counters["search_s"] = r->search_time.value();
  }
}

BENCHMARK(BM_Tune)
    ->ArgNames({"devices", "micro_batches"})
    ->Args({8, 64})
    ->Args({16, 64})
    ->Args({32, 64})
    ->Args({64, 64})
    ->Args({128, 64})
    ->Args({256, 64})
    ->Args({512, 64})
    ->Args({1024, 64})
    ->Args({64, 16})
    ->Args({64, 256})
    ->Args({64, 1024})
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kSecond);

}  // namespace
}  // namespace motley

BENCHMARK_MAIN();
