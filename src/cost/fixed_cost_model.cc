#include "motley/cost/fixed_cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "motley/cost/collectives.h"

namespace motley {
namespace {

std::string number(double value) {
  // {:f} writes 6 decimals, as printf's %f does; trim the zeros it pads with.
  std::string s = fmt::format("{:f}", value);
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

Status field_error(const std::string& source, const std::string& field, const std::string& what) {
  return invalid_argument(fmt::format("{}: field '{}': {}", source, field, what));
}

Status check_times(const FixedLayerTimes& t, const std::string& source, const std::string& path) {
  const std::pair<const char*, Seconds> fields[] = {
      {"forward", t.forward},
      {"backward_input", t.backward_input},
      {"backward_weight", t.backward_weight},
      {"recompute", t.recompute},
      {"fused_backward_saving", t.fused_backward_saving}};
  for (const auto& [name, value] : fields) {
    if (!(value.value() >= 0) || !std::isfinite(value.value())) {
      return field_error(source, fmt::format("{}.{}", path, name),
                         fmt::format("expected a finite non-negative time in seconds, got {}",
                                     number(value.value())));
    }
  }
  if (t.fused_backward_saving > t.backward_input + t.backward_weight) {
    return field_error(source, path + ".fused_backward_saving",
                       fmt::format("expected at most backward_input + backward_weight ({}), got {}",
                                   number((t.backward_input + t.backward_weight).value()),
                                   number(t.fused_backward_saving.value())));
  }
  return Status::ok();
}

Status check_bytes(Bytes b, const std::string& source, const std::string& path) {
  if (!(b.value() >= 0) || !std::isfinite(b.value())) {
    return field_error(
        source, path,
        fmt::format("expected a finite non-negative size in bytes, got {}", number(b.value())));
  }
  return Status::ok();
}

}  // namespace

Status FixedCostModel::validate(const FixedCostSpec& spec, const std::string& source) {
  if (spec.layers.empty()) {
    return field_error(source, "layers", "expected at least one layer, got none");
  }
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const FixedLayer& l = spec.layers[i];
    const std::string path = fmt::format("layers[{}]", i);
    MOTLEY_RETURN_IF_ERROR(check_times(l.times, source, fmt::format("{}.times", path)));
    MOTLEY_RETURN_IF_ERROR(check_bytes(l.boundary, source, fmt::format("{}.boundary", path)));
    MOTLEY_RETURN_IF_ERROR(check_bytes(l.weights, source, fmt::format("{}.weights", path)));
    MOTLEY_RETURN_IF_ERROR(check_bytes(l.gradients, source, fmt::format("{}.gradients", path)));
    MOTLEY_RETURN_IF_ERROR(
        check_bytes(l.optimizer_state, source, fmt::format("{}.optimizer_state", path)));
    for (size_t p = 0; p < l.activations.size(); ++p) {
      MOTLEY_RETURN_IF_ERROR(
          check_bytes(l.activations[p], source, fmt::format("{}.activations[{}]", path, p)));
    }
  }
  if (spec.tied && !(spec.tied->first >= 0 && spec.tied->first < spec.tied->second &&
                     spec.tied->second < static_cast<int>(spec.layers.size()))) {
    return field_error(source, "tied",
                       fmt::format("expected two layers 0 <= first < second < {}, got {} and {}",
                                   spec.layers.size(), spec.tied->first, spec.tied->second));
  }
  for (size_t d = 0; d < spec.device_times.size(); ++d) {
    const auto& [name, times] = spec.device_times[d];
    const std::string path = fmt::format("device_times[{}]", d);
    auto type = find_device_type(name);
    if (!type.is_ok()) {
      return field_error(source, fmt::format("{}.name", path), type.status().message());
    }
    if (type.value()->name != name) {
      return field_error(source, fmt::format("{}.name", path),
                         fmt::format("expected a canonical device type name, got '{}' (write '{}')",
                                     name, type.value()->name));
    }
    if (times.size() != spec.layers.size()) {
      return field_error(source, fmt::format("{}.times", path),
                         fmt::format("expected one entry per layer ({}), got {}",
                                     spec.layers.size(), times.size()));
    }
    for (size_t i = 0; i < times.size(); ++i) {
      MOTLEY_RETURN_IF_ERROR(check_times(times[i], source, fmt::format("{}.times[{}]", path, i)));
    }
  }
  return Status::ok();
}

FixedCostModel::FixedCostModel(const ClusterSpec& cluster, FixedCostSpec spec)
    : spec_(std::move(spec)), topology_(cluster) {
  const Status valid = validate(spec_, "FixedCostSpec");
  MOTLEY_CHECK(valid.is_ok(), valid.message());
  default_times_.reserve(spec_.layers.size());
  for (const FixedLayer& l : spec_.layers) default_times_.push_back(l.times);
  table_of_device_.assign(topology_.devices().size(), -1);
  for (size_t d = 0; d < topology_.devices().size(); ++d) {
    const std::string& type = topology_.device_type(static_cast<int>(d)).name;
    for (size_t t = 0; t < spec_.device_times.size(); ++t) {
      if (spec_.device_times[t].first == type) table_of_device_[d] = static_cast<int>(t);
    }
  }
}

const std::vector<FixedLayerTimes>& FixedCostModel::times_for(const DeviceGroup& group) const {
  MOTLEY_CHECK(!group.devices.empty() && group.devices[0] >= 0 &&
                   group.devices[0] < static_cast<int>(table_of_device_.size()),
               "device group outside the cluster");
  const int table = table_of_device_[group.devices[0]];
  return table < 0 ? default_times_ : spec_.device_times[table].second;
}

ComputeTimes FixedCostModel::compute(LayerRange layers, const DeviceGroup& group,
                                     RecomputePolicy recompute) const {
  MOTLEY_CHECK(layers.begin >= 0 && layers.begin <= layers.end &&
                   layers.end <= static_cast<int>(spec_.layers.size()),
               "layer range outside the spec");
  if (layers.vocab_share != 1.0) return scaled(compute(whole(layers), group, recompute), layers);
  const std::vector<FixedLayerTimes>& times = times_for(group);
  ComputeTimes out;
  for (int i = layers.begin; i < layers.end; ++i) {
    out.forward += times[i].forward;
    out.backward_input += times[i].backward_input;
    out.backward_weight += times[i].backward_weight;
    out.fused_backward_saving += times[i].fused_backward_saving;
    if (recompute != RecomputePolicy::kNone) out.recompute += times[i].recompute;
  }
  return out;
}

StageMemory FixedCostModel::stage_memory(LayerRange layers, const DeviceGroup& group,
                                         const MemoryOptions& options) const {
  MOTLEY_CHECK(layers.begin >= 0 && layers.begin <= layers.end &&
                   layers.end <= static_cast<int>(spec_.layers.size()),
               "layer range outside the spec");
  if (layers.vocab_share != 1.0) return scaled(stage_memory(whole(layers), group, options), layers);
  const double tp = std::max(1, group.tp());
  const double d = static_cast<double>(std::max<int64_t>(1, options.data_parallel));
  auto shards = [&](int from_stage) { return options.zero_stage >= from_stage ? d : 1.0; };
  StageMemory out;
  for (int i = layers.begin; i < layers.end; ++i) {
    const FixedLayer& l = spec_.layers[i];
    out.weights += l.weights;
    out.gradients += l.gradients;
    out.optimizer_state += l.optimizer_state;
    out.activations_per_micro_batch += l.activations[static_cast<int>(options.recompute)];
  }
  out.weights = out.weights / (tp * shards(3));
  out.gradients = out.gradients / (tp * shards(2));
  out.optimizer_state = out.optimizer_state / (tp * shards(1));
  out.activations_per_micro_batch = out.activations_per_micro_batch / tp;
  out.activations =
      out.activations_per_micro_batch * static_cast<double>(options.in_flight_micro_batches);
  return out;
}

Bytes FixedCostModel::boundary_bytes(int layer) const {
  MOTLEY_CHECK(layer >= 0 && layer < static_cast<int>(spec_.layers.size()),
               "layer outside the spec");
  return spec_.layers[layer].boundary;
}

Bytes FixedCostModel::expert_dispatch_bytes(int layer) const {
  MOTLEY_CHECK(layer >= 0 && layer < static_cast<int>(spec_.layers.size()),
               "layer outside the spec");
  return spec_.layers[layer].expert_dispatch;
}

CostModel::ContextExchange FixedCostModel::context_exchange(int layer,
                                                            const DeviceGroup& group) const {
  (void)group;
  MOTLEY_CHECK(layer >= 0 && layer < static_cast<int>(spec_.layers.size()),
               "layer outside the spec");
  return spec_.layers[layer].context_exchange;
}

Seconds FixedCostModel::p2p_time(int src, int dst, Bytes bytes) const {
  if (src == dst) return Seconds(0);
  const Path& path = topology_.path(src, dst);
  return path.latency + bytes / path.bandwidth;
}

Seconds FixedCostModel::collective_time(Collective collective, const std::vector<int>& devices,
                                        Bytes bytes, CollectiveAlgorithm /*algorithm*/) const {
  std::vector<int> ring = devices;
  std::sort(ring.begin(), ring.end());
  ring.erase(std::unique(ring.begin(), ring.end()), ring.end());
  const int k = static_cast<int>(ring.size());
  if (k < 2) return Seconds(0);
  AlphaBeta link{Seconds(0), BytesPerSecond(std::numeric_limits<double>::infinity())};
  for (int i = 0; i < k; ++i) {
    const Path& path = topology_.path(ring[i], ring[(i + 1) % k]);
    link.latency = std::max(link.latency, path.latency);
    link.bandwidth = std::min(link.bandwidth, path.bandwidth);
  }
  return flat_collective_time(collective, k, bytes, link);
}

ClusterSpec make_fixed_cluster(const std::vector<std::string>& node_types, int devices_per_node,
                               LinkSpec intra, LinkSpec inter) {
  ClusterSpec cluster;
  cluster.name = "fixed";
  for (size_t n = 0; n < node_types.size(); ++n) {
    NodeSpec node;
    node.name = "node" + std::to_string(n);
    node.devices.push_back(NodeDevices{node_types[n], devices_per_node});
    node.interconnect = intra;
    node.pcie = LinkSpec{LinkKind::kPcie, inter.bandwidth, inter.latency};
    node.nic = LinkSpec{inter.kind, inter.bandwidth, Seconds(0)};
    node.nic_count = 1;
    cluster.nodes.push_back(std::move(node));
  }
  cluster.network = LinkSpec{inter.kind, inter.bandwidth, inter.latency};
  return cluster;
}

}  // namespace motley
