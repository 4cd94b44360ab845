// Host memory for training on this CPU: the fp32 training state the ranks of one process hold,
// what this machine has available, and whether the one fits the other, so that a plan for a
// real-sized model is refused before it allocates rather than killed by the kernel half-way. It
// counts weights, gradients and AdamW's moments, not activations, and words no message (the
// command line does). And how this process's C library keeps freed buffers. Free functions;
// thread-safe except keep_freed_host_buffers.
#pragma once

#include <optional>

#include "motley/core/units.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"

namespace motley {

struct TrainingState {
  Bytes bytes;    // over the ranks counted
  int ranks = 0;  // how many ranks that is
};

// The fp32 training state of the ranks of this process: 16 bytes per parameter (weights,
// gradients, two moments; 8 + 8 / replicas under a Plan::zero_stage of 1 or more, which the
// executor runs as ZeRO-1), a rank holding 1 / its tensor-parallel degree of its stages' parameters
// (model/layer_cost.h counts). `sequential`: the whole model on one rank, unsharded. `only_rank` >=
// 0: that rank alone; -1: every rank. REQUIRES: `plan` passed validate_plan for `model`.
TrainingState training_state_bytes(const Plan& plan, const ModelSpec& model, bool sequential,
                                   int only_rank);

// MemAvailable of /proc/meminfo; nullopt where it cannot be read.
std::optional<Bytes> available_memory_bytes();

// Why the state does not fit: `needed` (training_state_bytes) above `share`, the
// 1 / local_ranks part of `available` that this process may use.
struct HostMemoryShortfall {
  TrainingState needed;
  Bytes available;
  Bytes share;
  int local_ranks = 1;
};

// nullopt when the training state of training_state_bytes(plan, model, sequential, only_rank)
// fits in `available` / local_ranks, or when `available` is unknown (nothing to check against).
std::optional<HostMemoryShortfall> host_memory_shortfall(const Plan& plan, const ModelSpec& model,
                                                         bool sequential, int only_rank,
                                                         int local_ranks,
                                                         std::optional<Bytes> available);

// CPU tensors come from malloc. glibc serves a block above its mmap threshold (128 KiB at
// first, raised as such blocks are freed, up to 32 MiB) with a fresh mapping, and returns the
// top of its heap to the kernel once more than twice the threshold lies free there, so a
// schedule that frees activations and allocates them again pays for page faults on zeroed
// pages at every pass, and pays more or less according to how many micro-batches it holds at
// once. Fixing the threshold at its ceiling and trimming only above a GiB keeps freed buffers
// for reuse, as PyTorch's caching allocator does on a GPU. Does nothing where GLIBC_TUNABLES sets a
// malloc tunable (the user's own choice) or the C library is not glibc; returns whether it
// changed the allocator. Call once, first thing in main.
bool keep_freed_host_buffers();

}  // namespace motley
