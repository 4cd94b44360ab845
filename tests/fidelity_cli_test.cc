// Whole-program tests of `motley fidelity` (and `motley run --fidelity`): a tiny 2-rank plan run
// through the executor and compared with the simulator (valid JSON with every field, the text
// table), and bad input
// (exit 2, one message) refused before any rank starts. Wall-clock figures are only checked
// to be positive and finite.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_binary.h"

namespace {

using motley::test_support::read_file;
using motley::test_support::run_binary;
using motley::test_support::RunResult;
using motley::test_support::TempDir;

std::string fidelity_data(const std::string& name) {
  return std::string(MOTLEY_TEST_DATA_DIR) + "/fidelity/" + name;
}

const std::string kTinyPlan = fidelity_data("pp2-1f1b-tiny-llama.json");
const std::string kTinyProfile = fidelity_data("tiny-llama-cpu-profile.json");

RunResult run_fidelity(const std::string& args) {
  return run_binary(MOTLEY_BINARY, "fidelity " + args);
}

void expect_figure(const nlohmann::json& f, const std::string& what) {
  ASSERT_TRUE(f.is_object()) << what;
  ASSERT_TRUE(f.contains("predicted_s") && f["predicted_s"].is_number()) << what;
  ASSERT_TRUE(f.contains("measured_s") && f["measured_s"].is_number()) << what;
  ASSERT_TRUE(f.contains("error_pct")) << what;
  EXPECT_TRUE(std::isfinite(f["predicted_s"].get<double>())) << what;
  EXPECT_TRUE(std::isfinite(f["measured_s"].get<double>())) << what;
  EXPECT_TRUE(f["error_pct"].is_null() || std::isfinite(f["error_pct"].get<double>())) << what;
}

void expect_bad_fidelity_input(const std::string& args, const std::string& needle) {
  const RunResult r = run_fidelity(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line expected:\n" << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(FidelityCliTest, TwoRankPlanGivesEveryFigureAsJson) {
  const RunResult r = run_fidelity("--plan " + kTinyPlan + " --profile " + kTinyProfile +
                                   " --steps 3 --warmup 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  expect_figure(j, "iteration");
  EXPECT_GT(j["predicted_s"].get<double>(), 0);
  EXPECT_GT(j["measured_s"].get<double>(), 0);
  EXPECT_TRUE(j["error_pct"].is_number());
  EXPECT_EQ(j.value("world_size", 0), 2);
  EXPECT_EQ(j.value("steps_measured", 0), 3);
  EXPECT_EQ(j.value("steps_used", 0), 2);
  EXPECT_EQ(j.value("warmup_steps", -1), 1);
  EXPECT_EQ(j.value("priced_with", ""), kTinyProfile);
  ASSERT_TRUE(j["devices"].is_array());
  ASSERT_EQ(j["devices"].size(), 2u);
  for (const auto& d : j["devices"]) {
    for (const char* f : {"step", "busy", "idle"}) expect_figure(d[f], std::string("device ") + f);
    EXPECT_GT(d["step"]["measured_s"].get<double>(), 0);
    EXPECT_GT(d["busy"]["measured_s"].get<double>(), 0);
  }
  ASSERT_TRUE(j["kinds"].is_array());
  bool forward = false;
  for (const auto& k : j["kinds"]) {
    expect_figure(k, k.value("name", "?"));
    if (k.value("name", "") == "F") {
      forward = true;
      EXPECT_GT(k["predicted_s"].get<double>(), 0);
      EXPECT_GT(k["measured_s"].get<double>(), 0);
    }
  }
  EXPECT_TRUE(forward);
}

// Through `motley run --fidelity`, which is the same comparison.
TEST(FidelityCliTest, TextReportNamesTheIterationDevicesAndKinds) {
  const RunResult r =
      run_binary(MOTLEY_BINARY, "run --plan " + kTinyPlan + " --fidelity --steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* needle : {"iteration", "rank", "busy pred", "input wait", "optimizer",
                             "device step error", "the plan's model"}) {
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << "\n" << r.out;
  }
}

// `motley report --trace` draws the measured run under the simulated rows; its per-group error
// and measured iteration are the fidelity report's, computed the same way from the same trace.
TEST(FidelityCliTest, ReportDrawsTheMeasuredRunWithFidelitysErrors) {
  const TempDir scratch("fidelity_report");
  const std::string trace = scratch.path() + "/trace.json";
  const RunResult f = run_fidelity("--plan " + kTinyPlan + " --profile " + kTinyProfile +
                                   " --steps 4 --warmup 1 --json --trace " + trace);
  ASSERT_EQ(f.exit_code, 0) << f.err;
  const nlohmann::json fid = nlohmann::json::parse(f.out);
  const std::string page = scratch.path() + "/run.html";
  const RunResult r =
      run_binary(MOTLEY_BINARY, "report --plan " + kTinyPlan + " --profile " + kTinyProfile +
                                    " --trace " + trace + " --warmup 1 --html " + page);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = read_file(page);
  const std::string open = "<script type=\"application/json\" id=\"motley-data\">";
  const size_t begin = html.find(open) + open.size();
  const nlohmann::json d =
      nlohmann::json::parse(html.substr(begin, html.find("</script>", begin) - begin));
  EXPECT_EQ(d["summary"]["iteration_s"], fid["predicted_s"]);
  EXPECT_EQ(d["summary"]["measured_iteration_s"], fid["measured_s"]);
  // Rows: simulated group 0, its measured row, simulated group 1, its measured row.
  const nlohmann::json& rows = d["timeline"]["rows"];
  ASSERT_EQ(rows.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(rows[i]["source"], i % 2 == 0 ? "simulated" : "measured") << i;
    EXPECT_EQ(rows[i]["group"], i / 2) << i;
  }
  for (const auto& dev : fid["devices"]) {
    const nlohmann::json& row = rows[2 * dev["group"].get<int>() + 1];
    EXPECT_EQ(row["error_pct"], dev["step"]["error_pct"]);
    EXPECT_EQ(row["measured_s"], dev["step"]["measured_s"]);
    EXPECT_FALSE(row["events"].empty());
  }
  // A trace of another plan is refused, and no page is written for it.
  const std::string other = scratch.path() + "/other.html";
  const RunResult wrong = run_binary(
      MOTLEY_BINARY, "report --plan " + std::string(MOTLEY_SOURCE_DIR) +
                         "/examples/plans/1f1b-4stage.json --trace " + trace + " --html " + other);
  EXPECT_EQ(wrong.exit_code, 2) << wrong.err;
  EXPECT_NE(wrong.err.find(trace), std::string::npos) << wrong.err;
  EXPECT_FALSE(std::filesystem::exists(other));
}

TEST(FidelityCliTest, BadInputExitsTwoWithOneMessage) {
  expect_bad_fidelity_input("--plan " + fidelity_data("missing.json"), "missing.json");
  expect_bad_fidelity_input("--plan " + kTinyPlan + " --steps 2 --warmup 2", "--warmup");
  expect_bad_fidelity_input(
      "--plan " + kTinyPlan + " --profile " + fidelity_data("two-layer-profile.json"), "2 layers");
  expect_bad_fidelity_input("--plan " + kTinyPlan + " --steps 0", "--steps");
  expect_bad_fidelity_input("--plan " + kTinyPlan + " --trace /nonexistent-dir/t.json", "--trace");
  const RunResult run =
      run_binary(MOTLEY_BINARY, "run --plan " + kTinyPlan + " --fidelity --seed 3");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("'--seed' does not apply"), std::string::npos) << run.err;
  expect_bad_fidelity_input("--plan " + std::string(MOTLEY_TEST_DATA_DIR) + "/plan/bad-action.json",
                            "bad-action.json");
  expect_bad_fidelity_input("--plan " + kTinyPlan + " --stack megatron-1999", "megatron-1999");
  // A context group whose replicas run in different orders cannot split its sequences: the
  // executor computes whole sequences on every member, which is not what the simulator prices
  // for it, and no comparison is made.
  const TempDir scratch("fidelity_context");
  const std::string grouped = scratch.path() + "/grouped.json";
  const RunResult made = run_binary(
      MOTLEY_BINARY,
      "simulate --schedule gpipe --model tiny-llama --cluster h100x8 --stages 1 --data-parallel 2 "
      "--context-parallel 2 --micro-batches 2 --out " +
          grouped);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::string text;
  {
    std::ifstream in(grouped);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string alike = R"("same_actions_as": 0,
      "groups": [
        {"devices": [1]})";
  const size_t at = text.find(alike);
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, alike.size(), R"("groups": [
        {"devices": [1], "actions": "0F1 0F0 0B0 0B1"})");
  std::ofstream(grouped) << text;
  expect_bad_fidelity_input("--plan " + grouped, "field 'context_parallel'");
}

// The prediction is priced with the stack asked for: a calibration whose point-to-point
// transfers reach a fifth of the path's bandwidth predicts a slower pipeline.
TEST(FidelityCliTest, PredictionUsesTheStackAskedFor) {
  TempDir dir("fidelity-stack");
  const std::string slow = dir.path() + "/slow.json";
  {
    std::ofstream(slow) << R"({"format": "motley.calibration/1", "base": "megatron-core",)"
                        << R"( "stack": {"p2p_efficiency": 0.2}})";
  }
  const std::string args =
      "--plan " + kTinyPlan + " --profile " + kTinyProfile + " --steps 2 --warmup 1 --json";
  const RunResult base = run_fidelity(args);
  const RunResult slowed = run_fidelity(args + " --calibration " + slow);
  ASSERT_EQ(base.exit_code, 0) << base.err;
  ASSERT_EQ(slowed.exit_code, 0) << slowed.err;
  EXPECT_GT(nlohmann::json::parse(slowed.out)["predicted_s"].get<double>(),
            nlohmann::json::parse(base.out)["predicted_s"].get<double>());
}

}  // namespace
