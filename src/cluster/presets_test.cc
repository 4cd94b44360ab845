#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "motley/cluster/cluster.h"

namespace motley {
namespace {

ClusterSpec preset(std::string_view name) {
  auto r = cluster_preset(name);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? r.value() : ClusterSpec{};
}

int device_count(const ClusterSpec& c) { return static_cast<int>(cluster_devices(c).size()); }

// A fresh directory that is removed, and the working directory restored, at the end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "motley-cluster-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
    old_cwd_ = std::filesystem::current_path();
  }
  ~TempDir() {
    std::filesystem::current_path(old_cwd_);
    std::filesystem::remove_all(path_);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path old_cwd_;
};

TEST(ClusterPresetsTest, NamesAreListed) {
  EXPECT_EQ(
      cluster_preset_names(),
      (std::vector<std::string>{"default", "h100x8", "h100x16", "a100x16", "mi300x8", "h100-a100",
                                "h100-mi300x", "a100-l40s-ethernet", "spot-fleet", "pcie-lab"}));
}

TEST(ClusterPresetsTest, EveryPresetLoadsBuildsATopologyAndRoundTripsThroughAFile) {
  const std::map<std::string, std::pair<int, int>> sizes = {
      {"default", {2, 16}},     {"h100x8", {1, 8}},
      {"h100x16", {2, 16}},     {"a100x16", {2, 16}},
      {"mi300x8", {1, 8}},      {"h100-a100", {4, 32}},
      {"h100-mi300x", {2, 16}}, {"a100-l40s-ethernet", {3, 16}},
      {"spot-fleet", {5, 36}},  {"pcie-lab", {3, 12}}};
  TempDir dir;
  for (const std::string& name : cluster_preset_names()) {
    SCOPED_TRACE(name);
    ClusterSpec c = preset(name);
    EXPECT_EQ(c.name, name);
    ASSERT_EQ(sizes.count(name), 1u);
    EXPECT_EQ(static_cast<int>(c.nodes.size()), sizes.at(name).first);
    EXPECT_EQ(device_count(c), sizes.at(name).second);
    Topology t(c);
    EXPECT_EQ(static_cast<int>(t.devices().size()), sizes.at(name).second);

    const std::string file = (dir.path() / (name + ".yaml")).string();
    ASSERT_TRUE(write_file_atomically(file, cluster_to_yaml(c)).is_ok());
    auto loaded = load_cluster_yaml(file);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    EXPECT_TRUE(loaded.value() == c) << cluster_to_yaml(c);
  }
}

TEST(ClusterPresetsTest, DefaultIsEightH100AndEightA100OverInfiniband) {
  ClusterSpec c = preset("default");
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_EQ(c.nodes[0].devices, (std::vector<NodeDevices>{{"H100-SXM", 8}}));
  EXPECT_EQ(c.nodes[1].devices, (std::vector<NodeDevices>{{"A100-80GB", 8}}));
  EXPECT_EQ(c.network.kind, LinkKind::kInfiniband);
  EXPECT_DOUBLE_EQ(c.nodes[0].price_per_hour, 8 * 3.00);
  EXPECT_DOUBLE_EQ(c.nodes[1].price_per_hour, 8 * 1.80);
  Topology t(c);
  // H100 -> A100: NIC 0 (50 GB/s) -> fabric (50) -> the A100 node's NIC 0 (25 GB/s).
  const Path& p = t.path(0, 8);
  EXPECT_TRUE(p.crosses_nodes);
  EXPECT_FALSE(p.host_staged);
  EXPECT_DOUBLE_EQ(p.bandwidth.value(), 25e9);
  EXPECT_DOUBLE_EQ(p.latency.value(), 1e-6 + 2e-6 + 1e-6);
  EXPECT_DOUBLE_EQ(t.path(0, 7).bandwidth.value(), 450e9);
  EXPECT_DOUBLE_EQ(t.path(8, 15).bandwidth.value(), 300e9);
}

TEST(ClusterPresetsTest, H100Mi300xIsHostStagedBetweenVendors) {
  ClusterSpec c = preset("h100-mi300x");
  Topology t(c);
  EXPECT_EQ(t.device_type(8).vendor, Vendor::kAmd);
  const Path& p = t.path(0, 8);
  EXPECT_TRUE(p.host_staged);
  EXPECT_TRUE(p.crosses_nodes);
  EXPECT_DOUBLE_EQ(p.bandwidth.value(), 49e9);  // PCIe Gen5 below the 50 GB/s network
  EXPECT_FALSE(t.path(8, 9).host_staged);
  EXPECT_EQ(t.links()[t.path(8, 9).links[0]].kind, LinkKind::kXgmi);
}

TEST(ClusterPresetsTest, MixedPresetsHaveTheirCharacter) {
  ClusterSpec eth = preset("a100-l40s-ethernet");
  EXPECT_EQ(eth.network.kind, LinkKind::kEthernet);
  EXPECT_DOUBLE_EQ(eth.network.bandwidth.value(), 25e9);
  EXPECT_EQ(eth.nodes[1].name, "l40s-0");
  EXPECT_EQ(eth.nodes[2].name, "l40s-1");
  EXPECT_EQ(eth.nodes[1].interconnect.kind, LinkKind::kPcie);

  ClusterSpec spot = preset("spot-fleet");
  int spot_nodes = 0;
  for (const NodeSpec& n : spot.nodes) spot_nodes += n.spot ? 1 : 0;
  EXPECT_EQ(spot_nodes, 4);
  EXPECT_EQ(spot.nodes.size(), 5u);
  EXPECT_DOUBLE_EQ(spot.nodes[0].price_per_hour, 8 * 1.50);  // H100 at the spot rate
  EXPECT_DOUBLE_EQ(spot.nodes[4].price_per_hour, 8 * 1.30);  // the on-demand A100-40GB node

  ClusterSpec lab = preset("pcie-lab");
  for (const NodeSpec& n : lab.nodes) {
    EXPECT_EQ(n.interconnect.kind, LinkKind::kPcie) << n.name;
    EXPECT_EQ(n.nic.kind, LinkKind::kEthernet) << n.name;
  }
  EXPECT_EQ(lab.nodes[2].devices, (std::vector<NodeDevices>{{"A10", 4}}));

  ClusterSpec big = preset("h100-a100");
  EXPECT_EQ(big.nodes[3].name, "a100-1");
}

TEST(ClusterPresetsTest, NamesAreCaseInsensitiveAndUnknownOnesListThePresets) {
  EXPECT_EQ(preset("H100X8").name, "h100x8");
  auto r = cluster_preset("h100x9");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            "unknown cluster preset 'h100x9'; presets: default, h100x8, h100x16, a100x16, "
            "mi300x8, h100-a100, h100-mi300x, a100-l40s-ethernet, spot-fleet or pcie-lab");
}

TEST(LoadClusterTest, ReadsPresetsAndFiles) {
  auto p = load_cluster("Default");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_TRUE(p.value() == preset("default"));

  auto f = load_cluster(MOTLEY_TEST_DATA_DIR "/cluster/lab-mixed.yaml");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f.value().name, "lab-mixed");
}

TEST(LoadClusterTest, AnExistingFileWinsOverAPresetOfTheSameName) {
  TempDir dir;
  {
    std::ofstream out(dir.path() / "h100x8");
    out << "name: mine\nnodes: [{name: box, devices: {type: T4, count: 2}}]\n";
  }
  std::filesystem::current_path(dir.path());
  auto r = load_cluster("h100x8");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value().name, "mine");
  EXPECT_EQ(r.value().nodes[0].devices[0].type, "T4");
}

TEST(LoadClusterTest, NeitherFileNorPresetSaysBoth) {
  auto r = load_cluster("/nonexistent/lab.yaml");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            "'/nonexistent/lab.yaml' is neither a cluster file (no such file) nor a cluster "
            "preset; presets: default, h100x8, h100x16, a100x16, mi300x8, h100-a100, "
            "h100-mi300x, a100-l40s-ethernet, spot-fleet or pcie-lab");
}

TEST(LoadClusterTest, BadFileErrorsAreNotHiddenByThePresetFallback) {
  const std::string path = MOTLEY_TEST_DATA_DIR "/cluster/bad-device-count.yaml";
  auto r = load_cluster(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            path + ": field 'nodes[1].devices.count': expected a positive integer, got -3");
}

}  // namespace
}  // namespace motley
