// Link measurements (`motley.links/1`): per ordered device pair a fitted latency and bandwidth,
// plus the collectives' bus bandwidth per size, as `motley profile comm` writes them and a cluster
// file includes them (docs/cluster-format.md, "Measured links"). Plain data with its YAML reader
// and writer; measuring is the profile module's job, using the figures Topology's. Thread-safe
// (pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/core/units.h"

namespace motley {

inline constexpr const char* kLinksFormat = "motley.links/1";

// The fit time(n) = latency + n / bandwidth of one direction from device `src` to `dst`.
struct MeasuredLink {
  int src = 0;  // global device ids, as Topology numbers the cluster's devices
  int dst = 0;
  Seconds latency;           // alpha, >= 0
  BytesPerSecond bandwidth;  // beta, > 0
};

// One row of a collective's sweep, in nccl-tests' terms (docs/profile-comm.md).
struct CollectiveSample {
  Bytes size;            // nccl-tests' "size" (bytes per rank; all_gather: the whole output)
  Seconds time;          // mean over iterations and ranks
  BytesPerSecond algbw;  // size / time
  BytesPerSecond busbw;  // algbw * bus_bandwidth_factor
};

struct MeasuredCollective {
  std::string op;              // all_reduce, all_gather, reduce_scatter or all_to_all
  std::string implementation;  // what was measured, e.g. "c10d ProcessGroupGloo allreduce"
  int ranks = 0;
  // The global device ids of the ranks, rank order; empty where the file does not say (older
  // files), and then the sweep is informational. With them, a cluster prices this collective
  // over exactly these devices from the sweep (docs/cluster-format.md, "Measured collectives").
  std::vector<int> devices;
  std::vector<CollectiveSample> samples;
};

struct LinksFile {
  std::string transport;  // informational: "gloo", ...
  std::vector<MeasuredLink> links;
  std::vector<MeasuredCollective> collectives;
};

// Reads a links document. Errors (invalid_argument) name `root`'s source and the field: wrong
// format string, unknown keys, negative / NaN / infinite values, src == dst, a pair listed twice,
// and (when device_count >= 0) a device id outside [0, device_count). A collective that names its
// `devices` must name `ranks` distinct ones and give at least one result, its sizes strictly
// increasing; one op over one set of devices may be measured once.
Result<LinksFile> links_from_json(const JsonField& root, int64_t device_count = -1);
Result<LinksFile> load_links_file(const std::string& path, int64_t device_count = -1);
// Every field, numbers in the shortest decimal that reads back to the identical double, so
// links_from_json(parse(links_to_yaml(f))) == f.
std::string links_to_yaml(const LinksFile& file);
// The `links:` entries alone, as flow mappings indented by `indent` (the cluster writer's
// inline `measured_links`).
std::string measured_links_yaml(const std::vector<MeasuredLink>& links, int indent);
// The `collectives:` entries alone, as block mappings indented by `indent`.
std::string measured_collectives_yaml(const std::vector<MeasuredCollective>& collectives,
                                      int indent);

bool operator==(const MeasuredLink& a, const MeasuredLink& b);
bool operator==(const CollectiveSample& a, const CollectiveSample& b);
bool operator==(const MeasuredCollective& a, const MeasuredCollective& b);
bool operator==(const LinksFile& a, const LinksFile& b);

}  // namespace motley
