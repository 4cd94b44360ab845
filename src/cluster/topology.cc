// Resolves a device pair of a ClusterSpec to a Path over shared Links, when asked. The rules
// (which links a transfer crosses, how latencies add) are documented in docs/cluster-format.md,
// "Paths"; keep the two in step.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "motley/cluster/cluster.h"

namespace motley {
namespace {

constexpr int kNone = -1;

bool has_ports(LinkKind kind) { return kind == LinkKind::kNvlink || kind == LinkKind::kGaudiRoce; }

int switch_of(const NodeSpec& node, int local) {
  return node.devices_per_pcie_switch > 0 ? static_cast<int>(local / node.devices_per_pcie_switch)
                                          : 0;
}

// Collects a path's links, bandwidth bottleneck and latency as they are appended.
class PathBuilder {
 public:
  explicit PathBuilder(const std::vector<Link>& links) : links_(links) {
    path_.bandwidth = BytesPerSecond(std::numeric_limits<double>::infinity());
  }
  void cross(int link) {
    path_.links.push_back(link);
    path_.bandwidth = std::min(path_.bandwidth, links_[link].bandwidth);
  }
  void limit(BytesPerSecond bandwidth) { path_.bandwidth = std::min(path_.bandwidth, bandwidth); }
  void wait(Seconds latency) { path_.latency += latency; }
  Path done(bool host_staged, bool crosses_nodes) {
    path_.host_staged = host_staged;
    path_.crosses_nodes = crosses_nodes;
    return path_;
  }

 private:
  const std::vector<Link>& links_;
  Path path_;
};

}  // namespace

std::vector<Device> cluster_devices(const ClusterSpec& cluster) {
  std::vector<Device> out;
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    int local = 0;
    for (const NodeDevices& group : cluster.nodes[n].devices) {
      for (int64_t i = 0; i < group.count; ++i) {
        Device d;
        d.id = static_cast<int>(out.size());
        d.type = group.type;
        d.node = static_cast<int>(n);
        d.local_index = local++;
        out.push_back(d);
      }
    }
  }
  return out;
}

int64_t topology_link_count(const NodeSpec& node) {
  int64_t devices = 0;
  std::map<Vendor, int64_t> per_vendor;
  for (const NodeDevices& g : node.devices) {
    devices += g.count;
    auto type = find_device_type(g.type);
    MOTLEY_CHECK(type.is_ok(), type.status().message());
    per_vendor[type.value()->vendor] += g.count;
  }
  int64_t links = 2 * devices;  // PCIe tx and rx
  if (has_ports(node.interconnect.kind)) links += 2 * devices;
  if (node.devices_per_pcie_switch > 0 && devices > 0) {
    links += 2 * ((devices + node.devices_per_pcie_switch - 1) / node.devices_per_pcie_switch);
  }
  if (node.interconnect.kind == LinkKind::kXgmi) {
    for (const auto& [vendor, n] : per_vendor) links += n * (n - 1);
  }
  return links + 2 * node.nic_count;
}

Topology::Topology(const ClusterSpec& cluster)
    : nodes_(cluster.nodes), devices_(cluster_devices(cluster)), network_(cluster.network) {
  types_.reserve(devices_.size());
  for (const Device& d : devices_) {
    auto type = find_device_type(d.type);
    MOTLEY_CHECK(type.is_ok(), type.status().message());
    types_.push_back(type.value());
  }

  auto add_link = [this](std::string name, LinkKind kind, BytesPerSecond bandwidth) {
    Link link;
    link.id = static_cast<int>(links_.size());
    link.name = std::move(name);
    link.kind = kind;
    link.bandwidth = bandwidth;
    links_.push_back(std::move(link));
    return links_.back().id;
  };

  node_links_.resize(nodes_.size());
  int first_device = 0;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const NodeSpec& node = nodes_[n];
    MOTLEY_CHECK(node.nic_count > 0 && node.devices_per_pcie_switch >= 0,
                 fmt::format("node '{}': nic_count must be positive and devices_per_pcie_switch "
                             "non-negative",
                             node.name));
    NodeLinks& nl = node_links_[n];
    const int node_first = first_device;
    int count = 0;
    for (const NodeDevices& g : node.devices) count += static_cast<int>(g.count);
    first_device += count;

    const LinkKind ic = node.interconnect.kind;
    const std::string ic_name = link_kind_name(ic);
    for (int i = 0; i < count; ++i) {
      const std::string dev = node.name + "/gpu" + std::to_string(i);
      if (has_ports(ic)) {
        nl.port_tx.push_back(
            add_link(dev + " " + ic_name + " tx", ic, node.interconnect.bandwidth));
        nl.port_rx.push_back(
            add_link(dev + " " + ic_name + " rx", ic, node.interconnect.bandwidth));
      }
      nl.pcie_tx.push_back(add_link(dev + " pcie tx", LinkKind::kPcie, node.pcie.bandwidth));
      nl.pcie_rx.push_back(add_link(dev + " pcie rx", LinkKind::kPcie, node.pcie.bandwidth));
    }
    if (node.devices_per_pcie_switch > 0 && count > 0) {
      const int switches = switch_of(node, count - 1) + 1;
      for (int s = 0; s < switches; ++s) {
        const std::string sw = node.name + " pcie-switch" + std::to_string(s);
        nl.uplink_tx.push_back(add_link(sw + " uplink tx", LinkKind::kPcie, node.pcie.bandwidth));
        nl.uplink_rx.push_back(add_link(sw + " uplink rx", LinkKind::kPcie, node.pcie.bandwidth));
      }
    }
    if (ic == LinkKind::kXgmi) {
      nl.pair.assign(static_cast<size_t>(count) * count, kNone);
      for (int i = 0; i < count; ++i) {
        for (int j = 0; j < count; ++j) {
          if (i == j || types_[node_first + i]->vendor != types_[node_first + j]->vendor) {
            continue;
          }
          nl.pair[i * count + j] = add_link(
              node.name + "/gpu" + std::to_string(i) + "->gpu" + std::to_string(j) + " xgmi", ic,
              node.interconnect.bandwidth);
        }
      }
    }
    for (int64_t k = 0; k < node.nic_count; ++k) {
      const std::string nic = node.name + " nic" + std::to_string(k);
      nl.nic_tx.push_back(add_link(nic + " tx", node.nic.kind, node.nic.bandwidth));
      nl.nic_rx.push_back(add_link(nic + " rx", node.nic.kind, node.nic.bandwidth));
    }
  }

  const size_t n_dev = devices_.size();
  int64_t expected_links = 0;
  for (const NodeSpec& node : nodes_) expected_links += topology_link_count(node);
  MOTLEY_CHECK(expected_links == static_cast<int64_t>(links_.size()),
               "topology_link_count disagrees with the links Topology made");
  measured_ = cluster.measured_links;
  for (const MeasuredLink& m : measured_) {
    MOTLEY_CHECK(m.src >= 0 && m.dst >= 0 && static_cast<size_t>(m.src) < n_dev &&
                     static_cast<size_t>(m.dst) < n_dev && m.src != m.dst,
                 fmt::format("measured link {} -> {} outside the cluster's {} devices", m.src,
                             m.dst, n_dev));
  }
  std::sort(measured_.begin(), measured_.end(), [](const MeasuredLink& a, const MeasuredLink& b) {
    return std::pair(a.src, a.dst) < std::pair(b.src, b.dst);
  });
}

Path Topology::path(int src, int dst) const {
  Path p = resolve(src, dst);
  // Measured pairs keep the links they cross (for sharing) but take their measured alpha-beta.
  auto it = std::lower_bound(measured_.begin(), measured_.end(), std::pair(src, dst),
                             [](const MeasuredLink& m, const std::pair<int, int>& key) {
                               return std::pair(m.src, m.dst) < key;
                             });
  if (it != measured_.end() && it->src == src && it->dst == dst) {
    p.latency = it->latency;
    p.bandwidth = it->bandwidth;
    p.measured = true;
  }
  return p;
}

Path Topology::resolve(int a, int b) const {
  PathBuilder p(links_);
  if (a == b) return p.done(false, false);
  const Device& da = devices_[a];
  const Device& db = devices_[b];
  const NodeSpec& na = nodes_[da.node];
  const NodeSpec& nb = nodes_[db.node];
  const NodeLinks& la = node_links_[da.node];
  const NodeLinks& lb = node_links_[db.node];
  const int ia = da.local_index;
  const int ib = db.local_index;
  const int sa = switch_of(na, ia);
  const int sb = switch_of(nb, ib);
  const bool same_vendor = types_[a]->vendor == types_[b]->vendor;

  // Device a up to host memory (or to its switch) and, mirrored, down to device b.
  auto up = [&](bool through_root) {
    p.cross(la.pcie_tx[ia]);
    if (through_root && !la.uplink_tx.empty()) p.cross(la.uplink_tx[sa]);
  };
  auto down = [&](bool through_root) {
    if (through_root && !lb.uplink_rx.empty()) p.cross(lb.uplink_rx[sb]);
    p.cross(lb.pcie_rx[ib]);
  };

  if (da.node == db.node) {
    const LinkKind ic = na.interconnect.kind;
    if (!same_vendor) {
      up(true);
      down(true);
      p.wait(na.pcie.latency + kHostStagingLatency + na.pcie.latency);
      return p.done(true, false);
    }
    if (has_ports(ic)) {
      p.cross(la.port_tx[ia]);
      p.cross(la.port_rx[ib]);
      p.wait(na.interconnect.latency);
      return p.done(false, false);
    }
    if (ic == LinkKind::kXgmi) {
      const int count = static_cast<int>(la.pcie_tx.size());
      p.cross(la.pair[ia * count + ib]);
      p.wait(na.interconnect.latency);
      return p.done(false, false);
    }
    // PCIe peer to peer: under one switch, or up through the root complex.
    const bool same_switch = na.devices_per_pcie_switch == 0 || sa == sb;
    up(!same_switch);
    down(!same_switch);
    p.wait(same_switch ? na.pcie.latency : na.pcie.latency + na.pcie.latency);
    return p.done(false, false);
  }

  const int nic_a = static_cast<int>(ia % na.nic_count);
  const int nic_b = static_cast<int>(ib % nb.nic_count);
  // No GPUDirect between vendors: stage through host memory on both ends.
  if (!same_vendor) {
    up(true);
    p.wait(na.pcie.latency + kHostStagingLatency);
  }
  p.cross(la.nic_tx[nic_a]);
  p.limit(network_.bandwidth);
  p.cross(lb.nic_rx[nic_b]);
  p.wait(na.nic.latency + network_.latency + nb.nic.latency);
  if (!same_vendor) {
    down(true);
    p.wait(kHostStagingLatency + nb.pcie.latency);
  }
  return p.done(!same_vendor, true);
}

const NodeSpec& Topology::node_of(int device) const { return nodes_[devices_[device].node]; }

}  // namespace motley
