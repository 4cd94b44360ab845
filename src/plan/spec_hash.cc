#include "motley/plan/spec_hash.h"

#include <fmt/format.h>

#include "motley/core/hash.h"
#include "motley/core/json.h"
#include "motley/model/model_json.h"

namespace motley {

SpecRef model_ref(const ModelSpec& model) {
  // Json keeps object keys sorted and dump() adds no whitespace: a canonical text.
  return SpecRef{model.name, fnv1a_64_hex(model_to_json(model).dump())};
}

Json cluster_canonical_json(const ClusterSpec& cluster) {
  // The parsed tree rather than the YAML text keeps the hash independent of how the YAML
  // writer lays out (or comments) its output.
  Result<Json> tree = parse_yaml(cluster_to_yaml(cluster), "cluster_to_yaml");
  MOTLEY_CHECK(tree.is_ok(), fmt::format("cluster_to_yaml wrote YAML that does not parse: {}",
                                         tree.status().message()));
  return std::move(tree).value();
}

SpecRef cluster_ref(const ClusterSpec& cluster) {
  return SpecRef{cluster.name, fnv1a_64_hex(cluster_canonical_json(cluster).dump())};
}

}  // namespace motley
