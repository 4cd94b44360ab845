// Internal to the cluster module: how its YAML writers print numbers, in file units, so that
// every value reads back to the identical double (cluster_yaml.cc defines them).
#pragma once

#include <string>

#include "motley/core/units.h"

namespace motley::cluster_internal {

// The shortest decimal that reads back as exactly `v`.
std::string yaml_number(double v);
// In GB/s (1e9 B/s) and µs, the shortest decimal the loader turns back into exactly the value.
std::string yaml_gbps(BytesPerSecond b);
std::string yaml_us(Seconds s);

}  // namespace motley::cluster_internal
