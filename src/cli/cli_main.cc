#include "cli_main.h"

#include <cstdio>
#include <exception>
#include <string>

namespace motley::cli {

int cli_main(int argc, char** argv, const std::vector<AddCommand>& commands) {
  CLI::App app(
      "motley: plans, simulates and runs pipeline-parallel training of large language models "
      "on heterogeneous GPU clusters.",
      "motley");
  app.require_subcommand(1);
  app.set_version_flag("--version", "motley 0.1.0");
  Action action;
  for (AddCommand add : commands) add(app, &action);

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
  Status status;
  try {
    status = action();
  } catch (const std::exception& e) {
    status = internal_error(std::string("unexpected exception: ") + e.what());
  }
  if (!status.is_ok()) {
    std::fprintf(stderr, "motley: error: %s\n", status.message().c_str());
    return exit_code_for(status);
  }
  return 0;
}

}  // namespace motley::cli
