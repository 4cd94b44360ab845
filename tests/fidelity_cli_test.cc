// Whole-program tests of `motley fidelity` (and `motley run --fidelity`): a tiny 2-rank plan run
// through the executor and compared with the simulator (valid JSON with every field, the text
// table), and bad input
// (exit 2, one message) refused before any rank starts. Wall-clock figures are only checked
// to be positive and finite.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_binary.h"

namespace {

using motley::test_support::run_binary;
using motley::test_support::RunResult;

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
}

}  // namespace
