// A cluster YAML, as `cluster show` and `--cluster` read it: YAML (anchors, aliases and all),
// then the cluster schema. An accepted cluster is hashed as a plan hashes it, and the YAML
// motley writes of it reads back to a cluster that writes the same YAML.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/cluster/cluster.h"
#include "motley/plan/spec_hash.h"

namespace motley::fuzz {

int cluster_yaml_target(const uint8_t* data, size_t size) {
  const std::optional<Json> document = parse_input(data, size, Syntax::kYaml);
  if (!document) return 0;
  const std::optional<ClusterSpec> cluster =
      read_input(*document, [](const Json& j) { return cluster_from_json(j, kSource); });
  if (!cluster) return 0;
  (void)cluster_ref(*cluster);
  check_reads_back(
      *cluster, cluster_to_yaml,
      [](const std::string& yaml) -> Result<ClusterSpec> {
        MOTLEY_ASSIGN_OR_RETURN(Json reread, reparse_yaml(yaml));
        return cluster_from_json(reread, kSource);
      },
      "a written cluster");
  return 0;
}

}  // namespace motley::fuzz
