// NcclTransport: the Transport over c10d's ProcessGroupNCCL (NCCL on NVIDIA GPUs; RCCL under
// ROCm's libtorch, whose "cuda" device is HIP), for ranks whose tensors live on their GPU. The
// rendezvous is Gloo's (gloo_transport.h: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
// NCCL's point-to-point has no tags: messages match in order, each link direction over a
// two-rank group of its own (MessageMatching::kInOrder, process_group_transport.h), so every
// direction has its own communicator and stream and communication overlaps compute. Present in
// builds with CUDA only (built_with_cuda(), compute_device.h). One object per rank.
#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "motley/core/status.h"
#include "motley/exec/gloo_transport.h"
#include "motley/exec/transport.h"

namespace motley {

// Joins the world over NCCL for a rank whose tensors live on `device` (its GPU);
// `options.transport.matching` is ignored (always in order). Errors: invalid_argument in a build
// without CUDA; io_error with c10d's reason when the rendezvous fails.
Result<std::unique_ptr<Transport>> connect_nccl(const GlooOptions& options, c10::Device device);

}  // namespace motley
