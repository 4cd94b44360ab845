// GlooTransport: the Transport over c10d's ProcessGroupGloo (TCP), one process (or thread) per
// rank, meeting through a TCPStore that rank 0 serves — the rendezvous torch.distributed uses
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Sub-groups for all-reduces over rank subsets are
// created on first use. Does not launch processes. One object per rank, used by one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "motley/core/status.h"
#include "motley/exec/transport.h"

namespace motley {

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";  // where rank 0 serves the TCPStore
  int master_port = 29500;
  // The address Gloo binds for its pairs: `interface` (a network interface name, e.g. "eth0",
  // as GLOO_SOCKET_IFNAME gives it) when set, else `hostname` when set, else the address this
  // machine's hostname resolves to (loopback if it does not resolve).
  std::string interface;
  std::string hostname;
  TransportOptions transport;  // bounds each wait on a message, all-reduce or barrier
  Seconds rendezvous_timeout = Seconds(300);  // bounds joining the world and creating sub-groups
};

// Reads RANK, WORLD_SIZE, MASTER_ADDR (default 127.0.0.1), MASTER_PORT (default 29500) and
// GLOO_SOCKET_IFNAME from `getenv` (the process environment by default). Errors
// (invalid_argument) name the variable and what is allowed.
Result<GlooOptions> gloo_options_from_env(
    const std::function<const char*(const char*)>& getenv = nullptr);

// Joins the world: blocks until all world_size ranks have connected or rendezvous_timeout passed.
// Errors (io_error) carry c10d's reason. After a timed-out wait the world should be torn down:
// Gloo's process group does not promise to stay usable.
Result<std::unique_ptr<Transport>> connect_gloo(const GlooOptions& options);

}  // namespace motley
