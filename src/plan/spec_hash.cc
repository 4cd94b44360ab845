#include "motley/plan/spec_hash.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <unordered_map>

#include "motley/core/hash.h"
#include "motley/core/json.h"
#include "motley/model/model_json.h"

namespace motley {

SpecRef model_ref(const ModelSpec& model) {
  // Json keeps object keys sorted and dump() adds no whitespace: a canonical text.
  return SpecRef{model.name, fnv1a_64_hex(model_to_json(model).dump())};
}

namespace {

// `yaml`, which cluster_to_yaml wrote, as JSON.
Json read_back(const std::string& yaml) {
  Result<Json> tree = parse_yaml(yaml, "cluster_to_yaml");
  MOTLEY_CHECK(tree.is_ok(), fmt::format("cluster_to_yaml wrote YAML that does not parse: {}",
                                         tree.status().message()));
  return std::move(tree).value();
}

// Printable ASCII without quotes or backslashes: quoted() writes such a name as it is, between
// double quotes, and YAML reads it back as the same string.
bool plain_name(const std::string& name) {
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; });
}

}  // namespace

Json cluster_canonical_json(const ClusterSpec& cluster) {
  // The parsed tree rather than the YAML text keeps the hash independent of how the YAML
  // writer lays out (or comments) its output.
  const bool plain = std::all_of(cluster.nodes.begin(), cluster.nodes.end(),
                                 [](const NodeSpec& n) { return plain_name(n.name); });
  if (cluster.nodes.size() <= 1 || !plain) return read_back(cluster_to_yaml(cluster));
  // The same tree, node by node: a cluster of thousands of nodes holds a few makes, and reading
  // its whole YAML back took half a second at 16,384 devices. Each distinct node, its name
  // aside, is read back once (a node's block reads the same alone as in the list), and its
  // name set as the string it is.
  ClusterSpec shell = cluster;
  shell.nodes.resize(1);
  Json tree = read_back(cluster_to_yaml(shell));
  ClusterSpec alone;
  alone.nodes.resize(1);
  std::unordered_map<std::string, Json> made;  // by the lone node's YAML
  Json& nodes = tree["nodes"];
  nodes = Json::array();
  for (const NodeSpec& node : cluster.nodes) {
    alone.nodes[0] = node;
    alone.nodes[0].name = "node";
    std::string text = cluster_to_yaml(alone);
    auto it = made.find(text);
    if (it == made.end()) {
      Json lone = read_back(text);
      it = made.emplace(std::move(text), std::move(lone["nodes"][0])).first;
    }
    nodes.push_back(it->second);
    nodes.back()["name"] = node.name;
  }
  return tree;
}

SpecRef cluster_ref(const ClusterSpec& cluster) {
  return SpecRef{cluster.name, fnv1a_64_hex(cluster_canonical_json(cluster).dump())};
}

}  // namespace motley
