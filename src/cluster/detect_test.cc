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
