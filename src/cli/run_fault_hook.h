// The fault-injection hook of motley-run's tests, MOTLEY_TEST_FAULT=RANK:STEP:exit|hang: a rank
// that dies (SIGKILL, like a crash) or hangs after its first compute action of a step. Compiled
// in only when the build has MOTLEY_TEST_HOOKS (CMake option, on with the tests), so that a
// production build has no hook at all. Free functions; thread-safe.
#pragma once

#include "motley/core/status.h"
#include "motley/exec/executor.h"

namespace motley::cli {

// What motley run --help says of the hook.
extern const char kFaultHookHelp[];

// Reads MOTLEY_TEST_FAULT: unset gives an empty hook; otherwise one for
// ExecOptions::after_action that ends or stops the named rank at the named step.
// Errors: invalid_argument for a value of another form, naming the variable.
Result<decltype(ExecOptions::after_action)> fault_hook_from_env();

}  // namespace motley::cli
