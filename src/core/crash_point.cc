#include "motley/core/crash_point.h"

#include <atomic>

namespace motley {
namespace {

std::atomic<CrashPointHook> installed_hook{nullptr};

}  // namespace

void set_crash_point_hook(CrashPointHook hook) { installed_hook.store(hook); }

void crash_point(std::string_view done) {
  if (CrashPointHook hook = installed_hook.load()) hook(done);
}

}  // namespace motley
