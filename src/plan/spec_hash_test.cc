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

}  // namespace
}  // namespace motley
