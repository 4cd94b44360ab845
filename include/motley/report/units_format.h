// Human-readable quantities for reports and the command line: times, byte sizes, counts, rates
// and percentages, each with its unit and about three significant digits. Formatting only: no
// knowledge of plans, models or clusters. Pure functions; thread-safe.
#pragma once

#include <string>

#include "motley/core/units.h"

namespace motley {

// Three significant digits with the largest unit that keeps the number >= 1 (when rounding
// reaches the next unit, the next unit is used: 999.96 ms prints as "1.00 s").
std::string format_time(Seconds t);  // "830 ns", "12.3 us", "45.6 ms", "4.50 s", "1234 s"
std::string format_bytes(Bytes b);   // binary prefixes: "512 B", "12.0 MiB", "61.2 GiB"
std::string format_count(double n);  // decimal prefixes: "12", "4.10 K", "512 M", "8.03 B"
std::string format_bandwidth(BytesPerSecond b);   // decimal: "450 GB/s"; "inf" when infinite
std::string format_flops(Flops f);                // "1.23 TFLOP"
std::string format_flops_rate(FlopsPerSecond r);  // "989 TFLOP/s"
std::string format_tokens_per_second(double tokens_per_s);  // "45.6 K tokens/s"
// A fraction as a percentage with `decimals` digits after the point: 0.1234 -> "12.3%".
std::string format_percent(double fraction, int decimals = 1);
// A time in milliseconds with exactly `decimals` digits after the point and no unit:
// (0.0125 s, 1) -> "12.5". For axis labels and columns that state their unit once.
std::string format_milliseconds(Seconds t, int decimals);

}  // namespace motley
