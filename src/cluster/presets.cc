// Built-in clusters, written in the cluster file format itself so that they take the catalog
// defaults through the same loader as a user's file. docs/cluster-format.md lists them.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <utility>

#include "motley/cluster/cluster.h"

namespace motley {
namespace {

// DGX-like nodes: two GPUs and two 400 Gb/s (or 200 Gb/s on A100) NICs behind each PCIe switch.
const std::vector<std::pair<std::string, std::string>>& presets() {
  static const std::vector<std::pair<std::string, std::string>> kPresets = {
      {"default", R"(
name: default
network: {kind: infiniband, bandwidth_GBps: 50, latency_us: 2}
nodes:
  - name: h100
    devices: {type: H100-SXM, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 50, count: 8}
  - name: a100
    devices: {type: A100-80GB, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 25, count: 8}
)"},
      {"h100x8", R"(
name: h100x8
network: {kind: infiniband, bandwidth_GBps: 50, latency_us: 2}
nodes:
  - name: h100
    devices: {type: H100-SXM, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 50, count: 8}
)"},
      {"h100x16", R"(
name: h100x16
network: {kind: infiniband, bandwidth_GBps: 50, latency_us: 2}
nodes:
  - name: h100
    count: 2
    devices: {type: H100-SXM, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 50, count: 8}
)"},
      {"a100x16", R"(
name: a100x16
network: {kind: infiniband, bandwidth_GBps: 25, latency_us: 2}
nodes:
  - name: a100
    count: 2
    devices: {type: A100-80GB, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 25, count: 8}
)"},
      {"mi300x8", R"(
name: mi300x8
network: {kind: infiniband, bandwidth_GBps: 50, latency_us: 2}
nodes:
  - name: mi300x
    devices: {type: MI300X, count: 8}
    devices_per_pcie_switch: 1
    nic: {bandwidth_GBps: 50, count: 8}
)"},
      {"h100-a100", R"(
name: h100-a100
network: {kind: infiniband, bandwidth_GBps: 50, latency_us: 2}
nodes:
  - name: h100
    count: 2
    devices: {type: H100-SXM, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 50, count: 8}
  - name: a100
    count: 2
    devices: {type: A100-80GB, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 25, count: 8}
)"},
      {"h100-mi300x", R"(
name: h100-mi300x
network: {kind: infiniband, bandwidth_GBps: 50, latency_us: 2}
nodes:
  - name: h100
    devices: {type: H100-SXM, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 50, count: 8}
  - name: mi300x
    devices: {type: MI300X, count: 8}
    devices_per_pcie_switch: 1
    nic: {bandwidth_GBps: 50, count: 8}
)"},
      {"a100-l40s-ethernet", R"(
name: a100-l40s-ethernet
network: {kind: ethernet, bandwidth_GBps: 25, latency_us: 10}
nodes:
  - name: a100
    devices: {type: A100-80GB, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 25, count: 2}
  - name: l40s
    count: 2
    devices: {type: L40S, count: 4}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 25, count: 1}
)"},
      {"spot-fleet", R"(
name: spot-fleet
network: {kind: ethernet, bandwidth_GBps: 12.5, latency_us: 10}
nodes:
  - name: h100-spot
    devices: {type: H100-SXM, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 12.5, count: 4}
    spot: true
  - name: a100-spot
    count: 2
    devices: {type: A100-80GB, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 12.5, count: 4}
    spot: true
  - name: l40s-spot
    devices: {type: L40S, count: 4}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 12.5, count: 1}
    spot: true
  - name: a100-40gb
    devices: {type: A100-40GB, count: 8}
    devices_per_pcie_switch: 2
    nic: {bandwidth_GBps: 12.5, count: 4}
)"},
      {"pcie-lab", R"(
name: pcie-lab
network: {kind: ethernet, bandwidth_GBps: 3.125, latency_us: 20}
nodes:
  - name: rtx4090
    count: 2
    devices: {type: RTX-4090, count: 4}
    nic: {bandwidth_GBps: 3.125, count: 1}
  - name: a10
    devices: {type: A10, count: 4}
    nic: {bandwidth_GBps: 3.125, count: 1}
)"},
  };
  return kPresets;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::vector<std::string> cluster_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : presets()) names.push_back(name);
  return names;
}

Result<ClusterSpec> cluster_preset(std::string_view name) {
  const std::string key = lower(name);
  for (const auto& [preset_name, text] : presets()) {
    if (preset_name != key) continue;
    const std::string source = fmt::format("preset '{}'", preset_name);
    auto doc = parse_yaml(text, source);
    MOTLEY_CHECK(doc.is_ok(), doc.status().message());
    auto cluster = cluster_from_json(doc.value(), source);
    MOTLEY_CHECK(cluster.is_ok(), cluster.status().message());
    return cluster;
  }
  return not_found(fmt::format("unknown cluster preset '{}'; presets: {}", name,
                               join_alternatives(cluster_preset_names())));
}

Result<ClusterSpec> load_cluster(const std::string& name_or_path) {
  std::error_code ec;
  if (std::filesystem::exists(name_or_path, ec)) return load_cluster_yaml(name_or_path);
  const std::string key = lower(name_or_path);
  for (const std::string& name : cluster_preset_names()) {
    if (name == key) return cluster_preset(name);
  }
  return not_found(
      fmt::format("'{}' is neither a cluster file (no such file) nor a cluster preset; presets: {}",
                  name_or_path, join_alternatives(cluster_preset_names())));
}

}  // namespace motley
