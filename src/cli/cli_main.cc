#include "cli_main.h"

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>

namespace motley::cli {
namespace {

// The names of `app`'s subcommands, "a, b, c".
std::string subcommand_names(const CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

// The subcommand of `app` called `name`, or nullptr.
const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == name) return sub;
  }
  return nullptr;
}

// The command line whose --help explains the command `argv` names: "motley model show", or
// "motley" when it names none.
std::string command_of(const CLI::App& app, int argc, char** argv) {
  std::string command = "motley";
  const CLI::App* current = &app;
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    const CLI::App* sub = find_subcommand(*current, argv[i]);
    if (sub == nullptr) break;
    command += " " + sub->get_name();
    current = sub;
  }
  return command;
}

// One line on stderr: "motley: error: MESSAGE (see 'COMMAND --help')".
void print_usage_error(const std::string& message, const std::string& command) {
  std::fprintf(stderr, "motley: error: %s (see '%s --help')\n", message.c_str(), command.c_str());
}

}  // namespace

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
  if (argc > 1 && argv[1][0] != '-' && find_subcommand(app, argv[1]) == nullptr) {
    print_usage_error(
        fmt::format("unknown command '{}'; commands: {}", argv[1], subcommand_names(app)),
        "motley");
    return 2;
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
    print_usage_error(e.what(), command_of(app, argc, argv));
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
