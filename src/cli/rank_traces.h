// The per-rank trace files of a distributed `motley run --trace PATH` — each rank writes its own,
// its events already on the time axis the thread mode's one trace would use — and their merge
// into PATH, which `motley launch` does once every rank has exited. Knows nothing of how the
// ranks ran. Free functions; safe to call from one thread per PATH.
#pragma once

#include <string>

#include "motley/core/status.h"

namespace motley::cli {

// The file rank `rank` writes for `--trace path`: "t.json" -> "t.rank3.json".
std::string rank_trace_path(const std::string& path, int rank);

// Merges the files rank_trace_path(path, k), k = 0 .. world_size - 1, into `path`
// (merge_chrome_traces; otherData is rank 0's plus "merged_ranks": world_size), written
// atomically, then removes them. A rank file that is missing, unreadable or not a trace is an
// io_error naming it; then `path` is not written and the rank files are left as they are.
Status merge_rank_traces(const std::string& path, int world_size);

}  // namespace motley::cli
