// TextTable: the one aligned plain-text table of motley's terminal output — columns padded to
// their widest cell, an optional header with a rule under it, separators, and each column
// aligned left, right, or (by default) right when every cell in it looks numeric. Formatting
// only: it knows nothing of what the cells mean. Thread-compatible value type.
#pragma once

#include <string>
#include <vector>

namespace motley {

class TextTable {
 public:
  enum class Align { kAuto, kLeft, kRight };

  // With a header, the table starts with it and a rule of '-' as wide as the table; without
  // one (the default), rows start at once and columns default to left alignment.
  explicit TextTable(std::vector<std::string> header = {});

  // Per column; columns beyond the list keep the default.
  void set_alignment(std::vector<Align> alignment) { alignment_ = std::move(alignment); }
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // A rule across the table (tables with a header only).
  void add_separator() { rows_.push_back({}); }

  // Two spaces between columns, no space at the end of a line, a newline after every line.
  std::string to_string() const;

 private:
  std::vector<std::string> header_;
  std::vector<Align> alignment_;
  std::vector<std::vector<std::string>> rows_;  // an empty row is a separator
};

}  // namespace motley
