#include "motley/report/text_table.h"

#include <algorithm>
#include <cctype>

namespace motley {
namespace {

bool looks_numeric(const std::string& cell) {
  const unsigned char c = cell.empty() ? 0 : static_cast<unsigned char>(cell[0]);
  return std::isdigit(c) || c == '$' || c == '-' || c == '.';
}

}  // namespace

TextTable::TextTable(std::vector<std::string> header) : header_(std::move(header)) {}

std::string TextTable::to_string() const {
  size_t columns = header_.size();
  for (const auto& row : rows_) columns = std::max(columns, row.size());
  std::vector<size_t> width(columns, 0);
  std::vector<bool> numeric(columns, true);
  for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
      if (!row[c].empty() && !looks_numeric(row[c])) numeric[c] = false;
    }
  }
  std::vector<bool> right(columns, false);
  for (size_t c = 0; c < columns; ++c) {
    const Align a = c < alignment_.size() ? alignment_[c] : Align::kAuto;
    right[c] = a == Align::kRight || (a == Align::kAuto && !header_.empty() && numeric[c]);
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t c = 0; c < columns; ++c) {
      const std::string& cell = c < row.size() ? row[c] : std::string();
      const std::string pad(width[c] - cell.size(), ' ');
      if (c > 0) out += "  ";
      out += right[c] ? pad + cell : cell + pad;
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  size_t total = 0;
  for (size_t c = 0; c < columns; ++c) total += width[c] + (c > 0 ? 2 : 0);
  const std::string rule = std::string(total, '-') + "\n";
  std::string out;
  if (!header_.empty()) out = line(header_) + rule;
  for (const auto& row : rows_) out += row.empty() ? rule : line(row);
  return out;
}

}  // namespace motley
