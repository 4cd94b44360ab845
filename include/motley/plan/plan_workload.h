// The workload a plan is priced with: its sequence length and micro-batch size, with the model's
// dtype and dropout — what every cost model built for a plan needs. Header-only; a pure
// function, thread-safe.
#pragma once

#include "motley/model/layer_cost.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley {

// Workload{plan.seq_len, plan.micro_batch_size, model.dtype, model.dropout,
// plan.context_parallel}.
inline Workload plan_workload(const Plan& plan, const ModelSpec& model) {
  return Workload{plan.seq_len, plan.micro_batch_size, model.dtype, model.dropout,
                  plan.context_parallel};
}

}  // namespace motley
