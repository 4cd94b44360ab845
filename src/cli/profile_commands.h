// The subcommands of `motley profile`, which measure on this machine and need libtorch: they
// live in motley-profile (profile_main.cc), and motley forwards `motley profile ...` to it
// (profile_forwarder.cc). Each `add_profile_*` registers one subcommand on the `profile` parent.
#pragma once

#include <CLI/CLI.hpp>

#include "commands.h"

namespace motley::cli {

// `motley profile comm` (profile_comm_command.cc).
void add_profile_comm_command(CLI::App& profile, Action* action);
// `motley stress` (stress_command.cc), in motley-profile too.
void add_stress_command(CLI::App& app, Action* action);
// `motley profile` and `motley stress` in motley: forward everything after the command name to
// motley-profile.
void add_profile_forwarder(CLI::App& app, Action* action);
void add_stress_forwarder(CLI::App& app, Action* action);

}  // namespace motley::cli
