// `motley profile ...` in the main executable: replaces this process with motley-profile (found
// beside this executable), so that only measuring pays for loading libtorch. Under motley
// launch each rank's motley forwards the same way.
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

Status forward_to_motley_profile(const std::vector<std::string>& args) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    return internal_error(fmt::format("cannot locate the motley executable: {}", ec.message()));
  }
  std::string target = (self.parent_path() / "motley-profile").string();
  if (::access(target.c_str(), X_OK) != 0) {
    return not_found(fmt::format(
        "'motley profile' needs {}, built beside motley (cmake --build build builds it)", target));
  }
  std::vector<std::string> argv_storage = {target, "profile"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(target.c_str(), argv.data());
  return io_error(fmt::format("cannot start {}: {}", target, std::strerror(errno)));
}

}  // namespace

void add_profile_forwarder(CLI::App& app, Action* action) {
  CLI::App* profile = app.add_subcommand(
      "profile",
      "Measure on this machine: per-layer times, communication between ranks (see 'motley "
      "profile --help')");
  // Everything after `profile`, --help included, belongs to motley-profile.
  profile->prefix_command();
  profile->allow_extras();
  profile->set_help_flag();
  profile->callback([profile, action] {
    std::vector<std::string> args = profile->remaining();
    *action = [args] { return forward_to_motley_profile(args); };
  });
}

}  // namespace motley::cli
