#include "motley/report/units_format.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <vector>

namespace motley {
namespace {

// About three significant digits of `v` in the largest of `units` (each `base` times the
// previous) that keeps it >= 1. `whole_first`: an integral value in the first unit prints
// without decimals ("512 B", "12").
std::string scaled(double v, std::initializer_list<const char*> unit_list, double base,
                   bool whole_first) {
  if (std::isnan(v)) return "nan";
  const std::vector<const char*> units(unit_list);
  size_t i = 0;
  if (std::isinf(v)) return fmt::format("{} {}", v > 0 ? "inf" : "-inf", units.back());
  while (i + 1 < units.size() && std::fabs(v) >= base) {
    v /= base;
    ++i;
  }
  std::string number;
  for (;;) {
    const double a = std::fabs(v);
    int decimals = a >= 100 ? 0 : (a >= 10 ? 1 : 2);
    if (i == 0 && whole_first && a == std::floor(a)) decimals = 0;
    number = fmt::format("{:.{}f}", v, decimals);
    // Rounding may carry into the next digit (99.96 -> "100.0") or the next unit.
    const double shown = std::fabs(std::strtod(number.c_str(), nullptr));
    if (shown >= base && i + 1 < units.size()) {
      v /= base;
      ++i;
      continue;
    }
    const int wanted = shown >= 100 ? 0 : (shown >= 10 ? 1 : 2);
    if (wanted < decimals) number = fmt::format("{:.{}f}", v, wanted);
    break;
  }
  if (*units[i] == '\0') return number;
  return fmt::format("{} {}", number, units[i]);
}

}  // namespace

std::string format_time(Seconds t) {
  if (t.value() == 0) return "0 s";
  return scaled(t.value() * 1e9, {"ns", "us", "ms", "s"}, 1000.0, false);
}

std::string format_bytes(Bytes b) {
  return scaled(b.value(), {"B", "KiB", "MiB", "GiB", "TiB", "PiB"}, 1024.0, true);
}

std::string format_count(double n) { return scaled(n, {"", "K", "M", "B", "T"}, 1000.0, true); }

std::string format_bandwidth(BytesPerSecond b) {
  if (std::isinf(b.value())) return "inf";
  return scaled(b.value(), {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"}, 1000.0, true);
}

std::string format_flops(Flops f) {
  return scaled(f.value(), {"FLOP", "KFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"}, 1000.0,
                true);
}

std::string format_flops_rate(FlopsPerSecond r) {
  return scaled(r.value(), {"FLOP/s", "KFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s"},
                1000.0, true);
}

std::string format_tokens_per_second(double tokens_per_s) {
  return fmt::format("{} tokens/s", format_count(tokens_per_s));
}

std::string format_percent(double fraction, int decimals) {
  if (decimals < 0) decimals = 0;
  return fmt::format("{:.{}f}%", fraction * 100.0, decimals);
}

std::string format_milliseconds(Seconds t, int decimals) {
  if (decimals < 0) decimals = 0;
  std::string s = fmt::format("{:.{}f}", t.value() * 1e3, decimals);
  // "-0" and "-0.0" from tiny negative rounding errors read as noise on an axis.
  if (s[0] == '-' && std::strtod(s.c_str(), nullptr) == 0) s.erase(0, 1);
  return s;
}

}  // namespace motley
