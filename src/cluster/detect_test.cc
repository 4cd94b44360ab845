// motley detect's reading of the tools' text (detect.h): the catalog match of product names,
// nvidia-smi's query and topology, rocm-smi's product and memory lines, lspci's accelerators,
// the NICs, and the cluster made of it reading back.
#include "motley/cluster/detect.h"

#include <gtest/gtest.h>

#include <string>

namespace motley {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

TEST(DetectTest, ProductNamesMatchTheCatalogByModelAndMemory) {
  EXPECT_EQ(match_device_type("NVIDIA H100 80GB HBM3", Bytes(79.6 * kGiB)), "H100-SXM");
  EXPECT_EQ(match_device_type("NVIDIA A100-SXM4-80GB", Bytes(80 * kGiB)), "A100-80GB");
  EXPECT_EQ(match_device_type("NVIDIA A100-PCIE-40GB", Bytes(40 * kGiB)), "A100-40GB");
  // A10 is a word of its own, not the start of A100.
  EXPECT_EQ(match_device_type("NVIDIA A10", Bytes(22 * kGiB)), "A10");
  EXPECT_EQ(match_device_type("NVIDIA GeForce RTX 4090", Bytes(24 * kGiB)), "RTX-4090");
  EXPECT_EQ(match_device_type("Tesla T4", Bytes(15 * kGiB)), "T4");
  EXPECT_EQ(match_device_type("AMD Instinct MI300X OAM", Bytes(191 * kGiB)), "MI300X");
  EXPECT_EQ(match_device_type("NVIDIA L40S", Bytes(45 * kGiB)), "L40S");
  EXPECT_EQ(match_device_type("NVIDIA B200", Bytes(179 * kGiB)), std::nullopt);
  EXPECT_EQ(match_device_type("NVIDIA L40", Bytes(45 * kGiB)), std::nullopt);
}

TEST(DetectTest, NvidiaSmiAndItsTopology) {
  NodeProbe p;
  p.hostname = "n0";
  p.nvidia_smi = "0, NVIDIA A100-PCIE-40GB, 40960\n1, NVIDIA A100-PCIE-40GB, 40960\n";
  p.nvidia_topology =
      "\tGPU0\tGPU1\tCPU Affinity\n"
      "GPU0\t X \tPIX\t0-31\n"
      "GPU1\tPIX\t X \t0-31\n"
      "\nLegend:\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n";
  p.ethernet = {{"eno1", 100000}, {"eno2", 100000}, {"eno3", 1000}};
  Result<DetectedNode> n = detect_node(p);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  ASSERT_EQ(n->devices.size(), 2u);
  EXPECT_EQ(n->devices[1].type, "A100-40GB");
  EXPECT_EQ(n->devices[1].memory, Bytes(40960.0 * 1024 * 1024));
  EXPECT_EQ(n->nvlink, false);
  EXPECT_EQ(n->network, LinkKind::kEthernet);
  EXPECT_EQ(n->nic_count, 2);
  EXPECT_DOUBLE_EQ(n->nic_bandwidth.value(), 12.5e9);
  Result<ClusterSpec> c = detected_cluster(*n);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->nodes[0].interconnect.kind, LinkKind::kPcie);
  EXPECT_EQ(c->nodes[0].nic_count, 2);

  p.nvidia_topology = "\tGPU0\tGPU1\nGPU0\t X \tNV12\nGPU1\tNV12\t X \n";
  EXPECT_EQ(detect_node(p)->nvlink, true);
  p.nvidia_smi = "0, NVIDIA A100-PCIE-40GB\n";
  EXPECT_EQ(detect_node(p).status().message(),
            "nvidia-smi: line 1: expected 'index, name, memory.total' (--query-gpu=index,name,"
            "memory.total --format=csv,noheader,nounits), got '0, NVIDIA A100-PCIE-40GB'");
}

// Four PCIe A100s: the PIX pairs make two switches, SYS between them crosses sockets.
constexpr const char* kTwoSwitches =
    "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tPIX\tSYS\tSYS\t0-31\t0\n"
    "GPU1\tPIX\t X \tSYS\tSYS\t0-31\t0\n"
    "GPU2\tSYS\tSYS\t X \tPIX\t32-63\t1\n"
    "GPU3\tSYS\tSYS\tPIX\t X \t32-63\t1\n"
    "\nLegend:\n  X    = Self\n  PIX  = Connection traversing at most a single PCIe bridge\n";

NodeProbe four_a100s(const std::string& topology) {
  NodeProbe p;
  p.hostname = "n0";
  for (int i = 0; i < 4; ++i)
    p.nvidia_smi += std::to_string(i) + ", NVIDIA A100-PCIE-40GB, 40960\n";
  p.nvidia_topology = topology;
  return p;
}

bool has_note(const DetectedNode& n, const std::string& text) {
  for (const std::string& note : n.notes) {
    if (note.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(DetectTest, PcieSwitchesFromTheTopology) {
  Result<DetectedNode> n = detect_node(four_a100s(kTwoSwitches));
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->nvlink, false);
  EXPECT_EQ(n->devices_per_pcie_switch, 2);
  EXPECT_TRUE(has_note(*n, "cross CPU sockets (nvidia-smi topo -m: SYS)"));
  EXPECT_NE(detected_summary(*n).find("PCIe: 2 GPUs per switch"), std::string::npos);
  Result<ClusterSpec> c = detected_cluster(*n);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->nodes[0].interconnect.kind, LinkKind::kPcie);
  EXPECT_EQ(c->nodes[0].devices_per_pcie_switch, 2);

  // Switches that are not equal runs in device order: said, and left on the root complex.
  const std::string uneven =
      "\tGPU0\tGPU1\tGPU2\tGPU3\n"
      "GPU0\t X \tPXB\tPXB\tNODE\n"
      "GPU1\tPXB\t X \tPXB\tNODE\n"
      "GPU2\tPXB\tPXB\t X \tNODE\n"
      "GPU3\tNODE\tNODE\tNODE\t X \n";
  n = detect_node(four_a100s(uneven));
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->devices_per_pcie_switch, 0);
  EXPECT_TRUE(has_note(*n, "not runs of equal size in device order ([0, 1, 2] [3])"));

  // NVLink bridges between pairs: not every pair, so PCIe, and said.
  const std::string bridged =
      "\tGPU0\tGPU1\tGPU2\tGPU3\n"
      "GPU0\t X \tNV4\tPHB\tPHB\n"
      "GPU1\tNV4\t X \tPHB\tPHB\n"
      "GPU2\tPHB\tPHB\t X \tNV4\n"
      "GPU3\tPHB\tPHB\tNV4\t X \n";
  n = detect_node(four_a100s(bridged));
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->nvlink, false);
  EXPECT_EQ(n->devices_per_pcie_switch, 0);
  EXPECT_TRUE(has_note(*n, "NVLink joins only some pairs"));

  // A matrix with fewer rows than GPUs says nothing.
  n = detect_node(four_a100s("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tPIX\t X \n"));
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->nvlink, std::nullopt);
  EXPECT_TRUE(has_note(*n, "no 'nvidia-smi topo -m' output"));
}

TEST(DetectTest, XgmiFromRocmSmiTopology) {
  NodeProbe p;
  for (int i = 0; i < 3; ++i) {
    p.rocm_smi += "GPU[" + std::to_string(i) + "]\t\t: Card Series: \t\tAMD Instinct MI250X\n";
  }
  const auto topology = [](const std::string& link) {
    return "==== ROCm System Management Interface ====\n"
           "==== Weight between two GPUs ====\n"
           "       GPU0  GPU1  GPU2\n"
           "GPU0   0     15    15\nGPU1   15    0     15\nGPU2   15    15    0\n"
           "==== Link Type between two GPUs ====\n"
           "       GPU0  GPU1  GPU2\n"
           "GPU0   0     XGMI  " +
           link + "\nGPU1   XGMI  0     " + link + "\nGPU2   " + link + "  " + link +
           "  0\n"
           "==== Numa Nodes ====\nGPU[0]\t\t: (Topology) Numa Node: 0\n";
  };
  p.rocm_topology = topology("XGMI");
  Result<DetectedNode> n = detect_node(p);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->xgmi, true);
  EXPECT_EQ(detected_cluster(*n)->nodes[0].interconnect.kind, LinkKind::kXgmi);

  p.rocm_topology = topology("PCIE");
  n = detect_node(p);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->xgmi, false);
  EXPECT_TRUE(has_note(*n,
                       "xGMI joins only some pairs of GPUs (rocm-smi --showtopo; not: 0-2 "
                       "PCIE, 1-2 PCIE)"));
  EXPECT_EQ(detected_cluster(*n)->nodes[0].interconnect.kind, LinkKind::kPcie);

  // xGMI on a type the catalog knows only with PCIe: kept as the catalog says, and said.
  p.rocm_smi.clear();
  for (int i = 0; i < 3; ++i) {
    p.rocm_smi += "GPU[" + std::to_string(i) + "]\t\t: Card Series: \t\tAMD Instinct MI210\n";
  }
  p.rocm_topology = topology("XGMI");
  n = detect_node(p);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->devices[2].type, "MI210");
  EXPECT_TRUE(has_note(*n, "no xGMI rate for MI210"));
  EXPECT_EQ(detected_cluster(*n)->nodes[0].interconnect.kind, LinkKind::kPcie);

  p.rocm_topology.clear();
  n = detect_node(p);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->xgmi, std::nullopt);
  EXPECT_TRUE(has_note(*n, "no 'rocm-smi --showtopo' output"));
}

TEST(DetectTest, RocmSmiLspciAndInfiniband) {
  NodeProbe p;
  p.rocm_smi =
      "GPU[0]\t\t: Card Series: \t\tAMD Instinct MI300X OAM\n"
      "GPU[1]\t\t: Card Series: \t\tAMD Instinct MI300X OAM\n"
      "GPU[0]\t\t: VRAM Total Memory (B): 205822885888\n"
      "GPU[1]\t\t: VRAM Total Memory (B): 205822885888\n";
  p.infiniband = {{"mlx5_0/1", "400 Gb/sec (4X NDR)", "4: ACTIVE"},
                  {"mlx5_1/1", "400 Gb/sec (4X NDR)", "4: ACTIVE"},
                  {"mlx5_2/1", "800 Gb/sec (4X XDR)", "1: DOWN"}};
  Result<DetectedNode> n = detect_node(p);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->source, "rocm-smi");
  ASSERT_EQ(n->devices.size(), 2u);
  EXPECT_EQ(n->devices[0].type, "MI300X");
  EXPECT_EQ(n->network, LinkKind::kInfiniband);
  EXPECT_EQ(n->nic_count, 2);  // the port that is down does not count
  EXPECT_DOUBLE_EQ(n->nic_bandwidth.value(), 50e9);

  // lspci alone: accelerators counted, none usable, and said so.
  NodeProbe bare;
  bare.lspci =
      "07:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2]\n"
      "00:03.0 VGA compatible controller [0300]: Amazon.com, Inc. Device [1d0f:1111]\n"
      "c1:00.0 Processing accelerators [1200]: Habana Labs Ltd. Device [1da3:1020]\n";
  Result<DetectedNode> b = detect_node(bare);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->lspci_accelerators, 2);
  EXPECT_TRUE(b->devices.empty());
  EXPECT_NE(detected_summary(*b).find("lspci lists 2 accelerators"), std::string::npos);
  EXPECT_EQ(detected_cluster(*b).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace motley
