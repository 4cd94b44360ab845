// The subcommands of `motley profile`, which measure on this machine and need libtorch: they
// live in motley-profile (profile_main.cc), and motley forwards `motley profile ...` to it
// (profile_forwarder.cc). Each `add_profile_*` registers one subcommand on the `profile` parent.
#pragma once

#include <CLI/CLI.hpp>

#include "commands.h"

namespace motley::cli {

// `motley profile comm` (profile_comm_command.cc).
void add_profile_comm_command(CLI::App& profile, Action* action);
// `motley profile` in motley: forwards everything after `profile` to motley-profile.
void add_profile_forwarder(CLI::App& app, Action* action);

}  // namespace motley::cli
