// Whole-program tests of malformed and hostile input: every file of tests/data/hostile/ (each
// wrong in its own way: self-referential, exponential or deeply nested structure, repeated
// keys, counts and products past the limits, non-finite numbers, wrong types, empty, truncated
// or binary files) must end the command that reads it with exit code 2 and one error line
// that names the file, with nothing on stdout and no file written. ctest's timeout on each
// case guards against blowups in time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "support/run_binary.h"

namespace {

using motley::test_support::RunOptions;
using motley::test_support::RunResult;
using motley::test_support::TempDir;

const std::string kCorpus = std::string(MOTLEY_TEST_DATA_DIR) + "/hostile";
// The corpus's list of files and the part of the error line each must give.
const std::string kManifest = "expected.txt";

struct CorpusFile {
  std::string name;
  std::string expected;  // a part of the error line
};

// For gtest's listing: the file, not the struct's bytes.
void PrintTo(const CorpusFile& file, std::ostream* os) { *os << file.name; }

std::vector<CorpusFile> corpus() {
  std::vector<CorpusFile> out;
  std::ifstream in(kCorpus + "/" + kManifest);
  for (std::string line; std::getline(in, line);) {
    const size_t tab = line.find('\t');
    if (line.empty() || line[0] == '#' || tab == std::string::npos) continue;
    out.push_back(CorpusFile{line.substr(0, tab), line.substr(tab + 1)});
  }
  return out;
}

// The kind of input a file is, from its name: hf-, model-, profile-, cluster- or plan-.
std::string kind_of(const std::string& name) { return name.substr(0, name.find('-')); }

// The command a user would read such a file with.
std::string command_for(const std::string& name) {
  const std::string kind = kind_of(name);
  if (kind == "cluster") return "cluster show";
  if (kind == "plan") return "simulate --plan";
  return "model show";  // hf, model, profile
}

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

class HostileInputTest : public ::testing::TestWithParam<CorpusFile> {};

TEST_P(HostileInputTest, ExitsTwoWithOneLineNamingTheFile) {
  const CorpusFile& file = GetParam();
  const std::string path = kCorpus + "/" + file.name;
  TempDir cwd("motley_hostile");
  const std::set<std::string> corpus_before = listing(kCorpus);

  const RunResult r = motley::test_support::run_binary(
      MOTLEY_BINARY, command_for(file.name) + " " + path, RunOptions{cwd.path(), ""});

  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n') << r.err;
  EXPECT_EQ(r.err.rfind("motley: error: " + path + ": ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(file.expected), std::string::npos) << file.expected << "\n" << r.err;
  EXPECT_TRUE(std::filesystem::is_empty(cwd.path()));
  EXPECT_EQ(listing(kCorpus), corpus_before);
}

INSTANTIATE_TEST_SUITE_P(Corpus, HostileInputTest, ::testing::ValuesIn(corpus()),
                         [](const ::testing::TestParamInfo<CorpusFile>& info) {
                           std::string name = info.param.name;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// The same files reach the planner and the simulator through --model and --cluster: each
// command refuses them the same way before doing any work.
void expect_refused(const std::string& args, const std::string& file, const std::string& field) {
  TempDir cwd("motley_hostile");
  const RunResult r =
      motley::test_support::run_binary(MOTLEY_BINARY, args, RunOptions{cwd.path(), ""});
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  EXPECT_EQ(r.out, "") << args;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("motley: error: " + kCorpus + "/" + file + ": field '" + field + "'", 0),
            0u)
      << r.err;
  EXPECT_TRUE(std::filesystem::is_empty(cwd.path()));
}

TEST(HostileInputCommands, PlanRefusesAHugeLayerCount) {
  expect_refused("plan --model " + kCorpus + "/hf-layers-1e9.json --cluster h100x8",
                 "hf-layers-1e9.json", "num_hidden_layers");
}

TEST(HostileInputCommands, PlanRefusesACountProductPastTheLimit) {
  expect_refused("plan --model tiny-llama --cluster " + kCorpus + "/cluster-device-product.yaml",
                 "cluster-device-product.yaml", "nodes[0]");
}

TEST(HostileInputCommands, SimulateRefusesARecursiveAlias) {
  expect_refused("simulate --schedule 1f1b --model tiny-llama --cluster " + kCorpus +
                     "/cluster-self-alias.yaml --out plan.json",
                 "cluster-self-alias.yaml", "nodes[0]");
}

TEST(HostileInputCommands, EstimateRefusesRepeatsPastTheLayerLimit) {
  expect_refused("estimate --cluster h100x8 --model " + kCorpus + "/profile-repeat-sum.json",
                 "profile-repeat-sum.json", "layers[1].repeat");
}

TEST(HostileInputCommands, RunRefusesASequenceLengthBeforeTheExecutorStarts) {
  if (!std::filesystem::exists(std::filesystem::path(MOTLEY_BINARY).parent_path() / "motley-run")) {
    GTEST_SKIP() << "built without the executor (MOTLEY_WITH_TORCH=OFF)";
  }
  expect_refused("run --plan " + kCorpus + "/plan-seq-len-1e9.json", "plan-seq-len-1e9.json",
                 "seq_len");
}

TEST(HostileInputCommands, AFileThatNeverEndsIsReadOnlyUpToTheLimit) {
  TempDir cwd("motley_hostile");
  const RunResult r = motley::test_support::run_binary(MOTLEY_BINARY, "model show /dev/zero",
                                                       RunOptions{cwd.path(), ""});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "motley: error: /dev/zero: larger than 256 MiB, the most motley reads as a JSON or "
            "YAML file\n");
}

// Every file in the folder is run (a file missing from the manifest would be skipped silently),
// and every kind of input motley reads has its share.
TEST(HostileCorpus, ListsEveryFileAndCoversEveryKind) {
  std::set<std::string> listed;
  std::map<std::string, int> per_kind;
  for (const CorpusFile& file : corpus()) {
    listed.insert(file.name);
    ++per_kind[kind_of(file.name)];
  }
  std::set<std::string> on_disk = listing(kCorpus);
  on_disk.erase(kManifest);
  on_disk.erase("README.md");
  EXPECT_EQ(listed, on_disk);
  EXPECT_GE(listed.size(), 40u);
  for (const char* kind : {"hf", "model", "profile", "cluster", "plan"}) {
    EXPECT_GE(per_kind[kind], 5) << kind;
  }
}

}  // namespace
