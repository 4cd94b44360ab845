#include "output_options.h"

#include <fmt/format.h>

#include <filesystem>

#include "motley/core/output_files.h"

namespace motley::cli {
namespace {

// One spelling per file, for comparing the paths options name: "./a/../t.json" is "t.json".
std::filesystem::path file_identity(const std::string& path) {
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  const std::filesystem::path full = std::filesystem::weakly_canonical(absolute, error);
  return error ? absolute.lexically_normal() : full;
}

}  // namespace

Status check_output_options(const std::vector<OutputOption>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const OutputOption& output = outputs[i];
    if (output.path.empty()) continue;
    MOTLEY_RETURN_IF_ERROR(check_output_file(output.option, output.path));
    for (size_t j = 0; j < i; ++j) {
      if (!outputs[j].path.empty() &&
          file_identity(outputs[j].path) == file_identity(output.path)) {
        return invalid_argument(fmt::format("{}: {}: {} names the same file; give each its own",
                                            output.option, output.path, outputs[j].option));
      }
    }
  }
  return Status::ok();
}

}  // namespace motley::cli
