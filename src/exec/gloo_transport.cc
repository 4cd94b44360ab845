// GlooTransport: ProcessGroupTransport (process_group_transport.h) over ProcessGroupGloo.
#include "motley/exec/gloo_transport.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "error_text.h"
#include "process_group_transport.h"

namespace motley {
namespace {

Result<int> int_variable(const char* name, const char* value, int min, int max) {
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || parsed < min || parsed > max) {
    return invalid_argument(
        fmt::format("environment variable {}: expected an integer in [{}, {}], got '{}'", name, min,
                    max, value));
  }
  return static_cast<int>(parsed);
}

}  // namespace

namespace internal {

c10::intrusive_ptr<c10d::Store> connect_store(const GlooOptions& options) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(options.master_port);
  store_options.isServer = options.rank == 0;
  store_options.numWorkers = options.world_size;
  store_options.waitWorkers = false;  // the process groups' own rendezvous waits
  store_options.timeout = to_ms(options.rendezvous_timeout);
  return c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
}

}  // namespace internal

Result<GlooOptions> gloo_options_from_env(const std::function<const char*(const char*)>& getenv) {
  auto get = [&](const char* name) -> const char* {
    return getenv ? getenv(name) : std::getenv(name);
  };
  GlooOptions options;
  const char* world = get("WORLD_SIZE");
  const char* rank = get("RANK");
  if (world == nullptr || rank == nullptr) {
    return invalid_argument(
        "environment variables RANK and WORLD_SIZE must be set (as torchrun, mpirun wrappers "
        "or Slurm scripts set them)");
  }
  MOTLEY_ASSIGN_OR_RETURN(options.world_size, int_variable("WORLD_SIZE", world, 1, 1 << 20));
  MOTLEY_ASSIGN_OR_RETURN(options.rank, int_variable("RANK", rank, 0, options.world_size - 1));
  if (const char* addr = get("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    options.master_addr = addr;
  }
  if (const char* port = get("MASTER_PORT"); port != nullptr) {
    MOTLEY_ASSIGN_OR_RETURN(options.master_port, int_variable("MASTER_PORT", port, 1, 65535));
  }
  if (const char* ifname = get("GLOO_SOCKET_IFNAME"); ifname != nullptr) options.interface = ifname;
  return options;
}

Result<std::unique_ptr<Transport>> connect_gloo(const GlooOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument(
        fmt::format("gloo: rank {} is not in a world of {}", options.rank, options.world_size));
  }
  try {
    c10::intrusive_ptr<c10d::Store> store = internal::connect_store(options);

    // The process group's own timeout bounds its rendezvous; each wait passes transport.timeout.
    auto pg_options =
        c10d::ProcessGroupGloo::Options::create(internal::to_ms(options.rendezvous_timeout));
    if (!options.interface.empty()) {
      pg_options->devices = {c10d::ProcessGroupGloo::createDeviceForInterface(options.interface)};
    } else if (!options.hostname.empty()) {
      pg_options->devices = {c10d::ProcessGroupGloo::createDeviceForHostname(options.hostname)};
    } else {
      pg_options->devices = {c10d::ProcessGroupGloo::createDefaultDevice()};
    }
    pg_options->threads = 2;
    auto factory = [pg_options](const c10::intrusive_ptr<c10d::Store>& group_store, int position,
                                int size) {
      return c10::make_intrusive<c10d::ProcessGroupGloo>(group_store, position, size, pg_options);
    };
    // Gloo's point-to-point reads host memory only: GPU tensors are staged through it.
    return internal::make_process_group_transport<c10d::ProcessGroupGloo>(
        options, options.transport, /*stage_through_host=*/true, c10::Device(c10::kCPU), store,
        std::move(factory));
  } catch (const std::exception& e) {
    return io_error(fmt::format("gloo: rank {} could not join the world of {} at {}:{}: {}",
                                options.rank, options.world_size, options.master_addr,
                                options.master_port, internal::first_line(e.what())));
  }
}

}  // namespace motley
