// The fault-injection hook of motley-run's tests, MOTLEY_TEST_FAULT=RANK:STEP:exit|hang: a rank
// that dies (SIGKILL, like a crash) or hangs after its first compute action of a step; and
// MOTLEY_TEST_FAULT=save:N: the process killed at its N-th crash point (core/crash_point.h), to
// kill a checkpoint save at each of its steps in turn. Compiled
// in only when the build has MOTLEY_TEST_HOOKS (CMake option, on with the tests), so that a
// production build has no hook at all. Free functions; thread-safe.
#pragma once

#include "motley/core/status.h"
#include "motley/exec/executor.h"

namespace motley::cli {

// What motley run --help says of the hook.
extern const char kFaultHookHelp[];

// Reads MOTLEY_TEST_FAULT: unset gives an empty hook; save:N installs the crash-point hook and
// gives an empty one; otherwise one for ExecOptions::after_action that ends or stops the named
// rank at the named step.
// Errors: invalid_argument for a value of another form, naming the variable.
Result<decltype(ExecOptions::after_action)> fault_hook_from_env();

}  // namespace motley::cli
