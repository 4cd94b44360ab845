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

// Link rates in GB/s: a kilobyte a second up to a billion GB/s (the "free" links that stand for
// communication a study leaves out use a million). Beyond them a transfer's time rounds to
// nothing or to a day for a byte, and sums of them to infinity.
inline constexpr double kMinLinkGBps = 1e-6;
inline constexpr double kMaxLinkGBps = 1e9;
// A measured collective's time, in microseconds: a nanosecond to a thousand seconds.
inline constexpr double kMinCollectiveUs = 1e-3;
inline constexpr double kMaxCollectiveUs = 1e9;
// Link latencies in microseconds: up to a second.
inline constexpr double kMaxLinkLatencyUs = 1e6;
// Prices in USD per node-hour: up to a million.
inline constexpr double kMaxNodePricePerHour = 1e6;
// A spot node's mean time between preemptions, in hours: 36 seconds to a million hours.
inline constexpr double kMinHoursBetweenPreemptions = 0.01;
inline constexpr double kMaxHoursBetweenPreemptions = 1e6;
// A restart after an interruption, in seconds: up to a million (eleven days).
inline constexpr double kMaxRestartSeconds = 1e6;

}  // namespace motley
