// The largest clusters motley accepts from a file (cluster YAML, a plan's embedded cluster).
// Topology holds a path for every ordered pair of devices and xGMI a link per pair inside a
// node, so memory grows with the square of these counts: at the limits a topology takes a
// few GB and seconds to build. docs/cluster-format.md, "Limits", lists them. Constants only.
#pragma once

#include <cstdint>

namespace motley {

// Devices in the whole cluster, after `count: N` nodes are expanded.
inline constexpr int64_t kMaxClusterDevices = 4096;
// Devices in one node, over all its device groups.
inline constexpr int64_t kMaxDevicesPerNode = 1024;
inline constexpr int64_t kMaxNicsPerNode = 1024;

}  // namespace motley
