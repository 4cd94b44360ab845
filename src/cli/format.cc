#include "format.h"

#include <fmt/format.h>

namespace motley::cli {
std::string format_money(double usd) { return fmt::format("${:.2f}", usd); }

}  // namespace motley::cli
