#include "motley/core/output_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "motley/core/crash_point.h"

namespace motley {
namespace {

namespace fs = std::filesystem;

// ".<target>.tmp.XXXXXX", mkstemp's six characters last.
constexpr std::string_view kTemporaryMark = ".tmp.";
constexpr size_t kUniqueLength = 6;

fs::path directory_of(const fs::path& path) {
  return path.parent_path().empty() ? fs::path(".") : path.parent_path();
}

// Whether this process may create and rename entries in `dir`.
bool writable(const fs::path& dir) { return ::access(dir.c_str(), W_OK | X_OK) == 0; }

// Why files cannot be written into the existing `dir`, or "" when they can.
std::string directory_problem(const fs::path& dir) {
  std::error_code error;
  const fs::file_status status = fs::status(dir, error);
  if (!fs::exists(status)) return fmt::format("no such directory '{}'", dir.string());
  if (!fs::is_directory(status)) return fmt::format("'{}' is not a directory", dir.string());
  if (!writable(dir)) return fmt::format("directory '{}' is not writable", dir.string());
  return "";
}

// `path` without a trailing separator ("out/" -> "out").
fs::path without_trailing_separator(const std::string& path) {
  fs::path p(path);
  return p.has_filename() || !p.has_parent_path() ? p : p.parent_path();
}

std::string os_reason() { return std::strerror(errno); }

// Writes all of `contents` to `fd` and flushes it to disk.
Status write_and_sync(int fd, std::string_view contents, const std::string& path) {
  const char* next = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, next, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(fmt::format("{}: write failed: {}", path, os_reason()));
    next += n;
    left -= static_cast<size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0) {
    return io_error(fmt::format("{}: flushing to disk failed: {}", path, os_reason()));
  }
  return Status::ok();
}

}  // namespace

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

Status check_output_file(std::string_view option, const std::string& path) {
  auto refuse = [&](const std::string& why) {
    return invalid_argument(fmt::format("{}: {}: {}", option, path, why));
  };
  if (path.empty()) return invalid_argument(fmt::format("{}: expected a file name", option));
  const fs::path target(path);
  std::error_code error;
  const fs::file_status status = fs::status(target, error);
  if (fs::is_directory(status) || !target.has_filename()) {
    return refuse("is a directory, expected a file name");
  }
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    return refuse("exists and is not a regular file");
  }
  const std::string problem = directory_problem(directory_of(target));
  return problem.empty() ? Status::ok() : refuse(problem);
}

Status check_output_directory(std::string_view option, const std::string& path) {
  auto refuse = [&](const std::string& why) {
    return invalid_argument(fmt::format("{}: {}: {}", option, path, why));
  };
  if (path.empty()) return invalid_argument(fmt::format("{}: expected a directory", option));
  const fs::path dir = without_trailing_separator(path);
  std::error_code error;
  const fs::file_status status = fs::status(dir, error);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) return refuse("exists and is not a directory");
    return writable(dir) ? Status::ok() : refuse("the directory is not writable");
  }
  // To be created: the nearest existing directory above it must take the new entry.
  fs::path above = directory_of(dir);
  while (!fs::exists(above, error) && above != directory_of(above)) above = directory_of(above);
  const std::string problem = directory_problem(above);
  return problem.empty() ? Status::ok() : refuse(problem);
}

std::optional<std::string> temporary_target(std::string_view file_name) {
  // ".", a target of at least one character, the mark, mkstemp's letters and digits.
  if (file_name.size() < 2 + kTemporaryMark.size() + kUniqueLength || file_name.front() != '.') {
    return std::nullopt;
  }
  const size_t mark = file_name.size() - kUniqueLength - kTemporaryMark.size();
  const std::string_view unique = file_name.substr(mark + kTemporaryMark.size());
  const bool generated = std::all_of(unique.begin(), unique.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c));
  });
  if (file_name.substr(mark, kTemporaryMark.size()) != kTemporaryMark || !generated) {
    return std::nullopt;
  }
  return std::string(file_name.substr(1, mark - 1));
}

void OutputFiles::add(std::string path, std::string contents) {
  files_.push_back(File{std::move(path), std::move(contents)});
}

void OutputFiles::add_directory(std::string path) { directories_.push_back(std::move(path)); }

Status OutputFiles::create_directories(std::vector<std::string>* created) const {
  for (const std::string& path : directories_) {
    // The directories that do not exist yet, outermost first, to remove them on failure.
    std::vector<fs::path> missing;
    std::error_code error;
    for (fs::path p = without_trailing_separator(path);
         !p.empty() && !fs::exists(p, error) && p != p.parent_path(); p = p.parent_path()) {
      missing.insert(missing.begin(), p);
    }
    for (const fs::path& p : missing) {
      if (!fs::create_directory(p, error) && error) {
        return io_error(
            fmt::format("{}: cannot create the directory: {}", p.string(), error.message()));
      }
      created->push_back(p.string());
    }
  }
  return Status::ok();
}

Status OutputFiles::write_temporaries(std::vector<std::string>* temporaries) const {
  for (const File& file : files_) {
    const fs::path target(file.path);
    std::string temporary = (directory_of(target) /
                             fmt::format(".{}{}XXXXXX", target.filename().string(), kTemporaryMark))
                                .string();
    const int fd = ::mkstemp(temporary.data());
    if (fd < 0) {
      return io_error(
          fmt::format("{}: cannot create a temporary file beside it: {}", file.path, os_reason()));
    }
    temporaries->push_back(temporary);
    const Status written = write_and_sync(fd, file.contents, file.path);
    ::close(fd);
    MOTLEY_RETURN_IF_ERROR(written);
    crash_point("wrote " + temporary);
  }
  return Status::ok();
}

Status OutputFiles::rename_into_place(std::vector<std::string>* temporaries) const {
  for (size_t i = 0; i < files_.size(); ++i) {
    if (std::rename((*temporaries)[i].c_str(), files_[i].path.c_str()) != 0) {
      const std::string why = os_reason();
      temporaries->erase(temporaries->begin(), temporaries->begin() + static_cast<ptrdiff_t>(i));
      return io_error(
          fmt::format("{}: cannot rename the temporary file into place: {}", files_[i].path, why));
    }
    crash_point("renamed " + files_[i].path);
  }
  temporaries->clear();
  return Status::ok();
}

Status OutputFiles::commit() {
  std::vector<std::string> created, temporaries;
  Status status = create_directories(&created);
  if (status.is_ok()) status = write_temporaries(&temporaries);
  if (status.is_ok()) status = rename_into_place(&temporaries);
  if (status.is_ok()) {
    std::set<fs::path> directories;
    for (const File& file : files_) directories.insert(directory_of(fs::path(file.path)));
    for (const fs::path& dir : directories) sync_directory(dir.string());
  } else {
    for (const std::string& temporary : temporaries) ::unlink(temporary.c_str());
    // Innermost first; a directory that is not empty is someone else's now and stays.
    for (auto it = created.rbegin(); it != created.rend(); ++it) ::rmdir(it->c_str());
  }
  files_.clear();
  directories_.clear();
  return status;
}

}  // namespace motley
