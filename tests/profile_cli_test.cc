// Whole-program tests of `motley profile layers` (motley forwarding to motley-profile): the
// profile file it writes loads back, and bad options exit with code 2 and one line. Times are
// only checked to be positive and finite.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/run_binary.h"

namespace {

using motley::test_support::read_file;
using motley::test_support::RunResult;
using motley::test_support::TempDir;

RunResult run_profile(const std::string& args) {
  return motley::test_support::run_binary(MOTLEY_BINARY, "profile " + args);
}

// A short stopping rule: the figures are not the point here.
const std::string kQuick =
    " --seq-len 16 --micro-batch-size 1 --warmup 1 --min-repeats 2 --max-repeats 3 --rse 0.5";

void expect_bad_profile_options(const std::string& args, const std::string& needle) {
  RunResult r = run_profile(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  EXPECT_EQ(r.out, "") << args;
  EXPECT_EQ(r.err.rfind("motley: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line\n" << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << needle << "\n" << r.err;
}

TEST(ProfileCli, PrintsATableOfTheDistinctLayers) {
  RunResult r = run_profile("layers --model tiny-llama" + kQuick);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model tiny-llama: 6 layers, 3 distinct"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layers.0 (+3 alike)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("R (selective)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer"), std::string::npos) << r.out;
}

TEST(ProfileCli, WritesAProfileThatMotleyReads) {
  TempDir dir("profile_cli");
  const std::string out = dir.file("tiny.json");
  RunResult r = run_profile("layers --model tiny-llama --tp 2" + kQuick + " --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "wrote " + out + ": 6 layers (3 distinct) measured on 'cpu'\n");
  const nlohmann::json j = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(j["format"], "motley.profile/2");
  ASSERT_EQ(j["layers"].size(), 3u);
  for (const auto& e : j["layers"]) {
    EXPECT_EQ(e["measured_on"], "cpu");
    EXPECT_EQ(e["seq_len"], 16);
    EXPECT_EQ(e["micro_batch_size"], 1);
    const double f = e["forward_s"].get<double>();
    EXPECT_TRUE(std::isfinite(f) && f > 0) << e.dump();
    ASSERT_TRUE(e.contains("times_by_tp")) << e.dump();
    const double f2 = e["times_by_tp"]["cpu"]["2"]["forward_s"].get<double>();
    EXPECT_TRUE(std::isfinite(f2) && f2 > 0) << e.dump();
  }
  EXPECT_EQ(j["layers"][1]["repeat"], 4);
  EXPECT_TRUE(j["layers"][1].contains("selective_recompute_s"));
  EXPECT_FALSE(j["layers"][0].contains("selective_recompute_s"));
  // The file is a model to every command.
  RunResult show = motley::test_support::run_binary(MOTLEY_BINARY, "model show " + out);
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("F time"), std::string::npos) << show.out;
}

TEST(ProfileCli, BadOptionsExitTwoWithOneLine) {
  expect_bad_profile_options("layers --model tiny-llama --tp 1", "--tp");
  expect_bad_profile_options("layers --model tiny-llama --tp 2,x", "--tp");
  expect_bad_profile_options("layers --model tiny-llama --micro-batch-size 0",
                             "--micro-batch-size");
  expect_bad_profile_options("layers --model tiny-llama --seq-len 2000000", "--seq-len");
  expect_bad_profile_options("layers --model tiny-llama --threads 0", "--threads");
  expect_bad_profile_options("layers --model tiny-llama --precision fp16", "--precision");
  expect_bad_profile_options("layers --model tiny-llama --device tpu",
                             "--device: expected cpu, cuda (each rank its local GPU) or cuda:N");
  expect_bad_profile_options("layers --model tiny-llama --rse 0", "--rse");
  expect_bad_profile_options("layers --model tiny-llama --min-repeats 9 --max-repeats 3",
                             "--max-repeats (3) must be at least --min-repeats (9)");
  expect_bad_profile_options("layers --model no-such-model", "no preset named 'no-such-model'");
  expect_bad_profile_options("layers --model tiny-llama --out /no/such/dir/p.json", "--out");
  expect_bad_profile_options("layers", "--model");
  expect_bad_profile_options("", "subcommand");
  // Refused before allocating: far more memory than any machine this runs on has.
  expect_bad_profile_options("layers --model tiny-llama --seq-len 1048576 --micro-batch-size 65536",
                             "use a smaller --seq-len or --micro-batch-size");
}

// A GPU is profiled where this build has CUDA and the machine a GPU (the profile then names its
// catalog type); elsewhere --device cuda is refused saying which is missing.
TEST(ProfileCli, AGpuThisBuildOrMachineDoesNotHave) {
  const std::string args = "layers --model tiny-llama --device cuda" + kQuick;
  RunResult r = run_profile(args);
  if (r.exit_code == 0) {
    EXPECT_NE(r.out.find("measured on this machine's GPU (device type '"), std::string::npos)
        << r.out;
    return;
  }
  expect_bad_profile_options(args, "--device cuda: ");
  EXPECT_TRUE(r.err.find("built against a libtorch without CUDA") != std::string::npos ||
              r.err.find("no CUDA device is visible") != std::string::npos)
      << r.err;
}

}  // namespace
