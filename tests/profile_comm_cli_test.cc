// Whole-program tests of `motley profile comm`: two ranks under motley launch over Gloo, the
// tables, the JSON, the links file, and a cluster file that includes it and then prices the
// measured pair with the measured figures (motley cluster show). Times are only checked to be
// positive and finite.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <utility>

#include "support/run_binary.h"

namespace {

using motley::test_support::read_file;
using motley::test_support::run_binary;
using motley::test_support::RunResult;
using motley::test_support::TempDir;

RunResult run_profile_cli(const std::string& args) { return run_binary(MOTLEY_BINARY, args); }

const TempDir& profile_dir() {
  static const TempDir dir("profile_cli_test");
  return dir;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(ProfileCommCli, TwoRanksWriteALinksFileThatAClusterPricesWith) {
  const std::string links = profile_dir().file("links.yaml");
  const RunResult r = run_profile_cli(
      "launch --nproc 2 -- profile comm --sizes 1K:64K --factor 4 --iters 3 --warmup 1 --out " +
      links);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Rank 0 prints nccl-tests' tables; the other rank prints nothing.
  EXPECT_NE(r.out.find("[rank 0] # p2p rank 0 -> rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 0] # p2p rank 1 -> rank 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(elements)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 0] # all_to_all over 2 ranks: pairwise exchange"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("[rank 0] # Avg bus bandwidth    : "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank 1]"), std::string::npos) << r.out;

  // The pairs as written: {src, dst} -> (latency in s, bandwidth in B/s), as the loader
  // converts the file's µs and GB/s.
  const std::string text = read_file(links);
  EXPECT_EQ(text.rfind("# motley link measurements", 0), 0u) << text;
  EXPECT_NE(text.find("format: motley.links/1"), std::string::npos) << text;
  const std::regex entry(
      R"(- \{src: (\d+), dst: (\d+), latency_us: ([^,]+), bandwidth_GBps: ([^}]+)\})");
  std::set<std::pair<double, double>> expected;
  int pairs = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), entry), end; it != end; ++it) {
    ++pairs;
    const double latency_s = std::stod((*it)[3]) / 1e6;
    const double bandwidth = std::stod((*it)[4]) * 1e9;
    EXPECT_TRUE(std::isfinite(latency_s) && latency_s >= 0) << text;
    EXPECT_TRUE(std::isfinite(bandwidth) && bandwidth > 0) << text;
    expected.emplace(bandwidth, latency_s);
  }
  EXPECT_EQ(pairs, 2) << text;
  EXPECT_NE(text.find("op: reduce_scatter"), std::string::npos) << text;

  // A cluster of two devices including the file: `cluster show` lists the measured pairs with
  // exactly the measured figures (the path's latency and bandwidth, which p2p_time uses).
  const std::string cluster = profile_dir().file("box.yaml");
  write_text(cluster,
             "measured_links: links.yaml\n"
             "nodes:\n"
             "  - name: box\n"
             "    devices: {type: RTX-4090, count: 2}\n");
  const RunResult show = run_profile_cli("cluster show --json " + cluster);
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const nlohmann::json j = nlohmann::json::parse(show.out);
  std::set<std::pair<double, double>> shown;
  int measured_pairs = 0;
  for (const auto& l : j.at("links")) {
    if (l.at("kind") != "measured") continue;
    measured_pairs += l.at("device_pairs").get<int>();
    shown.emplace(l.at("bandwidth_bytes_per_s").get<double>(), l.at("latency_s").get<double>());
  }
  EXPECT_EQ(measured_pairs, 2) << show.out;
  EXPECT_EQ(shown, expected) << show.out << text;
}

TEST(ProfileCommCli, JsonHasEveryRowWithTheBusFactors) {
  const RunResult r = run_profile_cli(
      "launch --nproc 2 -- profile comm --sizes 4K:16K --iters 2 --warmup 0 --json "
      "--ops p2p,all_reduce,all_gather");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("ranks"), 2);
  EXPECT_EQ(j.at("checked"), true);
  ASSERT_EQ(j.at("p2p").size(), 2u);
  ASSERT_EQ(j.at("collectives").size(), 2u);
  EXPECT_EQ(j.at("collectives")[0].at("op"), "all_reduce");
  EXPECT_EQ(j.at("collectives")[0].at("busbw_factor"), 1.0);  // 2(k-1)/k at k = 2
  EXPECT_EQ(j.at("collectives")[1].at("busbw_factor"), 0.5);  // (k-1)/k
  for (const auto& c : j.at("collectives")) {
    ASSERT_EQ(c.at("rows").size(), 3u);
    for (const auto& row : c.at("rows")) {
      const double t = row.at("time_us").get<double>();
      EXPECT_TRUE(std::isfinite(t) && t > 0) << row;
      EXPECT_DOUBLE_EQ(row.at("busbw_GBps").get<double>(),
                       row.at("algbw_GBps").get<double>() * c.at("busbw_factor").get<double>());
    }
  }
  EXPECT_EQ(j.at("p2p")[0].at("rows")[0].at("size_bytes"), 4096);
}

TEST(ProfileCommCli, BadInputExitsTwoWithOneMessage) {
  const RunResult alone = run_profile_cli("profile comm --sizes 1K:4K");
  EXPECT_EQ(alone.exit_code, 2) << alone.err;
  EXPECT_NE(alone.err.find("start it as N >= 2 ranks"), std::string::npos) << alone.err;

  const RunResult sizes = run_profile_cli("profile comm --sizes 1K:2X");
  EXPECT_EQ(sizes.exit_code, 2) << sizes.err;
  EXPECT_NE(sizes.err.find("--sizes: expected a size in bytes"), std::string::npos) << sizes.err;

  const RunResult ops = run_profile_cli("profile comm --ops p2p,broadcast");
  EXPECT_EQ(ops.exit_code, 2) << ops.err;
  EXPECT_NE(ops.err.find("--ops: expected p2p, all_reduce"), std::string::npos) << ops.err;

  const std::string links = profile_dir().file("bad-links.yaml");
  write_text(links,
             "format: motley.links/1\n"
             "links:\n"
             "  - {src: 0, dst: 1, latency_us: 3, bandwidth_GBps: 1}\n"
             "  - {src: 0, dst: 1, latency_us: 4, bandwidth_GBps: 1}\n");
  const std::string cluster = profile_dir().file("bad-box.yaml");
  write_text(cluster,
             "measured_links: bad-links.yaml\n"
             "nodes: [{name: box, devices: {type: RTX-4090, count: 2}}]\n");
  const RunResult show = run_profile_cli("cluster show " + cluster);
  EXPECT_EQ(show.exit_code, 2) << show.err;
  EXPECT_NE(show.err.find(links + ": field 'links[1]': duplicate pair 0 -> 1"), std::string::npos)
      << show.err;
}

}  // namespace
