// fuzz_replay TARGET PATH...: runs every file of each PATH (a file, or a directory's files in
// name order) through fuzz target TARGET once, as libFuzzer would, so the kept corpus is a
// regression test in a build without libFuzzer. A failed check aborts (the file being run is
// printed first); a missing path or an empty corpus is an error, so the test cannot pass on
// nothing.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_targets.h"

namespace {

std::vector<std::filesystem::path> inputs(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path)) return {path};
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_replay TARGET PATH...\n");
    return 2;
  }
  const std::string_view name = argv[1];
  const auto* target =
      std::find_if(std::begin(motley::fuzz::kTargets), std::end(motley::fuzz::kTargets),
                   [name](const motley::fuzz::Target& t) { return t.name == name; });
  if (target == std::end(motley::fuzz::kTargets)) {
    std::fprintf(stderr, "fuzz_replay: no target '%s'\n", argv[1]);
    return 2;
  }
  int count = 0;
  for (int i = 2; i < argc; ++i) {
    if (!std::filesystem::exists(argv[i])) {
      std::fprintf(stderr, "fuzz_replay: no such file or directory: %s\n", argv[i]);
      return 2;
    }
    for (const std::filesystem::path& file : inputs(argv[i])) {
      std::ifstream in(file, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      std::fprintf(stderr, "%s\n", file.c_str());
      target->run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++count;
    }
  }
  if (count == 0) {
    std::fprintf(stderr, "fuzz_replay: no inputs\n");
    return 2;
  }
  std::printf("fuzz_replay %s: %d inputs, no failed check\n", argv[1], count);
  return 0;
}
