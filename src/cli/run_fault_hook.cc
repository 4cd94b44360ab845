#include "run_fault_hook.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "motley/core/crash_point.h"

namespace motley::cli {
namespace {

constexpr const char* kFaultVariable = "MOTLEY_TEST_FAULT";

// The crash points (core/crash_point.h) still to pass before the one that kills the process.
std::atomic<int64_t> crash_points_left{0};

void kill_at_chosen_crash_point(std::string_view /*done*/) {
  if (crash_points_left.fetch_sub(1) == 1) std::raise(SIGKILL);
}

}  // namespace

const char kFaultHookHelp[] =
    "Test hook: MOTLEY_TEST_FAULT=RANK:STEP:exit kills rank RANK (SIGKILL) after its first\n"
    "compute action of step STEP; RANK:STEP:hang makes it sleep forever there; save:N kills\n"
    "the process (each one under WORLD_SIZE) at its N-th crash point of writing files, such\n"
    "as a file of a checkpoint renamed into place. Under launch --elastic, faults separated by\n"
    "commas apply to the first attempt, the second, ... ('-' for none).";

Result<decltype(ExecOptions::after_action)> fault_hook_from_env() {
  using Hook = decltype(ExecOptions::after_action);
  const char* all = std::getenv(kFaultVariable);
  if (all == nullptr || *all == '\0') return Hook();
  // One fault per attempt of an elastic launch, comma-separated: the restart's own.
  const char* restart_text = std::getenv("MOTLEY_ELASTIC_RESTART");
  const long restart = restart_text != nullptr ? std::strtol(restart_text, nullptr, 10) : 0;
  std::string own;
  {
    std::string list = all;
    size_t begin = 0;
    for (long k = 0; k <= restart && begin != std::string::npos; ++k) {
      const size_t comma = list.find(',', begin);
      own = list.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
      begin = comma == std::string::npos ? std::string::npos : comma + 1;
      if (k < restart && begin == std::string::npos) own.clear();
    }
  }
  if (own.empty() || own == "-") return Hook();
  const char* value = own.c_str();
  long long points = 0;
  char end = 0;
  if (std::sscanf(value, "save:%lld%c", &points, &end) == 1) {
    if (points < 1) {
      return invalid_argument(fmt::format("environment variable {}: save:N needs N >= 1, got '{}'",
                                          kFaultVariable, value));
    }
    crash_points_left.store(points);
    set_crash_point_hook(&kill_at_chosen_crash_point);
    return Hook();
  }
  int rank = -1;
  long long step = 0;
  char what[16] = {0};
  if (std::sscanf(value, "%d:%lld:%15s", &rank, &step, what) != 3 || rank < 0 || step < 0 ||
      (std::string(what) != "exit" && std::string(what) != "hang")) {
    return invalid_argument(
        fmt::format("environment variable {}: expected RANK:STEP:exit, RANK:STEP:hang or save:N, "
                    "got '{}'",
                    kFaultVariable, value));
  }
  const bool hang = std::string(what) == "hang";
  return Hook([rank, step, hang](int r, int64_t s, const ::motley::Action&, Seconds) {
    if (r != rank || s != step) return;
    if (hang) {
      while (true) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    std::raise(SIGKILL);  // a crash: no cleanup, no message, sockets closed by the kernel
  });
}

}  // namespace motley::cli
