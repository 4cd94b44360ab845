// A cluster YAML, as `cluster show` and `--cluster` read it: YAML (anchors, aliases and all),
// then the cluster schema. An accepted cluster is hashed as a plan hashes it, and the YAML
// motley writes of it reads back to a cluster that writes the same YAML.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/cluster/cluster.h"
#include "motley/plan/spec_hash.h"

namespace motley::fuzz {

int cluster_yaml_target(const uint8_t* data, size_t size) {
  Result<Json> yaml = parse_yaml(text(data, size), kSource);
  if (!yaml) {
    check_refusal(yaml.status());
    return 0;
  }
  Result<ClusterSpec> cluster = cluster_from_json(*yaml, kSource);
  if (!cluster) {
    check_refusal(cluster.status());
    return 0;
  }
  (void)cluster_ref(*cluster);
  const std::string written = cluster_to_yaml(*cluster);
  Result<Json> reread = parse_yaml(written, kSource);
  if (!reread) fail("a written cluster must parse as YAML", reread.status().message());
  Result<ClusterSpec> again = cluster_from_json(*reread, kSource);
  if (!again) fail("a written cluster must read back", again.status().message());
  check_same(Json(written), Json(cluster_to_yaml(*again)),
             "a written cluster must read back the same");
  return 0;
}

}  // namespace motley::fuzz
