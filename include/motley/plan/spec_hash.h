// Content hashes of the model and cluster a plan was made for, so that a plan is never run
// against a different model or cluster by mistake. The hash covers the canonical JSON/YAML
// form (names included), not the file bytes. Thread-safe.
#pragma once

#include <string>

#include "motley/cluster/cluster.h"
#include "motley/core/json.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley {

SpecRef model_ref(const ModelSpec& model);
SpecRef cluster_ref(const ClusterSpec& cluster);

// The canonical tree the cluster hash covers, which is also how a plan file embeds a cluster:
// cluster_to_yaml's output (every field explicit, nodes expanded) read back as JSON.
// cluster_from_json reads it back to an equal ClusterSpec.
Json cluster_canonical_json(const ClusterSpec& cluster);

}  // namespace motley
