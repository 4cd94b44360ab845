// NcclTransport: ProcessGroupTransport (process_group_transport.h) over ProcessGroupNCCL, in
// builds with CUDA; elsewhere connect_nccl says it is not there.
#include "motley/exec/nccl_transport.h"

#include <fmt/format.h>

#if MOTLEY_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "error_text.h"
#include "process_group_transport.h"
#endif

namespace motley {

#if MOTLEY_WITH_CUDA

Result<std::unique_ptr<Transport>> connect_nccl(const GlooOptions& options, c10::Device device) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument(
        fmt::format("nccl: rank {} is not in a world of {}", options.rank, options.world_size));
  }
  try {
    c10::intrusive_ptr<c10d::Store> store = internal::connect_store(options);
    // NCCL's own timeout (its watchdog) is the transport's: a wait that outlives it fails.
    auto pg_options = c10d::ProcessGroupNCCL::Options::create();
    pg_options->timeout = internal::to_ms(options.transport.timeout);
    auto factory = [pg_options](const c10::intrusive_ptr<c10d::Store>& group_store, int position,
                                int size) {
      return c10::make_intrusive<c10d::ProcessGroupNCCL>(group_store, position, size, pg_options);
    };
    TransportOptions transport = options.transport;
    transport.matching = MessageMatching::kInOrder;  // NCCL has no tags
    return internal::make_process_group_transport<c10d::ProcessGroupNCCL>(
        options, transport, /*stage_through_host=*/false, device, store, std::move(factory));
  } catch (const std::exception& e) {
    return io_error(fmt::format("nccl: rank {} could not join the world of {} at {}:{}: {}",
                                options.rank, options.world_size, options.master_addr,
                                options.master_port, internal::first_line(e.what())));
  }
}

#else

Result<std::unique_ptr<Transport>> connect_nccl(const GlooOptions& options, c10::Device device) {
  (void)device;
  return invalid_argument(fmt::format(
      "nccl: rank {}: this motley was built against a libtorch without CUDA, so it has no NCCL "
      "transport (docs/executor.md, \"GPUs\")",
      options.rank));
}

#endif

}  // namespace motley
