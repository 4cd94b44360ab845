// SequentialTrainer: the executor's yardstick — the same model, weights, data and optimizer in
// one process with no pipeline: each step loops over the global batch's micro-batches in order
// (data.h), accumulates the gradient of the mean loss and takes one AdamW step. Uses no
// transport and no plan beyond its batch shape. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "motley/core/status.h"
#include "motley/exec/data.h"
#include "motley/exec/executor.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley {

// How the reference adds up the micro-batches' gradients. fp32 addition is not associative, so
// only the same order gives the same bits.
enum class GradientOrder {
  kSequential,  // one running sum over the global batch, micro-batch 0 first
  // Each replica's micro-batches into their own sum, then those sums in replica order: the
  // order of the executor with the in-process transport when every rank runs its weight
  // gradients in micro-batch order (docs/executor.md, "Numerics").
  kByReplica,
};

class SequentialTrainer {
 public:
  // Takes micro_batch_size, seq_len and the replicas' micro-batch counts from `plan`.
  // `tokens` must outlive the trainer. Errors: make_transformer_stage's.
  static Result<std::unique_ptr<SequentialTrainer>> create(
      const ExecOptions& options, const Plan& plan, const ModelSpec& model,
      const TokenStream& tokens, GradientOrder order = GradientOrder::kSequential);
  ~SequentialTrainer();

  // One step; returns the mean loss over the global batch.
  Result<double> step();
  // In increasing name order; after a step each grad() holds the gradient that step applied.
  std::vector<NamedTensor> parameters() const;

 private:
  struct Impl;
  explicit SequentialTrainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace motley
