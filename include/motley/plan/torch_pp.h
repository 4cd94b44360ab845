// A plan's schedule as PyTorch's torch.distributed.pipelining writes it in CSV, and back: one
// row per pipeline rank (a replica's device groups in pipeline order), one cell per action in
// the rank's order. Compute actions are written "<stage><type><micro-batch>": F forward, I
// input-gradient backward, W weight-gradient backward, B full backward ("0F3", "1I3", "1W3",
// "2B0"); the lowered form adds the pipeline messages, SEND_F after the forward whose output
// leaves the rank and RECV_F before the forward that takes it (the receiving stage's index),
// SEND_B / RECV_B likewise for the backward. Recompute actions are not written (PyTorch
// recomputes inside the stage module); where the plan lists a stage's recompute as actions of
// its own, reading a CSV puts them back before each micro-batch's first backward. Stage indices are
// the plan's (global), so a rank holds several stages under an interleaved or V map. Thread-safe
// free functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "motley/core/status.h"
#include "motley/plan/plan.h"

namespace motley {

// The CSV of replica `replica`'s orders; `lowered` adds SEND_F / RECV_F / SEND_B / RECV_B.
// REQUIRES: the plan passed check_plan_structure; 0 <= replica < replicas.
std::string torch_pp_csv(const Plan& plan, int replica, bool lowered);

// Stage s -> the pipeline rank (device group of `replica`) that runs it.
std::vector<int> torch_pp_stage_ranks(const Plan& plan, int replica);

// What replica `replica`'s CSV does not carry of the plan, in words: other replicas that
// differ from it (devices aside), tensor parallelism, recompute; empty when nothing.
std::vector<std::string> torch_pp_limits(const Plan& plan, int replica);

// `plan` with the order of every replica's groups replaced by the CSV's rows (compute-only or
// lowered; messages and PyTorch's FSDP actions UNSHARD, RESHARD, REDUCE_GRAD are checked for
// form and skipped, OVERLAP_F_B runs its sub-actions in order), recompute put back. The result
// is not validated: validate_plan says whether it runs. Errors: invalid_argument naming
// `source`, the row (rank) and the column, for a cell that is not an action, and for a row
// count other than every replica's group count.
Result<Plan> plan_with_torch_pp_order(const Plan& plan, std::string_view csv,
                                      const std::string& source);

}  // namespace motley
