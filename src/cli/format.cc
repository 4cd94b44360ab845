#include "format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace motley::cli {
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
