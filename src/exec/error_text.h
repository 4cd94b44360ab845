// How the executor words what libtorch and the clock tell it, in one place for every file of
// the module: the reason of a c10 error without its backtrace, and a duration.
#pragma once

#include <sstream>
#include <string>

#include "motley/core/units.h"

namespace motley::internal {

// c10 and c10d errors carry a backtrace after the first line; the first line is the reason.
inline std::string first_line(const char* what) {
  std::string text = what;
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

inline std::string format_seconds(Seconds s) {
  std::ostringstream os;
  os << s.value() << " s";
  return os.str();
}

}  // namespace motley::internal
