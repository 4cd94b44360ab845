#include "run_binary.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace motley::test_support {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunResult run_binary(const std::string& binary, const std::string& args,
                     const RunOptions& options) {
  static int counter = 0;
  const std::string base =
      (std::filesystem::temp_directory_path() /
       ("motley_run_binary_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
          .string();
  std::string cmd;
  if (!options.cwd.empty()) cmd = "cd '" + options.cwd + "' && ";
  cmd +=
      "env -u WORLD_SIZE -u RANK -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u OMPI_COMM_WORLD_SIZE -u "
      "OMPI_COMM_WORLD_RANK -u MOTLEY_TEST_FAULT " +
      options.env + " " + binary + " " + args + " >" + base + ".out 2>" + base + ".err";
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(base + ".out");
  r.err = read_file(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

TempDir::TempDir(const std::string& name)
    : path_((std::filesystem::temp_directory_path() /
             ("motley_" + name + "_" + std::to_string(::getpid())))
                .string()) {
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<std::string> directory_entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace motley::test_support
