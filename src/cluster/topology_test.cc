#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"

namespace motley {
namespace {

// Hand-built specs, so that every expected number below follows from the documented rules
// (docs/cluster-format.md, "Paths") without going through the YAML defaults.
LinkSpec link(LinkKind kind, double gbps, double us) {
  return LinkSpec{kind, gigabytes_per_second(gbps), microseconds(us)};
}

NodeSpec node(std::string name, std::vector<NodeDevices> devices, LinkSpec interconnect,
              LinkSpec pcie, int64_t devices_per_switch, LinkSpec nic, int64_t nic_count) {
  NodeSpec n;
  n.name = std::move(name);
  n.devices = std::move(devices);
  n.interconnect = interconnect;
  n.pcie = pcie;
  n.devices_per_pcie_switch = devices_per_switch;
  n.nic = nic;
  n.nic_count = nic_count;
  return n;
}

ClusterSpec cluster(std::vector<NodeSpec> nodes, LinkSpec network) {
  ClusterSpec c;
  c.name = "test";
  c.nodes = std::move(nodes);
  c.network = network;
  return c;
}

std::vector<std::string> link_names(const Topology& t, const Path& p) {
  std::vector<std::string> names;
  for (int id : p.links) names.push_back(t.links()[id].name);
  return names;
}

using Ids = std::vector<int>;
using Names = std::vector<std::string>;

TEST(TopologyTest, ListsDevicesInNodeThenGroupOrder) {
  ClusterSpec c =
      cluster({node("a", {{"H100-SXM", 2}}, link(LinkKind::kNvlink, 450, 2),
                    link(LinkKind::kPcie, 49, 3), 0, link(LinkKind::kInfiniband, 50, 1), 1),
               node("b", {{"RTX-4090", 1}, {"MI210", 2}}, link(LinkKind::kPcie, 24, 3),
                    link(LinkKind::kPcie, 24, 3), 0, link(LinkKind::kInfiniband, 50, 1), 1)},
              link(LinkKind::kInfiniband, 50, 2));
  Topology t(c);
  ASSERT_EQ(t.devices().size(), 5u);
  const std::vector<std::string> types = {"H100-SXM", "H100-SXM", "RTX-4090", "MI210", "MI210"};
  const std::vector<int> nodes = {0, 0, 1, 1, 1};
  const std::vector<int> locals = {0, 1, 0, 1, 2};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(t.devices()[i].id, i);
    EXPECT_EQ(t.devices()[i].type, types[i]);
    EXPECT_EQ(t.devices()[i].node, nodes[i]);
    EXPECT_EQ(t.devices()[i].local_index, locals[i]);
    EXPECT_EQ(t.device_type(i).name, types[i]);
    EXPECT_EQ(t.node_of(i).name, nodes[i] == 0 ? "a" : "b");
  }
  EXPECT_EQ(t.device_type(3).vendor, Vendor::kAmd);
  EXPECT_EQ(cluster_devices(c).size(), 5u);
}

TEST(TopologyTest, DeviceToItselfIsFree) {
  ClusterSpec c =
      cluster({node("a", {{"A100-80GB", 2}}, link(LinkKind::kNvlink, 300, 2),
                    link(LinkKind::kPcie, 24, 3), 0, link(LinkKind::kInfiniband, 25, 1), 1)},
              link(LinkKind::kInfiniband, 25, 2));
  Topology t(c);
  for (int d = 0; d < 2; ++d) {
    const Path& p = t.path(d, d);
    EXPECT_TRUE(p.links.empty());
    EXPECT_EQ(p.latency.value(), 0.0);
    EXPECT_TRUE(std::isinf(p.bandwidth.value()));
    EXPECT_GT(p.bandwidth.value(), 0.0);
    EXPECT_FALSE(p.host_staged);
    EXPECT_FALSE(p.crosses_nodes);
  }
}

// One node of 4 H100s, two per PCIe switch, two NICs. Links per device: nvlink tx, nvlink rx,
// pcie tx, pcie rx (device i: 4i .. 4i+3); then the switch uplinks (16..19); then the NICs.
class NvlinkNodeTest : public ::testing::Test {
 protected:
  ClusterSpec spec_ =
      cluster({node("n", {{"H100-SXM", 4}}, link(LinkKind::kNvlink, 450, 2),
                    link(LinkKind::kPcie, 49, 3), 2, link(LinkKind::kInfiniband, 50, 1), 2)},
              link(LinkKind::kInfiniband, 50, 2));
  Topology t_{spec_};
};

TEST_F(NvlinkNodeTest, LinksAreNumberedInDocumentedOrder) {
  ASSERT_EQ(t_.links().size(), 24u);
  EXPECT_EQ(t_.links()[0].name, "n/gpu0 nvlink tx");
  EXPECT_EQ(t_.links()[1].name, "n/gpu0 nvlink rx");
  EXPECT_EQ(t_.links()[2].name, "n/gpu0 pcie tx");
  EXPECT_EQ(t_.links()[3].name, "n/gpu0 pcie rx");
  EXPECT_EQ(t_.links()[16].name, "n pcie-switch0 uplink tx");
  EXPECT_EQ(t_.links()[19].name, "n pcie-switch1 uplink rx");
  EXPECT_EQ(t_.links()[20].name, "n nic0 tx");
  EXPECT_EQ(t_.links()[23].name, "n nic1 rx");
  for (size_t i = 0; i < t_.links().size(); ++i) EXPECT_EQ(t_.links()[i].id, static_cast<int>(i));
  EXPECT_EQ(t_.links()[0].kind, LinkKind::kNvlink);
  EXPECT_DOUBLE_EQ(t_.links()[0].bandwidth.value(), 450e9);
  EXPECT_EQ(t_.links()[20].kind, LinkKind::kInfiniband);
}

TEST_F(NvlinkNodeTest, PairCrossesSenderTxAndReceiverRx) {
  const Path& p = t_.path(0, 3);
  EXPECT_EQ(p.links, (Ids{0, 13}));
  EXPECT_EQ(link_names(t_, p), (Names{"n/gpu0 nvlink tx", "n/gpu3 nvlink rx"}));
  EXPECT_DOUBLE_EQ(p.latency.value(), 2e-6);
  EXPECT_DOUBLE_EQ(p.bandwidth.value(), 450e9);
  EXPECT_FALSE(p.host_staged);
  EXPECT_FALSE(p.crosses_nodes);
}

TEST_F(NvlinkNodeTest, TransfersFromOneDeviceShareItsTxPort) {
  const Path& to1 = t_.path(0, 1);
  const Path& to2 = t_.path(0, 2);
  EXPECT_EQ(to1.links, (Ids{0, 5}));
  EXPECT_EQ(to2.links, (Ids{0, 9}));
  EXPECT_EQ(to1.links[0], to2.links[0]);  // both contend for gpu0's NVLink tx
  // Two senders into one device share its rx port, and nothing else.
  EXPECT_EQ(t_.path(1, 2).links, (Ids{4, 9}));
  EXPECT_EQ(t_.path(3, 2).links, (Ids{12, 9}));
}

TEST(TopologyTest, XgmiPairsHaveDedicatedLinks) {
  // 3 MI300X, all on the root complex: pcie tx/rx per device (0..5), then one link per ordered
  // pair in row-major order (6..11), then the NIC.
  ClusterSpec c =
      cluster({node("m", {{"MI300X", 3}}, link(LinkKind::kXgmi, 64, 3),
                    link(LinkKind::kPcie, 49, 3), 0, link(LinkKind::kInfiniband, 50, 1), 1)},
              link(LinkKind::kInfiniband, 50, 2));
  Topology t(c);
  ASSERT_EQ(t.links().size(), 14u);
  const Path& p = t.path(1, 2);
  EXPECT_EQ(p.links, (Ids{9}));
  EXPECT_EQ(link_names(t, p), (Names{"m/gpu1->gpu2 xgmi"}));
  EXPECT_DOUBLE_EQ(p.latency.value(), 3e-6);
  EXPECT_DOUBLE_EQ(p.bandwidth.value(), 64e9);
  EXPECT_EQ(t.links()[9].kind, LinkKind::kXgmi);
  EXPECT_EQ(t.path(2, 1).links, (Ids{11}));
  // Sends from one device to two peers share nothing.
  EXPECT_EQ(t.path(0, 1).links, (Ids{6}));
  EXPECT_EQ(t.path(0, 2).links, (Ids{7}));
  EXPECT_EQ(t.path(1, 0).links, (Ids{8}));
}

// 4 L40S, two per switch. Links: device i pcie tx 2i, rx 2i+1 (0..7); switch 0 uplink tx 8,
// rx 9; switch 1 uplink tx 10, rx 11; NIC 12, 13.
TEST(TopologyTest, PcieSameSwitchStaysUnderTheSwitch) {
  ClusterSpec c =
      cluster({node("p", {{"L40S", 4}}, link(LinkKind::kPcie, 20, 1.5),
                    link(LinkKind::kPcie, 20, 1.5), 2, link(LinkKind::kEthernet, 25, 5), 1)},
              link(LinkKind::kEthernet, 25, 10));
  Topology t(c);
  ASSERT_EQ(t.links().size(), 14u);
  const Path& p = t.path(0, 1);
  EXPECT_EQ(p.links, (Ids{0, 3}));
  EXPECT_EQ(link_names(t, p), (Names{"p/gpu0 pcie tx", "p/gpu1 pcie rx"}));
  EXPECT_DOUBLE_EQ(p.latency.value(), 1.5e-6);
  EXPECT_DOUBLE_EQ(p.bandwidth.value(), 20e9);
  EXPECT_FALSE(p.host_staged);
}

TEST(TopologyTest, PcieAcrossSwitchesCrossesBothUplinks) {
  ClusterSpec c =
      cluster({node("p", {{"L40S", 4}}, link(LinkKind::kPcie, 20, 1.5),
                    link(LinkKind::kPcie, 20, 1.5), 2, link(LinkKind::kEthernet, 25, 5), 1)},
              link(LinkKind::kEthernet, 25, 10));
  Topology t(c);
  const Path& p = t.path(0, 2);
  EXPECT_EQ(p.links, (Ids{0, 8, 11, 5}));
  EXPECT_EQ(link_names(t, p), (Names{"p/gpu0 pcie tx", "p pcie-switch0 uplink tx",
                                     "p pcie-switch1 uplink rx", "p/gpu2 pcie rx"}));
  EXPECT_DOUBLE_EQ(p.latency.value(), 3e-6);  // two PCIe traversals
  EXPECT_DOUBLE_EQ(p.bandwidth.value(), 20e9);
  // Both directions between the switches are separate links.
  EXPECT_EQ(t.path(3, 1).links, (Ids{6, 10, 9, 3}));
  // The uplink is shared: gpu0->gpu2 and gpu1->gpu3 both climb switch 0.
  EXPECT_EQ(t.path(1, 3).links, (Ids{2, 8, 11, 7}));
}

TEST(TopologyTest, PcieWithoutSwitchesHasNoUplinks) {
  ClusterSpec c =
      cluster({node("p", {{"A10", 4}}, link(LinkKind::kPcie, 24, 3), link(LinkKind::kPcie, 24, 3),
                    0, link(LinkKind::kEthernet, 25, 5), 1)},
              link(LinkKind::kEthernet, 25, 10));
  Topology t(c);
  ASSERT_EQ(t.links().size(), 10u);  // 4 x (tx, rx) + one NIC
  EXPECT_EQ(t.path(0, 3).links, (Ids{0, 7}));
  EXPECT_DOUBLE_EQ(t.path(0, 3).latency.value(), 3e-6);
}

// Node a: 2 H100 (links 0..7: nvlink tx/rx, pcie tx/rx each), NICs 8..11 (two NICs).
// Node b: 2 A100 (links 12..19), one NIC 20, 21.
class CrossNodeTest : public ::testing::Test {
 protected:
  static ClusterSpec spec(double network_gbps) {
    return cluster({node("a", {{"H100-SXM", 2}}, link(LinkKind::kNvlink, 450, 2),
                         link(LinkKind::kPcie, 49, 3), 0, link(LinkKind::kInfiniband, 40, 1.5), 2),
                    node("b", {{"A100-80GB", 2}}, link(LinkKind::kNvlink, 300, 2),
                         link(LinkKind::kPcie, 24, 3), 0, link(LinkKind::kInfiniband, 25, 1), 1)},
                   link(LinkKind::kInfiniband, network_gbps, 2));
  }
};

TEST_F(CrossNodeTest, SameVendorGoesNicFabricNic) {
  Topology t(spec(50));
  ASSERT_EQ(t.links().size(), 22u);
  const Path& p = t.path(1, 3);  // a/gpu1 uses NIC 1 % 2 = 1; b/gpu1 uses NIC 1 % 1 = 0
  EXPECT_EQ(p.links, (Ids{10, 21}));
  EXPECT_EQ(link_names(t, p), (Names{"a nic1 tx", "b nic0 rx"}));
  EXPECT_DOUBLE_EQ(p.latency.value(), 1.5e-6 + 2e-6 + 1e-6);
  EXPECT_DOUBLE_EQ(p.bandwidth.value(), 25e9);  // min(40, 50, 25)
  EXPECT_TRUE(p.crosses_nodes);
  EXPECT_FALSE(p.host_staged);
  EXPECT_EQ(t.path(0, 2).links, (Ids{8, 21}));
  EXPECT_EQ(t.path(3, 0).links, (Ids{20, 9}));
}

TEST_F(CrossNodeTest, FabricPortRateCapsThePath) {
  Topology t(spec(20));
  EXPECT_DOUBLE_EQ(t.path(1, 3).bandwidth.value(), 20e9);
  EXPECT_EQ(t.path(1, 3).links, (Ids{10, 21}));  // non-blocking fabric: no shared link
}

TEST(TopologyTest, CrossVendorAcrossNodesIsHostStagedAndTakesTheSlowerOfPcieAndNetwork) {
  // Node h: 2 H100, one device per switch: device links 0..7, uplinks 8..11, NIC 12, 13.
  // Node m: 2 MI300X on the root complex: device links 14..17, xGMI 18, 19, NIC 20, 21.
  ClusterSpec c =
      cluster({node("h", {{"H100-SXM", 2}}, link(LinkKind::kNvlink, 450, 2),
                    link(LinkKind::kPcie, 49, 3), 1, link(LinkKind::kInfiniband, 50, 1), 1),
               node("m", {{"MI300X", 2}}, link(LinkKind::kXgmi, 64, 3),
                    link(LinkKind::kPcie, 20, 2), 0, link(LinkKind::kInfiniband, 50, 1), 1)},
              link(LinkKind::kInfiniband, 50, 2));
  Topology t(c);
  ASSERT_EQ(t.links().size(), 22u);
  const Path& p = t.path(1, 3);
  EXPECT_EQ(p.links, (Ids{6, 10, 12, 21, 17}));
  EXPECT_EQ(link_names(t, p), (Names{"h/gpu1 pcie tx", "h pcie-switch1 uplink tx", "h nic0 tx",
                                     "m nic0 rx", "m/gpu1 pcie rx"}));
  // PCIe up, staging, NIC, fabric, NIC, staging, PCIe down.
  EXPECT_DOUBLE_EQ(p.latency.value(), 3e-6 + 10e-6 + 1e-6 + 2e-6 + 1e-6 + 10e-6 + 2e-6);
  EXPECT_DOUBLE_EQ(p.bandwidth.value(), 20e9);  // m's PCIe is slower than the 50 GB/s network
  EXPECT_TRUE(p.host_staged);
  EXPECT_TRUE(p.crosses_nodes);
  const Path& back = t.path(3, 1);
  EXPECT_EQ(back.links, (Ids{16, 20, 13, 11, 7}));
  EXPECT_DOUBLE_EQ(back.latency.value(), p.latency.value());
  // Same vendor inside m still uses xGMI.
  EXPECT_EQ(t.path(2, 3).links, (Ids{18}));
}

TEST(TopologyTest, CrossVendorWithFastPcieIsLimitedByTheNetwork) {
  ClusterSpec c =
      cluster({node("h", {{"H100-SXM", 1}}, link(LinkKind::kNvlink, 450, 2),
                    link(LinkKind::kPcie, 49, 3), 0, link(LinkKind::kInfiniband, 50, 1), 1),
               node("g", {{"Gaudi2", 1}}, link(LinkKind::kGaudiRoce, 262.5, 3),
                    link(LinkKind::kPcie, 24, 3), 0, link(LinkKind::kInfiniband, 50, 1), 1)},
              link(LinkKind::kInfiniband, 12.5, 2));
  Topology t(c);
  EXPECT_DOUBLE_EQ(t.path(0, 1).bandwidth.value(), 12.5e9);
  EXPECT_TRUE(t.path(0, 1).host_staged);
}

TEST(TopologyTest, MixedVendorsInOneNodeStageThroughHostMemory) {
  // Devices 0, 1: RTX-4090 under switch 0; device 2: MI210 under switch 1.
  // Links: device i pcie tx 2i, rx 2i+1 (0..5); switch 0 uplink 6, 7; switch 1 uplink 8, 9.
  ClusterSpec c =
      cluster({node("w", {{"RTX-4090", 2}, {"MI210", 1}}, link(LinkKind::kPcie, 24, 2.5),
                    link(LinkKind::kPcie, 24, 2.5), 2, link(LinkKind::kEthernet, 3.125, 5), 1)},
              link(LinkKind::kEthernet, 3.125, 20));
  Topology t(c);
  const Path& p = t.path(0, 2);
  EXPECT_EQ(p.links, (Ids{0, 6, 9, 5}));
  EXPECT_EQ(link_names(t, p), (Names{"w/gpu0 pcie tx", "w pcie-switch0 uplink tx",
                                     "w pcie-switch1 uplink rx", "w/gpu2 pcie rx"}));
  EXPECT_DOUBLE_EQ(p.latency.value(), 2.5e-6 + 10e-6 + 2.5e-6);
  EXPECT_DOUBLE_EQ(p.bandwidth.value(), 24e9);
  EXPECT_TRUE(p.host_staged);
  EXPECT_FALSE(p.crosses_nodes);
  // Same vendor, same switch: peer to peer.
  EXPECT_EQ(t.path(0, 1).links, (Ids{0, 3}));
  EXPECT_FALSE(t.path(0, 1).host_staged);
  EXPECT_DOUBLE_EQ(t.path(0, 1).latency.value(), 2.5e-6);
}

TEST(TopologyTest, HostStagingUnderOneSwitchGoesUpAndDownItsUplink) {
  // All three devices under switch 0: uplink tx 6, rx 7.
  ClusterSpec c =
      cluster({node("w", {{"RTX-4090", 2}, {"MI210", 1}}, link(LinkKind::kPcie, 24, 2.5),
                    link(LinkKind::kPcie, 24, 2.5), 4, link(LinkKind::kEthernet, 3.125, 5), 1)},
              link(LinkKind::kEthernet, 3.125, 20));
  Topology t(c);
  EXPECT_EQ(t.path(2, 1).links, (Ids{4, 6, 7, 3}));
  EXPECT_TRUE(t.path(2, 1).host_staged);
}

TEST(TopologyTest, ZeroLatencyOverridesAreKept) {
  ClusterSpec c =
      cluster({node("a", {{"H100-SXM", 2}}, link(LinkKind::kNvlink, 400, 0),
                    link(LinkKind::kPcie, 48, 0), 0, link(LinkKind::kInfiniband, 50, 0), 1),
               node("b", {{"H100-SXM", 2}}, link(LinkKind::kNvlink, 400, 0),
                    link(LinkKind::kPcie, 48, 0), 0, link(LinkKind::kInfiniband, 50, 0), 1)},
              link(LinkKind::kInfiniband, 50, 0));
  Topology t(c);
  EXPECT_EQ(t.path(0, 1).latency.value(), 0.0);
  EXPECT_EQ(t.path(0, 3).latency.value(), 0.0);
  EXPECT_DOUBLE_EQ(t.path(0, 1).bandwidth.value(), 400e9);
}

TEST(TopologyTest, PathsOfTheHandWrittenLabFile) {
  auto c = load_cluster_yaml(MOTLEY_TEST_DATA_DIR "/cluster/lab-mixed.yaml");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  Topology t(c.value());
  ASSERT_EQ(t.devices().size(), 8u + 8u + 4u + 3u);
  // Inside an H100 node the NVLink latency was overridden to 0.
  EXPECT_EQ(t.path(0, 1).latency.value(), 0.0);
  EXPECT_DOUBLE_EQ(t.path(0, 1).bandwidth.value(), 400e9);
  // h100-node-0/gpu0 -> h100-node-1/gpu5: NIC 0 -> NIC 5 % 4 = 1, fabric latency 0.
  const Path& across = t.path(0, 13);
  EXPECT_EQ(link_names(t, across), (Names{"h100-node-0 nic0 tx", "h100-node-1 nic1 rx"}));
  EXPECT_DOUBLE_EQ(across.latency.value(), 0.5e-6 + 0.0 + 0.5e-6);
  EXPECT_DOUBLE_EQ(across.bandwidth.value(), 40e9);
  // h100-node-0/gpu0 -> mi300x-node/gpu1 (device 17): host-staged on both ends.
  const Path& staged = t.path(0, 17);
  EXPECT_EQ(link_names(t, staged),
            (Names{"h100-node-0/gpu0 pcie tx", "h100-node-0 pcie-switch0 uplink tx",
                   "h100-node-0 nic0 tx", "mi300x-node nic1 rx", "mi300x-node/gpu1 pcie rx"}));
  EXPECT_DOUBLE_EQ(staged.latency.value(), 1.5e-6 + 10e-6 + 0.5e-6 + 0.0 + 1e-6 + 10e-6 + 3e-6);
  EXPECT_DOUBLE_EQ(staged.bandwidth.value(), 40e9);
  EXPECT_TRUE(staged.host_staged);
  // MI300X pair: xGMI from the catalog, latency overridden to 4 us.
  EXPECT_DOUBLE_EQ(t.path(16, 17).latency.value(), 4e-6);
  EXPECT_DOUBLE_EQ(t.path(16, 17).bandwidth.value(), 64e9);
  // Workstation: RTX-4090 (20) to MI210 (22) through host memory, no switches.
  EXPECT_EQ(link_names(t, t.path(20, 22)),
            (Names{"workstation/gpu0 pcie tx", "workstation/gpu2 pcie rx"}));
  EXPECT_DOUBLE_EQ(t.path(20, 22).latency.value(), 3e-6 + 10e-6 + 3e-6);
  EXPECT_DOUBLE_EQ(t.path(20, 22).bandwidth.value(), 20e9);
}

}  // namespace
}  // namespace motley
