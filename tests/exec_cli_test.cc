// Whole-program tests of `motley run` and `motley launch`: the executor through the binary, as
// threads and as Gloo processes, against the sequential reference; checkpoints resumed under
// the same and another plan; the measured trace, and launch's merge of the ranks' traces;
// emulation; bf16 autocast; bad input (exit 2, one message); and a rank that dies or hangs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "support/run_binary.h"

namespace {

using motley::test_support::directory_entries;
using motley::test_support::read_file;
using motley::test_support::run_binary;
using motley::test_support::RunOptions;
using motley::test_support::RunResult;
using motley::test_support::TempDir;

// A file of this process's scratch directory, which goes when the process ends.
std::string temp_path(const std::string& name) {
  static const TempDir dir("exec_cli_test");
  return dir.file(name);
}

// Runs the binary with `env` (VAR=value ...) in a clean distributed environment.
RunResult run_motley(const std::string& args, const std::string& env = "") {
  return run_binary(MOTLEY_BINARY, args, RunOptions{"", env});
}

nlohmann::json run_json(const std::string& args, const std::string& env = "") {
  RunResult r = run_motley(args, env);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << args << ": not one JSON object: " << e.what() << "\n" << r.out;
    return nlohmann::json::object();
  }
}

std::string example(const std::string& name) {
  return std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/" + name;
}
std::string data(const std::string& name) {
  return std::string(MOTLEY_TEST_DATA_DIR) + "/run/" + name;
}

const std::string kFourStage = example("1f1b-4stage.json");

std::vector<double> losses_of(const nlohmann::json& j) {
  return j.value("losses", std::vector<double>{});
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LT(std::abs(got[i] - want[i]) / std::abs(want[i]), 1e-5)
        << what << " step " << i << ": " << got[i] << " vs " << want[i];
  }
}

// The sequential reference's losses on the 4-stage example (fp32, one thread), computed once.
const std::vector<double>& reference_losses() {
  static const std::vector<double> losses = losses_of(
      run_json("run --plan " + kFourStage + " --steps 3 --json --sequential --threads 1"));
  return losses;
}

// Whether motley-run has the fault-injection hook (CMake's MOTLEY_TEST_HOOKS): its help says so.
bool fault_hook_compiled_in() {
  static const bool compiled_in =
      run_motley("run --help").out.find("MOTLEY_TEST_FAULT") != std::string::npos;
  return compiled_in;
}

#define SKIP_WITHOUT_FAULT_HOOK()                                                     \
  if (!fault_hook_compiled_in()) {                                                    \
    GTEST_SKIP() << "motley-run was built without MOTLEY_TEST_HOOKS (no fault hook)"; \
  }

// Bad input: exit 2, one "motley: error:" message naming each of `needles`, nothing on stdout.
void expect_bad_input(const std::string& args, const std::vector<std::string>& needles,
                      const std::string& env = "") {
  RunResult r = run_motley(args, env);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  EXPECT_EQ(r.out, "") << args;
  EXPECT_EQ(r.err.rfind("motley: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line\n" << r.err;
  for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << n << "\n" << r.err;
}

TEST(RunTest, ThreadsMatchTheSequentialReferenceAndWriteTheMeasuredTrace) {
  const std::string trace = temp_path("trace.json");
  const nlohmann::json j =
      run_json("run --plan " + kFourStage + " --steps 3 --json --trace " + trace);
  EXPECT_EQ(j.value("mode", ""), "threads");
  EXPECT_EQ(j.value("world_size", 0), 4);
  EXPECT_EQ(j.value("precision", ""), "fp32");
  EXPECT_EQ(j.value("device", ""), "cpu");
  EXPECT_FALSE(j.contains("peak_device_memory_bytes"));  // measured on GPUs only
  EXPECT_EQ(j.value("first_step", -1), 0);
  EXPECT_EQ(j["step_time_s"].size(), 3u);
  EXPECT_GT(j.value("tokens_per_s", 0.0), 0.0);
  EXPECT_EQ(j.value("tokens_per_step", 0.0), 8.0 * 64);  // global batch 8 x 64 tokens
  EXPECT_EQ(j["ranks"].size(), 4u);
  expect_close(losses_of(j), reference_losses(), "threads vs sequential");

  // One track per rank; every compute action of every step (16 per rank per step in 1F1B with
  // 8 micro-batches: 8 F and 8 fused B) as one complete event named like "2F5".
  const nlohmann::json doc = nlohmann::json::parse(read_file(trace));
  std::remove(trace.c_str());
  EXPECT_EQ(doc["otherData"].value("measured", false), true);
  int tracks = 0, actions = 0, sum_tracks = 0, sums = 0;
  const std::regex action_name("[0-9]+[FBIWR][0-9]+");
  for (const auto& e : doc["traceEvents"]) {
    const std::string name = e.value("ph", "") == "M" && e.value("name", "") == "thread_name"
                                 ? e["args"].value("name", "")
                                 : "";
    if (name.rfind("rank ", 0) == 0 && name.find("gradient sums") == std::string::npos) ++tracks;
    if (name.find("gradient sums") != std::string::npos) ++sum_tracks;
    if (e.value("ph", "") == "X" && std::regex_match(e.value("name", ""), action_name)) ++actions;
    if (e.value("ph", "") == "X" && e.value("name", "").rfind("sum ", 0) == 0) ++sums;
  }
  EXPECT_EQ(tracks, 4);
  EXPECT_EQ(actions, 3 * 4 * 16);
  // Each rank's gradient sums (one per layer, and the loss on the last stage: 6 layers and the
  // loss over the 4 ranks) on tracks of their own.
  EXPECT_GE(sum_tracks, 4);
  EXPECT_EQ(sums, 3 * (6 + 1));
}

TEST(RunTest, LaunchOverGlooMatchesTheSequentialReference) {
  const nlohmann::json j =
      run_json("launch --nproc 4 -- run --plan " + kFourStage + " --steps 3 --json");
  EXPECT_EQ(j.value("mode", ""), "gloo");
  EXPECT_EQ(j.value("rank", -1), 3);  // the last stage's rank computes the loss
  expect_close(losses_of(j), reference_losses(), "gloo vs sequential");
}

// Every schedule kind, and an irregular order with non-uniform stages and two replicas of 3 and
// 5 micro-batches, trains to the sequential reference's losses both as threads and as Gloo
// processes (tests/data/run/schedules/: plans for tiny-llama on h100x8).
class ScheduleThroughTheBinaryTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ScheduleThroughTheBinaryTest, ThreadsAndGlooMatchTheSequentialReference) {
  const std::string plan = data("schedules/" + GetParam() + ".json");
  const nlohmann::json doc = nlohmann::json::parse(read_file(plan));
  int world = 0;  // one rank per device
  for (const auto& replica : doc["replicas"]) {
    for (const auto& group : replica["groups"]) world += static_cast<int>(group["devices"].size());
  }
  const std::vector<double> reference =
      losses_of(run_json("run --plan " + plan + " --steps 3 --json --sequential --threads 1"));
  ASSERT_EQ(reference.size(), 3u);
  expect_close(losses_of(run_json("run --plan " + plan + " --steps 3 --json")), reference,
               GetParam() + " threads vs sequential");
  expect_close(losses_of(run_json("launch --nproc " + std::to_string(world) + " -- run --plan " +
                                  plan + " --steps 3 --json")),
               reference, GetParam() + " gloo vs sequential");
}

INSTANTIATE_TEST_SUITE_P(Schedules, ScheduleThroughTheBinaryTest,
                         ::testing::Values("gpipe", "interleaved", "zb-h1", "zb-v",
                                           "irregular-uneven", "zb-h1-tp2"));

// ZeRO-1 in the plan: the same losses bit for bit, half the optimizer state per rank.
TEST(RunTest, ZeroOneHalvesTheOptimizerStateAndChangesNoLoss) {
  const std::string plain = data("zb-h1-2stage-2replica-tiny-llama.json");
  nlohmann::json doc = nlohmann::json::parse(read_file(plain));
  doc["zero1"] = true;
  const std::string sharded = temp_path("zero1-plan.json");
  {
    std::ofstream out(sharded);
    out << doc.dump(1) << "\n";
  }
  const nlohmann::json a = run_json("run --plan " + plain + " --steps 2 --json");
  const nlohmann::json b = run_json("run --plan " + sharded + " --steps 2 --json");
  EXPECT_EQ(losses_of(b), losses_of(a));
  ASSERT_EQ(a["ranks"].size(), 4u);
  ASSERT_EQ(b["ranks"].size(), 4u);
  for (size_t r = 0; r < 4; ++r) {
    const double full = a["ranks"][r].value("optimizer_state_bytes", 0.0);
    const double shard = b["ranks"][r].value("optimizer_state_bytes", 0.0);
    EXPECT_GT(full, 0) << "rank " << r;
    EXPECT_GT(shard, 0.4 * full) << "rank " << r;
    EXPECT_LT(shard, 0.6 * full) << "rank " << r;
  }
  std::filesystem::remove(sharded);
}

// ZeRO-3 in the plan: the executor runs it with ZeRO-1's exchanges, the same losses bit for
// bit, and says so.
TEST(RunTest, ZeroThreePlansRunAsZeroOneAndSaySo) {
  const std::string plain = data("zb-h1-2stage-2replica-tiny-llama.json");
  nlohmann::json doc = nlohmann::json::parse(read_file(plain));
  doc.erase("zero1");
  doc["zero_stage"] = 3;
  const std::string sharded = temp_path("zero3-plan.json");
  {
    std::ofstream out(sharded);
    out << doc.dump(1) << "\n";
  }
  const RunResult r = run_motley("run --plan " + sharded + " --steps 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("ZeRO-3 runs here with ZeRO-1's exchanges"), std::string::npos) << r.err;
  const nlohmann::json a = run_json("run --plan " + plain + " --steps 2 --json");
  EXPECT_EQ(losses_of(nlohmann::json::parse(r.out)), losses_of(a));
  std::filesystem::remove(sharded);
}

TEST(RunTest, Bf16AutocastMatchesItsSequentialRunAndStaysNearFp32) {
  const std::string args = "run --plan " + kFourStage + " --steps 3 --json --threads 1";
  const nlohmann::json threads = run_json(args + " --precision bf16");
  const nlohmann::json sequential = run_json(args + " --precision bf16 --sequential");
  EXPECT_EQ(threads.value("precision", ""), "bf16");
  EXPECT_EQ(sequential.value("precision", ""), "bf16");
  expect_close(losses_of(threads), losses_of(sequential), "bf16 threads vs sequential");
  const std::vector<double> bf16 = losses_of(threads);
  const std::vector<double>& fp32 = reference_losses();
  ASSERT_EQ(bf16.size(), fp32.size());
  for (size_t i = 0; i < bf16.size(); ++i) {
    EXPECT_NE(bf16[i], fp32[i]) << "step " << i << ": autocast did not engage";
    EXPECT_LT(std::abs(bf16[i] - fp32[i]) / fp32[i], 2e-2) << "step " << i;
  }
}

TEST(RunTest, TextOutputIsOneLinePerStep) {
  RunResult r = run_motley("run --plan " + kFourStage + " --steps 2 --data synthetic");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::regex line("step +[0-9]+  loss [0-9.]+  time +[0-9.]+ [mun]?s  .* tokens/s");
  std::istringstream lines(r.out);
  int steps = 0;
  for (std::string l; std::getline(lines, l);) {
    EXPECT_TRUE(std::regex_match(l, line)) << l;
    ++steps;
  }
  EXPECT_EQ(steps, 2);
}

TEST(RunTest, ResumingEqualsAnUninterruptedRunUnderTheSameAndAnotherPlan) {
  const std::string dir = temp_path("ckpt");
  const std::string copy = temp_path("ckpt_copy");
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(copy);
  const std::vector<double> straight =
      losses_of(run_json("run --plan " + kFourStage + " --steps 4 --json"));
  ASSERT_EQ(straight.size(), 4u);
  const nlohmann::json head =
      run_json("run --plan " + kFourStage + " --steps 2 --json --checkpoint-dir " + dir);
  EXPECT_EQ(losses_of(head), std::vector<double>(straight.begin(), straight.begin() + 2));
  std::filesystem::copy(dir, copy, std::filesystem::copy_options::recursive);

  const nlohmann::json tail =
      run_json("run --plan " + kFourStage + " --steps 2 --json --resume --checkpoint-dir " + dir);
  EXPECT_EQ(tail.value("first_step", -1), 2);
  // The same plan resumes bit for bit (JSON carries doubles exactly).
  EXPECT_EQ(losses_of(tail), std::vector<double>(straight.begin() + 2, straight.end()));

  // Two stages and two replicas (ZB-H1) over the same global batch continue within rounding.
  const nlohmann::json other =
      run_json("run --plan " + data("zb-h1-2stage-2replica-tiny-llama.json") +
               " --steps 2 --json --resume --checkpoint-dir " + copy);
  EXPECT_EQ(other.value("first_step", -1), 2);
  EXPECT_EQ(other.value("world_size", 0), 4);
  expect_close(losses_of(other), std::vector<double>(straight.begin() + 2, straight.end()),
               "resumed under another plan");
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(copy);
}

TEST(RunTest, EmulationIsLabelledSlowsTheSlowerDeviceAndKeepsTheLosses) {
  const std::string plan = data("1f1b-2stage-h100-a100.json");
  const nlohmann::json native = run_json("run --plan " + plan + " --steps 2 --json");
  const nlohmann::json emulated = run_json("run --plan " + plan + " --steps 2 --json --emulate");
  EXPECT_EQ(losses_of(emulated), losses_of(native));  // delays change timing, never values
  const nlohmann::json& e = emulated["emulation"];
  ASSERT_TRUE(e.is_object()) << emulated.dump();
  EXPECT_NE(e.value("note", "").find("emulated"), std::string::npos);
  EXPECT_EQ(e.value("speeds", ""), "peak");
  EXPECT_EQ(e["device_types"], (nlohmann::json{"H100-SXM", "A100-80GB"}));
  // tiny-llama trains in fp32: the catalog's FP32 peaks, 66.9 and 19.5 TFLOP/s.
  ASSERT_EQ(e["compute_slowdown"].size(), 2u);
  EXPECT_DOUBLE_EQ(e["compute_slowdown"][0].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(e["compute_slowdown"][1].get<double>(), 66.9 / 19.5);
  EXPECT_GT(e.value("time_scale", 0.0), 0.0);
  EXPECT_DOUBLE_EQ(e.value("simulated_iteration_scaled_s", 0.0),
                   e.value("simulated_iteration_s", 0.0) * e.value("time_scale", 0.0));
  EXPECT_EQ(emulated.value("ranks", nlohmann::json::array()).size(), 2u);

  RunResult text = run_motley("run --plan " + plan + " --steps 2 --emulate");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out.rfind("EMULATION on this CPU, not a measurement of default", 0), 0u)
      << text.out;

  // Under launch each rank's motley computes the same factors, and the ranks agree on a scale.
  const nlohmann::json launched =
      run_json("launch --nproc 2 -- run --plan " + plan + " --steps 2 --json --emulate");
  EXPECT_EQ(launched.value("mode", ""), "gloo");
  EXPECT_EQ(losses_of(launched), losses_of(native));
  const nlohmann::json& l = launched["emulation"];
  ASSERT_TRUE(l.is_object()) << launched.dump();
  EXPECT_EQ(l["compute_slowdown"], e["compute_slowdown"]);
  EXPECT_EQ(l["device_types"], e["device_types"]);
  EXPECT_EQ(l["simulated_iteration_s"], e["simulated_iteration_s"]);
  EXPECT_GT(l.value("time_scale", 0.0), 0.0);
}

TEST(RunTest, TheEmulationComparisonPlansTrain) {
  // The plans of docs/executor.md's emulated-vs-simulated table that no other test runs.
  for (const char* name : {"1f1b-2stage-h100-h100.json", "1f1b-2stage-h100-a100-skewed.json"}) {
    const nlohmann::json j = run_json("run --plan " + data(name) + " --steps 1 --json");
    EXPECT_EQ(j.value("world_size", 0), 2) << name;
    EXPECT_EQ(losses_of(j).size(), 1u) << name;
  }
}

// A plan for a model whose training state cannot fit this machine (mixtral-8x7b: about 700 GiB
// of fp32 weights, gradients and moments) is refused before anything is allocated, as threads,
// as the sequential reference and as one of 16 Gloo ranks on this machine.
TEST(RunBadInputTest, AModelTooLargeForThisMachine) {
  const std::string plan = temp_path("mixtral-plan.json");
  const RunResult made = run_motley(
      "simulate --model mixtral-8x7b --cluster h100x16 --schedule "
      "1f1b --stages 16 --micro-batches 16 --recompute full --out " +
      plan);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  expect_bad_input("run --plan " + plan + " --steps 1",
                   {"mixtral-plan.json", "'mixtral-8x7b'", "its 16 ranks in this process need",
                    "GiB", "available", "tiny-llama"});
  expect_bad_input("run --plan " + plan + " --steps 1 --sequential",
                   {"its one rank in this process needs"});
  expect_bad_input("run --plan " + plan + " --steps 1",
                   {"rank 3 needs", "GiB", "a share of 1/16 per rank"},
                   "WORLD_SIZE=16 RANK=3 LOCAL_WORLD_SIZE=16");
  std::filesystem::remove(plan);
}

// --device cuda trains on the GPU where this build has CUDA and the machine a GPU; elsewhere it
// is refused saying which of the two is missing (Debian's libtorch has no CUDA).
TEST(RunBadInputTest, AGpuThisBuildOrMachineDoesNotHave) {
  const std::string args = "run --plan " + kFourStage + " --steps 1 --json --device cuda";
  RunResult r = run_motley(args);
  if (r.exit_code == 0) {
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.value("device", "").rfind("cuda:", 0), 0u) << r.out;
    EXPECT_GT(j.value("peak_device_memory_bytes", int64_t{0}), 0) << r.out;
    return;
  }
  expect_bad_input(args, {"--device cuda: "});
  EXPECT_TRUE(r.err.find("built against a libtorch without CUDA") != std::string::npos ||
              r.err.find("no CUDA device is visible") != std::string::npos)
      << r.err;
  // Under WORLD_SIZE a bare cuda takes the GPU the launch script names; a malformed one is said.
  expect_bad_input("run --plan " + kFourStage + " --steps 1 --device cuda",
                   {"environment variable MOTLEY_LOCAL_DEVICE: expected the GPU's index on its "
                    "node (an integer >= 0), got '-1'"},
                   "WORLD_SIZE=4 RANK=1 MOTLEY_LOCAL_DEVICE=-1");
}

TEST(RunBadInputTest, APlanForAnotherWorldSize) {
  expect_bad_input("run --plan " + kFourStage + " --steps 1",
                   {"1f1b-4stage.json", "4 devices", "WORLD_SIZE is 2"}, "WORLD_SIZE=2 RANK=0");
  // Through launch: the rank that fails first says so, and launch exits 2 naming it. Which rank
  // that is depends on the scheduler: launch stops the other, which may not have printed yet.
  RunResult r = run_motley("launch --nproc 2 -- run --plan " + kFourStage + " --steps 1");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const bool rank_said = r.err.find("[rank 0] motley: error: ") != std::string::npos ||
                         r.err.find("[rank 1] motley: error: ") != std::string::npos;
  EXPECT_TRUE(rank_said) << r.err;
  EXPECT_NE(r.err.find("WORLD_SIZE is 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with status 2"), std::string::npos) << r.err;
}

TEST(RunBadInputTest, MissingPlanFileAndOptions) {
  expect_bad_input("run --plan /nonexistent/plan.json", {"/nonexistent/plan.json"});
  expect_bad_input("run --plan " + kFourStage + " --resume", {"--resume", "--checkpoint-dir"});
  expect_bad_input("run --plan " + kFourStage + " --keep-checkpoints 3",
                   {"--keep-checkpoints needs --checkpoint-dir"});
  expect_bad_input("run --plan " + kFourStage + " --steps 0", {"--steps"});
  expect_bad_input("run --plan " + kFourStage + " --emulate --emulate-speeds fast",
                   {"--emulate-speeds", "peak", "cost"});
  expect_bad_input("run --plan " + kFourStage + " --emulate-speeds cost",
                   {"--emulate-speeds requires --emulate"});
  expect_bad_input("run --plan " + kFourStage + " --precision fp16",
                   {"--precision", "fp16", "fp32", "bf16"});
  expect_bad_input("run --plan " + kFourStage + " --device gpu",
                   {"--device: expected cpu, cuda (each rank its local GPU) or cuda:N, got 'gpu'"});
  expect_bad_input("run --plan " + kFourStage + " --transport nccl",
                   {"--transport nccl moves GPU tensors: give --device cuda"});
  expect_bad_input("run --plan " + kFourStage + " --transport mpi", {"--transport", "mpi"});
  expect_bad_input("run --plan " + kFourStage + " --device cuda --sequential",
                   {"--device cuda: --sequential (the reference) runs on the CPU"});
}

// Every numeric option of `motley run` is checked by the parser, before the plan is read.
TEST(RunBadInputTest, EveryNumericOptionIsCheckedByTheParser) {
  const std::string whole = "expected an integer from 1 to 9223372036854775807, got ";
  const std::string seconds = "expected a number of seconds from 0.001 to 1000000, got ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--steps 0", "--steps: " + whole + "0"},
      {"--steps -3", "--steps: " + whole + "-3"},
      {"--checkpoint-dir d --checkpoint-every 0", "--checkpoint-every: " + whole + "0"},
      {"--checkpoint-dir d --keep-checkpoints 0",
       "--keep-checkpoints: expected an integer from 1 to 1000000, got 0"},
      {"--seed -1", "--seed: expected an integer from 0 to 18446744073709551615, got -1"},
      {"--lr inf", "--lr: expected a number above 0 and at most 1000, got inf"},
      {"--lr 0", "--lr: expected a number above 0 and at most 1000, got 0"},
      {"--threads 0", "--threads: expected an integer from 1 to 1024, got 0"},
      {"--timeout 0", "--timeout: " + seconds + "0"},
      {"--timeout 1e300", "--timeout: " + seconds + "1e300"},
      {"--timeout 1e-320", "--timeout: " + seconds + "1e-320"},
      {"--timeout 0.0005", "--timeout: " + seconds + "0.0005"},
      {"--rendezvous-timeout nan", "--rendezvous-timeout: " + seconds + "nan"},
  };
  for (const auto& [args, message] : cases) {
    expect_bad_input("run --plan /nonexistent/plan.json " + args,
                     {"motley: error: " + message, "(see 'motley run --help')"});
  }
}

// motley refuses what motley-run would refuse before training without starting it: a copy of
// motley with no motley-run beside it gives the same refusals, and names motley-run only once
// the options and the plan are good. motley-run itself refuses them alike (the tests above
// and below reach it where motley cannot check: another device, the world size, outputs).
TEST(RunBadInputTest, MotleyRefusesBadOptionsAndInputsBeforeStartingMotleyRun) {
  const TempDir dir("exec_cli_test_alone");
  const std::string alone = dir.file("motley");
  std::filesystem::copy_file(MOTLEY_BINARY, alone);
  std::filesystem::permissions(alone, std::filesystem::perms::owner_all);
  const std::string bad_plan = dir.file("plan.json");
  std::ofstream(bad_plan) << "{\"format\": \"motley.plan/2\"";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--plan " + kFourStage + " --steps 0",
       "motley: error: --steps: expected an integer from 1 to 9223372036854775807, got 0 (see "
       "'motley run --help')"},
      {"--plan " + kFourStage + " --bogus",
       "motley: error: The following argument was not expected: --bogus (see 'motley run "
       "--help')"},
      {"--plan " + kFourStage + " --resume", "motley: error: --resume needs --checkpoint-dir"},
      {"--plan /nonexistent/plan.json", "motley: error: /nonexistent/plan.json"},
      {"--plan " + bad_plan, "motley: error: " + bad_plan},
      {"--plan " + kFourStage + " --cluster h100x16",
       "motley: error: " + kFourStage + ": field 'cluster'"},
  };
  for (const auto& [args, message] : cases) {
    const RunResult r = run_binary(alone, "run " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind(message, 0), 0u) << args << "\n" << r.err;
    EXPECT_EQ(r.err.find("motley-run"), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
  }
  // Good options and plan: the training itself needs motley-run. So does another device,
  // which only libtorch can parse.
  const std::vector<std::string> good = {"--plan " + kFourStage,
                                         "--plan " + kFourStage + " --device gpu"};
  for (const std::string& args : good) {
    const RunResult r = run_binary(alone, "run " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("'motley run' needs " + dir.file("motley-run")), std::string::npos)
        << args << "\n"
        << r.err;
  }
}

TEST(RunBadInputTest, AMalformedFaultHook) {
  SKIP_WITHOUT_FAULT_HOOK();
  expect_bad_input("run --plan " + kFourStage + " --steps 1", {"MOTLEY_TEST_FAULT"},
                   "MOTLEY_TEST_FAULT=one");
}

// motley-run takes the emulation's factors from motley only.
TEST(RunBadInputTest, EmulationWithoutMotleysFactors) {
  const std::string motley_run =
      std::filesystem::path(MOTLEY_BINARY).parent_path().string() + "/motley-run";
  const RunResult r = run_binary(motley_run, "run --plan " + kFourStage + " --steps 1 --emulate");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("run it as 'motley run ... --emulate'"), std::string::npos) << r.err;
}

TEST(RunBadInputTest, ACorruptCheckpoint) {
  const std::string dir = temp_path("corrupt");
  std::filesystem::remove_all(dir);
  expect_bad_input("run --plan " + kFourStage + " --resume --checkpoint-dir " + dir,
                   {dir + ": no checkpoint here (no 'latest' pointer and no manifest.json)"});
  RunResult saved = run_motley("run --plan " + kFourStage + " --steps 1 --checkpoint-dir " + dir);
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  EXPECT_NE(saved.out.find("checkpoint: " + dir + "/step-00000001\n"), std::string::npos)
      << saved.out;
  {
    std::ofstream garbage(dir + "/step-00000001/layer-3.bin", std::ios::trunc);
    garbage << "not a tensor file";
  }
  expect_bad_input("run --plan " + kFourStage + " --resume --checkpoint-dir " + dir,
                   {dir + "/step-00000001/layer-3.bin"});
  std::ofstream(dir + "/latest", std::ios::trunc) << "step-00000001/../..\n";
  expect_bad_input("run --plan " + kFourStage + " --resume --checkpoint-dir " + dir,
                   {dir + "/latest: expected the name of a step directory"});
  std::filesystem::remove_all(dir);
}

// The names in `dir`, hidden ones included, sorted.
// An output path that cannot be written is refused before the first step: exit 2, one line,
// no step printed, nothing written.
TEST(RunBadInputTest, OutputPathsAreCheckedBeforeTraining) {
  const std::string dir = temp_path("outputs");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/a-file";
  std::ofstream(file) << "x";
  const std::string run = "run --plan " + kFourStage + " --steps 2 ";
  expect_bad_input(run + "--checkpoint-dir " + file,
                   {"--checkpoint-dir: " + file + ": exists and is not a directory"});
  expect_bad_input(run + "--checkpoint-dir " + file + "/sub",
                   {"--checkpoint-dir: " + file + "/sub: '" + file + "' is not a directory"});
  expect_bad_input(
      run + "--trace " + dir + "/missing/t.json",
      {"--trace: " + dir + "/missing/t.json: no such directory '" + dir + "/missing'"});
  expect_bad_input(run + "--trace " + dir, {"--trace: " + dir + ": is a directory"});
  // Under WORLD_SIZE the rank's own file; under launch, launch itself refuses before any rank.
  expect_bad_input(run + "--trace " + dir + "/missing/t.json",
                   {"--trace: " + dir + "/missing/t.rank0.json: no such directory"},
                   "WORLD_SIZE=4 RANK=0");
  expect_bad_input("launch --nproc 4 -- " + run + "--trace " + dir + "/missing/t.json",
                   {"--trace: " + dir + "/missing/t.json: no such directory"});
  EXPECT_EQ(directory_entries(dir), std::vector<std::string>{"a-file"});
  std::filesystem::remove_all(dir);
}

// The FNV-1a 64-bit hash that ends a tensor file (exec/checkpoint.h).
uint64_t fnv1a_64(std::string_view bytes) {
  uint64_t hash = 14695981039346656037ULL;
  for (unsigned char c : bytes) hash = (hash ^ c) * 1099511628211ULL;
  return hash;
}

template <class T>
T read_at(const std::string& bytes, size_t offset) {
  T value{};
  std::memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

// A tensor record of a layer file, in exec/checkpoint.h's layout: its name, and its sizes and
// where they are in the file.
struct TensorRecord {
  std::string name;
  std::vector<int64_t> sizes;
  size_t sizes_offset = 0;
};

std::vector<TensorRecord> tensor_records(const std::string& bytes) {
  std::vector<TensorRecord> records;
  size_t at = 8 + 4 + 8;  // magic, version, step
  const uint32_t count = read_at<uint32_t>(bytes, at);
  at += 4;
  for (uint32_t i = 0; i < count; ++i) {
    TensorRecord r;
    const uint32_t name_length = read_at<uint32_t>(bytes, at);
    r.name = bytes.substr(at + 4, name_length);
    at += 4 + name_length + 1;  // the name, then the dtype
    const uint32_t rank = read_at<uint32_t>(bytes, at);
    r.sizes_offset = at + 4;
    for (uint32_t d = 0; d < rank; ++d) {
      r.sizes.push_back(read_at<int64_t>(bytes, r.sizes_offset + 8 * d));
    }
    at = r.sizes_offset + 8 * rank;
    at += 8 + read_at<uint64_t>(bytes, at);  // the byte count, then the data
    records.push_back(r);
  }
  return records;
}

// `bytes` with `record`'s sizes replaced and the checksum recomputed, as a forger would.
std::string forge_sizes(std::string bytes, const TensorRecord& record,
                        const std::vector<int64_t>& sizes) {
  std::memcpy(bytes.data() + record.sizes_offset, sizes.data(), sizes.size() * sizeof(int64_t));
  const uint64_t sum = fnv1a_64(std::string_view(bytes).substr(0, bytes.size() - 8));
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, sizeof(sum));
  return bytes;
}

// A layer file with the right checksum but a forged shape — 2^40 elements declared, or a
// moment's shape that is not its parameter's — is refused naming the file and the tensor,
// before anything is loaded or trained.
TEST(RunBadInputTest, AForgedCheckpointIsRefusedNamingTheFileAndTheTensor) {
  const std::string dir = temp_path("forged");
  std::filesystem::remove_all(dir);
  RunResult saved = run_motley("run --plan " + kFourStage + " --steps 1 --checkpoint-dir " + dir);
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  const std::string layer = dir + "/step-00000001/layer-1.bin";
  const std::string good = read_file(layer);
  const std::vector<TensorRecord> records = tensor_records(good);
  ASSERT_FALSE(records.empty());
  const std::string resume = "run --plan " + kFourStage + " --resume --checkpoint-dir " + dir;

  std::vector<int64_t> huge(records[0].sizes.size(), 1);
  huge[0] = int64_t{1} << 40;
  std::ofstream(layer, std::ios::binary | std::ios::trunc) << forge_sizes(good, records[0], huge);
  expect_bad_input(resume, {layer + ": tensor '" + records[0].name + "' has shape [1099511627776",
                            "which does not fill its"});

  const auto moment = std::find_if(records.begin(), records.end(), [](const TensorRecord& r) {
    return r.sizes.size() == 2 && r.name.ends_with(".exp_avg") && r.sizes[1] > 1;
  });
  ASSERT_NE(moment, records.end());
  const std::vector<int64_t> reshaped = {moment->sizes[0] * moment->sizes[1], 1};
  std::ofstream(layer, std::ios::binary | std::ios::trunc) << forge_sizes(good, *moment, reshaped);
  expect_bad_input(resume,
                   {layer + ": tensor '" + moment->name + "': expected float32 of shape [" +
                    std::to_string(moment->sizes[0]) + ", " + std::to_string(moment->sizes[1]) +
                    "], found float32 of shape [" + std::to_string(reshaped[0]) + ", 1]"});
  std::filesystem::remove_all(dir);
}

// What a killed save left goes when the directory is next used; the checkpoint and anything
// else in the directory stay, and each save keeps the newest --keep-checkpoints.
TEST(RunTest, AKilledSavesLeftoversAreRemovedAndTheNewestCheckpointsKept) {
  const std::string dir = temp_path("killed-save");
  std::filesystem::remove_all(dir);
  RunResult saved = run_motley("run --plan " + kFourStage + " --steps 1 --checkpoint-dir " + dir);
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  EXPECT_EQ(directory_entries(dir), (std::vector<std::string>{"latest", "step-00000001"}));
  std::filesystem::create_directory(dir + "/.step-00000002.partial");
  std::ofstream(dir + "/.step-00000002.partial/layer-1.bin") << "half written";
  std::ofstream(dir + "/.latest.tmp.Ab12Cd") << "step-";
  std::ofstream(dir + "/notes.txt") << "mine";
  const std::string resume = "run --plan " + kFourStage + " --json --resume --checkpoint-dir " +
                             dir + " --keep-checkpoints 2 --steps ";
  const nlohmann::json resumed = run_json(resume + "1");
  EXPECT_EQ(resumed.value("first_step", -1), 1);
  EXPECT_EQ(directory_entries(dir),
            (std::vector<std::string>{"latest", "notes.txt", "step-00000001", "step-00000002"}));
  EXPECT_EQ(run_json(resume + "2 --checkpoint-every 1").value("first_step", -1), 2);
  EXPECT_EQ(directory_entries(dir),
            (std::vector<std::string>{"latest", "notes.txt", "step-00000003", "step-00000004"}));
  std::filesystem::remove_all(dir);
}

// A run that does not resume refuses a directory holding a checkpoint, before training: the
// checkpoint is not buried under a new run's.
TEST(RunBadInputTest, AFreshRunRefusesADirectoryHoldingACheckpoint) {
  const std::string dir = temp_path("taken");
  std::filesystem::remove_all(dir);
  RunResult saved = run_motley("run --plan " + kFourStage + " --steps 1 --checkpoint-dir " + dir);
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  expect_bad_input("run --plan " + kFourStage + " --steps 1 --checkpoint-dir " + dir,
                   {"--checkpoint-dir: " + dir + " already holds a checkpoint (" + dir +
                    "/step-00000001); add --resume"});
  EXPECT_EQ(directory_entries(dir), (std::vector<std::string>{"latest", "step-00000001"}));
  std::filesystem::remove_all(dir);
}

// Killed (SIGKILL) during its second save, a run leaves the first checkpoint, or the second if
// the kill came after its pointer switched, and resuming from it continues the uninterrupted
// run bit for bit. scripts/checkpoint-kill-matrix.sh kills at every point in turn.
TEST(RunFaultTest, AKillDuringASaveLeavesACheckpointTheRunContinuesFrom) {
  SKIP_WITHOUT_FAULT_HOOK();
  const std::string dir = temp_path("kill-save");
  std::filesystem::remove_all(dir);
  const std::vector<double> straight =
      losses_of(run_json("run --plan " + kFourStage + " --steps 3 --json"));
  ASSERT_EQ(straight.size(), 3u);
  // A save of this plan's six layers passes 18 crash points (its directory, 7 files written and
  // renamed, its rename, the pointer written and renamed): point 25 is inside the second.
  const std::string run =
      "run --plan " + kFourStage + " --json --checkpoint-every 1 --checkpoint-dir " + dir;
  RunResult killed = run_motley(run + " --steps 2", "MOTLEY_TEST_FAULT=save:25");
  EXPECT_NE(killed.exit_code, 0) << killed.err;
  const nlohmann::json resumed = run_json(run + " --resume --steps 2");
  EXPECT_EQ(resumed.value("first_step", -1), 1);
  EXPECT_EQ(losses_of(resumed), std::vector<double>(straight.begin() + 1, straight.end()));
  EXPECT_EQ(directory_entries(dir),
            (std::vector<std::string>{"latest", "step-00000002", "step-00000003"}));
  std::filesystem::remove_all(dir);
}

// The elastic launch: a plan on three one-device nodes loses a rank (its node) once, or twice;
// each time the rest is replanned and the run resumes from its last checkpoint, and the run
// ends with the losses of the sequential reference on the same global batch (within rounding:
// the plans differ). With no restart allowed, it gives up naming the failure.
TEST(ElasticTest, TrainingCompletesAfterOneAndAfterTwoLostNodes) {
  SKIP_WITHOUT_FAULT_HOOK();
  const std::string plan = temp_path("elastic-plan.json");
  RunResult planned =
      run_motley("plan --model tiny-llama --cluster " + data("three-single-device-nodes.yaml") +
                 " --global-batch 6 --max-plans 60 --quiet --out " + plan);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const std::vector<double> straight =
      losses_of(run_json("run --plan " + plan + " --steps 5 --json --sequential --threads 1"));
  ASSERT_EQ(straight.size(), 5u);
  struct Case {
    std::string faults;
    int attempts;
  };
  for (const Case& c : {Case{"1:2:exit", 2}, Case{"2:1:exit,0:3:exit", 3}}) {
    SCOPED_TRACE(c.faults);
    const std::string dir = temp_path("elastic-" + std::to_string(c.attempts));
    RunResult r = run_motley("launch --elastic -- run --plan " + plan + " --steps 5 --json " +
                                 "--checkpoint-every 1 --checkpoint-dir " + dir,
                             "MOTLEY_TEST_FAULT=" + c.faults);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("elastic: done: steps 0 to 4 (5 steps)"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("over " + std::to_string(c.attempts) + " attempts"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("was killed by signal 9"), std::string::npos) << r.err;
    const nlohmann::json last = nlohmann::json::parse(r.out);
    const int64_t first = last.value("first_step", -1);
    ASSERT_GE(first, 1);
    expect_close(losses_of(last), std::vector<double>(straight.begin() + first, straight.end()),
                 "after the losses");
    EXPECT_EQ(last.value("world_size", 0), 4 - c.attempts);
    EXPECT_TRUE(
        std::filesystem::exists(dir + "/elastic-plan-" + std::to_string(c.attempts - 1) + ".json"));
  }

  RunResult gave_up = run_motley("launch --elastic --max-restarts 0 -- run --plan " + plan +
                                     " --steps 3 --checkpoint-dir " + temp_path("elastic-0"),
                                 "MOTLEY_TEST_FAULT=1:1:exit");
  EXPECT_EQ(gave_up.exit_code, 1) << gave_up.err;
  EXPECT_NE(gave_up.err.find("motley: error: elastic: gave up after 0 restarts (--max-restarts); "
                             "last: rank 1 was killed by signal 9"),
            std::string::npos)
      << gave_up.err;
  expect_bad_input("launch --elastic -- run --plan " + plan + " --steps 3",
                   {"--elastic: the command must be 'run --plan P --checkpoint-dir D ...'"});
}

TEST(LaunchFaultTest, AKilledRankStopsTheJobAndIsNamed) {
  SKIP_WITHOUT_FAULT_HOOK();
  // Rank 1 dies (SIGKILL) after its first action of step 1.
  RunResult r = run_motley("launch --nproc 4 -- run --plan " + kFourStage + " --steps 3",
                           "MOTLEY_TEST_FAULT=1:1:exit");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("motley: error: rank 1 was killed by signal 9"), std::string::npos) << r.err;
}

TEST(LaunchFaultTest, AHungRankMakesTheOthersTimeOut) {
  SKIP_WITHOUT_FAULT_HOOK();
  // Rank 1 stops answering in step 1; its neighbours time out after 2 s naming it.
  RunResult r =
      run_motley("launch --nproc 4 -- run --plan " + kFourStage + " --steps 3 --timeout 2",
                 "MOTLEY_TEST_FAULT=1:1:hang");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("from rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("limit 2 s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with status 1"), std::string::npos) << r.err;
}

// Under launch, the ranks' trace files become one trace like the thread mode's: every rank's
// track, every action of the plan in every step, and step k on every track at or after the end
// of step k - 1 on every track, although the ranks' clocks are not aligned.
TEST(LaunchTraceTest, TheRanksTracesAreMergedIntoOneAlignedTrace) {
  const std::string trace = temp_path("launch-trace.json");
  const RunResult r =
      run_motley("launch --nproc 4 -- run --plan " + kFourStage + " --steps 3 --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("trace: " + trace), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(".rank"), std::string::npos) << "no rank names its own file\n" << r.out;
  for (int k = 0; k < 4; ++k) {
    const std::string rank_file = temp_path("launch-trace.rank" + std::to_string(k) + ".json");
    EXPECT_FALSE(std::filesystem::exists(rank_file)) << rank_file;
  }
  ASSERT_TRUE(std::filesystem::exists(trace));
  const nlohmann::json doc = nlohmann::json::parse(read_file(trace));
  std::remove(trace.c_str());
  EXPECT_EQ(doc["otherData"].value("measured", false), true);
  EXPECT_EQ(doc["otherData"].value("mode", ""), "gloo");
  EXPECT_EQ(doc["otherData"].value("merged_ranks", 0), 4);

  // Threads, each named after its rank ("rank 2: ...", a second lane "rank 2: ... #2").
  std::map<std::pair<int, int>, int> rank_of_thread;
  std::set<int> ranks;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "M" || e.value("name", "") != "thread_name") continue;
    const std::string name = e["args"].value("name", "");
    ASSERT_EQ(name.rfind("rank ", 0), 0u) << name;
    const int rank = std::stoi(name.substr(5));
    EXPECT_TRUE(
        rank_of_thread.emplace(std::pair(e["pid"].get<int>(), e["tid"].get<int>()), rank).second)
        << "two threads share pid " << e["pid"] << " tid " << e["tid"];
    ranks.insert(rank);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));

  // Per rank and step, the compute actions; per step, where its events begin and end.
  const nlohmann::json plan = nlohmann::json::parse(read_file(kFourStage));
  const std::regex action_name("[0-9]+[FBIWR][0-9]+");
  std::map<std::pair<int, int>, std::multiset<std::string>> actions;  // (rank, step)
  std::map<int, double> begin_us, end_us;                             // by step
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const auto thread = rank_of_thread.find({e["pid"].get<int>(), e["tid"].get<int>()});
    ASSERT_NE(thread, rank_of_thread.end()) << e;
    const int rank = thread->second;
    EXPECT_EQ(e["args"].value("rank", -1), rank) << e;
    const int step = e["args"].value("step", -1);
    const double ts = e["ts"].get<double>(), end = ts + e["dur"].get<double>();
    begin_us[step] = begin_us.count(step) ? std::min(begin_us[step], ts) : ts;
    end_us[step] = end_us.count(step) ? std::max(end_us[step], end) : end;
    const std::string name = e.value("name", "");
    if (std::regex_match(name, action_name)) actions[std::pair(rank, step)].insert(name);
  }
  ASSERT_EQ(begin_us.size(), 3u);
  for (int rank = 0; rank < 4; ++rank) {
    std::multiset<std::string> want;
    std::istringstream listed(plan["replicas"][0]["groups"][rank]["actions"].get<std::string>());
    for (std::string a; listed >> a;) want.insert(a);
    for (int step = 0; step < 3; ++step) {
      EXPECT_EQ(actions[std::pair(rank, step)], want) << "rank " << rank << " step " << step;
    }
  }
  for (int step = 1; step < 3; ++step) {
    // A nanosecond for rounding to microseconds.
    EXPECT_GE(begin_us[step], end_us[step - 1] - 1e-3) << "step " << step;
  }
}

TEST(LaunchTraceTest, AFailedRunWritesNoMergedTrace) {
  SKIP_WITHOUT_FAULT_HOOK();
  const std::string trace = temp_path("failed-trace.json");
  const RunResult r =
      run_motley("launch --nproc 4 -- run --plan " + kFourStage + " --steps 3 --trace=" + trace,
                 "MOTLEY_TEST_FAULT=1:1:exit");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(trace));
}

TEST(LaunchTraceTest, AMissingRankFileIsNamedAndTheOthersAreKept) {
  // `run --help` succeeds without writing a trace; rank 0's file is left from before.
  const std::string trace = temp_path("missing-trace.json");
  const std::string rank0 = temp_path("missing-trace.rank0.json");
  const std::string rank1 = temp_path("missing-trace.rank1.json");
  std::ofstream(rank0) << "{\"traceEvents\": []}\n";
  const RunResult r = run_motley("launch --nproc 2 -- run --help --trace " + trace);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("motley: error: merging the ranks' traces into " + trace + ": " + rank1),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(trace));
  EXPECT_TRUE(std::filesystem::exists(rank0));
  std::remove(rank0.c_str());
}

}  // namespace
