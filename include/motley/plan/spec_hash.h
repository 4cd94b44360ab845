// Content hashes of the model and cluster a plan was made for, so that a plan is never run
// against a different model or cluster by mistake. The hash covers the canonical JSON/YAML
// form (names included), not the file bytes. Thread-safe.
#pragma once

#include <string>

#include "motley/cluster/cluster.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley {

SpecRef model_ref(const ModelSpec& model);
SpecRef cluster_ref(const ClusterSpec& cluster);

}  // namespace motley
