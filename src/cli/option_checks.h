// The checks of every numeric option of the motley commands, done by the parser so that a bad
// value is refused before any work, with a message naming the option and what it allows:
// "--stages: expected an integer from 1 to 65536, got 0". The limits are far above any real
// run and low enough that the products the commands form stay exact. Values; thread-safe.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>

namespace motley::cli {

// The most sequences, micro-batches, stages, chunks or devices an option may name.
inline constexpr int64_t kMaxOptionCount = int64_t{1} << 16;
// The longest sequence an option may name, in tokens.
inline constexpr int64_t kMaxOptionSeqLen = int64_t{1} << 24;
// The most threads or processes an option may ask for.
inline constexpr int64_t kMaxOptionThreads = 1024;
// The longest wait an option may set, in seconds (it becomes a clock duration).
inline constexpr double kMaxOptionSeconds = 1e6;
// The shortest wait on another process a --timeout may set, in seconds: below a millisecond no
// message arrives in time, even between processes of one machine.
inline constexpr double kMinWaitSeconds = 1e-3;
// --budget (USD per hour), --deadline (hours) and --train-tokens: far above any real job, so
// that costs and times derived from them stay finite and readable.
inline constexpr double kMaxBudgetPerHour = 1e9;
inline constexpr double kMaxDeadlineHours = 1e6;
inline constexpr double kMaxTrainTokens = 1e18;

// An integer from `min` to `max`, written in decimal.
CLI::Validator integer_in(int64_t min, int64_t max);
// Any value of an unsigned 64-bit option (a seed): an integer from 0 to 2^64 - 1.
CLI::Validator unsigned_integer();
// A finite number above 0 and at most `max`.
CLI::Validator positive_number(double max = std::numeric_limits<double>::infinity());
// A finite number from 0 to below `max` (a share such as a memory headroom).
CLI::Validator fraction_below(double max);
// A wait on other processes, in seconds: from kMinWaitSeconds to kMaxOptionSeconds.
CLI::Validator wait_seconds();

}  // namespace motley::cli
