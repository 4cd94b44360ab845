// Whole-program tests of `motley stress`: two ranks under motley launch over Gloo, the report,
// its JSON and links files, a device made to compute wrong (exit 1 after the report naming it),
// and the options it refuses. Throughputs are only checked to be positive.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "support/run_binary.h"

namespace {

using motley::test_support::read_file;
using motley::test_support::run_binary;
using motley::test_support::RunResult;
using motley::test_support::TempDir;

const TempDir& stress_dir() {
  static const TempDir dir("stress_cli_test");
  return dir;
}

const char* kQuick = " --seconds 0.3 --gemm-size 64 --message-bytes 64K";

TEST(StressCli, TwoHealthyRanksWriteTheReportAndTheLinks) {
  const std::string out = stress_dir().file("stress.json");
  const std::string links = stress_dir().file("links.yaml");
  const RunResult r =
      run_binary(MOTLEY_BINARY, std::string("launch --nproc 2 -- stress") + kQuick + " --out " +
                                    out + " --links " + links + " --cluster h100x8");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] # stress: 2 ranks over gloo"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 0] # verdict: "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank 1]"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(j["format"], "motley.stress/1");
  ASSERT_EQ(j["devices"].size(), 2u);
  for (const auto& d : j["devices"]) {
    EXPECT_GT(d["products"].get<int64_t>(), 0);
    EXPECT_EQ(d["wrong"].get<int64_t>(), 0);
    // Against an H100's float32 peak, a CPU is far below it, but the ratio is there.
    EXPECT_GT(d["vs_expected"].get<double>(), 0.0);
  }
  ASSERT_EQ(j["links"].size(), 1u);
  EXPECT_GT(j["links"][0]["round_trips"].get<int64_t>(), 0);
  EXPECT_GT(j["all_reduce"]["iterations"].get<int64_t>(), 0);
  EXPECT_FALSE(j["faulty"].get<bool>());
  const std::string text = read_file(links);
  EXPECT_NE(text.find("format: motley.links/1"), std::string::npos) << text;
  EXPECT_NE(text.find("{src: 0, dst: 1, "), std::string::npos) << text;
  EXPECT_NE(text.find("{src: 1, dst: 0, "), std::string::npos) << text;
}

TEST(StressCli, AWrongDeviceFailsAfterTheReportNamesIt) {
  motley::test_support::RunOptions faulty;
  faulty.env = "MOTLEY_TEST_FAULT=stress-wrong:1";
  const RunResult r =
      run_binary(MOTLEY_BINARY, std::string("launch --nproc 2 -- stress") + kQuick, faulty);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("# verdict: FAULTY rank 1 ("), std::string::npos) << r.out;
  EXPECT_NE((r.out + r.err).find("stress: wrong results"), std::string::npos) << r.err;
}

TEST(StressCli, RefusesBadOptionsAndASingleRank) {
  RunResult one = run_binary(MOTLEY_BINARY, "stress --seconds 1");
  EXPECT_EQ(one.exit_code, 2);
  EXPECT_NE(one.err.find("stress measures between ranks"), std::string::npos) << one.err;
  RunResult small = run_binary(MOTLEY_BINARY, "stress --message-bytes 4");
  EXPECT_EQ(small.exit_code, 2);
  EXPECT_NE(small.err.find("--message-bytes"), std::string::npos) << small.err;
  RunResult zero = run_binary(MOTLEY_BINARY, "stress --seconds 0");
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--seconds"), std::string::npos) << zero.err;
}

}  // namespace
