// motley-profile: the executable behind `motley profile` (measurement needs libtorch and the
// executor's transports, which motley does not load). motley forwards `motley profile ARGS`
// here as `motley-profile profile ARGS`.
#include "cli_main.h"
#include "profile_commands.h"

namespace motley::cli {
namespace {

void add_profile_command(CLI::App& app, Action* action) {
  CLI::App* profile =
      app.add_subcommand("profile", "Measure on this machine: communication between ranks");
  profile->require_subcommand(1);
  add_profile_comm_command(*profile, action);
}

}  // namespace
}  // namespace motley::cli

int main(int argc, char** argv) {
  return motley::cli::cli_main(argc, argv, {motley::cli::add_profile_command});
}
