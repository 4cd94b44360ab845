// Money and the table type of the motley command line; quantities are formatted by
// report/units_format.h. Formatting only: no knowledge of models or clusters. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "motley/report/text_table.h"
#include "motley/report/units_format.h"

namespace motley::cli {

std::string format_money(double usd);  // $24.00, $0.53, $0.0612, $0.000118

// The project's one table formatter (report/text_table.h).
using Table = ::motley::TextTable;

}  // namespace motley::cli
