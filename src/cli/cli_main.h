// The shared body of the motley executables: builds the CLI11 app from the given commands,
// parses, runs the chosen command and maps its Status to the exit code (0 ok, 2 bad input,
// 1 anything else) — the only place that chooses an exit code.
#pragma once

#include <vector>

#include "commands.h"

namespace motley::cli {

using AddCommand = void (*)(CLI::App& app, Action* action);

int cli_main(int argc, char** argv, const std::vector<AddCommand>& commands);

}  // namespace motley::cli
