// The motley subcommands. Each `add_*` registers a subcommand on the CLI11 app and sets
// `*action` to the function main runs after parsing, which checks every numeric option
// (option_checks.h). A command checks its output paths before any work (output_options.h) and
// builds its whole output before printing it or writing its files, all or none
// (core/output_files.h), so a failure leaves no partial output; it returns a Status and never
// exits.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "motley/core/status.h"

namespace motley::cli {

using Action = std::function<Status()>;

void add_model_command(CLI::App& app, Action* action);
void add_cluster_command(CLI::App& app, Action* action);
void add_estimate_command(CLI::App& app, Action* action);
void add_simulate_command(CLI::App& app, Action* action);
void add_plan_command(CLI::App& app, Action* action);
void add_compare_command(CLI::App& app, Action* action);
void add_replan_command(CLI::App& app, Action* action);
void add_export_command(CLI::App& app, Action* action);
void add_detect_command(CLI::App& app, Action* action);
void add_calibrate_command(CLI::App& app, Action* action);
// `motley run` in motley-run (links libtorch) and the forwarder to it in motley.
void add_run_command(CLI::App& app, Action* action);
void add_run_forwarder(CLI::App& app, Action* action);
void add_launch_command(CLI::App& app, Action* action);
// `motley profile` (a parent of measuring subcommands: layers) in motley-profile (links libtorch)
// and the forwarder to it in motley.
void add_profile_command(CLI::App& app, Action* action);
void add_profile_forwarder(CLI::App& app, Action* action);
// `motley fidelity`: runs a plan through `launch` and compares the trace with the simulator.
void add_fidelity_command(CLI::App& app, Action* action);
// `motley report`: a plan as one self-contained HTML page.
void add_report_command(CLI::App& app, Action* action);

// Defaults of the built-in example that the main job runs on.
inline constexpr const char* kDefaultModel = "nemotron-h-8b";
inline constexpr const char* kDefaultCluster = "default";

}  // namespace motley::cli
