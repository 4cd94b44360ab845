// The instance of the planner's scaling sweep, shared by bench/tune_bench.cc (search time) and
// bench/tune_cases.cc (the table in RESULTS.md): a 128-layer model (embedding, 126 Llama-3-8B
// blocks, head) on half H100, half A100 nodes of 8 devices.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/check.h"
#include "motley/core/json.h"
#include "motley/model/presets.h"

namespace motley {

inline ModelSpec model_128_layers() {
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

inline ClusterSpec two_generations(int devices) {
  const int nodes = std::max(1, devices / 8);
  const int h100 = (nodes + 1) / 2, a100 = nodes - h100;
  std::string yaml = "name: scaling-" + std::to_string(devices) +
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
  Result<Json> doc = parse_yaml(yaml, "scaling");
  MOTLEY_CHECK(doc.is_ok(), doc.status().message());
  Result<ClusterSpec> cluster = cluster_from_json(doc.value(), "scaling");
  MOTLEY_CHECK(cluster.is_ok(), cluster.status().message());
  return cluster.value();
}

}  // namespace motley
