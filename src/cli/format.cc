#include "format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace motley::cli {
namespace {

// Three significant digits with a decimal prefix from `units` (each 1000x the previous).
std::string scaled(double v, const std::vector<const char*>& units, double base) {
  size_t i = 0;
  double a = std::fabs(v);
  while (i + 1 < units.size() && a >= base) {
    v /= base;
    a /= base;
    ++i;
  }
  int decimals = a >= 100 ? 0 : (a >= 10 ? 1 : 2);
  if (i == 0 && std::floor(a) == a) decimals = 0;
  return fmt::format("{:.{}f} {}", v, decimals, units[i]);
}

}  // namespace

std::string format_count(double n) {
  std::string s = scaled(n, {"", "K", "M", "B", "T"}, 1000.0);
  if (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string format_flops(Flops f) {
  return scaled(f.value(), {"FLOP", "KFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"}, 1000.0);
}

std::string format_rate(FlopsPerSecond r) {
  return scaled(r.value(), {"FLOP/s", "KFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s"},
                1000.0);
}

std::string format_bytes(Bytes b) {
  return scaled(b.value(), {"B", "KiB", "MiB", "GiB", "TiB"}, 1024.0);
}

std::string format_bandwidth(BytesPerSecond b) {
  if (std::isinf(b.value())) return "inf";
  return scaled(b.value(), {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"}, 1000.0);
}

std::string format_time(Seconds t) {
  double s = t.value();
  double a = std::fabs(s);
  if (a == 0) return "0 s";
  if (a < 1e-3) return fmt::format("{:.3g} us", s * 1e6);
  if (a < 1.0) return fmt::format("{:.3g} ms", s * 1e3);
  if (a < 100.0) return fmt::format("{:.3g} s", s);
  return fmt::format("{:.0f} s", s);
}

std::string format_money(double usd) { return fmt::format("${:.2f}", usd); }

std::string Table::to_string() const {
  size_t ncols = header_.size();
  std::vector<size_t> width(ncols, 0);
  std::vector<bool> numeric(ncols, true);
  for (size_t c = 0; c < ncols; ++c) width[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < ncols; ++c) {
      width[c] = std::max(width[c], row[c].size());
      const std::string& cell = row[c];
      bool looks_numeric = !cell.empty() && (std::isdigit(static_cast<unsigned char>(cell[0])) ||
                                             cell[0] == '$' || cell[0] == '-' || cell[0] == '.');
      if (!cell.empty() && !looks_numeric) numeric[c] = false;
    }
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t c = 0; c < ncols; ++c) {
      std::string cell = c < row.size() ? row[c] : "";
      size_t pad = width[c] - std::min(width[c], cell.size());
      if (c > 0) out += "  ";
      if (numeric[c]) {
        out += std::string(pad, ' ') + cell;
      } else {
        out += cell + (c + 1 < ncols ? std::string(pad, ' ') : "");
      }
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  size_t total = 0;
  for (size_t c = 0; c < ncols; ++c) total += width[c] + (c > 0 ? 2 : 0);
  std::string out = line(header_);
  out += std::string(total, '-') + "\n";
  for (const auto& row : rows_) out += row.empty() ? std::string(total, '-') + "\n" : line(row);
  return out;
}

}  // namespace motley::cli
