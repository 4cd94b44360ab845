// `motley profile ...` and `motley stress ...` in the main executable: replace this process with
// motley-profile (found beside this executable), so that only measuring pays for loading
// libtorch. Under motley launch each rank's motley forwards the same way.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "profile_commands.h"

namespace motley::cli {
namespace {

Status forward_to_motley_profile(const std::string& command, const std::vector<std::string>& args) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    return internal_error(fmt::format("cannot locate the motley executable: {}", ec.message()));
  }
  std::string target = (self.parent_path() / "motley-profile").string();
  if (::access(target.c_str(), X_OK) != 0) {
    return not_found(
        fmt::format("'motley {}' needs {}, built beside motley (cmake --build build builds it)",
                    command, target));
  }
  std::vector<std::string> argv_storage = {target, command};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(target.c_str(), argv.data());
  return io_error(fmt::format("cannot start {}: {}", target, std::strerror(errno)));
}

// `command` on `app`: everything after it, --help included, belongs to motley-profile.
void add_forwarder(CLI::App& app, Action* action, const std::string& command,
                   const std::string& description) {
  CLI::App* cmd = app.add_subcommand(command, description);
  cmd->prefix_command();
  cmd->allow_extras();
  cmd->set_help_flag();
  cmd->callback([cmd, action, command] {
    std::vector<std::string> args = cmd->remaining();
    *action = [command, args] { return forward_to_motley_profile(command, args); };
  });
}

}  // namespace

void add_profile_forwarder(CLI::App& app, Action* action) {
  add_forwarder(app, action, "profile",
                "Measure on this machine: per-layer times, communication between ranks (see "
                "'motley profile --help')");
}

void add_stress_forwarder(CLI::App& app, Action* action) {
  add_forwarder(app, action, "stress",
                "Burn-in before scaling: every device's compute and every link for a set time, "
                "checked exactly (see 'motley stress --help')");
}

}  // namespace motley::cli
