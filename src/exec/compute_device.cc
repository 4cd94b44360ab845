#include "motley/exec/compute_device.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#if MOTLEY_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace motley {

bool built_with_cuda() { return MOTLEY_WITH_CUDA != 0; }

Result<c10::Device> parse_compute_device(const std::string& text) {
  if (text == "cpu") return c10::Device(c10::kCPU);
  if (text == "cuda") return c10::Device(c10::kCUDA);
  const std::string prefix = "cuda:";
  if (text.rfind(prefix, 0) == 0 && text.size() > prefix.size() &&
      text.size() <= prefix.size() + 3) {
    char* end = nullptr;
    const long index = std::strtol(text.c_str() + prefix.size(), &end, 10);
    if (*end == '\0' && std::isdigit(static_cast<unsigned char>(text[prefix.size()]))) {
      return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
    }
  }
  return invalid_argument(fmt::format(
      "--device: expected cpu, cuda (each rank its local GPU) or cuda:N, got '{}'", text));
}

Result<c10::Device> resolve_compute_device(c10::Device requested, int local_rank) {
  if (requested.is_cpu()) return requested;
  if (!built_with_cuda()) {
    return invalid_argument(
        "--device cuda: this motley was built against a libtorch without CUDA (Debian's is "
        "CPU-only); configure it against a CUDA-enabled libtorch, e.g. PyTorch's "
        "(docs/executor.md, \"GPUs\")");
  }
  const int count = static_cast<int>(torch::cuda::device_count());
  if (!torch::cuda::is_available() || count == 0) {
    return invalid_argument(
        "--device cuda: no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
  }
  if (!requested.has_index()) {
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(std::max(0, local_rank) % count));
  }
  if (requested.index() >= count) {
    return invalid_argument(
        fmt::format("--device {}: this machine shows {} CUDA device(s), 0 to {}", requested.str(),
                    count, count - 1));
  }
  return requested;
}

std::optional<int64_t> peak_device_memory(c10::Device device) {
#if MOTLEY_WITH_CUDA
  if (device.is_cuda()) {
    // allocated_bytes[0]: the aggregate over the allocator's pools.
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return static_cast<int64_t>(stats.allocated_bytes[0].peak);
  }
#else
  (void)device;
#endif
  return std::nullopt;
}

std::optional<GpuProperties> gpu_properties(c10::Device device) {
#if MOTLEY_WITH_CUDA
  if (device.is_cuda()) {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(device.index());
    return GpuProperties{p->name, static_cast<int64_t>(p->totalGlobalMem)};
  }
#else
  (void)device;
#endif
  return std::nullopt;
}

void synchronize_device(c10::Device device) {
  if (device.is_cpu()) return;
  // The current (compute) stream only: a whole-device synchronization would also wait for
  // receives NCCL has queued ahead on its own streams, whose senders may wait on this rank.
  const c10::impl::VirtualGuardImpl impl(device.type());
  impl.getStream(device).synchronize();
}

}  // namespace motley
