#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "motley/cluster/cluster.h"

namespace motley {
namespace {

const std::string kDataDir = MOTLEY_TEST_DATA_DIR "/cluster/";

Result<ClusterSpec> parse(std::string_view yaml) {
  auto doc = parse_yaml(yaml, "test.yaml");
  if (!doc.is_ok()) return doc.status();
  return cluster_from_json(doc.value(), "test.yaml");
}

// Expects `yaml` to fail with exactly `message` (which names the file and the field).
void expect_error(std::string_view yaml, const std::string& message) {
  auto r = parse(yaml);
  ASSERT_FALSE(r.is_ok()) << yaml;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), message);
}

void expect_error_starts(std::string_view yaml, const std::string& prefix) {
  auto r = parse(yaml);
  ASSERT_FALSE(r.is_ok()) << yaml;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().substr(0, prefix.size()), prefix) << r.status().message();
}

TEST(ClusterYamlTest, ReadsTheHandWrittenLabFile) {
  auto r = load_cluster_yaml(kDataDir + "lab-mixed.yaml");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const ClusterSpec& c = r.value();
  EXPECT_EQ(c.name, "lab-mixed");
  EXPECT_EQ(c.network.kind, LinkKind::kInfiniband);
  EXPECT_DOUBLE_EQ(c.network.bandwidth.value(), 40e9);
  EXPECT_EQ(c.network.latency.value(), 0.0);
  ASSERT_EQ(c.nodes.size(), 4u);
  EXPECT_EQ(c.nodes[0].name, "h100-node-0");
  EXPECT_EQ(c.nodes[1].name, "h100-node-1");
  EXPECT_EQ(c.nodes[2].name, "mi300x-node");
  EXPECT_EQ(c.nodes[3].name, "workstation");

  // Every key overridden.
  for (int i = 0; i < 2; ++i) {
    const NodeSpec& h = c.nodes[i];
    EXPECT_EQ(h.devices, (std::vector<NodeDevices>{{"H100-SXM", 8}}));  // alias resolved
    EXPECT_EQ(h.interconnect.kind, LinkKind::kNvlink);
    EXPECT_DOUBLE_EQ(h.interconnect.bandwidth.value(), 400e9);
    EXPECT_EQ(h.interconnect.latency.value(), 0.0);
    EXPECT_EQ(h.pcie.kind, LinkKind::kPcie);
    EXPECT_DOUBLE_EQ(h.pcie.bandwidth.value(), 48e9);
    EXPECT_DOUBLE_EQ(h.pcie.latency.value(), 1.5e-6);
    EXPECT_EQ(h.devices_per_pcie_switch, 4);
    EXPECT_EQ(h.nic.kind, LinkKind::kInfiniband);
    EXPECT_DOUBLE_EQ(h.nic.bandwidth.value(), 50e9);
    EXPECT_DOUBLE_EQ(h.nic.latency.value(), 0.5e-6);
    EXPECT_EQ(h.nic_count, 4);
    EXPECT_EQ(h.price_per_hour, 20.0);
    EXPECT_FALSE(h.spot);
  }

  // Catalog and format defaults.
  const NodeSpec& m = c.nodes[2];
  EXPECT_EQ(m.devices, (std::vector<NodeDevices>{{"MI300X", 4}}));
  EXPECT_EQ(m.interconnect.kind, LinkKind::kXgmi);
  EXPECT_DOUBLE_EQ(m.interconnect.bandwidth.value(), 64e9);
  EXPECT_DOUBLE_EQ(m.interconnect.latency.value(), 4e-6);
  EXPECT_DOUBLE_EQ(m.pcie.bandwidth.value(), 49e9);
  EXPECT_DOUBLE_EQ(m.pcie.latency.value(), 3e-6);
  EXPECT_EQ(m.devices_per_pcie_switch, 0);
  EXPECT_DOUBLE_EQ(m.nic.bandwidth.value(), 40e9);  // the network's rate
  EXPECT_DOUBLE_EQ(m.nic.latency.value(), 1e-6);
  EXPECT_EQ(m.nic_count, 2);
  EXPECT_TRUE(m.spot);
  EXPECT_DOUBLE_EQ(m.price_per_hour, 4 * 1.25);  // spot: half of $2.50

  const NodeSpec& w = c.nodes[3];
  EXPECT_EQ(w.devices, (std::vector<NodeDevices>{{"RTX-4090", 2}, {"MI210", 1}}));
  EXPECT_EQ(w.interconnect.kind, LinkKind::kPcie);
  EXPECT_DOUBLE_EQ(w.interconnect.bandwidth.value(), 20e9);  // mirrors pcie
  EXPECT_DOUBLE_EQ(w.interconnect.latency.value(), 3e-6);
  EXPECT_DOUBLE_EQ(w.pcie.bandwidth.value(), 20e9);
  EXPECT_EQ(w.nic_count, 1);
  EXPECT_DOUBLE_EQ(w.price_per_hour, 2 * 0.40 + 1.00);
}

TEST(ClusterYamlTest, DefaultsForAMinimalFile) {
  auto r = parse("nodes:\n  - name: box\n    devices: {type: A100-40GB, count: 4}\n");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const ClusterSpec& c = r.value();
  EXPECT_EQ(c.name, "test");  // the file name's stem
  EXPECT_EQ(c.network.kind, LinkKind::kInfiniband);
  EXPECT_DOUBLE_EQ(c.network.bandwidth.value(), 50e9);
  EXPECT_DOUBLE_EQ(c.network.latency.value(), 2e-6);
  const NodeSpec& n = c.nodes.at(0);
  EXPECT_EQ(n.name, "box");
  EXPECT_EQ(n.interconnect.kind, LinkKind::kNvlink);
  EXPECT_DOUBLE_EQ(n.interconnect.bandwidth.value(), 300e9);
  EXPECT_DOUBLE_EQ(n.interconnect.latency.value(), 2e-6);
  EXPECT_DOUBLE_EQ(n.pcie.bandwidth.value(), 24e9);
  EXPECT_DOUBLE_EQ(n.pcie.latency.value(), 3e-6);
  EXPECT_EQ(n.devices_per_pcie_switch, 0);
  EXPECT_DOUBLE_EQ(n.nic.bandwidth.value(), 50e9);
  EXPECT_DOUBLE_EQ(n.nic.latency.value(), 1e-6);
  EXPECT_EQ(n.nic_count, 1);
  EXPECT_DOUBLE_EQ(n.price_per_hour, 4 * 1.30);
  EXPECT_FALSE(n.spot);
}

TEST(ClusterYamlTest, EthernetDefaultsAndSpotPrice) {
  auto r = parse(R"(
name: eth
network: {kind: ethernet}
nodes:
  - {name: a, count: 2, devices: {type: L40S, count: 4}, spot: true}
)");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const ClusterSpec& c = r.value();
  EXPECT_DOUBLE_EQ(c.network.bandwidth.value(), 12.5e9);
  EXPECT_DOUBLE_EQ(c.network.latency.value(), 10e-6);
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_EQ(c.nodes[1].name, "a-1");
  EXPECT_EQ(c.nodes[1].nic.kind, LinkKind::kEthernet);
  EXPECT_DOUBLE_EQ(c.nodes[1].nic.latency.value(), 5e-6);
  EXPECT_EQ(c.nodes[1].interconnect.kind, LinkKind::kPcie);
  EXPECT_DOUBLE_EQ(c.nodes[1].price_per_hour, 4 * 0.55);
}

TEST(ClusterYamlTest, AnExplicitLinkKindTakesItsOwnDefaults) {
  // H100 on PCIe (e.g. H100 PCIe cards): the interconnect mirrors the PCIe entry.
  auto r = parse(R"(
nodes:
  - {name: a, devices: {type: H100-SXM, count: 2}, interconnect: {kind: pcie},
     pcie: {bandwidth_GBps: 30, latency_us: 0}}
)");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const LinkSpec& ic = r.value().nodes[0].interconnect;
  EXPECT_EQ(ic.kind, LinkKind::kPcie);
  EXPECT_DOUBLE_EQ(ic.bandwidth.value(), 30e9);
  EXPECT_EQ(ic.latency.value(), 0.0);
}

TEST(ClusterYamlTest, RoundTripsTheLabFile) {
  auto r = load_cluster_yaml(kDataDir + "lab-mixed.yaml");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const std::string text = cluster_to_yaml(r.value());
  auto again = parse(text);
  ASSERT_TRUE(again.is_ok()) << again.status().message() << "\n" << text;
  EXPECT_TRUE(again.value() == r.value()) << text;
  EXPECT_EQ(cluster_to_yaml(again.value()), text);
  // Expanded names, no 'count' on nodes any more.
  EXPECT_NE(text.find("name: \"h100-node-1\""), std::string::npos) << text;
  EXPECT_NE(text.find("devices_per_pcie_switch: 4"), std::string::npos) << text;
}

TEST(ClusterYamlTest, RoundTripsAwkwardNumbersExactly) {
  auto r = parse(R"(
name: "odd: name # with YAML characters"
network: {kind: ethernet, bandwidth_GBps: 12.3456789, latency_us: 0.1}
nodes:
  - name: "n'1"
    devices: {type: T4, count: 3}
    pcie: {bandwidth_GBps: 11.1, latency_us: 0.7}
    nic: {bandwidth_GBps: 3.3333333333333335, latency_us: 1e-3, count: 3}
    price_per_hour: 0.1
)");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const std::string text = cluster_to_yaml(r.value());
  auto again = parse(text);
  ASSERT_TRUE(again.is_ok()) << again.status().message() << "\n" << text;
  EXPECT_TRUE(again.value() == r.value()) << text;
  EXPECT_EQ(again.value().name, "odd: name # with YAML characters");
  EXPECT_EQ(again.value().nodes[0].name, "n'1");
}

TEST(ClusterYamlTest, EqualityComparesEveryField) {
  auto base = load_cluster_yaml(kDataDir + "lab-mixed.yaml");
  ASSERT_TRUE(base.is_ok());
  ClusterSpec a = base.value();
  ClusterSpec b = a;
  EXPECT_TRUE(a == b);
  b.nodes[2].spot = false;
  EXPECT_FALSE(a == b);
  b = a;
  b.nodes[0].nic_count = 3;
  EXPECT_FALSE(a == b);
  b = a;
  b.network.latency = microseconds(1);
  EXPECT_FALSE(a == b);
  b = a;
  b.nodes[3].devices[1].count = 2;
  EXPECT_FALSE(a == b);
}

TEST(ClusterYamlTest, FileErrorsNameTheFileAndField) {
  const std::string path = kDataDir + "bad-device-count.yaml";
  auto r = load_cluster_yaml(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            path + ": field 'nodes[1].devices.count': expected a positive integer, got -3");

  const std::string typo = kDataDir + "bad-unknown-key.yaml";
  r = load_cluster_yaml(typo);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            typo +
                ": field 'nodes[0].pcie.bandwidth': unknown field; allowed fields here: "
                "bandwidth_GBps or latency_us");

  const std::string syntax = kDataDir + "bad-syntax.yaml";
  r = load_cluster_yaml(syntax);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message().rfind(syntax + ": malformed YAML at line", 0), 0u)
      << r.status().message();

  r = load_cluster_yaml(kDataDir + "no-such-cluster.yaml");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), kDataDir + "no-such-cluster.yaml: no such file");
}

TEST(ClusterYamlTest, RejectsBadCounts) {
  expect_error("nodes: [{name: a, devices: {type: A10, count: -3}}]",
               "test.yaml: field 'nodes[0].devices.count': expected a positive integer, got -3");
  expect_error("nodes: [{name: a, devices: {type: A10, count: 0}}]",
               "test.yaml: field 'nodes[0].devices.count': expected a positive integer, got 0");
  expect_error("nodes: [{name: a, devices: {type: A10, count: 8.5}}]",
               "test.yaml: field 'nodes[0].devices.count': expected an integer, got 8.5");
  expect_error("nodes: [{name: a, devices: {type: A10}}]",
               "test.yaml: field 'nodes[0].devices.count': is missing");
  expect_error("nodes: [{name: a, count: 0, devices: {type: A10, count: 1}}]",
               "test.yaml: field 'nodes[0].count': expected a positive integer, got 0");
  expect_error("nodes: [{name: a, devices: {type: A10, count: 1}, nic: {count: 0}}]",
               "test.yaml: field 'nodes[0].nic.count': expected a positive integer, got 0");
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, devices_per_pcie_switch: -1}]",
      "test.yaml: field 'nodes[0].devices_per_pcie_switch': expected a non-negative integer, "
      "got -1");
  expect_error("nodes: [{name: a, devices: {type: A10, count: \"8\"}}]",
               "test.yaml: field 'nodes[0].devices.count': expected an integer, got \"8\"");
}

// Counts are capped before nodes are expanded or a topology sized: 2^63-1 nodes used to end in
// std::bad_alloc, naming neither file nor field.
TEST(ClusterYamlTest, RejectsHugeCountsBeforeExpanding) {
  expect_error("nodes: [{name: a, count: 9223372036854775807, devices: {type: A10, count: 1}}]",
               "test.yaml: field 'nodes[0].count': expected an integer from 1 to 262144, got "
               "9223372036854775807");
  expect_error("nodes: [{name: a, devices: {type: A10, count: 1e9}}]",
               "test.yaml: field 'nodes[0].devices.count': expected an integer from 1 to 1024, got "
               "1000000000.0");
  expect_error("nodes: [{name: a, devices: {type: A10, count: 1}, nic: {count: 1000000}}]",
               "test.yaml: field 'nodes[0].nic.count': expected an integer from 1 to 1024, got "
               "1000000");
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, devices_per_pcie_switch: 4294967296}]",
      "test.yaml: field 'nodes[0].devices_per_pcie_switch': expected an integer from 0 to 1024, "
      "got 4294967296");
  expect_error("nodes: [{name: a, devices: [{type: A10, count: 1000}, {type: T4, count: 1000}]}]",
               "test.yaml: field 'nodes[0].devices': gives the node 2000 devices; at most 1024 are "
               "supported");
  // The product of two counts within their limits, and the sum over entries.
  expect_error(
      "network: {kind: ethernet}\n"
      "nodes: [{name: a, count: 262144, devices: {type: A10, count: 8}}]",
      "test.yaml: field 'nodes[0]': brings the cluster past 262144 devices (262144 nodes of "
      "8), the most supported");
  expect_error(
      "network: {kind: ethernet}\n"
      "nodes: [{name: a, count: 32000, devices: {type: A10, count: 8}},\n"
      "        {name: b, count: 6145, devices: {type: T4, count: 1}}]",
      "test.yaml: field 'nodes[1]': brings the cluster past 262144 devices (6145 nodes of 1), "
      "the most supported");
  // Links, which a topology holds one by one: xGMI has one per device pair of a node, so a few
  // nodes of 1,024 such devices (1,047,552 pair links each) are too many; so are many NICs.
  expect_error(
      "network: {kind: ethernet}\n"
      "nodes: [{name: a, count: 5, devices: {type: MI300X, count: 1024}}]",
      "test.yaml: field 'nodes[0]': brings the cluster past 4194304 shared links (5 nodes of "
      "1049602: device ports, PCIe links and switch uplinks, xGMI device pairs, two per NIC), "
      "the most supported");
  expect_error(
      "network: {kind: ethernet}\n"
      "nodes: [{name: a, count: 4000, devices: {type: A10, count: 1}, nic: {count: 1024}}]",
      "test.yaml: field 'nodes[0]': brings the cluster past 4194304 shared links (4000 nodes of "
      "2050: device ports, PCIe links and switch uplinks, xGMI device pairs, two per NIC), "
      "the most supported");
  auto at_limit = parse(
      "network: {kind: ethernet}\n"
      "nodes: [{name: a, count: 32768, devices: {type: A10, count: 8}}]");
  ASSERT_TRUE(at_limit.is_ok()) << at_limit.status().message();
  EXPECT_EQ(at_limit.value().nodes.size(), 32768u);
  // A topology of that many devices resolves paths when asked, with no table of pairs.
  const Topology topology(at_limit.value());
  EXPECT_EQ(topology.devices().size(), 262144u);
  EXPECT_TRUE(topology.path(0, 262143).crosses_nodes);
}

TEST(ClusterYamlTest, RejectsRecursiveAliasesAndAliasBombs) {
  expect_error("nodes: &n [*n]",
               "test.yaml: field 'nodes[0]' (line 1): an alias refers to a node that contains it; "
               "YAML aliases must not be recursive");
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    bomb += fmt::format("{0}: &{0} [*{1}, *{1}, *{1}, *{1}, *{1}, *{1}, *{1}, *{1}, *{1}]\n", c,
                        static_cast<char>(c - 1));
  }
  expect_error_starts(bomb + "nodes: [*j]", "test.yaml: field '");
  // Anchors as a user writes them still work.
  auto shared = parse(
      "network: {kind: infiniband}\n"
      "nodes:\n  - {name: a, devices: &h100 {type: H100-SXM, count: 8}}\n"
      "  - {name: b, devices: *h100}\n");
  ASSERT_TRUE(shared.is_ok()) << shared.status().message();
  EXPECT_EQ(shared.value().nodes[1].devices[0].count, 8);
}

TEST(ClusterYamlTest, RejectsDuplicateKeysNamingThePath) {
  expect_error("nodes:\n  - name: a\n    devices: {type: A10, count: 1}\n    name: b\n",
               "test.yaml: field 'nodes[0].name' (line 4): duplicate key; a key may appear only "
               "once in a mapping");
}

TEST(ClusterYamlTest, RejectsNonFiniteNumbers) {
  expect_error("nodes: [{name: a, devices: {type: A10, count: 1}, price_per_hour: .nan}]",
               "test.yaml: field 'nodes[0].price_per_hour': expected a number from 0 to 1e+06, "
               "got NaN");
  expect_error(
      "network: {bandwidth_GBps: .inf}\nnodes: [{name: a, devices: {type: A10, count: 1}}]",
      "test.yaml: field 'network.bandwidth_GBps': expected a number from 1e-06 to 1e+09, got "
      "Infinity");
}

TEST(ClusterYamlTest, PreemptionAndCheckpointFieldsRoundTrip) {
  const std::string text =
      "network: {kind: ethernet}\n"
      "checkpoint: {write_GBps: 1.5, restart_s: 240}\n"
      "nodes:\n"
      "  - {name: s, devices: {type: A100-80GB, count: 2}, spot: true,\n"
      "     mean_hours_between_preemptions: 6, on_demand_price_per_hour: 5.5}\n"
      "  - {name: d, devices: {type: A100-80GB, count: 2}, mean_hours_between_preemptions: 2000}\n"
      "  - {name: plain, devices: {type: A100-80GB, count: 2}}\n";
  Result<ClusterSpec> c = parse(text);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->nodes[0].mean_hours_between_preemptions, 6.0);
  EXPECT_EQ(c->nodes[0].on_demand_price_per_hour, 5.5);
  EXPECT_EQ(node_on_demand_price_per_hour(c->nodes[0]), 5.5);
  EXPECT_EQ(node_hours_between_preemptions(c->nodes[1]), 2000.0);
  EXPECT_EQ(node_hours_between_preemptions(c->nodes[2]), std::nullopt);
  EXPECT_EQ(node_on_demand_price_per_hour(c->nodes[2]), c->nodes[2].price_per_hour);
  EXPECT_EQ(c->checkpoint.write_bandwidth, gigabytes_per_second(1.5));
  EXPECT_EQ(c->checkpoint.restart, Seconds(240));
  Result<Json> again = parse_yaml(cluster_to_yaml(*c), "again.yaml");
  ASSERT_TRUE(again.is_ok());
  Result<ClusterSpec> back = cluster_from_json(*again, "again.yaml");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_TRUE(*back == *c);
  // Left out, nothing is written: a cluster without them reads and writes as before.
  Result<ClusterSpec> plain = parse("nodes: [{name: a, devices: {type: A10, count: 1}}]");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(cluster_to_yaml(*plain).find("checkpoint"), std::string::npos);
  EXPECT_EQ(cluster_to_yaml(*plain).find("preemptions"), std::string::npos);
  // A spot node bought on demand costs the catalog's on-demand price of its devices.
  Result<ClusterSpec> spot =
      parse("nodes: [{name: a, devices: {type: A10, count: 2}, spot: true}]");
  ASSERT_TRUE(spot.is_ok());
  EXPECT_GT(node_on_demand_price_per_hour(spot->nodes[0]), spot->nodes[0].price_per_hour);
}

TEST(ClusterYamlTest, RejectsBadPreemptionAndCheckpointFields) {
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, mean_hours_between_preemptions: 0}]",
      "test.yaml: field 'nodes[0].mean_hours_between_preemptions': expected a number from 0.01 to "
      "1e+06, got 0");
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, mean_hours_between_preemptions: 1e-300}]",
      "test.yaml: field 'nodes[0].mean_hours_between_preemptions': expected a number from 0.01 to "
      "1e+06, got 1e-300");
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, on_demand_price_per_hour: 3}]",
      "test.yaml: field 'nodes[0].on_demand_price_per_hour': is for spot nodes (spot: true); an "
      "on-demand node's price is price_per_hour");
  expect_error("checkpoint: {write_GBps: -1}\nnodes: [{name: a, devices: {type: A10, count: 1}}]",
               "test.yaml: field 'checkpoint.write_GBps': expected a number from 1e-06 to 1e+09, "
               "got -1");
  expect_error("checkpoint: {restart_s: 1e300}\nnodes: [{name: a, devices: {type: A10, count: 1}}]",
               "test.yaml: field 'checkpoint.restart_s': expected a number from 0 to 1e+06, got "
               "1e+300");
  expect_error("checkpoint: {restart: 5}\nnodes: [{name: a, devices: {type: A10, count: 1}}]",
               "test.yaml: field 'checkpoint.restart': unknown field; allowed fields here: "
               "write_GBps or restart_s");
}

TEST(ClusterYamlTest, RejectsUnknownKeys) {
  expect_error("nodes: [{name: a, gpus: 8, devices: {type: A10, count: 1}}]",
               "test.yaml: field 'nodes[0].gpus': unknown field; allowed fields here: name, "
               "count, devices, interconnect, pcie, devices_per_pcie_switch, nic, "
               "price_per_hour, spot, mean_hours_between_preemptions or "
               "on_demand_price_per_hour");
  expect_error("cluster: x\nnodes: [{name: a, devices: {type: A10, count: 1}}]",
               "test.yaml: field 'cluster': unknown field; allowed fields here: name, nodes, "
               "network, software_stack, measured_links or checkpoint");
  expect_error("nodes: [{name: a, devices: {type: A10, count: 1, memory: 24}}]",
               "test.yaml: field 'nodes[0].devices.memory': unknown field; allowed fields here: "
               "type or count");
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, interconnect: {speed: 1}}]",
      "test.yaml: field 'nodes[0].interconnect.speed': unknown field; allowed fields here: kind, "
      "bandwidth_GBps or latency_us");
}

TEST(ClusterYamlTest, UnknownDeviceTypeListsKnownOnes) {
  auto r = parse("nodes: [{name: a, devices: [{type: A10, count: 1}, {type: H900, count: 2}]}]");
  ASSERT_FALSE(r.is_ok());
  const std::string& m = r.status().message();
  EXPECT_EQ(m.rfind("test.yaml: field 'nodes[0].devices[1].type': unknown device type 'H900'; "
                    "known device types: H100-SXM, H200, ",
                    0),
            0u)
      << m;
  EXPECT_NE(m.find("Gaudi2 or Gaudi3"), std::string::npos) << m;
}

TEST(ClusterYamlTest, RejectsUnknownLinkKinds) {
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, interconnect: {kind: infinity}}]",
      "test.yaml: field 'nodes[0].interconnect.kind': expected nvlink, xgmi, gaudi-roce or pcie, "
      "got 'infinity'");
  expect_error("network: {kind: nvlink}\nnodes: [{name: a, devices: {type: A10, count: 1}}]",
               "test.yaml: field 'network.kind': expected infiniband or ethernet, got 'nvlink'");
}

// The format's canonical example, as users copy it: `network` without a kind is InfiniBand.
TEST(ClusterYamlTest, NetworkKindDefaultsToInfiniband) {
  auto doc = parse_yaml(
      "name: lab-mixed\n"
      "nodes:\n"
      "  - name: h100-node\n"
      "    count: 2\n"
      "    devices: {type: H100-SXM, count: 8}\n"
      "    interconnect: {kind: nvlink, bandwidth_GBps: 450, latency_us: 2}\n"
      "    nic: {bandwidth_GBps: 50, latency_us: 5}\n"
      "    price_per_hour: 24.0\n"
      "    spot: false\n"
      "network: {bandwidth_GBps: 50, latency_us: 5}\n",
      "test.yaml");
  ASSERT_TRUE(doc.is_ok());
  auto c = cluster_from_json(doc.value(), "test.yaml");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c.value().network.kind, LinkKind::kInfiniband);
  EXPECT_EQ(c.value().network.bandwidth, gigabytes_per_second(50));
  EXPECT_EQ(c.value().network.latency, microseconds(5));
  ASSERT_EQ(c.value().nodes.size(), 2u);
  EXPECT_EQ(c.value().nodes[1].name, "h100-node-1");
}

TEST(ClusterYamlTest, RejectsNegativeBandwidthAndLatency) {
  expect_error(
      "network: {kind: ethernet, bandwidth_GBps: -5}\n"
      "nodes: [{name: a, devices: {type: A10, count: 1}}]",
      "test.yaml: field 'network.bandwidth_GBps': expected a number from 1e-06 to 1e+09, got -5");
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, pcie: {bandwidth_GBps: 0}}]",
      "test.yaml: field 'nodes[0].pcie.bandwidth_GBps': expected a number from 1e-06 to 1e+09, "
      "got 0");
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, nic: {latency_us: -1}}]",
      "test.yaml: field 'nodes[0].nic.latency_us': expected a number from 0 to 1e+06, got -1");
  expect_error(
      "nodes: [{name: a, devices: {type: H100, count: 2}, interconnect: {latency_us: -0.5}}]",
      "test.yaml: field 'nodes[0].interconnect.latency_us': expected a number from 0 to 1e+06, "
      "got -0.5");
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, price_per_hour: -2}]",
      "test.yaml: field 'nodes[0].price_per_hour': expected a number from 0 to 1e+06, got -2");
  // Finite but absurd: an infinite iteration, or a cost per token of 300 digits, before.
  expect_error(
      "network: {kind: ethernet, bandwidth_GBps: 1e-300}\n"
      "nodes: [{name: a, devices: {type: A10, count: 1}}]",
      "test.yaml: field 'network.bandwidth_GBps': expected a number from 1e-06 to 1e+09, got "
      "1e-300");
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, nic: {latency_us: 1e300}}]",
      "test.yaml: field 'nodes[0].nic.latency_us': expected a number from 0 to 1e+06, got 1e+300");
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, price_per_hour: 1e300}]",
      "test.yaml: field 'nodes[0].price_per_hour': expected a number from 0 to 1e+06, got 1e+300");
  expect_error(
      "nodes: [{name: a, devices: {type: A10, count: 1}, spot: true, "
      "on_demand_price_per_hour: 2e6}]",
      "test.yaml: field 'nodes[0].on_demand_price_per_hour': expected a number from 0 to 1e+06, "
      "got 2e+06");
}

TEST(ClusterYamlTest, RejectsEmptyAndMissingNodes) {
  expect_error("name: x\nnodes: []", "test.yaml: field 'nodes': expected at least one node");
  expect_error("name: x", "test.yaml: field 'nodes': is missing");
  expect_error("nodes: {name: a}", "test.yaml: field 'nodes': expected an array, got an object");
  expect_error("nodes: [{name: a, devices: []}]",
               "test.yaml: field 'nodes[0].devices': expected at least one {type, count} entry");
  expect_error("[1, 2]",
               "test.yaml: expected a mapping with 'name', 'nodes' and 'network', got an array");
  expect_error("nodes: [{name: '', devices: {type: A10, count: 1}}]",
               "test.yaml: field 'nodes[0].name': expected a non-empty name");
}

TEST(ClusterYamlTest, RejectsDuplicateNodeNames) {
  expect_error(
      "network: {kind: ethernet}\n"
      "nodes: [{name: a, devices: {type: A10, count: 1}}, {name: a, devices: {type: T4, count: "
      "1}}]",
      "test.yaml: field 'nodes[1].name': duplicate node name 'a' (also made by nodes[0]); names "
      "must be unique after 'count' expansion");
  // Expansion can collide too: a x2 makes a-0 and a-1.
  expect_error(
      "network: {kind: ethernet}\n"
      "nodes: [{name: a, count: 2, devices: {type: A10, count: 1}},"
      " {name: a-1, devices: {type: T4, count: 1}}]",
      "test.yaml: field 'nodes[1].name': duplicate node name 'a-1' (also made by nodes[0]); "
      "names must be unique after 'count' expansion");
  expect_error(
      "nodes: [{name: a, devices: [{type: A10, count: 1}, {type: a10, count: 2}]}]",
      "test.yaml: field 'nodes[0].devices[1].type': device type A10 is listed twice in this "
      "node; give one entry with the total count");
}

TEST(ClusterYamlTest, MultiNodeClusterNeedsANetwork) {
  expect_error_starts("nodes: [{name: a, count: 2, devices: {type: A10, count: 1}}]",
                      "test.yaml: field 'network': is missing, and a cluster of 2 nodes needs "
                      "the fabric between them");
}

TEST(ClusterYamlTest, InterconnectMustSuitTheVendor) {
  expect_error(
      "nodes: [{name: a, devices: {type: MI300X, count: 8}, interconnect: {kind: nvlink}}]",
      "test.yaml: field 'nodes[0].interconnect.kind': nvlink connects NVIDIA devices only, but "
      "this node has MI300X (AMD); expected pcie or xgmi, got nvlink");
  expect_error(
      "nodes: [{name: a, devices: [{type: RTX-4090, count: 2}, {type: MI210, count: 1}],"
      " interconnect: {kind: nvlink}}]",
      "test.yaml: field 'nodes[0].interconnect.kind': this node mixes NVIDIA and other vendors' "
      "devices, which meet through host memory; expected pcie, got nvlink");
  expect_error(
      "nodes: [{name: a, devices: {type: L40S, count: 2}, interconnect: {kind: nvlink}}]",
      "test.yaml: field 'nodes[0].interconnect.bandwidth_GBps': is missing, and the catalog "
      "gives L40S no nvlink rate; set it");
  expect_error(
      "nodes: [{name: a, devices: {type: L40S, count: 2},"
      " interconnect: {kind: pcie, bandwidth_GBps: 20}}]",
      "test.yaml: field 'nodes[0].interconnect.bandwidth_GBps': with kind pcie, devices talk "
      "over the node's PCIe links; set bandwidth_GBps and latency_us under 'pcie' instead");
  // With an explicit rate, NVLink bridges on PCIe cards are allowed.
  auto r = parse(
      "nodes: [{name: a, devices: {type: L40S, count: 2},"
      " interconnect: {kind: nvlink, bandwidth_GBps: 56}}]");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r.value().nodes[0].interconnect.bandwidth.value(), 56e9);
}

TEST(ClusterYamlTest, WrongScalarTypesNameTheField) {
  expect_error("nodes: [{name: a, devices: {type: A10, count: 1}, spot: maybe}]",
               "test.yaml: field 'nodes[0].spot': expected true or false, got \"maybe\"");
  expect_error("nodes: [{name: a, devices: 4}]",
               "test.yaml: field 'nodes[0].devices': expected {type, count} or a list of them, "
               "got 4");
  expect_error("nodes: [{name: a, devices: {type: [A10], count: 1}}]",
               "test.yaml: field 'nodes[0].devices.type': expected a string, got an array");
  // An unquoted number still names a device.
  auto r = parse("nodes: [{name: a, devices: {type: 4090, count: 1}}]");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value().nodes[0].devices[0].type, "RTX-4090");
}

TEST(ClusterYamlTest, TheFormatDocumentsExampleParses) {
  auto text = read_text_file(MOTLEY_SOURCE_DIR "/docs/cluster-format.md");
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  const std::string& doc = text.value();
  const size_t begin = doc.find("```yaml\n");
  ASSERT_NE(begin, std::string::npos);
  const size_t end = doc.find("```", begin + 8);
  ASSERT_NE(end, std::string::npos);
  auto yaml = parse_yaml(doc.substr(begin + 8, end - begin - 8), "cluster-format.md");
  ASSERT_TRUE(yaml.is_ok()) << yaml.status().message();
  auto c = cluster_from_json(yaml.value(), "cluster-format.md");
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c.value().name, "lab-mixed");
  ASSERT_EQ(c.value().nodes.size(), 3u);
  EXPECT_EQ(c.value().nodes[1].name, "h100-node-1");
  EXPECT_DOUBLE_EQ(c.value().nodes[0].price_per_hour, 24.0);
}

}  // namespace
}  // namespace motley
