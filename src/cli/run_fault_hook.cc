#include "run_fault_hook.h"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace motley::cli {
namespace {

constexpr const char* kFaultVariable = "MOTLEY_TEST_FAULT";

}  // namespace

const char kFaultHookHelp[] =
    "Test hook: MOTLEY_TEST_FAULT=RANK:STEP:exit kills rank RANK (SIGKILL) after its first\n"
    "compute action of step STEP; RANK:STEP:hang makes it sleep forever there.";

Result<decltype(ExecOptions::after_action)> fault_hook_from_env() {
  using Hook = decltype(ExecOptions::after_action);
  const char* value = std::getenv(kFaultVariable);
  if (value == nullptr || *value == '\0') return Hook();
  int rank = -1;
  long long step = 0;
  char what[16] = {0};
  if (std::sscanf(value, "%d:%lld:%15s", &rank, &step, what) != 3 || rank < 0 || step < 0 ||
      (std::string(what) != "exit" && std::string(what) != "hang")) {
    return invalid_argument(
        fmt::format("environment variable {}: expected RANK:STEP:exit or RANK:STEP:hang, got '{}'",
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
