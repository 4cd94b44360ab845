// `motley run ...` in the main executable: replaces this process with motley-run (found beside
// this executable) so that only training pays for loading libtorch. With --emulate it first
// computes the emulation's factors, which need the cost model and the simulator that motley-run
// does not link, and hands them over (run_emulation.h); on a GPU, the predicted peak memory of
// each device. With --fidelity it runs the plan as
// `motley fidelity` does instead (fidelity_command.h).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "fidelity_command.h"
#include "option_checks.h"
#include "run_emulation.h"

namespace motley::cli {
namespace {

// The refusals motley-run would give before training, given here without starting it (its
// libtorch takes about 0.6 s to start): an option that does not parse, and, for a run on the
// CPU, options that do not go together and a plan, model or cluster that does not load or
// validate. motley-run checks all of them again, in the same order: its options as its `run`
// command declares them, then check_run_options, then the device, then the inputs. The device
// is libtorch's to parse, so with another --device, or a --transport that needs a GPU, the rest
// is left to motley-run.
Status refuse_bad_run_arguments(const std::vector<std::string>& args) {
  MOTLEY_ASSIGN_OR_RETURN(const std::optional<RunOptions> parsed, parse_run_arguments(args));
  if (!parsed) return Status::ok();  // --help or --version: motley-run answers
  const RunOptions& opt = *parsed;
  MOTLEY_RETURN_IF_ERROR(check_run_options(opt));
  if (opt.device != "cpu" || opt.transport == "nccl") return Status::ok();
  MOTLEY_ASSIGN_OR_RETURN(const RunInputs inputs, load_run_inputs(opt));
  return validate_run_inputs(inputs, opt);
}

Status forward_to_motley_run(const std::vector<std::string>& args) {
  MOTLEY_RETURN_IF_ERROR(refuse_bad_run_arguments(args));
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
  const std::optional<std::string> memory = predicted_memory_handover(args);
  // The hidden options go first: anything after a `--` in `args` would be positional.
  std::vector<std::string> argv_storage = {target, "run"};
  if (emulation) {
    argv_storage.push_back("--emulation-fd");
    argv_storage.push_back(std::to_string(*emulation));
  }
  if (memory) {
    argv_storage.push_back("--predicted-device-memory");
    argv_storage.push_back(*memory);
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

// `run --fidelity ...`: the options `motley fidelity` shares with `run` (--plan, --steps,
// --trace, --timeout, --json, each as "--x v" or "--x=v"); any other is refused, since the
// comparison runs the plan its own way (one thread per rank under launch).
Result<FidelityCommandOptions> fidelity_options_from_run(const std::vector<std::string>& args) {
  FidelityCommandOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    const size_t eq = name.find('=');
    const bool inline_value = name.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "--fidelity" || name == "--json") {
      if (inline_value) return invalid_argument(fmt::format("{} takes no value", name));
      if (name == "--json") opt.json = true;
      continue;
    }
    if (name != "--plan" && name != "--steps" && name != "--trace" && name != "--timeout") {
      return invalid_argument(fmt::format(
          "run --fidelity: '{}' does not apply; it takes --plan, --steps, --trace, --timeout and "
          "--json (motley fidelity --help has the rest)",
          args[i]));
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return invalid_argument(fmt::format("{}: give a value", name));
      value = args[++i];
    }
    if (name == "--plan") opt.plan = value;
    if (name == "--trace") opt.trace = value;
    if (name == "--steps" || name == "--timeout") {
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(value.c_str(), &end);
      const bool whole = name == "--timeout" || std::floor(v) == v;
      const double least = name == "--timeout" ? kMinWaitSeconds : 1;
      if (end == value.c_str() || *end != '\0' || errno != 0 || !(v >= least) || !whole ||
          v > kMaxOptionSeconds) {
        return invalid_argument(
            fmt::format("{}: expected {} from {} to {}, got '{}'", name,
                        name == "--steps" ? "an integer" : "a number of seconds", least,
                        kMaxOptionSeconds, value));
      }
      if (name == "--steps") opt.steps = static_cast<int64_t>(v);
      if (name == "--timeout") opt.timeout_s = v;
    }
  }
  return opt;
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
    const bool fidelity = std::find(args.begin(), args.end(), "--fidelity") != args.end() &&
                          std::find(args.begin(), args.end(), "--help") == args.end();
    *action = [args, fidelity]() -> Status {
      if (!fidelity) return forward_to_motley_run(args);
      MOTLEY_ASSIGN_OR_RETURN(FidelityCommandOptions opt, fidelity_options_from_run(args));
      return fidelity_command(opt);
    };
  });
}

}  // namespace motley::cli
