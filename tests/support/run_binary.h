// Runs a motley executable as a user would, for whole-program tests: a shell command line, an
// optional working directory and environment, and what it printed and returned. Owns nothing
// of motley itself. Not thread-safe (a counter names the capture files).
#pragma once

#include <string>
#include <vector>

namespace motley::test_support {

struct RunResult {
  int exit_code = -1;  // -1 when the process did not exit normally
  std::string out;
  std::string err;
};

struct RunOptions {
  std::string cwd;  // empty: the test's own
  std::string env;  // "VAR=value ..." added to a clean distributed environment
};

// Runs `binary args` through the shell with stdout and stderr captured; WORLD_SIZE, RANK and
// the other launcher variables of the test's own environment are removed first, so a test
// never joins a job by accident.
RunResult run_binary(const std::string& binary, const std::string& args,
                     const RunOptions& options = RunOptions{});

// A fresh, empty directory under the system's temporary directory, named after `name` and this
// process; removed with everything in it when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& name);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path);

// The names of the entries of directory `dir`, sorted.
std::vector<std::string> directory_entries(const std::string& dir);

}  // namespace motley::test_support
