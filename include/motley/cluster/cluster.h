// ClusterSpec: nodes of devices, the links inside each node and the fabric between nodes, as a
// user writes them in YAML, plus Topology, which resolves the path (latency, bottleneck
// bandwidth and the shared links it crosses) between any two devices. No timing model beyond
// latency + bytes / bandwidth: contention is the simulator's job. Thread-compatible;
// a built Topology is immutable and safe to share.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motley/cluster/device_catalog.h"
#include "motley/cluster/measured_links.h"
#include "motley/core/check.h"
#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/core/units.h"

namespace motley {

struct LinkSpec {
  LinkKind kind = LinkKind::kPcie;
  BytesPerSecond bandwidth;  // per direction
  Seconds latency;
};

// One group of identical devices inside a node.
struct NodeDevices {
  std::string type;  // canonical DeviceType name
  int64_t count = 0;
};

struct NodeSpec {
  std::string
      name;  // after expansion of `count: N`: "<name>-0", "<name>-1", ... (or as given when N = 1)
  std::vector<NodeDevices> devices;  // usually one entry; several for a mixed-vendor workstation
  LinkSpec interconnect;             // device to device inside the node (NVLink, xGMI, PCIe, ...)
  LinkSpec pcie;                     // device to host
  int64_t devices_per_pcie_switch = 0;  // 0: all devices behind one switch/root
  LinkSpec nic;                         // one NIC's bandwidth and latency
  int64_t nic_count = 1;                // NICs per node; device i uses NIC (i mod nic_count)
  double price_per_hour = 0.0;          // USD for the whole node
  bool spot = false;
  // Mean hours between this node's interruptions (preemptions of spot capacity, or failures
  // where the user states them); unset: node_hours_between_preemptions's default.
  std::optional<double> mean_hours_between_preemptions;
  // What the node costs bought on demand (spot nodes only); unset: the catalog's on-demand
  // prices of its devices.
  std::optional<double> on_demand_price_per_hour;
};

// Where checkpoints are written and how a job comes back after an interruption; unset fields
// take the defaults of docs/preemption.md (kDefaultCheckpoint*).
struct CheckpointStorage {
  std::optional<BytesPerSecond> write_bandwidth;  // per node, to the checkpoint store
  std::optional<Seconds> restart;                 // from an interruption to training again
};

// Defaults, estimates with their basis in docs/preemption.md.
inline constexpr double kDefaultSpotHoursBetweenPreemptions = 24.0;
inline constexpr BytesPerSecond kDefaultCheckpointWriteBandwidth = gigabytes_per_second(2.0);
inline constexpr Seconds kDefaultRestartTime = Seconds(300.0);

struct ClusterSpec {
  std::string name;
  std::vector<NodeSpec> nodes;  // expanded: one entry per physical node
  LinkSpec network;             // the fabric between NICs (its latency adds to the NICs')
  // The training software the cluster runs, by name (the cost module's software stacks);
  // empty: the cost model's default.
  std::string software_stack;
  // Measured latency and bandwidth of ordered device pairs (`measured_links`, a links file or
  // inline); Topology uses them instead of the link figures for those pairs. Unique pairs.
  std::vector<MeasuredLink> measured_links;
  // Measured collectives over named devices (the `collectives` of `measured_links` that list
  // their `devices`); the cost model prices that op over exactly that device set from the sweep.
  // One per (op, device set).
  std::vector<MeasuredCollective> measured_collectives;
  CheckpointStorage checkpoint;
};

// The node's mean hours between interruptions: as stated, else
// kDefaultSpotHoursBetweenPreemptions for a spot node; nullopt: never interrupted.
std::optional<double> node_hours_between_preemptions(const NodeSpec& node);
// USD per hour of the node bought on demand: on_demand_price_per_hour, or for a spot node the
// catalog's on-demand prices of its devices; an on-demand node's own price_per_hour.
double node_on_demand_price_per_hour(const NodeSpec& node);

// The fixed cost of staging a transfer through a pinned host buffer (one device-to-host copy
// handing over to a host-to-device or NIC send); counted once per staging buffer crossed.
inline constexpr Seconds kHostStagingLatency = microseconds(10.0);

// A device with its global id (dense, in node order, then in the node's device order).
struct Device {
  int id = 0;
  std::string type;
  int node = 0;
  int local_index = 0;
};

std::vector<Device> cluster_devices(const ClusterSpec& cluster);

// A shared transmission resource: a device's NVLink port in one direction, an xGMI pair link,
// a PCIe switch uplink, a node's NIC, the host staging copy. Transfers that cross the same
// Link share its bandwidth.
struct Link {
  int id = 0;
  std::string name;  // e.g. "node0/gpu3 nvlink tx", "node1 nic0 rx"
  LinkKind kind = LinkKind::kPcie;
  BytesPerSecond bandwidth;
};

// The links a path crosses, in order: at most kCapacity (a device's PCIe link and its switch's
// uplink, the NIC out, the NIC in, and the same two at the far end). A value, so that paths are
// computed when asked and never stored for every pair.
class PathLinks {
 public:
  static constexpr int kCapacity = 6;
  // REQUIRES: size() < kCapacity.
  void push_back(int id) {
    MOTLEY_CHECK(size_ < kCapacity, "a path crosses more links than any rule makes");
    ids_[size_++] = id;
  }
  const int* begin() const { return ids_.data(); }
  const int* end() const { return ids_.data() + size_; }
  size_t size() const { return static_cast<size_t>(size_); }
  bool empty() const { return size_ == 0; }
  int front() const { return ids_[0]; }
  int operator[](size_t i) const { return ids_[i]; }
  friend bool operator==(const PathLinks& a, const PathLinks& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const PathLinks& a, const std::vector<int>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  std::array<int, kCapacity> ids_{};
  int size_ = 0;
};

// The shared links Topology makes for one node: its devices' interconnect ports and PCIe
// links, its switches' uplinks, xGMI's pair links and its NICs. Topology's link count is the
// sum over the nodes. REQUIRES: the node's device types are in the catalog.
int64_t topology_link_count(const NodeSpec& node);

// How bytes travel from one device to another (docs/cluster-format.md, "Paths"). A device to
// itself: no links, zero latency, infinite bandwidth (a local copy is not a transfer).
struct Path {
  Seconds latency;
  BytesPerSecond bandwidth;  // the bottleneck of the links crossed (and of the fabric port)
  PathLinks links;           // Link ids crossed, in order; empty for a device to itself
  bool host_staged = false;  // crosses host memory (different vendors)
  bool crosses_nodes = false;
  bool measured = false;  // latency and bandwidth come from ClusterSpec::measured_links
};

class Topology {
 public:
  // REQUIRES: every device type is in the catalog and every measured link names two distinct
  // devices of the cluster (cluster_from_json and the presets ensure both); a violation is a
  // bug and aborts. A measured pair's path crosses the same links as without the measurement,
  // with the measured latency and bandwidth. Memory grows with devices and links, not with
  // pairs: a path is resolved each time it is asked for.
  explicit Topology(const ClusterSpec& cluster);

  const std::vector<Device>& devices() const { return devices_; }
  const std::vector<Link>& links() const { return links_; }
  // REQUIRES: 0 <= src, dst < devices().size().
  Path path(int src, int dst) const;
  const DeviceType& device_type(int device) const { return *types_[device]; }
  const NodeSpec& node_of(int device) const;

 private:
  // Link ids of one node, by local device index where per device.
  struct NodeLinks {
    std::vector<int> port_tx, port_rx;      // NVLink / Gaudi RoCE ports (empty for other kinds)
    std::vector<int> pcie_tx, pcie_rx;      // device <-> its PCIe switch (or the root complex)
    std::vector<int> uplink_tx, uplink_rx;  // per switch: towards / from the root complex
    std::vector<int> pair;                  // xGMI: n*n, -1 on the diagonal and across vendors
    std::vector<int> nic_tx, nic_rx;
  };

  Path resolve(int src, int dst) const;

  std::vector<NodeSpec> nodes_;
  std::vector<Device> devices_;
  std::vector<const DeviceType*> types_;
  std::vector<Link> links_;
  std::vector<NodeLinks> node_links_;
  LinkSpec network_;
  // Measured pairs, sorted by (src, dst): their latency and bandwidth replace the path's.
  std::vector<MeasuredLink> measured_;
};

// Cluster YAML (see docs/cluster-format.md). Errors name the file and field. Applies the
// catalog defaults and expands `count: N` nodes.
Result<ClusterSpec> cluster_from_json(const Json& doc, const std::string& source);
// The same for a cluster inside another document (a plan file's "cluster_spec"): errors name
// the field's path within that document.
Result<ClusterSpec> cluster_from_json(const JsonField& root);
Result<ClusterSpec> load_cluster_yaml(const std::string& path);
// Writes every field explicitly (after expansion), so that load(dump(c)) == c.
std::string cluster_to_yaml(const ClusterSpec& cluster);
bool operator==(const LinkSpec& a, const LinkSpec& b);
bool operator==(const NodeDevices& a, const NodeDevices& b);
bool operator==(const NodeSpec& a, const NodeSpec& b);
bool operator==(const ClusterSpec& a, const ClusterSpec& b);

std::vector<std::string> cluster_preset_names();
// Case-insensitive; the error (not found) lists the names.
Result<ClusterSpec> cluster_preset(std::string_view name);
// A preset name or the path of a YAML file; an existing file wins over a preset of that name.
Result<ClusterSpec> load_cluster(const std::string& name_or_path);

}  // namespace motley
