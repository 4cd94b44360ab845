// EmulationFactors: what an emulated run (emulation.h) takes from the cost model and the
// simulator, as numbers — per rank its device type and compute slowdown, the cost model's time
// of one step's work on the device that runs natively, the simulated iteration time, the links
// between the ranks' devices and the all-reduce time over each rank set the executor sums over —
// with their JSON form, so that motley (which links the cost model and the simulator) computes
// them and motley-run (which must not) applies them. It computes none of them and measures
// nothing (the time scale is this CPU's, emulation.h). Plain values and pure functions;
// thread-safe once built.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "motley/core/json.h"
#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/plan/plan.h"

namespace motley {

inline constexpr const char* kEmulationFormat = "motley.emulation/1";

// The path between the devices of two ranks: a message of b bytes takes latency + b / bandwidth
// (the cost model's point-to-point time).
struct EmulatedLink {
  int src = 0;
  int dst = 0;
  Seconds latency;
  BytesPerSecond bandwidth;
};

// The cost model's all-reduce time over the devices of `ranks` at each size of
// all_reduce_grid() (bytes per member); linear in between.
struct EmulatedAllReduce {
  std::vector<int> ranks;  // increasing
  std::vector<double> bytes;
  std::vector<double> seconds;
};

struct EmulationFactors {
  std::string speeds;                     // "peak" or "cost" (motley run --emulate-speeds)
  std::vector<std::string> device_types;  // per rank
  std::vector<double> compute_slowdown;   // per rank, >= 1; 1 on the device that runs natively
  // The cost model's time of one step's work (every stage's F + B + W (+ R) for every
  // micro-batch) on the device that runs natively: what the time scale divides by.
  Seconds cluster_step;
  Seconds simulated_iteration;  // the simulator's, on the cluster
  // Bytes the cluster moves per byte the executor sends (the model's dtype over fp32).
  double wire_bytes_per_byte = 1;
  std::vector<EmulatedLink> links;             // every ordered pair of ranks on two devices
  std::vector<EmulatedAllReduce> all_reduces;  // one per set of emulated_rank_sets
};

// The sizes, in bytes per member, at which all-reduces are priced: 0, then every quarter octave
// from 1 byte to 1 TiB. Between two of them the time is interpolated linearly, which is exact
// where the cost model's time is affine in the size over that interval (always within one node)
// and otherwise off by at most a quarter of the slope change times the interval's width
// (docs/executor.md, "Emulation").
std::vector<double> all_reduce_grid();

// Every rank set of two or more ranks over which a RankExecutor of `plan` may all-reduce: its
// tensor-parallel groups, the sets that sum its gradients (rank_layout.h) — for any parameter of
// a stage, and for a matrix the embedding shares with a tied head — and the last stage's ranks
// (the loss). Increasing, each set increasing. REQUIRES: `plan` passed validate_plan.
std::vector<std::vector<int>> emulated_rank_sets(const Plan& plan);

// The factors, or the error motley met computing them (so that motley-run reports it where it
// would have met it itself), as one JSON document.
Json emulation_factors_to_json(const EmulationFactors& factors);
Json emulation_error_to_json(const Status& error);
// Reads either form: the factors, or the Status the error document carries. Malformed input is
// an invalid_argument naming `source` and the field.
Result<EmulationFactors> emulation_factors_from_json(const Json& json, const std::string& source);

// The factors' times in the cluster's seconds, looked up fast. Immutable; thread-safe.
class EmulatedNetwork {
 public:
  explicit EmulatedNetwork(const EmulationFactors& factors);
  // A message of `bytes` (as the executor sends them) from rank `src` to rank `dst`: the link's
  // latency + bytes x wire_bytes_per_byte / bandwidth; 0 between ranks on one device.
  Seconds message_time(int src, int dst, int64_t bytes) const;
  // A sum of `bytes` per member over `ranks` (increasing, two or more): the priced set's time
  // at bytes x wire_bytes_per_byte. REQUIRES: `ranks` is one of the priced sets.
  Seconds all_reduce_time(const std::vector<int>& ranks, int64_t bytes) const;

 private:
  double wire_bytes_per_byte_ = 1;
  std::map<std::pair<int, int>, EmulatedLink> links_;
  std::map<std::vector<int>, EmulatedAllReduce> all_reduces_;
};

}  // namespace motley
