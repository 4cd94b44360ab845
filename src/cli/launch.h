// `motley launch`'s job runner, shared by the plain launch (launch_command.cc) and the elastic
// supervisor (elastic_launch.cc): N local ranks of this binary as one torch-style job, their
// output forwarded line by line, the first failure stopping the others. POSIX processes only.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "motley/core/status.h"

namespace motley::cli {

// Called with each complete line a rank writes on stdout (without the "[rank k] " prefix).
using LineHandler = std::function<void(int rank, const std::string& line)>;

struct LaunchOptions {
  int nproc = 0;                   // 0 with elastic: the plan's world size
  std::optional<int> master_port;  // unset: a free port
  std::vector<std::string> command;
  bool elastic = false;
  int max_restarts = 3;
  // Not options: what the elastic supervisor adds to each attempt.
  std::vector<std::string> extra_env;  // "NAME=value", replacing the launcher's own
  LineHandler on_line;
};

// The value of option `name` in a rank's command (`name VALUE` or `name=VALUE`, the last one
// given; command[0] is the subcommand), nullopt when it is not there.
std::optional<std::string> command_option(const std::vector<std::string>& command,
                                          const std::string& name);

// Runs one job of opt.nproc ranks to its end. When it fails and `failed_ranks` is set, the ranks
// that failed first (before launch stopped the others) are appended to it. Errors:
// invalid_argument when the first failed rank exited with 2 (bad input), io_error otherwise,
// each naming the ranks and how they ended.
Status run_job(const LaunchOptions& opt, std::vector<int>* failed_ranks);

// The elastic supervisor (`launch --elastic -- run --plan P --checkpoint-dir D ...`): runs the
// job; when ranks fail, treats their nodes as lost, replans on the nodes left, resumes from
// the last complete checkpoint, and goes on until the requested steps are done or
// opt.max_restarts restarts were spent. Prints what happened and the goodput.
Status elastic_launch(const LaunchOptions& opt);

}  // namespace motley::cli
