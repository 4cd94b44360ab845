#include "tune_test_util.h"

#include <utility>

namespace motley::tune_internal::tune_testing {

CostModelFactory fixed_factory(FixedCostSpec spec) {
  return [spec](const ModelSpec&, const ClusterSpec& cluster, const Workload&) {
    return std::unique_ptr<CostModel>(new FixedCostModel(cluster, spec));
  };
}

FixedCostSpec uniform_spec(int layers) {
  FixedCostSpec spec;
  for (int i = 0; i < layers; ++i) spec.layers.push_back(layer_ms(1, 1, 1, 1, 1));
  return spec;
}

FixedCostSpec slower_on(FixedCostSpec spec, const std::string& type, double factor) {
  std::vector<FixedLayerTimes> slow;
  for (const FixedLayer& l : spec.layers) {
    const FixedLayerTimes& t = l.times;
    slow.push_back({t.forward * factor, t.backward_input * factor, t.backward_weight * factor,
                    t.recompute * factor});
  }
  spec.device_times.emplace_back(type, std::move(slow));
  return spec;
}

FixedCostSpec two_speeds(int layers) {
  FixedCostSpec spec;
  for (int i = 0; i < layers; ++i) spec.layers.push_back(layer_ms(1, 1, 1));
  return slower_on(std::move(spec), "A100-80GB", 2);
}

Fixture::Fixture(ModelSpec m, ClusterSpec c, TuneOptions o)
    : model(std::move(m)), cluster(std::move(c)), options(std::move(o)) {
  Result<std::unique_ptr<Context>> made = Context::create(options, model, cluster);
  MOTLEY_CHECK(made.is_ok(), made.status().message());
  ctx = std::move(made.value());
}

TuneOptions fixed_options(int64_t global_batch, FixedCostSpec spec) {
  TuneOptions options;
  options.global_batch = global_batch;
  options.micro_batch_size = 1;
  options.cost_model = fixed_factory(std::move(spec));
  options.clock = [] { return Seconds(0); };
  return options;
}

Fixture::Fixture(int layers, const std::vector<std::string>& nodes, int per_node,
                 int64_t global_batch, FixedCostSpec spec)
    : Fixture(tiny_model(layers), fixed_cluster(nodes, per_node),
              fixed_options(global_batch, std::move(spec))) {}

}  // namespace motley::tune_internal::tune_testing
