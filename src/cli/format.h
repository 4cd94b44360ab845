// Aligned text tables and money for the motley command line; quantities are formatted by
// report/units_format.h. Formatting only: no knowledge of models or clusters. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "motley/report/units_format.h"

namespace motley::cli {

std::string format_money(double usd);  // $24.00

// A table printed with columns padded to their widest cell; numeric-looking columns align right.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void add_separator() { rows_.push_back({}); }
  std::string to_string() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;  // an empty row is a separator
};

}  // namespace motley::cli
