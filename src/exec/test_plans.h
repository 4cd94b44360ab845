// Plans for the executor's tests, without tensors (so tests of the executor's tensor-free
// arithmetic build without libtorch): presets, and plans from the schedule generators on one
// node of H100s with every layer at 1 s.
#pragma once

#include <cstdint>

#include "motley/cluster/cluster.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"
#include "motley/schedule/schedule.h"

namespace motley::testing {

ModelSpec preset(const char* name);

// One node of `devices` H100s (FixedCostModel's cluster).
ClusterSpec cluster_of(int devices);

struct UniformCase {
  ScheduleKind kind;
  int stages;  // device groups per replica
  int virtual_stages;
  int64_t micro_batches;
  int data_parallel;
  RecomputePolicy recompute = RecomputePolicy::kNone;
  int tensor_parallel = 1;  // devices per group
  // Both ends split into one vocabulary shard per group (UniformPlanOptions::vocab_parallel).
  bool vocab_parallel = false;
};
// make_uniform_plan with every layer at 1 s for F, B and W on one node of as many H100s as the
// plan uses, checked by validate_plan.
Plan uniform_plan(const ModelSpec& model, const UniformCase& c, int64_t micro_batch_size = 2,
                  int64_t seq_len = 16);

}  // namespace motley::testing
