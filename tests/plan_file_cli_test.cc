// A plan file is everything anyone needs: made from a Hugging Face config and a cluster YAML,
// with both deleted afterwards, it is simulated, trained (as threads, as launched processes and
// as the sequential reference) and re-saved from another directory; a --model or --cluster that
// is not the plan's is refused with one clear message.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/run_binary.h"

namespace {

using motley::test_support::read_file;
using motley::test_support::run_binary;
using motley::test_support::RunOptions;
using motley::test_support::RunResult;
using motley::test_support::TempDir;
namespace fs = std::filesystem;

constexpr const char* kFleet = R"(name: fleet
nodes:
  - name: big
    devices: {type: A100-80GB, count: 2}
  - name: small
    devices: {type: L40S, count: 2}
network: {kind: ethernet, bandwidth_GBps: 12.5, latency_us: 10}
)";

RunResult motley(const std::string& args, const std::string& cwd) {
  return run_binary(MOTLEY_BINARY, args, RunOptions{cwd, ""});
}

nlohmann::json json_of(const RunResult& r, const std::string& what) {
  EXPECT_EQ(r.exit_code, 0) << what << "\n" << r.err;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not one JSON object: " << e.what() << "\n" << r.out;
    return nlohmann::json::object();
  }
}

// Makes plan.json in `made` from a config.json directory and a cluster file there, then moves
// the plan to `elsewhere` and deletes everything it was made from.
void make_plan_then_delete_its_inputs(const TempDir& made, const TempDir& elsewhere) {
  fs::create_directories(made.file("Tiny-Llama"));
  fs::copy_file(std::string(MOTLEY_TEST_DATA_DIR) + "/model/hf-tiny-llama/config.json",
                made.file("Tiny-Llama/config.json"));
  {
    std::ofstream out(made.file("fleet.yaml"));
    out << kFleet;
  }
  const RunResult plan = motley(
      "plan --model ./Tiny-Llama --cluster ./fleet.yaml --global-batch 8 --quiet --out plan.json",
      made.path());
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  fs::rename(made.file("plan.json"), elsewhere.file("plan.json"));
  fs::remove_all(made.file("Tiny-Llama"));
  fs::remove(made.file("fleet.yaml"));
}

TEST(PlanFileCli, APlanFromFilesRunsAloneInAnotherDirectory) {
  const TempDir made("plan_file_made");
  const TempDir elsewhere("plan_file_elsewhere");
  make_plan_then_delete_its_inputs(made, elsewhere);
  const nlohmann::json plan = nlohmann::json::parse(read_file(elsewhere.file("plan.json")));
  EXPECT_EQ(plan.value("format", ""), "motley.plan/4");
  ASSERT_TRUE(plan.contains("model_spec") && plan.contains("cluster_spec"));
  EXPECT_EQ(plan["cluster_spec"].value("name", ""), "fleet");

  const nlohmann::json sim =
      json_of(motley("simulate --plan plan.json --json", elsewhere.path()), "simulate");
  EXPECT_EQ(sim.value("cluster", ""), "fleet");
  EXPECT_EQ(sim.value("model", ""), plan["model"].value("name", "?"));
  EXPECT_NEAR(sim.value("iteration_time_s", 0.0), plan["predicted"].value("iteration_time_s", -1.0),
              1e-12);

  // Saved again from the plan alone, the plan is the same file.
  ASSERT_EQ(motley("simulate --plan plan.json --out again.json", elsewhere.path()).exit_code, 0);
  EXPECT_EQ(read_file(elsewhere.file("again.json")), read_file(elsewhere.file("plan.json")));

  // Trained as threads, as launched processes and as the sequential reference: one loss curve.
  const std::string run = "run --plan plan.json --steps 2 --data synthetic --json";
  const std::vector<double> reference =
      json_of(motley(run + " --sequential --threads 1", elsewhere.path()), "sequential")
          .value("losses", std::vector<double>{});
  const std::vector<double> threads =
      json_of(motley(run, elsewhere.path()), "threads").value("losses", std::vector<double>{});
  ASSERT_EQ(reference.size(), 2u);
  ASSERT_EQ(threads.size(), 2u);
  for (size_t i = 0; i < reference.size(); ++i) {
    EXPECT_TRUE(std::isfinite(reference[i]));
    EXPECT_LT(std::abs(threads[i] - reference[i]) / reference[i], 1e-5) << "step " << i;
  }
  const int world = sim.value("devices", nlohmann::json::array()).size();
  ASSERT_GT(world, 0);
  const RunResult launched = motley("launch --nproc " + std::to_string(world) +
                                        " -- run --plan plan.json --steps 2 --data synthetic",
                                    elsewhere.path());
  EXPECT_EQ(launched.exit_code, 0) << launched.err;
  EXPECT_NE(launched.out.find("step    1  loss"), std::string::npos) << launched.out;
}

TEST(PlanFileCli, ASpecThatIsNotThePlansIsRefused) {
  const TempDir made("plan_file_made2");
  const TempDir elsewhere("plan_file_elsewhere2");
  make_plan_then_delete_its_inputs(made, elsewhere);
  for (const std::string command : {"simulate", "run"}) {
    const RunResult r = motley(command + " --plan plan.json --model tiny-llama", elsewhere.path());
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.err;
    EXPECT_EQ(r.out, "") << command;
    EXPECT_EQ(
        r.err.rfind("motley: error: plan.json: field 'model': the plan was made for model '", 0),
        0u)
        << r.err;
    EXPECT_NE(r.err.find("but --model tiny-llama is 'tiny-llama' (hash "), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("leave out --model to use the model the plan carries"), std::string::npos)
        << r.err;
  }
  const RunResult r = motley("simulate --plan plan.json --cluster h100x8", elsewhere.path());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("plan.json: field 'cluster': the plan was made for cluster 'fleet'"),
            std::string::npos)
      << r.err;
}

// A plan made from a measured profile carries the measured times: priced the same from the
// plan alone.
TEST(PlanFileCli, AProfilesMeasuredLayersTravelWithThePlan) {
  const TempDir made("plan_file_profile");
  const TempDir elsewhere("plan_file_profile_elsewhere");
  fs::copy_file(std::string(MOTLEY_TEST_DATA_DIR) + "/cli/small_profile.json",
                made.file("measured.json"));
  const std::string make =
      "simulate --schedule 1f1b --model measured.json --cluster h100x8 --stages 2 --json";
  const nlohmann::json first = json_of(motley(make + " --out plan.json", made.path()), "make");
  fs::rename(made.file("plan.json"), elsewhere.file("plan.json"));
  fs::remove(made.file("measured.json"));
  const nlohmann::json plan = nlohmann::json::parse(read_file(elsewhere.file("plan.json")));
  ASSERT_TRUE(plan["model_spec"]["layers"][1].contains("measured"));
  const nlohmann::json again =
      json_of(motley("simulate --plan plan.json --json", elsewhere.path()), "again");
  EXPECT_EQ(again.value("iteration_time_s", 0.0), first.value("iteration_time_s", -1.0));
  EXPECT_EQ(again.value("model", ""), "small-profile");
}

}  // namespace
