// The largest clusters motley accepts from a file (cluster YAML, a plan's embedded cluster).
// Topology resolves paths when asked, so its memory grows with devices and links, not pairs;
// the links cap bounds it (xGMI has a link per device pair inside a node, and each NIC two).
// docs/cluster-format.md, "Limits", lists them. Constants only.
#pragma once

#include <cstdint>

namespace motley {

// Devices in the whole cluster, after `count: N` nodes are expanded.
inline constexpr int64_t kMaxClusterDevices = 262144;
// Devices in one node, over all its device groups.
inline constexpr int64_t kMaxDevicesPerNode = 1024;
inline constexpr int64_t kMaxNicsPerNode = 1024;
// Shared links of the whole cluster (Topology::links(), topology_link_count), after expansion.
inline constexpr int64_t kMaxClusterLinks = int64_t{1} << 22;

}  // namespace motley
