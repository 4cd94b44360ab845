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
#include "scaling_instance.h"

namespace motley {
namespace {

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
