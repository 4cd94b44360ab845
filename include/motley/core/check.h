// MOTLEY_CHECK: an always-on invariant check for programming errors inside motley.
// Never use it for user input: that is reported with a Status. On failure it prints the
// condition, location and message to stderr and aborts. Thread-safe.
#pragma once

#include <string>

namespace motley::internal {
[[noreturn]] void check_failed(const char* condition, const char* file, int line,
                               const std::string& message);
}  // namespace motley::internal

#define MOTLEY_CHECK(cond, msg)                                                      \
  do {                                                                               \
    if (!(cond)) ::motley::internal::check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (false)
