// The local node as a cluster: accelerators from nvidia-smi's or rocm-smi's output (or counted
// by lspci when neither tool answers), NVLink and the PCIe switches from `nvidia-smi topo -m`,
// xGMI from `rocm-smi --showtopo`, NICs from /sys, the
// host's CPU and memory from /proc. Works on the tools' text, recorded or live, so it is tested
// on recorded outputs and can describe a node from outputs collected there. The catalog match
// and every field: docs/cluster-format.md, "motley detect". Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/core/units.h"

namespace motley {

// What the tools said; an empty field is a tool that was absent or printed nothing.
struct NodeProbe {
  std::string hostname;
  // `nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits`.
  std::string nvidia_smi;
  std::string nvidia_topology;  // `nvidia-smi topo -m`
  // `rocm-smi --showproductname --showmeminfo vram` (its text form).
  std::string rocm_smi;
  std::string rocm_topology;  // `rocm-smi --showtopo`
  std::string lspci;          // `lspci -nn`
  std::string cpuinfo;        // /proc/cpuinfo
  std::string meminfo;        // /proc/meminfo
  // Physical network interfaces: name and /sys/class/net/<name>/speed (Mb/s; -1 unknown).
  std::vector<std::pair<std::string, int64_t>> ethernet;
  // InfiniBand ports: "<device>/<port>", /sys/class/infiniband/<d>/ports/<p>/rate and state.
  struct IbPort {
    std::string name;
    std::string rate;   // "400 Gb/sec (4X NDR)"
    std::string state;  // "4: ACTIVE"
  };
  std::vector<IbPort> infiniband;
};

struct DetectedDevice {
  int index = 0;
  std::string product;  // as the tool names it: "NVIDIA H100 80GB HBM3"
  Bytes memory;         // 0 when the tool does not say
  std::string type;     // catalog name, empty when none matches
};

struct DetectedNode {
  std::string hostname;
  std::string cpu;  // model name
  int cpu_threads = 0;
  Bytes host_memory;
  std::vector<DetectedDevice> devices;
  std::string source;          // which tool the devices came from: "nvidia-smi", ...
  std::optional<bool> nvlink;  // every pair NVLink-connected (nvidia-smi topo); unset: unknown
  // Without NVLink: GPUs per PCIe switch, in device order (consecutive runs of this many GPUs
  // are PIX or PXB to each other, nvidia-smi topo); 0: the root complex, or not known.
  int devices_per_pcie_switch = 0;
  std::optional<bool> xgmi;    // every pair xGMI-connected (rocm-smi --showtopo); unset: unknown
  int lspci_accelerators = 0;  // NVIDIA, AMD and Habana accelerators lspci lists
  bool lspci_listed = false;   // lspci printed anything
  LinkKind network = LinkKind::kEthernet;
  BytesPerSecond nic_bandwidth;    // the fastest NIC (per direction); 0: none found
  int nic_count = 0;               // NICs of that rate
  std::vector<std::string> notes;  // what was assumed or could not be told, in words
};

// The catalog type of a product name: the type whose model word (H100, A100, MI300X, 4090,
// Gaudi2, ...) is a word of the name, the nearest in memory when several share it; nullopt
// when none does.
std::optional<std::string> match_device_type(const std::string& product, Bytes memory);

// Reads the probe. Errors (invalid_argument naming the tool): output that is not the format
// asked for, and an accelerator the catalog has no type for.
Result<DetectedNode> detect_node(const NodeProbe& probe);

// The node as a one-node cluster, which cluster_from_json reads back. Errors:
// invalid_argument when the node has no accelerator (a cluster needs one).
Result<ClusterSpec> detected_cluster(const DetectedNode& node);
// The human summary: CPU, memory, accelerators, links, NICs, notes.
std::string detected_summary(const DetectedNode& node);

}  // namespace motley
