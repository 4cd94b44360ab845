// The motley command line: parses arguments, runs one subcommand and maps its Status to the
// exit code (0 ok, 2 bad input, 1 anything else). The only place that chooses an exit code.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app(
      "motley: plans, simulates and runs pipeline-parallel training of large language models "
      "on heterogeneous GPU clusters.",
      "motley");
  app.require_subcommand(1);
  app.set_version_flag("--version", "motley 0.1.0");
  motley::cli::Action action;
  motley::cli::add_model_command(app, &action);
  motley::cli::add_cluster_command(app, &action);
  motley::cli::add_estimate_command(app, &action);
  motley::cli::add_plan_command(app, &action);
  motley::cli::add_compare_command(app, &action);
  motley::cli::add_simulate_command(app, &action);

  // CLI11 only says "A subcommand is required" for a mistyped command; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr,
                   "motley: error: unknown command '%s'; commands: %s\n"
                   "Run 'motley --help' for usage.\n",
                   argv[1], names.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "motley: error: %s\nRun 'motley --help' for usage.\n", e.what());
    return 2;
  }
  if (!action) {
    std::fprintf(stderr, "motley: error: no command given\n");
    return 2;
  }
  motley::Status status;
  try {
    status = action();
  } catch (const std::exception& e) {
    status = motley::internal_error(std::string("unexpected exception: ") + e.what());
  }
  if (!status.is_ok()) {
    std::fprintf(stderr, "motley: error: %s\n", status.message().c_str());
    return motley::exit_code_for(status);
  }
  return 0;
}
