// Shared by the tune module's tests of its internal pieces: a Context over a small model and
// cluster whose costs come from a FixedCostModel (so that times are exact), and the specs such
// tests start from. Test-only; not thread-safe beyond what Context is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../schedule/test_util.h"
#include "context.h"
#include "motley/cost/fixed_cost_model.h"

// The tests of tune/ live in this namespace, so these helpers and the schedule module's are
// theirs unqualified.
namespace motley::tune_internal::tune_testing {

using schedule_testing::fixed_cluster;
using schedule_testing::layer_ms;
using schedule_testing::tiny_model;

// The same FixedCostModel for every workload the tuner asks about.
CostModelFactory fixed_factory(FixedCostSpec spec);

// `layers` layers of 1 ms F, B and W each, with 1 GB of weights and 1 GB of activations.
FixedCostSpec uniform_spec(int layers);

// `spec` with every layer `factor` times as slow on devices of `type`.
FixedCostSpec slower_on(FixedCostSpec spec, const std::string& type, double factor);

// `layers` layers of 1 + 1 + 1 ms on an H100 and twice that on an A100, no memory to speak of.
FixedCostSpec two_speeds(int layers);

// Options for `global_batch` sequences in micro-batches of 1, priced by `spec`, on a clock that
// never moves (the time budget never runs out).
TuneOptions fixed_options(int64_t global_batch, FixedCostSpec spec);

// Owns what a Context refers to; built in place and never copied.
struct Fixture {
  // REQUIRES: Context::create accepts the inputs (checked).
  Fixture(ModelSpec model, ClusterSpec cluster, TuneOptions options);
  // `layers` tiny layers on nodes of `per_node` devices of the given types, priced by `spec`,
  // micro-batch size 1.
  Fixture(int layers, const std::vector<std::string>& nodes, int per_node, int64_t global_batch,
          FixedCostSpec spec);
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  ModelSpec model;
  ClusterSpec cluster;
  TuneOptions options;
  std::unique_ptr<Context> ctx;
};

}  // namespace motley::tune_internal::tune_testing
