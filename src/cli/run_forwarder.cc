// `motley run ...` in the main executable: replaces this process with motley-run (found beside
// this executable) so that only training pays for loading libtorch. With --emulate it first
// computes the emulation's factors, which need the cost model and the simulator that motley-run
// does not link, and hands them over (run_emulation.h).
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "run_emulation.h"

namespace motley::cli {
namespace {

Status forward_to_motley_run(const std::vector<std::string>& args) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    return internal_error(fmt::format("cannot locate the motley executable: {}", ec.message()));
  std::string target = (self.parent_path() / "motley-run").string();
  if (::access(target.c_str(), X_OK) != 0) {
    return not_found(fmt::format(
        "'motley run' needs {}, built beside motley (cmake --build build builds it)", target));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::optional<int> emulation, emulation_handover(args));
  // The hidden option goes first: anything after a `--` in `args` would be positional.
  std::vector<std::string> argv_storage = {target, "run"};
  if (emulation) {
    argv_storage.push_back("--emulation-fd");
    argv_storage.push_back(std::to_string(*emulation));
  }
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(target.c_str(), argv.data());
  const std::string why = std::strerror(errno);
  if (emulation) ::close(*emulation);
  return io_error(fmt::format("cannot start {}: {}", target, why));
}

}  // namespace

void add_run_forwarder(CLI::App& app, Action* action) {
  CLI::App* run =
      app.add_subcommand("run",
                         "Train under a plan with the executor: one rank per device group (see "
                         "'motley run --help')");
  // Everything after `run`, --help included, belongs to motley-run.
  run->prefix_command();
  run->allow_extras();
  run->set_help_flag();
  run->callback([run, action] {
    std::vector<std::string> args = run->remaining();
    *action = [args] { return forward_to_motley_run(args); };
  });
}

}  // namespace motley::cli
