// ZeRO-1 (Plan::zero1, Rajbhandari et al. 2020, stage 1): which member of a set of replicas
// steps each of the set's identical parameters, how the others receive the new values, and how
// the owners' AdamW moments are gathered for a checkpoint. The split is by whole tensors, as
// PyTorch's ZeroRedundancyOptimizer splits it. It does not sum gradients (gradient_buckets.h)
// or step (optimizer.h). Internal to exec/. Not thread-safe: one rank's thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "gradient_buckets.h"
#include "motley/core/status.h"
#include "motley/exec/transport.h"
#include "optimizer.h"

namespace motley::internal {

// The owner (an index into the set's members) of each of tensors of `elements` elements:
// largest first (equal sizes in their order), each to the member holding the fewest elements
// so far (the lowest index among equals). REQUIRES: members >= 1.
std::vector<size_t> zero1_owners(const std::vector<int64_t>& elements, size_t members);

class Zero1Shards {
 public:
  // No sharding: this rank steps every parameter.
  Zero1Shards() = default;
  // Shards every set of `sets` with two or more ranks whose parameters are all summed as plain
  // shards (full-size sums, of replicas with different tensor-parallel degrees, keep replicated
  // moments) among its ranks; `rank` is this rank.
  Zero1Shards(const GradientSumSets& sets, int rank);

  // Whether this rank's optimizer steps `param` (not so when another member owns it).
  bool steps_here(const at::Tensor& param) const {
    return owned_elsewhere_.count(param.unsafeGetTensorImpl()) == 0;
  }
  // After the optimizer step: one all-reduce per set, in the sets' order, in which each
  // tensor's owner contributes its new value and the others zeros, so every member gets the
  // owner's bits. A collective of each set.
  Status share_updates(Transport& transport) const;
  // The AdamW state of every sharded parameter from its owner (none before the first step), by
  // TensorImpl, at step count `steps_done`. A collective of each set.
  Result<std::map<const at::TensorImpl*, AdamWStep::State>> gather_state(Transport& transport,
                                                                         const AdamWStep& optimizer,
                                                                         int64_t steps_done) const;

 private:
  struct Set {
    std::vector<int> ranks;
    std::vector<at::Tensor> params;  // the set's parameters, name order
    std::vector<bool> owned;         // by this rank
  };
  std::vector<Set> sets_;  // in the order of their rank sets
  std::set<const at::TensorImpl*> owned_elsewhere_;
};

}  // namespace motley::internal
