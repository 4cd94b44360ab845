// Experiment: the exact min-max partition of stages owned by groups (interleaved, V) as a MILP
// solved by CBC within a time limit, started from the heuristic's partition. Internal to tune/.
#pragma once

#include <functional>

#include "motley/tune/partition.h"

namespace motley::tune_internal {

// Per stage s and range [begin, end): the fastest allowed policy that fits memory and its time
// (F + B + W + recompute); false when none fits.
using StageOption =
    std::function<bool(int s, int begin, int end, RecomputePolicy* policy, double* time)>;

struct MilpOutcome {
  bool improved = false;
  bool proven_optimal = false;
  double heuristic = 0;  // largest group total of the start
  double exact = 0;      // of the best solution found
  double seconds = 0;
  int arcs = 0;
};

// Replaces `partition` (bounds, recompute) by a better one when CBC finds it within
// `time_limit` seconds.
MilpOutcome improve_by_milp(const PartitionRequest& req, const StageOption& option,
                            double time_limit, Partition* partition);

}  // namespace motley::tune_internal
