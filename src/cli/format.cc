#include "format.h"

#include <fmt/format.h>

#include <cmath>

namespace motley::cli {
std::string format_money(double usd) {
  // Cents, or three significant digits below a dime (dollars per million tokens of a small
  // model are fractions of a cent).
  if (usd == 0 || std::abs(usd) >= 0.1) return fmt::format("${:.2f}", usd);
  return fmt::format("${:#.3g}", usd);
}

}  // namespace motley::cli
