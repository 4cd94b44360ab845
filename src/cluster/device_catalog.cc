#include "motley/cluster/device_catalog.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "motley/core/enum_names.h"
#include "motley/core/json.h"

namespace motley {
namespace {

// PCIe host-link rates as achieved by large pinned copies, not the signalling rate
// (docs/devices.md).
constexpr double kPcieGen3GBps = 12.0;
constexpr double kPcieGen4GBps = 24.0;
constexpr double kPcieGen5GBps = 49.0;

// Spot capacity is priced at half the on-demand rate: the middle of the 30-70% discount
// range clouds commonly give.
constexpr double kSpotFraction = 0.5;

struct Row {
  const char* name;
  std::vector<std::string> aliases;
  Vendor vendor;
  double bf16_tflops;
  double fp16_tflops;
  double fp32_tflops;
  double fp8_tflops;  // 0: no FP8 tensor cores
  double memory_gib;
  double memory_tbps;
  LinkKind link;
  double link_gbps;
  double pcie_gbps;
  double matmul_efficiency;
  double on_demand_usd;
};

DeviceType make(const Row& r) {
  DeviceType d;
  d.name = r.name;
  d.aliases = r.aliases;
  d.vendor = r.vendor;
  d.peak_bf16 = teraflops(r.bf16_tflops);
  d.peak_fp16 = teraflops(r.fp16_tflops);
  d.peak_fp32 = teraflops(r.fp32_tflops);
  d.peak_fp8 = teraflops(r.fp8_tflops);
  d.memory = Bytes(r.memory_gib * kGiB);
  d.memory_bandwidth = BytesPerSecond(r.memory_tbps * kTera);
  d.intra_node_link = r.link;
  d.intra_node_bandwidth = gigabytes_per_second(r.link_gbps);
  d.pcie_bandwidth = gigabytes_per_second(r.pcie_gbps);
  d.matmul_efficiency = r.matmul_efficiency;
  d.price_on_demand_per_hour = r.on_demand_usd;
  d.price_spot_per_hour = r.on_demand_usd * kSpotFraction;
  return d;
}

// Every number here is listed with its source in docs/devices.md; keep the two in step.
std::vector<DeviceType> build_catalog() {
  // Columns: name, aliases, vendor, dense BF16 / FP16 / FP32 / FP8 TFLOP/s, memory GiB,
  // memory TB/s, intra-node link, its GB/s per direction, achieved PCIe GB/s, best matmul
  // efficiency, on-demand USD per device-hour.
  // clang-format off
  const std::vector<Row> rows = {
      {"H100-SXM", {"H100", "H100-80GB", "H100-SXM5", "H100-SXM5-80GB"}, Vendor::kNvidia,
       989.4, 989.4, 66.9, 1978.9, 80, 3.35, LinkKind::kNvlink, 450, kPcieGen5GBps, 0.80, 3.00},
      {"H200", {"H200-SXM", "H200-141GB"}, Vendor::kNvidia,
       989.4, 989.4, 66.9, 1978.9, 141, 4.8, LinkKind::kNvlink, 450, kPcieGen5GBps, 0.80, 3.80},
      {"A100-80GB", {"A100", "A100-SXM4-80GB", "A100-SXM-80GB"}, Vendor::kNvidia,
       312, 312, 19.5, 0, 80, 2.039, LinkKind::kNvlink, 300, kPcieGen4GBps, 0.87, 1.80},
      {"A100-40GB", {"A100-SXM4-40GB", "A100-SXM-40GB"}, Vendor::kNvidia,
       312, 312, 19.5, 0, 40, 1.555, LinkKind::kNvlink, 300, kPcieGen4GBps, 0.87, 1.30},
      // No BF16 tensor cores: BF16 runs at the FP32 rate.
      {"V100-32GB", {"V100", "V100-SXM2-32GB"}, Vendor::kNvidia,
       15.7, 125, 15.7, 0, 32, 0.9, LinkKind::kNvlink, 150, kPcieGen3GBps, 0.75, 0.90},
      {"L40S", {"L40S-48GB"}, Vendor::kNvidia,
       362.05, 362.05, 91.6, 733, 48, 0.864, LinkKind::kPcie, kPcieGen4GBps, kPcieGen4GBps, 0.70, 1.10},
      {"RTX-4090", {"4090", "RTX4090", "GeForce-RTX-4090"}, Vendor::kNvidia,
       165.2, 165.2, 82.6, 330.3, 24, 1.008, LinkKind::kPcie, kPcieGen4GBps, kPcieGen4GBps, 0.75, 0.40},
      {"A10", {"A10-24GB"}, Vendor::kNvidia,
       125, 125, 31.2, 0, 24, 0.6, LinkKind::kPcie, kPcieGen4GBps, kPcieGen4GBps, 0.70, 0.75},
      // No BF16 tensor cores: BF16 runs at the FP32 rate.
      {"T4", {"T4-16GB", "Tesla-T4"}, Vendor::kNvidia,
       8.1, 65, 8.1, 0, 16, 0.32, LinkKind::kPcie, kPcieGen3GBps, kPcieGen3GBps, 0.60, 0.35},
      {"MI300X", {"Instinct-MI300X"}, Vendor::kAmd,
       1307.4, 1307.4, 163.4, 2614.9, 192, 5.3, LinkKind::kXgmi, 64, kPcieGen5GBps, 0.51, 2.50},
      // One package of two GCDs, as the datasheet counts it.
      {"MI250X", {"Instinct-MI250X"}, Vendor::kAmd,
       383, 383, 47.9, 0, 128, 3.2768, LinkKind::kXgmi, 50, kPcieGen4GBps, 0.77, 1.60},
      {"MI210", {"Instinct-MI210"}, Vendor::kAmd,
       181, 181, 22.6, 0, 64, 1.6384, LinkKind::kPcie, kPcieGen4GBps, kPcieGen4GBps, 0.75, 1.00},
      {"Gaudi2", {"Gaudi-2", "HL-225"}, Vendor::kIntel,
       432, 432, 54, 865, 96, 2.46, LinkKind::kGaudiRoce, 262.5, kPcieGen4GBps, 0.99, 1.30},
      {"Gaudi3", {"Gaudi-3", "HL-325L"}, Vendor::kIntel,
       1835, 459, 229, 1835, 128, 3.67, LinkKind::kGaudiRoce, 525, kPcieGen5GBps, 0.70, 2.20},
  };
  // clang-format on
  std::vector<DeviceType> out;
  out.reserve(rows.size());
  for (const Row& r : rows) out.push_back(make(r));
  return out;
}

}  // namespace

// Indexed by Vendor, in declaration order.
constexpr const char* kVendorNames[] = {"NVIDIA", "AMD", "Intel"};
static_assert(std::size(kVendorNames) == static_cast<size_t>(Vendor::kIntel) + 1);

const char* vendor_name(Vendor vendor) { return name_in(kVendorNames, vendor); }

// Indexed by LinkKind, in declaration order.
constexpr const char* kLinkKindNames[] = {"nvlink",     "xgmi",     "gaudi-roce",  "pcie",
                                          "infiniband", "ethernet", "host-staged", "local"};
static_assert(std::size(kLinkKindNames) == static_cast<size_t>(LinkKind::kLocal) + 1);

const char* link_kind_name(LinkKind kind) { return name_in(kLinkKindNames, kind); }

std::optional<LinkKind> parse_link_kind(std::string_view name) {
  return parse_name_in<LinkKind>(kLinkKindNames, name);
}

FlopsPerSecond DeviceType::peak(DType dtype) const {
  switch (dtype) {
    case DType::kBFloat16:
      return peak_bf16;
    case DType::kFloat16:
      return peak_fp16;
    case DType::kFloat32:
      return peak_fp32;
  }
  return peak_fp32;
}

const std::vector<DeviceType>& device_catalog() {
  static const std::vector<DeviceType> kCatalog = build_catalog();
  return kCatalog;
}

std::vector<std::string> device_type_names() {
  std::vector<std::string> names;
  for (const DeviceType& d : device_catalog()) names.push_back(d.name);
  return names;
}

Result<const DeviceType*> find_device_type(std::string_view name) {
  // "H100 SXM", "h100_sxm" and "H100-SXM" are one name (see same_name).
  for (const DeviceType& d : device_catalog()) {
    if (same_name(d.name, name)) return &d;
    for (const std::string& alias : d.aliases) {
      if (same_name(alias, name)) return &d;
    }
  }
  return not_found(fmt::format("unknown device type '{}'; known device types: {}", name,
                               join_alternatives(device_type_names())));
}

}  // namespace motley
