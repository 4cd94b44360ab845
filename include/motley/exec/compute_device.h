// Compute devices: where a rank of the executor computes (`motley run --device`), whether this
// build and this machine have that device, and what it measured. CUDA code is compiled only
// when the build found a CUDA-enabled libtorch (MOTLEY_WITH_CUDA, set by src/exec/CMakeLists.txt
// from TORCH_CUDA_LIBRARIES); Debian's libtorch is CPU-only, and there these functions say so.
// Thread-safe free functions.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>

#include "motley/core/status.h"

namespace motley {

// Whether this build links a CUDA-enabled libtorch.
bool built_with_cuda();

// "cpu", "cuda" (each rank its local GPU) or "cuda:N". Errors (invalid_argument) name --device
// and what is allowed.
Result<c10::Device> parse_compute_device(const std::string& text);

// The device rank `local_rank` of this machine computes on: `requested`, a bare "cuda" becoming
// cuda:(local_rank mod the GPUs visible). Errors (invalid_argument): a CUDA device in a build
// without CUDA, on a machine where none is visible, or an index beyond those visible.
Result<c10::Device> resolve_compute_device(c10::Device requested, int local_rank);

// The most bytes the CUDA caching allocator had handed out on `device` at once since the
// process started (tensors only, not the allocator's cached free blocks or the CUDA context);
// nullopt on the CPU.
std::optional<int64_t> peak_device_memory(c10::Device device);

// What CUDA reports of a GPU: its product name ("NVIDIA H100 80GB HBM3") and memory.
struct GpuProperties {
  std::string name;
  int64_t memory_bytes = 0;
};
// nullopt on the CPU. REQUIRES: a CUDA device from resolve_compute_device.
std::optional<GpuProperties> gpu_properties(c10::Device device);

// Waits until `device` has finished the work queued on its current stream, the compute stream (a
// GPU runs kernels after the host queued them; timing a piece of work needs this before reading
// the clock). Communication on other streams is not waited for. Nothing on the CPU.
void synchronize_device(c10::Device device);

}  // namespace motley
