// Human-readable numbers and aligned text tables for the motley command line.
// Formatting only: no knowledge of models or clusters. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "motley/core/units.h"

namespace motley::cli {

std::string format_count(double n);              // 8.03 B, 512 M, 4.10 K, 12
std::string format_flops(Flops f);               // 1.23 TFLOP
std::string format_rate(FlopsPerSecond r);       // 989 TFLOP/s
std::string format_bytes(Bytes b);               // 1.50 GiB, 12.0 MiB, 512 B
std::string format_bandwidth(BytesPerSecond b);  // 450 GB/s
std::string format_time(Seconds t);              // 12.3 ms, 4.50 s, 830 us
std::string format_money(double usd);            // $24.00

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
