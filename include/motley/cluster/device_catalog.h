// The accelerator catalog: peak rates per dtype, memory, bandwidths, vendor and typical prices
// of the devices motley knows, each number sourced in docs/devices.md. Read-only after
// static initialization; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "motley/core/dtype.h"
#include "motley/core/status.h"
#include "motley/core/units.h"

namespace motley {

enum class Vendor { kNvidia, kAmd, kIntel };
const char* vendor_name(Vendor vendor);

enum class LinkKind {
  kNvlink,      // NVLink through NVSwitch: every device has its own port bandwidth
  kXgmi,        // AMD Infinity Fabric: a point-to-point link per device pair
  kGaudiRoce,   // Gaudi's on-chip RoCE ports, all-to-all inside the node
  kPcie,        // PCIe, devices behind switches, peer-to-peer or through the root complex
  kInfiniband,  // between nodes
  kEthernet,    // between nodes (RoCE or TCP)
  kHostStaged,  // through host memory: devices of different vendors
  kLocal,       // a device to itself
};
// "nvlink", "xgmi", "gaudi-roce", "pcie", "infiniband", "ethernet", "host-staged", "local".
const char* link_kind_name(LinkKind kind);
// The inverse of link_kind_name (case-insensitive); nullopt for anything else.
std::optional<LinkKind> parse_link_kind(std::string_view name);

struct DeviceType {
  std::string name;  // canonical, e.g. "H100-SXM"
  std::vector<std::string> aliases;
  Vendor vendor = Vendor::kNvidia;
  FlopsPerSecond peak_bf16;  // dense, no sparsity; FP32 rate on devices without BF16 units
  FlopsPerSecond peak_fp16;
  FlopsPerSecond peak_fp32;  // non-tensor-core FP32 (Gaudi: the matrix engine's FP32 rate)
  // Dense FP8 matrix rate (FP32 accumulate); zero where the device has no FP8 units.
  FlopsPerSecond peak_fp8;
  Bytes memory;
  BytesPerSecond memory_bandwidth;
  LinkKind intra_node_link = LinkKind::kPcie;
  BytesPerSecond intra_node_bandwidth;  // per device, per direction
  BytesPerSecond pcie_bandwidth;        // host link, per direction, as achieved in practice
  // Best achieved fraction of peak on large dense matmuls (what MAMF-style measurements report).
  double matmul_efficiency = 0.7;
  double price_on_demand_per_hour = 0.0;  // USD per device-hour
  double price_spot_per_hour = 0.0;

  FlopsPerSecond peak(DType dtype) const;
};

const std::vector<DeviceType>& device_catalog();
// Canonical names in catalog order.
std::vector<std::string> device_type_names();
// Case-insensitive, by name or alias; spaces and underscores match '-' ("h100 sxm" finds
// H100-SXM). The error (not found) lists the known names. The pointer stays valid forever.
Result<const DeviceType*> find_device_type(std::string_view name);

}  // namespace motley
