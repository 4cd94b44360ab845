// Where a rank of `motley profile comm` or `motley stress` stands in its job (motley-profile
// only: it needs the Gloo transport, and so libtorch).
#pragma once

#include <string>

#include "motley/core/status.h"
#include "motley/exec/gloo_transport.h"

namespace motley::cli {

// This rank's place in a distributed job, from a torch-style launcher's variables (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or mpirun's (OMPI_COMM_WORLD_*); bound to the loopback
// address when the master is local. Errors: invalid_argument saying how to start `command` as
// ranks when neither is set.
Result<GlooOptions> rank_gloo_options(const std::string& command);

}  // namespace motley::cli
