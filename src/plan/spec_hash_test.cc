#include "motley/plan/spec_hash.h"

#include <gtest/gtest.h>

#include "test_plans.h"

namespace motley {
namespace {

using ::motley::testing::single_device_nodes;
using ::motley::testing::small_model;
using ::motley::testing::two_node_cluster;

bool is_hex64(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

TEST(SpecHash, ModelHashIsStableAndNamed) {
  const SpecRef a = model_ref(small_model(4));
  const SpecRef b = model_ref(small_model(4));
  EXPECT_EQ(a.name, "small");
  EXPECT_TRUE(is_hex64(a.hash)) << a.hash;
  EXPECT_EQ(a, b);
}

TEST(SpecHash, ModelHashChangesWithAnyField) {
  const std::string base = model_ref(small_model(4)).hash;
  ModelSpec wider = small_model(4);
  wider.layers[2].ffn->ffn_size = 512;
  EXPECT_NE(model_ref(wider).hash, base);
  EXPECT_NE(model_ref(small_model(5)).hash, base);
  EXPECT_NE(model_ref(small_model(4, "other")).hash, base);
  ModelSpec longer = small_model(4);
  longer.default_seq_len = 256;
  EXPECT_NE(model_ref(longer).hash, base);
}

TEST(SpecHash, ClusterHashIsStableAndNamed) {
  const SpecRef a = cluster_ref(two_node_cluster());
  EXPECT_EQ(a.name, "two-nodes");
  EXPECT_TRUE(is_hex64(a.hash)) << a.hash;
  EXPECT_EQ(a, cluster_ref(two_node_cluster()));
}

TEST(SpecHash, ClusterHashChangesWithAnyField) {
  const std::string base = cluster_ref(two_node_cluster()).hash;
  ClusterSpec more = two_node_cluster();
  more.nodes[1].devices[0].count = 8;
  EXPECT_NE(cluster_ref(more).hash, base);
  ClusterSpec slower = two_node_cluster();
  slower.network.bandwidth = gigabytes_per_second(25);
  EXPECT_NE(cluster_ref(slower).hash, base);
  ClusterSpec other_type = two_node_cluster();
  other_type.nodes[0].devices[0].type = "A100-80GB";
  EXPECT_NE(cluster_ref(other_type).hash, base);
  EXPECT_NE(cluster_ref(single_device_nodes(4)).hash, cluster_ref(single_device_nodes(3)).hash);
}

// cluster_canonical_json reads a many-node cluster back node by node; the tree must be the
// whole YAML's, read back at once, for any cluster: every preset, nodes of several makes with
// every optional field, measured links, and names YAML would have to unescape.
TEST(SpecHash, CanonicalTreeIsTheWholeYamlReadBack) {
  auto whole = [](const ClusterSpec& c) {
    Result<Json> tree = parse_yaml(cluster_to_yaml(c), "test");
    EXPECT_TRUE(tree.is_ok()) << tree.status().message();
    return tree.is_ok() ? tree.value() : Json();
  };
  std::vector<ClusterSpec> clusters;
  for (const std::string& name : cluster_preset_names()) {
    Result<ClusterSpec> c = load_cluster(name);
    ASSERT_TRUE(c.is_ok()) << name << ": " << c.status().message();
    clusters.push_back(c.value());
  }
  ClusterSpec mixed = two_node_cluster();
  for (int i = 0; i < 6; ++i) {
    NodeSpec n = mixed.nodes[static_cast<size_t>(i % 2)];
    n.name = "extra-" + std::to_string(i);
    n.spot = i % 3 == 0;
    n.price_per_hour = 10.0 + i;
    if (i % 2 == 0) n.mean_hours_between_preemptions = 4.5;
    if (i == 4) n.on_demand_price_per_hour = 31.25;
    mixed.nodes.push_back(n);
  }
  mixed.measured_links.push_back(MeasuredLink{0, 1, microseconds(3), gigabytes_per_second(40)});
  clusters.push_back(mixed);
  ClusterSpec odd = mixed;
  odd.nodes[3].name = "a \"quoted\" name\twith a tab";
  clusters.push_back(odd);
  ClusterSpec unicode = mixed;
  unicode.nodes[2].name = "n\u00f6de";
  clusters.push_back(unicode);
  for (const ClusterSpec& c : clusters) {
    EXPECT_EQ(cluster_canonical_json(c), whole(c)) << c.name;
  }
}

}  // namespace
}  // namespace motley
