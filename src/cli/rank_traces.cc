#include "rank_traces.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/report/chrome_trace.h"

namespace motley::cli {

std::string rank_trace_path(const std::string& path, int rank) {
  std::filesystem::path p(path);
  return (p.parent_path() /
          (p.stem().string() + ".rank" + std::to_string(rank) + p.extension().string()))
      .string();
}

Status merge_rank_traces(const std::string& path, int world_size) {
  const std::string context = "merging the ranks' traces into " + path;
  std::vector<Json> documents;
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string file = rank_trace_path(path, rank);
    // The ranks succeeded, so a missing or broken file is the run's failure, not bad input.
    Result<Json> doc = read_json_file(file);
    if (!doc.is_ok()) return io_error(fmt::format("{}: {}", context, doc.status().message()));
    Status valid = check_chrome_trace(*doc);
    if (!valid.is_ok()) return io_error(fmt::format("{}: {}: {}", context, file, valid.message()));
    documents.push_back(std::move(doc).value());
  }
  Json merged = merge_chrome_traces(documents);
  merged["otherData"]["merged_ranks"] = world_size;
  // Names come from user files: replace invalid UTF-8 rather than throw.
  OutputFiles files;
  files.add(path, merged.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
  MOTLEY_RETURN_IF_ERROR(files.commit());
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string file = rank_trace_path(path, rank);
    if (std::remove(file.c_str()) != 0) {
      return io_error(fmt::format("{}: {} is written but {} cannot be removed: {}", context, path,
                                  file, std::strerror(errno)));
    }
  }
  return Status::ok();
}

}  // namespace motley::cli
