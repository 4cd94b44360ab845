#include "motley/cluster/device_catalog.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "motley/core/json.h"

namespace motley {
namespace {

const DeviceType& lookup(std::string_view name) {
  auto r = find_device_type(name);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return *r.value();
}

TEST(DeviceCatalogTest, ListsEveryDocumentedDeviceInOrder) {
  EXPECT_EQ(device_type_names(),
            (std::vector<std::string>{"H100-SXM", "H200", "A100-80GB", "A100-40GB", "V100-32GB",
                                      "L40S", "RTX-4090", "A10", "T4", "MI300X", "MI250X", "MI210",
                                      "Gaudi2", "Gaudi3"}));
}

TEST(DeviceCatalogTest, LooksUpNamesAndAliasesCaseInsensitively) {
  EXPECT_EQ(lookup("H100-SXM").name, "H100-SXM");
  EXPECT_EQ(lookup("h100").name, "H100-SXM");
  EXPECT_EQ(lookup("H100-80GB").name, "H100-SXM");
  EXPECT_EQ(lookup("h100_sxm5").name, "H100-SXM");
  EXPECT_EQ(lookup("H100 SXM").name, "H100-SXM");
  EXPECT_EQ(lookup("a100").name, "A100-80GB");
  EXPECT_EQ(lookup("A100-40gb").name, "A100-40GB");
  EXPECT_EQ(lookup("mi300x").name, "MI300X");
  EXPECT_EQ(lookup("gaudi-2").name, "Gaudi2");
  EXPECT_EQ(lookup("GAUDI3").name, "Gaudi3");
  EXPECT_EQ(lookup("4090").name, "RTX-4090");
  EXPECT_EQ(lookup("rtx-4090").name, "RTX-4090");
  EXPECT_EQ(lookup("t4").name, "T4");
  // The same object every time: callers may keep the pointer.
  EXPECT_EQ(find_device_type("h100").value(), find_device_type("H100-SXM").value());
}

TEST(DeviceCatalogTest, NamesAndAliasesAreUnambiguous) {
  std::set<std::string> seen;
  for (const DeviceType& d : device_catalog()) {
    std::string key = d.name;
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_TRUE(seen.insert(key).second) << key;
    for (std::string alias : d.aliases) {
      for (char& c : alias) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      EXPECT_TRUE(seen.insert(alias).second) << alias;
    }
  }
}

TEST(DeviceCatalogTest, UnknownTypeIsNotFoundAndListsKnownNames) {
  auto r = find_device_type("H900");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("unknown device type 'H900'"), std::string::npos) << m;
  EXPECT_NE(m.find("H100-SXM, H200, A100-80GB"), std::string::npos) << m;
  EXPECT_NE(m.find("or Gaudi3"), std::string::npos) << m;
}

TEST(DeviceCatalogTest, H100NumbersMatchTheDatasheet) {
  const DeviceType& d = lookup("H100-SXM");
  EXPECT_EQ(d.vendor, Vendor::kNvidia);
  EXPECT_DOUBLE_EQ(d.peak_bf16.value(), 989.4e12);
  EXPECT_DOUBLE_EQ(d.peak_fp16.value(), 989.4e12);
  EXPECT_DOUBLE_EQ(d.peak_fp32.value(), 66.9e12);
  EXPECT_DOUBLE_EQ(d.memory.value(), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(d.memory_bandwidth.value(), 3.35e12);
  EXPECT_EQ(d.intra_node_link, LinkKind::kNvlink);
  EXPECT_DOUBLE_EQ(d.intra_node_bandwidth.value(), 450e9);
  EXPECT_DOUBLE_EQ(d.pcie_bandwidth.value(), 49e9);
  EXPECT_DOUBLE_EQ(d.matmul_efficiency, 0.80);
  EXPECT_DOUBLE_EQ(d.price_on_demand_per_hour, 3.0);
  EXPECT_DOUBLE_EQ(d.price_spot_per_hour, 1.5);
}

TEST(DeviceCatalogTest, LinksFollowTheVendorsInterconnects) {
  EXPECT_EQ(lookup("A100-80GB").intra_node_link, LinkKind::kNvlink);
  EXPECT_DOUBLE_EQ(lookup("A100-80GB").intra_node_bandwidth.value(), 300e9);
  EXPECT_DOUBLE_EQ(lookup("V100-32GB").intra_node_bandwidth.value(), 150e9);
  EXPECT_EQ(lookup("MI300X").intra_node_link, LinkKind::kXgmi);
  EXPECT_DOUBLE_EQ(lookup("MI300X").intra_node_bandwidth.value(), 64e9);
  EXPECT_DOUBLE_EQ(lookup("MI250X").intra_node_bandwidth.value(), 50e9);
  EXPECT_EQ(lookup("Gaudi2").intra_node_link, LinkKind::kGaudiRoce);
  // 21 of 24 100 GbE ports face the node's other devices: 21 * 100 / 8 GB/s.
  EXPECT_DOUBLE_EQ(lookup("Gaudi2").intra_node_bandwidth.value(), 262.5e9);
  EXPECT_DOUBLE_EQ(lookup("Gaudi3").intra_node_bandwidth.value(), 525e9);
  // PCIe-only cards talk over their host link: Gen4 ~24 GB/s, Gen3 ~12 GB/s achieved.
  for (const char* name : {"L40S", "RTX-4090", "A10"}) {
    EXPECT_EQ(lookup(name).intra_node_link, LinkKind::kPcie) << name;
    EXPECT_DOUBLE_EQ(lookup(name).intra_node_bandwidth.value(), 24e9) << name;
    EXPECT_DOUBLE_EQ(lookup(name).pcie_bandwidth.value(), 24e9) << name;
  }
  EXPECT_DOUBLE_EQ(lookup("T4").pcie_bandwidth.value(), 12e9);
  EXPECT_DOUBLE_EQ(lookup("H200").pcie_bandwidth.value(), 49e9);
}

TEST(DeviceCatalogTest, DevicesWithoutBf16UnitsRunBf16AtTheFp32Rate) {
  EXPECT_DOUBLE_EQ(lookup("V100-32GB").peak(DType::kBFloat16).value(), 15.7e12);
  EXPECT_DOUBLE_EQ(lookup("V100-32GB").peak(DType::kFloat16).value(), 125e12);
  EXPECT_DOUBLE_EQ(lookup("T4").peak(DType::kBFloat16).value(), 8.1e12);
  EXPECT_DOUBLE_EQ(lookup("T4").peak(DType::kFloat16).value(), 65e12);
}

TEST(DeviceCatalogTest, PeakSelectsTheDtypeRate) {
  const DeviceType& d = lookup("Gaudi3");
  EXPECT_DOUBLE_EQ(d.peak(DType::kBFloat16).value(), 1835e12);
  EXPECT_DOUBLE_EQ(d.peak(DType::kFloat16).value(), 459e12);
  EXPECT_DOUBLE_EQ(d.peak(DType::kFloat32).value(), 229e12);
}

TEST(DeviceCatalogTest, EveryEntryIsComplete) {
  for (const DeviceType& d : device_catalog()) {
    EXPECT_GT(d.peak_bf16.value(), 0) << d.name;
    EXPECT_GE(d.peak_fp16.value(), d.peak_fp32.value()) << d.name;
    EXPECT_GT(d.memory.value(), 0) << d.name;
    EXPECT_GT(d.memory_bandwidth.value(), 0) << d.name;
    EXPECT_GT(d.intra_node_bandwidth.value(), 0) << d.name;
    EXPECT_GT(d.pcie_bandwidth.value(), 0) << d.name;
    EXPECT_GT(d.matmul_efficiency, 0.0) << d.name;
    EXPECT_LE(d.matmul_efficiency, 1.0) << d.name;
    EXPECT_GT(d.price_on_demand_per_hour, 0.0) << d.name;
    EXPECT_DOUBLE_EQ(d.price_spot_per_hour, d.price_on_demand_per_hour / 2) << d.name;
  }
}

TEST(LinkKindTest, NamesRoundTrip) {
  for (LinkKind k :
       {LinkKind::kNvlink, LinkKind::kXgmi, LinkKind::kGaudiRoce, LinkKind::kPcie,
        LinkKind::kInfiniband, LinkKind::kEthernet, LinkKind::kHostStaged, LinkKind::kLocal}) {
    EXPECT_EQ(parse_link_kind(link_kind_name(k)), k) << link_kind_name(k);
  }
  EXPECT_EQ(parse_link_kind("NVLink"), LinkKind::kNvlink);
  EXPECT_EQ(parse_link_kind("gaudi_roce"), LinkKind::kGaudiRoce);
  EXPECT_EQ(parse_link_kind("token-ring"), std::nullopt);
  EXPECT_STREQ(vendor_name(Vendor::kAmd), "AMD");
}

TEST(DeviceCatalogTest, EveryDeviceIsDocumented) {
  auto text = read_text_file(MOTLEY_SOURCE_DIR "/docs/devices.md");
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  for (const DeviceType& d : device_catalog()) {
    EXPECT_NE(text.value().find("| " + d.name + " |"), std::string::npos) << d.name;
  }
}

}  // namespace
}  // namespace motley
