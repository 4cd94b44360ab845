// Whole-program tests of the motley binary: the documented JSON outputs, and that bad input
// exits with code 2, one message naming the file and field, and nothing on stdout.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "support/run_binary.h"

namespace {

using motley::test_support::directory_entries;
using motley::test_support::read_file;
using motley::test_support::run_binary;
using motley::test_support::RunOptions;
using motley::test_support::RunResult;
using motley::test_support::TempDir;

// Runs the binary in a clean distributed environment.
RunResult run_motley(const std::string& args) {
  return motley::test_support::run_binary(MOTLEY_BINARY, args);
}

std::string data(const std::string& name) {
  return std::string(MOTLEY_TEST_DATA_DIR) + "/cli/" + name;
}

// Every bad input: exit 2, a single "motley: error:" line mentioning each of `needles`, and no
// partial output on stdout.
void expect_bad_input(const std::string& args, const std::vector<std::string>& needles) {
  RunResult r = run_motley(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  EXPECT_EQ(r.out, "") << args;
  EXPECT_EQ(r.err.rfind("motley: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line\n" << r.err;
  for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << n << "\n" << r.err;
}

TEST(CliTest, ModelShowJsonHasTotalsAndLayers) {
  RunResult r = run_motley("model show " + data("small_llama.json") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  // Embedding 1000*256, two blocks of (q 256*256, k and v 256*128 each, o 256*256,
  // MLP 3*256*512, two norms 2*256), final norm 256, LM head 1000*256.
  int64_t block = 256 * 256 * 2 + 256 * 128 * 2 + 3 * 256 * 512 + 2 * 256;
  int64_t expected = 1000 * 256 + 2 * block + 256 + 1000 * 256;
  EXPECT_EQ(j["total_params"].get<int64_t>(), expected);
  EXPECT_EQ(j["active_params"].get<int64_t>(), expected);
  ASSERT_TRUE(j["layers"].is_array());
  ASSERT_EQ(j["layers"].size(), 4u);
  for (const auto& l : j["layers"]) {
    for (const char* key : {"kind", "params", "forward_flops", "backward_input_flops",
                            "backward_weight_flops", "activation_bytes", "output_bytes"}) {
      EXPECT_TRUE(l.contains(key)) << key;
    }
  }
}

TEST(CliTest, ModelShowPresetMatchesPublishedCount) {
  RunResult r = run_motley("model show llama-3-8b --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 8,030,261,248: Meta-Llama-3.1-8B's safetensors total_size / 2 (bf16).
  EXPECT_EQ(nlohmann::json::parse(r.out)["total_params"].get<int64_t>(), 8030261248);
}

TEST(CliTest, ModelShowTableEndsWithTotals) {
  RunResult r = run_motley("model show tiny-llama --seq-len 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("total parameters"), std::string::npos);
  EXPECT_NE(r.out.find("embedding"), std::string::npos);
}

// The line of `text` that starts with `prefix` after leading spaces; "" when none does.
std::string line_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line.compare(first, prefix.size(), prefix) == 0) return line;
  }
  return "";
}

// A profile's layers have measured times, not FLOPs: the table shows the times (not "0 FLOP"),
// says where they were measured, and totals them.
TEST(CliTest, ModelShowOfAProfileShowsMeasuredTimes) {
  RunResult r = run_motley("model show " + data("small_profile.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("0 FLOP"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ntimes measured on H100-SXM, per micro-batch"), std::string::npos);
  EXPECT_NE(line_starting(r.out, "#").find("F time   B time   W time"), std::string::npos);
  EXPECT_NE(line_starting(r.out, "1  block.0").find("4.00 ms  6.00 ms  2.00 ms"),
            std::string::npos);
  EXPECT_NE(line_starting(r.out, "total").find("12.0 ms  17.0 ms  5.00 ms"), std::string::npos);
  // Times on other device types: only those measured, the others "-".
  EXPECT_NE(r.out.find("times measured on other device types"), std::string::npos);
  EXPECT_NE(r.out.find("2  block.1  A100-80GB  9.00 ms       -       -"), std::string::npos);
  EXPECT_NE(r.out.find("measured time per micro-batch on H100-SXM 34.0 ms (F 12.0 ms, B 17.0 ms, W "
                       "5.00 ms)"),
            std::string::npos)
      << r.out;
}

// A profile that states no vocabulary: the rows of its head and embedding, read from their
// bytes (model-format.md, `vocab`), are shown, as a stated vocabulary is.
TEST(CliTest, ModelShowSaysTheVocabularyOfAMeasuredHead) {
  RunResult r = run_motley("model show " + data("unstated_vocabulary.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\nembedding (embed): 1000 vocabulary rows, read from its bytes; "
                       "vocabulary parallelism may split it\n"
                       "head (head): 1000 vocabulary rows, read from its bytes; vocabulary "
                       "parallelism may split it\n"),
            std::string::npos)
      << r.out;
  // A head that states no parameter bytes gives no rows to split.
  r = run_motley("model show " + data("small_profile.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("vocabulary rows"), std::string::npos) << r.out;
}

TEST(CliTest, ModelShowJsonCarriesMeasuredTimes) {
  RunResult r = run_motley("model show " + data("small_profile.json") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& block = j["layers"][1];
  EXPECT_EQ(block["name"], "block.0");
  EXPECT_EQ(block["forward_flops"].get<double>(), 0.0);  // the existing fields stay
  const auto& m = block["measured"];
  EXPECT_EQ(m["measured_on"], "H100-SXM");
  EXPECT_DOUBLE_EQ(m["forward_s"].get<double>(), 0.004);
  EXPECT_DOUBLE_EQ(m["backward_input_s"].get<double>(), 0.006);
  EXPECT_DOUBLE_EQ(m["backward_weight_s"].get<double>(), 0.002);
  EXPECT_EQ(m["seq_len"], 1024);
  EXPECT_EQ(m["micro_batch_size"], 1);
  EXPECT_DOUBLE_EQ(m["token_scale"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(m["times_by_device"]["A100-80GB"]["forward_s"].get<double>(), 0.009);
  EXPECT_FALSE(m["times_by_device"]["A100-80GB"].contains("backward_input_s"));
  const auto& totals = j["measured_totals"];
  EXPECT_EQ(totals["measured_on"], "H100-SXM");
  EXPECT_EQ(totals["layers"], 4);
  EXPECT_DOUBLE_EQ(totals["forward_s"].get<double>(), 0.012);
  EXPECT_DOUBLE_EQ(totals["backward_input_s"].get<double>(), 0.017);
  EXPECT_DOUBLE_EQ(totals["backward_weight_s"].get<double>(), 0.005);
  // Analytic models get neither.
  RunResult a = run_motley("model show tiny-llama --json");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto ja = nlohmann::json::parse(a.out);
  EXPECT_FALSE(ja.contains("measured_totals"));
  for (const auto& l : ja["layers"]) EXPECT_FALSE(l.contains("measured"));
}

// At another sequence length the times scale with the tokens, as the cost model scales them.
TEST(CliTest, ModelShowScalesMeasuredTimesToTheMicroBatch) {
  RunResult r = run_motley("model show " + data("small_profile.json") + " --seq-len 2048");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("scaled linearly from the 1 x 1024 tokens they were measured at to 1 x "
                       "2048"),
            std::string::npos)
      << r.out;
  EXPECT_NE(line_starting(r.out, "1  block.0").find("8.00 ms  12.0 ms  4.00 ms"),
            std::string::npos);
  RunResult j = run_motley("model show " + data("small_profile.json") + " --seq-len 2048 --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto m = nlohmann::json::parse(j.out)["layers"][1]["measured"];
  EXPECT_DOUBLE_EQ(m["forward_s"].get<double>(), 0.008);
  EXPECT_DOUBLE_EQ(m["token_scale"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(m["times_by_device"]["A100-80GB"]["forward_s"].get<double>(), 0.018);
}

// Analytic and measured layers in one model: FLOPs where known, "-" where not, times beside
// them; measured on two device types, the times have no total.
TEST(CliTest, ModelShowOfMixedLayersShowsBothAndNoMeaninglessTotal) {
  RunResult r = run_motley("model show " + data("mixed_measured.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string header = line_starting(r.out, "#");
  for (const char* column : {" F ", " W ", "F time", "W time", "measured on"}) {
    EXPECT_NE(header.find(column), std::string::npos) << column << "\n" << r.out;
  }
  const std::string block = line_starting(r.out, "1  block.0");
  EXPECT_NE(block.find("-           -           -  2.00 ms  3.00 ms  1.00 ms  A100-80GB"),
            std::string::npos)
      << r.out;
  EXPECT_NE(line_starting(r.out, "3  head").find("MFLOP"), std::string::npos);
  EXPECT_NE(r.out.find("measured layers not counted"), std::string::npos);
  EXPECT_NE(r.out.find("measured times are on several device types (A100-80GB, H100-SXM): no "
                       "total"),
            std::string::npos);
  const auto j = nlohmann::json::parse(
      run_motley("model show " + data("mixed_measured.json") + " --json").out);
  EXPECT_FALSE(j.contains("measured_totals"));
  EXPECT_FALSE(j["layers"][0].contains("measured"));
  EXPECT_EQ(j["layers"][2]["measured"]["measured_on"], "H100-SXM");
  EXPECT_DOUBLE_EQ(j["layers"][2]["measured"]["backward_weight_s"].get<double>(), 0.0005);
}

TEST(CliTest, ClusterShowJsonListsDevices) {
  RunResult r = run_motley("cluster show default --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j["devices"].is_array());
  EXPECT_EQ(j["total_devices"].get<size_t>(), j["devices"].size());
  for (size_t i = 0; i < j["devices"].size(); ++i) {
    const auto& d = j["devices"][i];
    EXPECT_EQ(d["id"].get<size_t>(), i);
    EXPECT_TRUE(d["type"].is_string());
    EXPECT_TRUE(d["node"].is_number_integer());
  }
}

TEST(CliTest, ClusterShowOfAFile) {
  RunResult r = run_motley("cluster show " + data("one_t4.yaml") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["total_devices"].get<int>(), 1);
  EXPECT_EQ(j["devices"][0]["type"].get<std::string>(), "T4");
}

// `cluster show` counts the device pairs of each path class by node groups (nodes with the same
// devices, links and NICs have the same paths, whatever their names) and moves measured pairs
// to their own class: the counts are the closed forms of every ordered pair.
TEST(CliTest, ClusterShowCountsEveryDevicePairByPathClass) {
  const TempDir scratch("cli_pair_classes");
  const std::string file = scratch.file("mixed.yaml");
  std::ofstream(file) << "name: mixed\n"
                         "network: {kind: infiniband, bandwidth_GBps: 100, latency_us: 2}\n"
                         "measured_links:\n"
                         "  links:\n"
                         "    - {src: 0, dst: 1, latency_us: 9, bandwidth_GBps: 7}\n"
                         "nodes:\n"
                         "  - name: a\n"
                         "    count: 3\n"
                         "    devices: {type: H100-SXM, count: 4}\n"
                         "    interconnect: {kind: nvlink, bandwidth_GBps: 450, latency_us: 2}\n"
                         "    nic: {bandwidth_GBps: 50, latency_us: 1, count: 4}\n"
                         "  - name: b\n"
                         "    count: 2\n"
                         "    devices: {type: A100-80GB, count: 2}\n"
                         "    interconnect: {kind: pcie}\n"
                         "    nic: {bandwidth_GBps: 25, latency_us: 3, count: 1}\n"
                         "  - name: c\n"
                         "    devices: {type: H100-SXM, count: 4}\n"
                         "    interconnect: {kind: nvlink, bandwidth_GBps: 450, latency_us: 2}\n"
                         "    nic: {bandwidth_GBps: 50, latency_us: 1, count: 4}\n";
  RunResult r = run_motley("cluster show " + file + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::tuple<std::string, double, double>, int64_t> pairs;
  int64_t total = 0;
  const nlohmann::json shown = nlohmann::json::parse(r.out);
  for (const auto& l : shown["links"]) {
    const int64_t n = l["device_pairs"].get<int64_t>();
    pairs[{l["kind"].get<std::string>(), l["bandwidth_bytes_per_s"].get<double>(),
           std::round(l["latency_s"].get<double>() * 1e7) / 1e7}] = n;
    total += n;
  }
  // 16 H100s in four nodes (three named a-*, one c) and 4 A100s in two nodes.
  EXPECT_EQ(total, 20 * 19) << r.out;
  EXPECT_EQ((pairs[{"measured", 7e9, 9e-6}]), 1) << r.out;
  EXPECT_EQ((pairs[{"intra-node nvlink", 450e9, 2e-6}]), 4 * 4 * 3 - 1) << r.out;
  EXPECT_EQ((pairs[{"inter-node", 50e9, 4e-6}]), 16 * 12) << r.out;     // H100 to H100
  EXPECT_EQ((pairs[{"inter-node", 25e9, 6e-6}]), 2 * 16 * 4) << r.out;  // H100 and A100
  EXPECT_EQ((pairs[{"inter-node", 25e9, 8e-6}]), 4 * 2) << r.out;       // A100 to A100
  // and the PCIe pairs inside the A100 nodes: one row per class (H100 to A100 and back, whose
  // latencies add up in opposite orders, share one).
  EXPECT_EQ(shown["links"].size(), 6u) << r.out;
}

// A collective measured over named devices prices that op over those devices: a data-parallel
// pair whose all-reduce was measured at 1 s takes that second on top of its compute.
TEST(CliTest, MeasuredCollectivesPriceTheGradientAllReduce) {
  const TempDir scratch("cli_measured_collectives");
  const std::string nodes =
      "nodes:\n"
      "  - name: box\n"
      "    devices: {type: T4, count: 2}\n"
      "    interconnect: {kind: pcie}\n";
  const std::string measured = scratch.path() + "/measured.yaml";
  const std::string plain = scratch.path() + "/plain.yaml";
  std::ofstream(measured) << "name: two-t4\n"
                             "measured_links:\n"
                             "  collectives:\n"
                             "    - op: all_reduce\n"
                             "      ranks: 2\n"
                             "      devices: [1, 0]\n"
                             "      results:\n"
                             "        - {size_bytes: 1000000000, time_us: 1000000, algbw_GBps: 1, "
                             "busbw_GBps: 1}\n"
                          << nodes;
  std::ofstream(plain) << "name: two-t4\n" << nodes;

  RunResult shown = run_motley("cluster show " + measured + " --json");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  auto c = nlohmann::json::parse(shown.out);
  ASSERT_EQ(c["measured_collectives"].size(), 1u);
  EXPECT_EQ(c["measured_collectives"][0]["op"], "all_reduce");
  EXPECT_EQ(c["measured_collectives"][0]["devices"], nlohmann::json::array({1, 0}));
  EXPECT_EQ(c["measured_collectives"][0]["max_size_time_s"].get<double>(), 1.0);

  const std::string sim =
      "simulate --schedule 1f1b --model tiny-llama --stages 1 --data-parallel 2 --json --cluster ";
  RunResult with = run_motley(sim + measured);
  RunResult without = run_motley(sim + plain);
  ASSERT_EQ(with.exit_code, 0) << with.err;
  ASSERT_EQ(without.exit_code, 0) << without.err;
  const double t_with = nlohmann::json::parse(with.out)["iteration_time_s"].get<double>();
  const double t_without = nlohmann::json::parse(without.out)["iteration_time_s"].get<double>();
  ASSERT_LT(t_without, 0.1);
  // The all-reduce waits for the backward; the sweep's one size prices every smaller one.
  EXPECT_GE(t_with, 1.0);
  EXPECT_LE(t_with, 1.0 + t_without);
}

TEST(CliTest, EstimateRunsTheDefaultExample) {
  RunResult r = run_motley("estimate --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_GE(j["devices"].size(), 1u);
  for (const auto& d : j["devices"]) {
    EXPECT_GT(d["step_time_s"].get<double>(), 0.0);
    EXPECT_GT(d["memory_bytes"].get<double>(), 0.0);
  }
}

TEST(CliBadInputTest, MissingModelFile) {
  expect_bad_input("model show /nonexistent/config.json", {"/nonexistent/config.json"});
}

TEST(CliBadInputTest, MalformedJson) {
  expect_bad_input("model show " + data("malformed.json"), {"malformed.json", "malformed JSON"});
}

TEST(CliBadInputTest, UnknownModelTypeListsSupportedOnes) {
  expect_bad_input("model show " + data("unknown_type.json"),
                   {"unknown_type.json", "bloom", "llama", "mixtral", "nemotron_h"});
}

TEST(CliBadInputTest, NegativeLayerCount) {
  expect_bad_input("model show " + data("negative_layers.json"),
                   {"negative_layers.json", "num_hidden_layers"});
}

TEST(CliBadInputTest, NonIntegerHeadCount) {
  expect_bad_input("model show " + data("fractional_heads.json"),
                   {"fractional_heads.json", "num_attention_heads", "4.5"});
}

TEST(CliBadInputTest, UnknownPreset) {
  expect_bad_input("model show no-such-model", {"no-such-model", "llama-3-8b"});
}

TEST(CliBadInputTest, UnknownDeviceType) {
  expect_bad_input("cluster show " + data("unknown_device.yaml"),
                   {"unknown_device.yaml", "H900", "H100-SXM"});
}

TEST(CliBadInputTest, NegativeDeviceCount) {
  expect_bad_input("cluster show " + data("negative_count.yaml"),
                   {"negative_count.yaml", "count", "-3"});
}

TEST(CliBadInputTest, NonIntegerDeviceCount) {
  expect_bad_input("cluster show " + data("fractional_count.yaml"),
                   {"fractional_count.yaml", "count", "8.5"});
}

TEST(CliBadInputTest, MalformedYaml) {
  expect_bad_input("cluster show " + data("malformed.yaml"), {"malformed.yaml", "YAML"});
}

TEST(CliBadInputTest, ModelThatFitsNowhere) {
  expect_bad_input("estimate --model llama-3-70b --cluster " + data("one_t4.yaml"),
                   {"llama-3-70b", "does not fit", "one-t4"});
}

TEST(CliBadInputTest, BadOptionValues) {
  expect_bad_input("model show tiny-llama --micro-batch-size 0", {"--micro-batch-size"});
  expect_bad_input("estimate --global-batch 3 --micro-batch-size 2", {"--global-batch"});
  expect_bad_input("model show tiny-llama --seq-len abc", {"--seq-len"});
  expect_bad_input("frobnicate", {"frobnicate"});
}

// Every numeric option of every command is checked by the parser: a zero where a count is
// expected, a negative or non-finite value, or one beyond the option's limit is refused naming
// the option and its range — never taken for the default.
TEST(CliBadInputTest, EveryNumericOptionIsCheckedByTheParser) {
  const std::string counts = "expected an integer from 1 to 65536, got ";
  const std::string lengths = "expected an integer from 1 to 16777216, got ";
  const std::string seeds = "expected an integer from 0 to 18446744073709551615, got -1";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model show tiny-llama --seq-len 0", "--seq-len: " + lengths + "0"},
      {"model show tiny-llama --micro-batch-size 0", "--micro-batch-size: " + counts + "0"},
      {"estimate --seq-len -64", "--seq-len: " + lengths + "-64"},
      {"estimate --micro-batch-size 0", "--micro-batch-size: " + counts + "0"},
      {"estimate --global-batch 0", "--global-batch: " + counts + "0"},
      {"simulate --schedule 1f1b --stages 0", "--stages: " + counts + "0"},
      {"simulate --schedule 1f1b --virtual-stages -1", "--virtual-stages: " + counts + "-1"},
      {"simulate --schedule 1f1b --micro-batches 0", "--micro-batches: " + counts + "0"},
      {"simulate --schedule 1f1b --micro-batches 99999999999",
       "--micro-batches: " + counts + "99999999999"},
      {"simulate --schedule 1f1b --micro-batch-size 0", "--micro-batch-size: " + counts + "0"},
      {"simulate --schedule 1f1b --seq-len -64", "--seq-len: " + lengths + "-64"},
      {"simulate --schedule 1f1b --tensor-parallel 0", "--tensor-parallel: " + counts + "0"},
      {"launch --nproc 0 -- run", "--nproc: expected an integer from 1 to 1024, got 0"},
      {"run --plan p.json --lr 1e300",
       "--lr: expected a number above 0 and at most 1000, got 1e300"},
      {"launch --nproc 2 --master-port 0 -- run",
       "--master-port: expected an integer from 1 to 65535, got 0"},
      {"launch --nproc 2 --master-port 65536 -- run",
       "--master-port: expected an integer from 1 to 65535, got 65536"},
  };
  for (const auto& [args, message] : cases) {
    expect_bad_input(args, {"motley: error: " + message});
  }
  for (const std::string command : {"plan", "compare"}) {
    const std::vector<std::pair<std::string, std::string>> tune_cases = {
        {"--global-batch 0", "--global-batch: " + counts + "0"},
        {"--seq-len -64", "--seq-len: " + lengths + "-64"},
        {"--micro-batch-size 0", "--micro-batch-size: " + counts + "0"},
        {"--time-budget inf",
         "--time-budget: expected a number above 0 and at most 1000000, got inf"},
        {"--time-budget 0", "--time-budget: expected a number above 0 and at most 1000000, got 0"},
        {"--max-plans 0", "--max-plans: expected an integer from 1 to 9223372036854775807, got 0"},
        {"--seed -1", "--seed: " + seeds},
        {"--threads 0", "--threads: expected an integer from 1 to 1024, got 0"},
    };
    for (const auto& [args, message] : tune_cases) {
      expect_bad_input(command + " --model tiny-llama " + args,
                       {"motley: error: " + message, "'motley " + command + " --help'"});
    }
  }
}

// CLI11's own refusals are one line too, saying where the usage is.
TEST(CliBadInputTest, ParseErrorsAreOneLineNamingTheHelp) {
  expect_bad_input("simulate --bogus", {"--bogus", "(see 'motley simulate --help')"});
  expect_bad_input("model show", {"model is required", "(see 'motley model show --help')"});
  expect_bad_input("frobnicate", {"unknown command 'frobnicate'", "(see 'motley --help')"});
  // A plan file fixes what these shape: given with --plan they are refused, not ignored.
  const std::string plan = std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/1f1b-4stage.json";
  for (const char* shape :
       {"--stages 4", "--micro-batches 8", "--seq-len 64", "--recompute full"}) {
    const std::string option = std::string(shape).substr(0, std::string(shape).find(' '));
    expect_bad_input("simulate --plan " + plan + " " + shape, {"--plan excludes " + option});
  }
}

// The names in `dir`, hidden ones included, sorted.
// A path that cannot be written is refused before anything is computed, and nothing is left:
// not the plan of a command whose SVG path is bad, nor a temporary.
TEST(CliBadInputTest, OutputPathsAreCheckedBeforeAnyWork) {
  const TempDir scratch("cli_outputs");
  const std::string dir = scratch.path();
  std::ofstream(dir + "/a-file") << "x";
  const std::string missing = dir + "/missing";
  const std::string sim =
      "simulate --schedule 1f1b --model tiny-llama --cluster h100x8 --stages 4 ";
  expect_bad_input(sim + "--out " + missing + "/plan.json",
                   {"--out: " + missing + "/plan.json: no such directory '" + missing + "'"});
  expect_bad_input(sim + "--out " + dir, {"--out: " + dir + ": is a directory, expected a file"});
  expect_bad_input(sim + "--out " + dir + "/plan.json --svg " + missing + "/x.svg",
                   {"--svg: " + missing + "/x.svg: no such directory"});
  expect_bad_input(sim + "--trace " + dir + "/a-file/t.json",
                   {"--trace: " + dir + "/a-file/t.json: '" + dir + "/a-file' is not a directory"});
  expect_bad_input(sim + "--out " + dir + "/p.json --trace " + dir + "/./p.json",
                   {"--trace: " + dir + "/./p.json: --out names the same file"});
  const std::string plan = "plan --model tiny-llama --max-plans 2 --quiet ";
  expect_bad_input(plan + "--out " + dir + "/plan.json --svg " + missing + "/x.svg",
                   {"--svg: " + missing + "/x.svg: no such directory"});
  expect_bad_input(plan + "--trace " + dir, {"--trace: " + dir + ": is a directory"});
  expect_bad_input(
      "compare --model tiny-llama --max-plans 2 --quiet --out-dir " + dir + "/a-file/plans",
      {"--out-dir: " + dir + "/a-file/plans: '" + dir + "/a-file' is not a directory"});
  EXPECT_EQ(directory_entries(dir), std::vector<std::string>{"a-file"});
}

// The data an HTML report draws, read back from its motley-data element.
nlohmann::json report_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"motley-data\">";
  const size_t begin = html.find(open);
  if (begin == std::string::npos) return nullptr;
  const size_t end = html.find("</script>", begin);
  return nlohmann::json::parse(html.substr(begin + open.size(), end - begin - open.size()));
}

// A baseline the budget left out is "not run" (not "infeasible"), in the table, the JSON and
// the HTML report's data, and the output says how to run it.
TEST(CliTest, CompareSaysWhichBaselinesTheBudgetLeftOut) {
  const TempDir scratch("cli_not_run");
  const std::string page = scratch.path() + "/compare.html";
  const std::string compare = "compare --model tiny-llama --max-plans 2 --quiet";
  RunResult text = run_motley(compare + " --html " + page);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const std::string table = text.out.substr(0, text.out.find("\nmotley:"));
  for (const char* name : {"zb-h1", "metis", "schedule-only"}) {
    const size_t row = table.find(std::string("\n") + name + " ");
    ASSERT_NE(row, std::string::npos) << name << "\n" << text.out;
    const std::string line = table.substr(row + 1, table.find('\n', row + 1) - row - 1);
    EXPECT_NE(line.find(" not run "), std::string::npos) << line;
    EXPECT_EQ(line.find("infeasible"), std::string::npos) << line;
  }
  EXPECT_NE(text.out.find("6 of the 9 baselines did not run: the budget was spent before they "
                          "started. A larger --time-budget (or --max-plans, where given) runs "
                          "them.\n"),
            std::string::npos)
      << text.out;
  RunResult as_json = run_motley(compare + " --json");
  ASSERT_EQ(as_json.exit_code, 0) << as_json.err;
  const nlohmann::json json = nlohmann::json::parse(as_json.out);
  const nlohmann::json data = report_data(read_file(page));
  for (const nlohmann::json* strategies : {&json["strategies"], &data["strategies"]}) {
    int not_run = 0;
    for (const auto& s : *strategies) {
      const bool reference = s["name"] == "motley" || s["name"] == "megatron-1f1b" ||
                             s["name"] == "megatron-interleaved" || s["name"] == "megatron-tuned";
      EXPECT_EQ(s.value("not_run", false), !reference) << s.dump();
      not_run += s.value("not_run", false) ? 1 : 0;
    }
    EXPECT_EQ(not_run, 6);
  }
}

TEST(CliTest, ReportWritesOnePageOfThePlan) {
  const TempDir scratch("cli_report");
  const std::string page = scratch.path() + "/plan.html";
  const std::string plan = std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/1f1b-4stage.json";
  RunResult r = run_motley("report --plan " + plan + " --html " + page);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(page + ": ", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  const std::string html = read_file(page);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  const nlohmann::json d = report_data(html);
  ASSERT_TRUE(d.is_object());
  // The same iteration `simulate` prices the plan at.
  RunResult sim = run_motley("simulate --plan " + plan + " --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const nlohmann::json s = nlohmann::json::parse(sim.out);
  EXPECT_EQ(d["summary"]["iteration_s"], s["iteration_time_s"]);
  EXPECT_EQ(d["summary"]["stages"], s["stages"]);
  EXPECT_EQ(d["devices"].size(), s["devices"].size());
  // One replica: one row per device group, stages in order, and no all-reduce row.
  ASSERT_EQ(s["replicas"], 1);
  const nlohmann::json& rows = d["timeline"]["rows"];
  ASSERT_EQ(rows.size(), s["stages"].get<size_t>());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i]["stage"], i);
  EXPECT_FALSE(d.contains("strategies"));
  EXPECT_EQ(directory_entries(scratch.path()), std::vector<std::string>{"plan.html"});
}

// compare --html draws motley's plan with every strategy of the table as a bar.
TEST(CliTest, CompareHtmlHoldsEveryStrategy) {
  const TempDir scratch("cli_compare_html");
  const std::string page = scratch.path() + "/compare.html";
  RunResult r = run_motley(
      "compare --model tiny-llama --cluster spot-fleet --max-plans 20 --quiet --json --html " +
      page);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json d = report_data(read_file(page));
  ASSERT_TRUE(d.is_object());
  ASSERT_EQ(d["strategies"].size(), j["strategies"].size());
  for (size_t i = 0; i < j["strategies"].size(); ++i) {
    EXPECT_EQ(d["strategies"][i]["name"], j["strategies"][i]["name"]);
    if (j["strategies"][i]["feasible"].get<bool>()) {
      EXPECT_EQ(d["strategies"][i]["iteration_s"], j["strategies"][i]["iteration_time_s"]);
      EXPECT_EQ(d["strategies"][i]["bubble_fraction"], j["strategies"][i]["bubble_fraction"]);
    }
  }
  EXPECT_EQ(d["summary"]["iteration_s"], j["strategies"][0]["iteration_time_s"]);
  EXPECT_EQ(d["summary"]["lower_bound_s"], j["lower_bound_s"]);
  // Spot nodes: the page prices interruptions and the on-demand alternative.
  EXPECT_EQ(d["cost"]["interruptible"], true);
  EXPECT_GT(d["cost"]["on_demand_dollars_per_hour"].get<double>(),
            d["cost"]["dollars_per_hour"].get<double>());
}

TEST(CliBadInputTest, ReportRefusesBadInputBeforeWriting) {
  const TempDir scratch("cli_report_bad");
  const std::string dir = scratch.path();
  const std::string plan = std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/1f1b-4stage.json";
  expect_bad_input("report --plan " + plan, {"--html is required"});
  expect_bad_input("report --plan " + plan + " --html " + dir + "/missing/p.html",
                   {"--html: " + dir + "/missing/p.html: no such directory"});
  expect_bad_input("report --plan " + plan + " --html " + dir,
                   {"--html: " + dir + ": is a directory"});
  expect_bad_input("report --plan " + dir + "/none.json --html " + dir + "/p.html", {"none.json"});
  expect_bad_input(
      "report --plan " + plan + " --html " + dir + "/p.html --trace " + dir + "/none.json",
      {"none.json"});
  // A plan is not a measured trace.
  expect_bad_input("report --plan " + plan + " --html " + dir + "/p.html --trace " + plan,
                   {plan, "measured trace"});
  expect_bad_input("report --plan " + plan + " --html " + dir + "/p.html --warmup -1",
                   {"--warmup: expected an integer from 0 to 65536, got -1"});
  EXPECT_EQ(directory_entries(dir), std::vector<std::string>{});
}

// compare --out-dir creates the directory and writes every feasible strategy's plan, and
// nothing else.
TEST(CliTest, CompareWritesEveryPlanIntoANewDirectory) {
  const TempDir scratch("cli_compare");
  const std::string out = scratch.path() + "/new/plans";
  RunResult r = run_motley(
      "compare --model tiny-llama --cluster h100x8 --max-plans 4 --quiet "
      "--json --out-dir " +
      out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  std::vector<std::string> expected;
  for (const auto& s : j["strategies"]) {
    if (s["feasible"].get<bool>()) expected.push_back(s["name"].get<std::string>() + ".json");
  }
  std::sort(expected.begin(), expected.end());
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(directory_entries(out), expected);
}

TEST(CliTest, SimulateJsonReportsTheDocumentedFields) {
  RunResult r = run_motley(
      "simulate --schedule 1f1b --model tiny-llama --cluster h100x8 --stages 4 --micro-batches 8 "
      "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  double t = j["iteration_time_s"].get<double>();
  ASSERT_GT(t, 0.0);
  // 8 devices in 4 stages: 2 replicas of 8 micro-batches of one 64-token sequence.
  EXPECT_EQ(j["global_batch"].get<int>(), 16);
  EXPECT_DOUBLE_EQ(j["throughput_tokens_per_s"].get<double>(), 16 * 64 / t);
  double idle = 0;
  ASSERT_EQ(j["devices"].size(), 8u);
  for (const auto& d : j["devices"]) {
    EXPECT_NEAR(d["busy_s"].get<double>() + d["idle_s"].get<double>(), t, 1e-12);
    EXPECT_GT(d["peak_memory_bytes"].get<double>(), 0.0);
    EXPECT_GT(d["memory_capacity_bytes"].get<double>(), d["peak_memory_bytes"].get<double>());
    idle += d["idle_s"].get<double>();
  }
  EXPECT_NEAR(j["bubble_fraction"].get<double>(), idle / (8 * t), 1e-12);
}

// tiny-llama is an embedding, 4 decoder blocks and a head. Megatron-LM's rule splits the
// decoder blocks evenly and adds the embedding to the first stage and the head to the last;
// the uniform rule counts all 6 layers alike.
TEST(CliTest, SimulatePartitionChoosesTheLayerSplit) {
  const TempDir scratch("cli_partition");
  auto bounds_of = [&](const std::string& partition) {
    const std::string plan = scratch.file(partition + ".json");
    RunResult r = run_motley(
        "simulate --schedule 1f1b --model tiny-llama --cluster h100x8 "
        "--stages 4 --partition " +
        partition + " --out " + plan);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::pair<int, int>> bounds;
    if (r.exit_code != 0) return bounds;
    const auto written = nlohmann::json::parse(read_file(plan));
    for (const auto& s : written["stages"]) {
      bounds.emplace_back(s["layers"][0].get<int>(), s["layers"][1].get<int>());
    }
    return bounds;
  };
  using Bounds = std::vector<std::pair<int, int>>;
  EXPECT_EQ(bounds_of("megatron"), (Bounds{{0, 2}, {2, 3}, {3, 4}, {4, 6}}));
  // 6 layers over 4 stages: the first two stages take the remainder.
  EXPECT_EQ(bounds_of("uniform"), (Bounds{{0, 2}, {2, 4}, {4, 5}, {5, 6}}));
  expect_bad_input(
      "simulate --schedule 1f1b --model tiny-llama --cluster h100x8 --partition balanced",
      {"--partition", "uniform", "megatron", "balanced"});
}

TEST(CliTest, SimulateWritesAPlanThatSimulatesTheSame) {
  const TempDir scratch("cli_sim");
  const std::string& dir = scratch.path();
  RunResult first = run_motley(
      "simulate --schedule zb-h1 --model tiny-moe --cluster default --stages 4 --json --out " +
      dir + "/plan.json --trace " + dir + "/t.json --svg " + dir + "/t.svg");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  RunResult again = run_motley("simulate --plan " + dir + "/plan.json --json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(first.out)["iteration_time_s"],
            nlohmann::json::parse(again.out)["iteration_time_s"]);
  auto plan = nlohmann::json::parse(read_file(dir + "/plan.json"));
  EXPECT_EQ(plan["predicted"]["iteration_time_s"],
            nlohmann::json::parse(first.out)["iteration_time_s"]);
  auto trace = nlohmann::json::parse(read_file(dir + "/t.json"));
  EXPECT_TRUE(trace.contains("traceEvents"));
  std::string svg = read_file(dir + "/t.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

// Vocabulary parallelism from the layout flags: the head split into a shard per group, the
// plan written and read back to the same time; plan --vocab-parallel splits it too; run trains
// it; the PyTorch export refuses such a plan (exit 2, naming the field), Megatron's lists it.
TEST(CliTest, VocabularyParallelPlansSimulateRunAndAreRefusedWhereTheyCannotBeExpressed) {
  const TempDir scratch("cli_vocab");
  const std::string plan = scratch.file("plan.json");
  RunResult first = run_motley(
      "simulate --schedule 1f1b --model tiny-llama --cluster h100x8 --stages 2 --data-parallel 2 "
      "--micro-batches 4 --vocab-parallel --json --out " +
      plan);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  // tiny-llama: the embedding, four decoder layers, the head; both ends split in two.
  auto doc = nlohmann::json::parse(read_file(plan));
  ASSERT_EQ(doc["stages"].size(), 6u);
  for (int s : {0, 4}) {
    EXPECT_EQ(doc["stages"][s]["vocab_rows"], nlohmann::json::parse("[0, 128]"));
    EXPECT_EQ(doc["stages"][s + 1]["vocab_rows"], nlohmann::json::parse("[128, 256]"));
  }
  EXPECT_EQ(doc["stages"][2]["layers"], nlohmann::json::parse("[1, 3]"));
  EXPECT_EQ(doc["replicas"][1]["stage_group"], nlohmann::json::parse("[0, 1, 0, 1, 0, 1]"));
  RunResult again = run_motley("simulate --plan " + plan + " --json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(first.out)["iteration_time_s"],
            nlohmann::json::parse(again.out)["iteration_time_s"]);

  // The executor trains it to the sequential reference's losses (ranks as threads).
  RunResult run = run_motley("run --plan " + plan + " --steps 2 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  RunResult sequential = run_motley("run --plan " + plan + " --steps 2 --json --sequential");
  ASSERT_EQ(sequential.exit_code, 0) << sequential.err;
  const auto losses = nlohmann::json::parse(run.out)["losses"].get<std::vector<double>>();
  const auto reference = nlohmann::json::parse(sequential.out)["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 2u);
  ASSERT_EQ(reference.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(losses[i], reference[i], 1e-5 * reference[i]);
  // Three groups of two: 256 rows split as 86, 84 and 86, even for each group's two devices
  // (85 rows would not split), so the executor runs the plan the planner wrote.
  const std::string thirds = scratch.file("thirds.json");
  RunResult split = run_motley(
      "simulate --schedule 1f1b --model tiny-llama --cluster h100x8 --stages 3 --tensor-parallel "
      "2 --data-parallel 1 --micro-batches 3 --vocab-parallel --json --out " +
      thirds);
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_EQ(nlohmann::json::parse(read_file(thirds))["stages"].back()["vocab_rows"],
            nlohmann::json::parse("[170, 256]"));
  RunResult split_run = run_motley("run --plan " + thirds + " --steps 1 --json");
  ASSERT_EQ(split_run.exit_code, 0) << split_run.err;
  RunResult split_reference = run_motley("run --plan " + thirds + " --steps 1 --json --sequential");
  ASSERT_EQ(split_reference.exit_code, 0) << split_reference.err;
  const double split_loss = nlohmann::json::parse(split_run.out)["losses"][0].get<double>();
  const double split_expected =
      nlohmann::json::parse(split_reference.out)["losses"][0].get<double>();
  EXPECT_NEAR(split_loss, split_expected, 1e-5 * split_expected);
  RunResult torch = run_motley("export torch-pp --plan " + plan);
  EXPECT_EQ(torch.exit_code, 2);
  EXPECT_NE(torch.err.find("cannot express them"), std::string::npos) << torch.err;
  RunResult megatron = run_motley("export megatron --plan " + plan + " --json");
  ASSERT_EQ(megatron.exit_code, 0) << megatron.err;
  const std::string listed = nlohmann::json::parse(megatron.out)["not_expressed"].dump();
  EXPECT_NE(listed.find("vocabulary parallelism"), std::string::npos) << listed;

  const std::string searched = scratch.file("searched.json");
  RunResult tuned = run_motley(
      "plan --quiet --model tiny-llama --cluster h100x8 --global-batch 16 --vocab-parallel --out " +
      searched);
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
  const auto best = nlohmann::json::parse(read_file(searched));
  EXPECT_TRUE(best["stages"].back().contains("vocab_rows")) << best["stages"];
  RunResult denied = run_motley(
      "plan --quiet --max-plans 100 --model tiny-llama --cluster h100x8 --global-batch 16 "
      "--vocab-parallel --no-vocab-parallel");
  EXPECT_EQ(denied.exit_code, 2);
}

// Iterations without the optimizer step, as peers publish them: `plan --no-optimizer-step`
// reports the plan's time without it and records that it did, so that `simulate --plan` (and
// `export megatron`) reproduce that time without being told; `--optimizer-step` adds the step.
TEST(CliTest, NoOptimizerStepLeavesTheStepOutOfPlanAndSimulate) {
  const TempDir scratch("cli_no_optimizer_step");
  const std::string planned = scratch.file("planned.json");
  RunResult made = run_motley(
      "plan --quiet --max-plans 100 --model tiny-llama --cluster h100x8 --global-batch 16 "
      "--no-optimizer-step --out " +
      planned);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const auto recorded = nlohmann::json::parse(read_file(planned))["predicted"];
  EXPECT_EQ(recorded["optimizer_step"], false);
  const double predicted = recorded["iteration_time_s"].get<double>();
  RunResult bare = run_motley("simulate --plan " + planned + " --no-optimizer-step --json");
  RunResult as_recorded = run_motley("simulate --plan " + planned + " --json");
  RunResult full = run_motley("simulate --plan " + planned + " --optimizer-step --json");
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  ASSERT_EQ(as_recorded.exit_code, 0) << as_recorded.err;
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const double t_bare = nlohmann::json::parse(bare.out)["iteration_time_s"].get<double>();
  const double t_recorded =
      nlohmann::json::parse(as_recorded.out)["iteration_time_s"].get<double>();
  const double t_full = nlohmann::json::parse(full.out)["iteration_time_s"].get<double>();
  EXPECT_DOUBLE_EQ(t_bare, predicted);
  EXPECT_DOUBLE_EQ(t_recorded, predicted);
  EXPECT_LT(t_bare, t_full);
  RunResult text = run_motley("simulate --plan " + planned);
  EXPECT_NE(text.out.find("without the optimizer step, as the plan was predicted"),
            std::string::npos)
      << text.out;
  RunResult exported = run_motley("export megatron --json --plan " + planned);
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(exported.out)["iteration_time_s"].get<double>(),
                   predicted);
  // Both flags at once are refused.
  EXPECT_EQ(
      run_motley("simulate --plan " + planned + " --optimizer-step --no-optimizer-step").exit_code,
      2);
}

// Per-layer recompute in a plan file: the simulator prices the listed layers' recompute, the
// executor trains to the sequential reference's losses, and a layer outside its stage is refused
// naming the field.
TEST(CliTest, PerLayerRecomputePlansSimulateAndRun) {
  const TempDir scratch("cli_recompute_layers");
  const std::string plain = scratch.file("plain.json");
  RunResult made = run_motley(
      "simulate --schedule 1f1b --model tiny-llama --cluster h100x8 --stages 2 --data-parallel 1 "
      "--micro-batches 4 --json --out " +
      plain);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto doc = nlohmann::json::parse(read_file(plain));
  ASSERT_EQ(doc["stages"][1]["layers"], nlohmann::json::parse("[3, 6]"));
  doc["stages"][1]["recompute_layers"] = {3, 4};
  doc.erase("predicted");
  const std::string listed = scratch.file("listed.json");
  std::ofstream(listed) << doc.dump();
  RunResult before = run_motley("simulate --plan " + plain + " --json");
  RunResult after = run_motley("simulate --plan " + listed + " --json");
  ASSERT_EQ(before.exit_code, 0) << before.err;
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_GT(nlohmann::json::parse(after.out)["iteration_time_s"].get<double>(),
            nlohmann::json::parse(before.out)["iteration_time_s"].get<double>());
  RunResult run = run_motley("run --plan " + listed + " --steps 2 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  RunResult sequential = run_motley("run --plan " + listed + " --steps 2 --json --sequential");
  ASSERT_EQ(sequential.exit_code, 0) << sequential.err;
  const auto losses = nlohmann::json::parse(run.out)["losses"].get<std::vector<double>>();
  const auto reference = nlohmann::json::parse(sequential.out)["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(losses[i], reference[i], 1e-5 * reference[i]);
  // From the command line: Megatron's block method, the first N layers of every stage.
  RunResult block = run_motley(
      "simulate --schedule 1f1b --model tiny-llama --cluster h100x8 --stages 2 --data-parallel 1 "
      "--micro-batches 4 --recompute-layers 2 --json --out " +
      listed);
  ASSERT_EQ(block.exit_code, 0) << block.err;
  const auto blocked = nlohmann::json::parse(read_file(listed));
  EXPECT_EQ(blocked["stages"][0]["recompute_layers"], nlohmann::json::parse("[1, 2]"));
  EXPECT_EQ(blocked["stages"][1]["recompute_layers"], nlohmann::json::parse("[3, 4]"));
  RunResult megatron = run_motley("export megatron --plan " + listed);
  ASSERT_EQ(megatron.exit_code, 0) << megatron.err;
  EXPECT_NE(megatron.out.find("--recompute-method block --recompute-num-layers 2"),
            std::string::npos)
      << megatron.out;
  RunResult both = run_motley(
      "simulate --model tiny-llama --recompute full --recompute-layers 2 --schedule 1f1b");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("cannot be combined with --recompute full"), std::string::npos)
      << both.err;
  doc["stages"][1]["recompute_layers"] = {2};
  std::ofstream(listed) << doc.dump();
  RunResult outside = run_motley("simulate --plan " + listed);
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_NE(outside.err.find("field 'stages[1].recompute_layers[0]': layer 2 is not one of stage "
                             "1 (layers [3, 6))'s layers"),
            std::string::npos)
      << outside.err;
}

// Context parallelism from the command line: four replicas as two context groups run the same
// eight micro-batches per step as two replicas do, so they train to the same losses (each
// member running half of every sequence), and the plan exports as Megatron's context-parallel
// size.
TEST(CliTest, ContextParallelPlansSimulateExportAndRun) {
  const TempDir scratch("cli_context");
  const std::string grouped = scratch.file("grouped.json");
  const std::string plain = scratch.file("plain.json");
  const std::string shape =
      "simulate --schedule 1f1b --model tiny-llama --cluster h100x8 --stages 2 --micro-batches 4 ";
  RunResult made =
      run_motley(shape + "--data-parallel 4 --context-parallel 2 --json --out " + grouped);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const auto doc = nlohmann::json::parse(read_file(grouped));
  EXPECT_EQ(doc["context_parallel"], 2);
  EXPECT_EQ(doc["global_batch"].get<int64_t>(), 8 * doc["micro_batch_size"].get<int64_t>());
  ASSERT_EQ(run_motley(shape + "--data-parallel 2 --json --out " + plain).exit_code, 0);
  RunResult megatron = run_motley("export megatron --plan " + grouped);
  ASSERT_EQ(megatron.exit_code, 0) << megatron.err;
  EXPECT_NE(megatron.out.find("TP 1 x PP 2 x CP 2 x DP 2"), std::string::npos) << megatron.out;
  EXPECT_NE(megatron.out.find("--context-parallel-size 2 --cp-comm-type p2p"), std::string::npos)
      << megatron.out;
  // Its groups' replicas are alike: each member runs half of every sequence, without a note.
  RunResult run = run_motley("run --plan " + grouped + " --steps 2 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err.find("runs here with every member"), std::string::npos) << run.err;
  RunResult two = run_motley("run --plan " + plain + " --steps 2 --json");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const auto losses = nlohmann::json::parse(run.out)["losses"].get<std::vector<double>>();
  const auto reference = nlohmann::json::parse(two.out)["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(losses[i], reference[i], 1e-5 * reference[i]);
  RunResult odd = run_motley(shape + "--data-parallel 3 --context-parallel 2");
  EXPECT_EQ(odd.exit_code, 2);
  EXPECT_NE(odd.err.find("context"), std::string::npos) << odd.err;
}

TEST(CliTest, PlanJsonAndItsPlanFileAgreeWithTheSimulator) {
  const TempDir scratch("cli_plan");
  const std::string& dir = scratch.path();
  RunResult r = run_motley("plan --model tiny-moe --cluster default --quiet --json --out " + dir +
                           "/plan.json --svg " + dir + "/plan.svg");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"iteration_time_s", "throughput_tokens_per_s", "search_time_s"}) {
    EXPECT_GT(j[key].get<double>(), 0.0) << key;
  }
  EXPECT_EQ(j["plan"].get<std::string>(), dir + "/plan.json");
  // The written plan simulates to the reported time and is never slower than megatron-1f1b.
  RunResult again = run_motley("simulate --plan " + dir + "/plan.json --json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(again.out)["iteration_time_s"].get<double>(),
                   j["iteration_time_s"].get<double>());
  for (const auto& b : j["baselines"]) {
    if (b["feasible"].get<bool>()) {
      EXPECT_LE(j["iteration_time_s"].get<double>(), b["iteration_time_s"].get<double>())
          << b["strategy"];
    }
  }
  EXPECT_NE(read_file(dir + "/plan.svg").find("</svg>"), std::string::npos);
}

// A node lost: the new plan keeps the global batch, runs on what is left, simulates to what
// replan reported, and each device of the lost node is gone; the same node back (renamed, in
// a file) makes a cluster as large as the first. Bad changes are refused before any search. The
// new plan is priced with, and records, the stack the old one was made with.
TEST(CliTest, ReplanAfterALostNodeKeepsTheGlobalBatch) {
  const TempDir scratch("cli_replan");
  const std::string old_plan = scratch.file("old.json");
  const std::string new_plan = scratch.file("new.json");
  RunResult planned = run_motley(
      "plan --model tiny-llama --cluster h100-a100 --global-batch 64 "
      "--quiet --max-plans 200 --stack megatron-lm-2022 --out " +
      old_plan);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  RunResult r = run_motley("replan --plan " + old_plan +
                           " --lost a100-1 --json --max-plans 200 "
                           "--out " +
                           new_plan);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["old_cluster_devices"], 32);
  EXPECT_EQ(j["new_cluster_devices"], 24);
  EXPECT_EQ(j["global_batch"], 64);
  EXPECT_EQ(j["plan"], new_plan);
  int gone = 0;
  for (const auto& d : j["devices"]) {
    EXPECT_EQ(d["node"] == "a100-1", d["new_layers"] == "gone") << d.dump();
    gone += d["new_layers"] == "gone";
  }
  EXPECT_EQ(gone, 8);
  EXPECT_EQ(nlohmann::json::parse(read_file(new_plan))["software_stack"]["name"],
            "megatron-lm-2022");
  RunResult again = run_motley("simulate --plan " + new_plan + " --json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  const nlohmann::json sim = nlohmann::json::parse(again.out);
  EXPECT_DOUBLE_EQ(sim["iteration_time_s"].get<double>(), j["iteration_time_s"].get<double>());
  EXPECT_EQ(sim["global_batch"], 64);

  std::ofstream(scratch.file("spare.yaml"))
      << "name: spare\nnodes:\n  - name: a100-spare\n    devices: {type: A100-80GB, count: 8}\n";
  RunResult grown = run_motley("replan --plan " + new_plan + " --gained " +
                               scratch.file("spare.yaml") + " --json --max-plans 50");
  ASSERT_EQ(grown.exit_code, 0) << grown.err;
  EXPECT_EQ(nlohmann::json::parse(grown.out)["new_cluster_devices"], 32);

  expect_bad_input("replan --plan " + old_plan, {"give exactly one of --cluster NEW, --lost"});
  expect_bad_input("replan --plan " + old_plan + " --lost a100-1 --cluster default",
                   {"give exactly one of"});
  expect_bad_input("replan --plan " + old_plan + " --lost nowhere",
                   {"--lost: cluster 'h100-a100' has no node 'nowhere'; its nodes: h100-0"});
  expect_bad_input("replan --plan " + old_plan + " --lost h100-0,h100-1,a100-0,a100-1",
                   {"every node of cluster 'h100-a100'"});
  expect_bad_input("replan --plan " + new_plan + " --gained " + scratch.file("spare.yaml") +
                       " --out " + scratch.file("missing/x.json"),
                   {"--out: ", "no such directory"});
  EXPECT_FALSE(std::filesystem::exists(scratch.file("missing")));
}

// A plan's schedule exported as PyTorch pipelining CSV, compute-only and lowered, simulates back
// to the plan's own time; a hand-written CSV is checked by the parser and the validator.
TEST(CliTest, TorchPipeliningCsvRoundTripsThroughSimulate) {
  const TempDir scratch("cli_torch_pp");
  const std::string plan =
      std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/zb-v-tiny-hybrid-default.json";
  const std::string csv = scratch.file("schedule.csv");
  const std::string lowered = scratch.file("lowered.csv");
  RunResult exported =
      run_motley("export torch-pp --plan " + plan + " --out " + csv + " --lowered " + lowered);
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_NE(exported.out.find("stage -> rank: 0 1 2 3 3 2 1 0\n"), std::string::npos)
      << exported.out;
  EXPECT_EQ(read_file(csv).rfind("0F0,", 0), 0u);
  EXPECT_NE(read_file(lowered).find("0SEND_F0"), std::string::npos);
  RunResult printed = run_motley("export torch-pp --plan " + plan);
  EXPECT_EQ(printed.out, read_file(csv));

  RunResult own = run_motley("simulate --plan " + plan + " --json");
  ASSERT_EQ(own.exit_code, 0) << own.err;
  const double time = nlohmann::json::parse(own.out)["iteration_time_s"].get<double>();
  for (const std::string& file : {csv, lowered}) {
    RunResult back = run_motley("simulate --plan " + plan + " --torch-pp-csv " + file + " --json");
    ASSERT_EQ(back.exit_code, 0) << back.err;
    const nlohmann::json j = nlohmann::json::parse(back.out);
    EXPECT_EQ(j["iteration_time_s"].get<double>(), time) << file;
    EXPECT_EQ(j["schedule"], "torch-pp-csv");
  }

  // Bad cells, rows of the wrong ranks, and a replica the plan does not have.
  std::string text = read_file(csv);
  std::ofstream(scratch.file("bad.csv")) << "0F0,0Q1\n";
  expect_bad_input(
      "simulate --plan " + plan + " --torch-pp-csv " + scratch.file("bad.csv"),
      {scratch.file("bad.csv") + ": row 1 (rank 0), column 2: expected an action", "got \"0Q1\""});
  const size_t first = text.find('\n');
  std::ofstream(scratch.file("swapped.csv"))
      << text.substr(first + 1, text.find('\n', first + 1) - first) << text.substr(0, first + 1)
      << text.substr(text.find('\n', first + 1) + 1);
  expect_bad_input("simulate --plan " + plan + " --torch-pp-csv " + scratch.file("swapped.csv"),
                   {plan + " with " + scratch.file("swapped.csv") +
                    ": field 'replicas[0].groups[0].actions[0].stage': 1F0 on replica 0 "
                    "device group 0"});
  expect_bad_input("export torch-pp --plan " + plan + " --replica 4",
                   {"--replica: ", "has 4 replicas (0 to 3), got 4"});
}

// plan prices its candidates with the stack simulate prices the written plan with: the
// cluster's (none here: the default) or the one given, so the two agree exactly.
// Megatron-LM's arguments: a plan Megatron runs as it is, and plans it cannot (mixed devices,
// a V stage map, a zero-bubble order, Mamba layers), each with the closest plan it can run.
TEST(CliTest, MegatronExportSaysWhatItCannotExpressAndPricesTheClosest) {
  const TempDir scratch("cli_megatron");
  auto plan_file = [&](const std::string& name, const std::string& args) {
    const std::string path = scratch.file(name);
    RunResult r = run_motley("plan --quiet --max-plans 200 --out " + path + " " + args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    return path;
  };
  const std::string interleaved = plan_file("interleaved.json",
                                            "--model tiny-llama --cluster h100x8 --strategy "
                                            "megatron-interleaved --global-batch 32");
  const std::string args = scratch.file("args.txt");
  RunResult r = run_motley("export megatron --plan " + interleaved + " --out " + args + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["not_expressed"].empty()) << j["not_expressed"];
  EXPECT_FALSE(j.contains("closest"));
  const int tp = j["tensor_parallel"], pp = j["pipeline_parallel"], dp = j["data_parallel"];
  EXPECT_EQ(tp * pp * dp, 8);
  // tiny-llama: the embedding, four decoder layers, the head; the stages in order.
  std::string layout = j["layout"];
  EXPECT_EQ(layout.front(), 'E');
  EXPECT_EQ(layout.back(), 'L');
  EXPECT_EQ(std::count(layout.begin(), layout.end(), '|') + 1, pp * j["virtual_stages"].get<int>());
  std::vector<int> ranks = j["rank_devices"];
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  const std::string line = read_file(args);
  EXPECT_NE(line.find("--pipeline-model-parallel-layout '" + layout + "'"), std::string::npos)
      << line;
  EXPECT_NE(line.find("--num-layers 4 "), std::string::npos) << line;
  EXPECT_NE(line.find("--global-batch-size 32"), std::string::npos) << line;

  // A zero-bubble order on one type of device: only the order is not Megatron's.
  const std::string zb = plan_file(
      "zb.json", "--model tiny-llama --cluster h100x8 --strategy zb-h1 --global-batch 32");
  r = run_motley("export megatron --plan " + zb + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["not_expressed"].size(), 1u) << j["not_expressed"];
  EXPECT_NE(j["not_expressed"][0].get<std::string>().find("schedule 'zb-h1'"), std::string::npos);
  // The closest plan keeps the plan's layout, ranks and arguments; only the order is 1F1B's.
  EXPECT_EQ(j["closest"]["strategy"], "megatron-layout");
  EXPECT_TRUE(j["closest"]["not_expressed"].empty());
  EXPECT_EQ(j["closest"]["arguments"], j["arguments"]);
  EXPECT_EQ(j["closest"]["rank_devices"], j["rank_devices"]);
  EXPECT_GT(j["closest"]["iteration_time_s"].get<double>(), 0.0);

  // motley's plan on mixed devices, in words.
  const std::string mixed = plan_file("mixed.json", "--model tiny-llama --cluster h100-a100");
  r = run_motley("export megatron --plan " + mixed);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("not expressed: mixed device types (A100-80GB, H100-SXM)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("the closest Megatron plan, megatron-"), std::string::npos) << r.out;

  // Six single-device nodes and five sequences: motley's replicas take one and two of them,
  // and no TP x PP x DP of the six devices that Megatron runs divides the batch. The export
  // still writes the arguments and says why there is no closest plan.
  const std::string singles = scratch.file("singles.yaml");
  std::ofstream(singles) << "name: six-singles\n"
                            "network: {kind: infiniband, bandwidth_GBps: 50, latency_us: 2}\n"
                            "nodes:\n"
                            "  - name: h100\n"
                            "    count: 6\n"
                            "    devices: {type: H100-SXM, count: 1}\n";
  const std::string uneven =
      plan_file("uneven.json", "--model tiny-llama --cluster " + singles + " --global-batch 5");
  r = run_motley("export megatron --plan " + uneven + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["not_expressed"].empty());
  EXPECT_FALSE(j.contains("closest"));
  const std::string why = j["closest_error"];
  EXPECT_NE(why.find("strategy 'megatron-1f1b' found no plan"), std::string::npos) << why;
  EXPECT_NE(why.find("strategy 'megatron-interleaved' found no plan"), std::string::npos) << why;

  // A hybrid model is Megatron's MambaModel: its layers as --hybrid-override-pattern (tiny-hybrid:
  // Mamba, MLP, attention, MLP, Mamba, MLP), no layout, and the split said when it is not even.
  const std::string hybrid =
      plan_file("hybrid.json", "--model tiny-hybrid --cluster h100x8 --strategy megatron-1f1b");
  r = run_motley("export megatron --plan " + hybrid + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layout"], "");
  EXPECT_EQ(j["hybrid_pattern"], "M-*-M-");
  const std::string hybrid_args = nlohmann::json(j["arguments"]).dump();
  EXPECT_NE(hybrid_args.find("\"--hybrid-override-pattern\",\"M-*-M-\",\"--num-layers\",\"6\""),
            std::string::npos)
      << hybrid_args;
  int split = 0;
  for (const auto& why : j["not_expressed"]) {
    const std::string text = why.get<std::string>();
    EXPECT_EQ(text.find("kind 'mamba'"), std::string::npos) << text;
    split += text.find("Megatron's hybrid model gives every pipeline stage the same number") !=
             std::string::npos;
  }
  // Six pattern layers over the plan's stages: said exactly when they are not split evenly.
  int stages = 0;
  bool even = true;
  {
    const nlohmann::json plan = nlohmann::json::parse(read_file(hybrid));
    stages = static_cast<int>(plan["stages"].size());
    for (const auto& s : plan["stages"]) {
      int n = 0;
      for (int l = s["layers"][0]; l < s["layers"][1]; ++l) n += l >= 1 && l <= 6;
      even = even && n * stages == 6;
    }
  }
  EXPECT_EQ(split, even ? 0 : 1) << j["not_expressed"];

  expect_bad_input("export megatron --plan " + scratch.file("missing.json"), {"missing.json"});
}

// The sbatch script, run by bash with stand-ins for scontrol and srun: every plan device gets
// one task, on the host that plays its node, with the rank the executor gives that device.
TEST(CliTest, SlurmScriptGivesEveryPlanDeviceItsRank) {
  const TempDir scratch("cli_slurm");
  const std::string plan = scratch.file("mixed.json");
  ASSERT_EQ(run_motley("plan --model tiny-llama --cluster h100-a100 --quiet --max-plans 100 "
                       "--out " +
                       plan)
                .exit_code,
            0);
  const std::string job = scratch.file("job.sbatch");
  RunResult r = run_motley("export slurm --plan " + plan +
                           " --partition gpu --time 01:00:00 --gres A100-80GB=a100_80g --out " +
                           job + " -- run --plan " + plan + " --steps 10");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string text = read_file(job);
  EXPECT_NE(text.find("#SBATCH --gres=gpu:h100:8\n"), std::string::npos) << text;
  EXPECT_NE(text.find("#SBATCH --gres=gpu:a100_80g:8\n"), std::string::npos) << text;
  EXPECT_NE(text.find("#SBATCH hetjob\n"), std::string::npos);
  EXPECT_NE(text.find("#SBATCH --partition=gpu\n"), std::string::npos);

  // Stand-ins: scontrol expands a comma list; srun runs the task once per FAKE_TASKS entry.
  const std::string bin = scratch.file("bin");
  std::filesystem::create_directories(bin);
  auto script = [&](const std::string& name, const std::string& body) {
    std::ofstream(bin + "/" + name) << "#!/bin/bash\n" << body;
    std::filesystem::permissions(bin + "/" + name, std::filesystem::perms::owner_all);
  };
  script("scontrol", "[[ $1 == show && $2 == hostnames ]] && tr ',' '\\n' <<< \"$3\"\n");
  script("srun",
         "while [[ $1 == --* ]]; do shift; done\n"
         "for t in $FAKE_TASKS; do SLURMD_NODENAME=${t%:*} SLURM_LOCALID=${t#*:} \"$@\" || exit 1; "
         "done\n");
  script("fake-motley",
         "echo \"$SLURMD_NODENAME $SLURM_LOCALID $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE "
         "$MOTLEY_LOCAL_DEVICE $MASTER_ADDR:$MASTER_PORT $*\"\n");
  std::string tasks;
  for (const char* host : {"gpu-a", "gpu-b", "gpu-c", "gpu-d"}) {
    for (int k = 0; k < 8; ++k) tasks += std::string(host) + ":" + std::to_string(k) + " ";
  }
  const std::string env = "PATH=" + bin + ":$PATH MOTLEY=fake-motley FAKE_TASKS='" + tasks +
                          "' SLURM_JOB_NODELIST_HET_GROUP_0=gpu-a,gpu-b "
                          "SLURM_JOB_NODELIST_HET_GROUP_1=gpu-c,gpu-d";
  RunResult ran = run_binary("bash", job, RunOptions{"", env});
  ASSERT_EQ(ran.exit_code, 0) << ran.out << ran.err;

  // The executor's ranks: replicas, groups, devices in order; device d of h100-a100 is on node
  // d / 8 (played by the (d / 8)-th host) at index d % 8.
  const auto p = nlohmann::json::parse(read_file(plan));
  std::vector<int> rank_device;
  for (const auto& rep : p["replicas"]) {
    for (const auto& g : rep["groups"]) {
      for (const auto& d : g["devices"]) rank_device.push_back(d.get<int>());
    }
  }
  const std::vector<std::string> hosts = {"gpu-a", "gpu-b", "gpu-c", "gpu-d"};
  std::istringstream lines(ran.out);
  std::string host, line;
  int local = 0, rank = 0, world = 0, local_rank = 0, local_world = 0, device = 0;
  std::set<int> seen;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string master, command;
    in >> host >> local >> rank >> world >> local_rank >> local_world >> device >> master;
    std::getline(in, command);
    ASSERT_GE(rank, 0);
    ASSERT_LT(rank, static_cast<int>(rank_device.size())) << line;
    EXPECT_TRUE(seen.insert(rank).second) << "rank twice: " << line;
    EXPECT_EQ(host, hosts[rank_device[rank] / 8]) << line;
    EXPECT_EQ(device, rank_device[rank] % 8) << line;
    EXPECT_EQ(world, 32);
    EXPECT_EQ(local_rank, local);
    EXPECT_EQ(master, "gpu-a:29500");
    EXPECT_EQ(command, " run --plan " + plan + " --steps 10");
  }
  EXPECT_EQ(seen.size(), 32u);

  // Slurm gave a component fewer hosts than the plan has nodes: exit 2, saying so.
  RunResult short_job = run_binary(
      "bash", job,
      RunOptions{"", "PATH=" + bin +
                         ":$PATH MOTLEY=fake-motley SLURM_JOB_NODELIST_HET_GROUP_0=gpu-a "
                         "SLURM_JOB_NODELIST_HET_GROUP_1=gpu-c,gpu-d"});
  EXPECT_EQ(short_job.exit_code, 2);
  EXPECT_NE(short_job.err.find("component 0 has 1 hosts, the plan 2"), std::string::npos)
      << short_job.err;
  expect_bad_input("export slurm --plan " + plan + " --gres H100", {"--gres", "TYPE=GRES_NAME"});
}

// motley detect on tool outputs recorded on other nodes (tests/data/detect/*, the layout
// scripts/collect-node.sh writes).
TEST(CliTest, DetectDescribesRecordedNodes) {
  const TempDir scratch("cli_detect");
  const std::string root = std::string(MOTLEY_TEST_DATA_DIR) + "/detect/";
  const std::string dgx = scratch.file("dgx.yaml");
  RunResult r = run_motley("detect --from " + root + "dgx-h100 --out " + dgx);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("8 x NVIDIA H100 80GB HBM3 (79.6 GiB) -> H100-SXM"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("network: InfiniBand, 8 NICs of 50.0 GB/s"), std::string::npos) << r.out;
  RunResult shown = run_motley("cluster show " + dgx + " --json");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  auto c = nlohmann::json::parse(shown.out);
  EXPECT_EQ(c["devices"].size(), 8u) << shown.out;
  EXPECT_EQ(c["devices"][0]["type"], "H100-SXM");

  r = run_motley("detect --json --from " + root + "pcie-a100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["nvlink"], false);
  EXPECT_EQ(j["cluster"]["nodes"][0]["interconnect"]["kind"], "pcie");
  // Its topology pairs the GPUs on two PCIe switches (PIX), across two sockets (SYS).
  EXPECT_EQ(j["devices_per_pcie_switch"], 2);
  EXPECT_EQ(j["cluster"]["nodes"][0]["devices_per_pcie_switch"], 2);
  EXPECT_EQ(j["cluster"]["nodes"][0]["devices"]["type"], "A100-40GB");
  EXPECT_EQ(j["nic_count"], 2);

  r = run_motley("detect --json --from " + root + "mi300x");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["source"], "rocm-smi");
  EXPECT_EQ(j["xgmi"], true);
  EXPECT_EQ(j["cluster"]["nodes"][0]["devices"]["type"], "MI300X");
  EXPECT_EQ(j["cluster"]["nodes"][0]["interconnect"]["kind"], "xgmi");

  // A CPU-only host is described as such; it makes no cluster file.
  r = run_motley("detect --from " + root + "cpu-only");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("host build-box: Intel(R) Xeon(R) Platinum 8488C, 2 threads"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("accelerators: none"), std::string::npos);
  const std::string none = scratch.file("none.yaml");
  expect_bad_input("detect --from " + root + "cpu-only --out " + none, {"--out", "no accelerator"});
  EXPECT_FALSE(std::filesystem::exists(none));
  r = run_motley("detect --from " + root + "driverless");
  EXPECT_NE(r.out.find("lspci lists 2 accelerators, but neither nvidia-smi nor rocm-smi"),
            std::string::npos)
      << r.out;
  expect_bad_input("detect --from " + root + "unknown-gpu", {"'NVIDIA B200'", "catalog"});
  expect_bad_input("detect --from " + root + "nowhere", {"--from", "not a directory"});
}

// Kubernetes manifests: a PyTorchJob on nodes of one kind, a JobSet on mixed nodes; the start
// script every pod runs, run by bash with a stand-in for motley, gives every plan device one
// process with the executor's rank, and the pod playing rank 0's node is the rendezvous.
TEST(CliTest, K8sManifestsGiveEveryPlanDeviceItsRank) {
  const TempDir scratch("cli_k8s");
  auto plan_of = [&](const std::string& name, const std::string& args) {
    const std::string path = scratch.file(name);
    EXPECT_EQ(run_motley("plan --quiet --max-plans 100 --out " + path + " " + args).exit_code, 0);
    return path;
  };
  auto docs_of = [](const std::string& text) {
    std::vector<nlohmann::json> out;
    size_t at = 0;
    while ((at = text.find("---\n", at)) != std::string::npos) {
      at += 4;
      const size_t next = text.find("---\n", at);
      out.push_back(nlohmann::json::parse(text.substr(at, next - at)));
    }
    return out;
  };
  const std::string bin = scratch.file("bin");
  std::filesystem::create_directories(bin);
  std::ofstream(bin + "/fake-motley") << "#!/bin/bash\necho \"$RANK $LOCAL_RANK $WORLD_SIZE "
                                         "$MOTLEY_LOCAL_DEVICE $*\"\n";
  std::filesystem::permissions(bin + "/fake-motley", std::filesystem::perms::owner_all);

  // One kind of node: a PyTorchJob, Master and Worker.
  const std::string same = plan_of("same.json", "--model tiny-llama --cluster h100x16");
  RunResult r = run_motley("export k8s --plan " + same + " --image reg/motley:1 --name train");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<nlohmann::json> docs = docs_of(r.out);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0]["kind"], "ConfigMap");
  EXPECT_EQ(docs[0]["data"]["plan.json"].get<std::string>(), read_file(same));
  EXPECT_EQ(docs[1]["kind"], "PyTorchJob");
  EXPECT_EQ(docs[1]["apiVersion"], "kubeflow.org/v1");
  const auto& replicas = docs[1]["spec"]["pytorchReplicaSpecs"];
  EXPECT_EQ(replicas["Master"]["replicas"], 1);
  EXPECT_EQ(replicas["Worker"]["replicas"], 1);
  const auto& pod = replicas["Worker"]["template"]["spec"];
  EXPECT_EQ(pod["containers"][0]["name"], "pytorch");
  EXPECT_EQ(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], 8);
  EXPECT_EQ(pod["nodeSelector"]["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
  const std::string start = scratch.file("start.sh");
  std::ofstream(start) << docs[0]["data"]["start.sh"].get<std::string>();
  std::set<int> ranks;
  for (int podrank = 0; podrank < 2; ++podrank) {
    RunResult ran = run_binary(
        "bash", start + " run --plan /etc/motley/plan.json",
        RunOptions{"", "MOTLEY=" + bin + "/fake-motley RANK=" + std::to_string(podrank)});
    ASSERT_EQ(ran.exit_code, 0) << "stdout:\n" << ran.out << "stderr:\n" << ran.err;
    std::istringstream lines(ran.out);
    std::string line;
    std::getline(lines, line);  // "motley: pod ... plays plan node ..."
    while (std::getline(lines, line)) {
      std::istringstream in(line);
      int rank = -1, local = -1, world = 0, device = -1;
      in >> rank >> local >> world >> device;
      EXPECT_EQ(world, 16);
      EXPECT_TRUE(ranks.insert(rank).second) << line;
      if (rank == 0) {
        EXPECT_EQ(podrank, 0) << "rank 0 must run in the Master pod";
      }
    }
  }
  EXPECT_EQ(ranks.size(), 16u);
  // A rank that fails fails its pod, and the pod's other ranks are stopped.
  std::ofstream(bin + "/failing-motley")
      << "#!/bin/bash\nif [ \"$RANK\" = 3 ]; then exit 3; fi\nexec sleep 600\n";
  std::filesystem::permissions(bin + "/failing-motley", std::filesystem::perms::owner_all);
  RunResult failed = run_binary("bash", start + " run",
                                RunOptions{"", "MOTLEY=" + bin + "/failing-motley RANK=0"});
  EXPECT_EQ(failed.exit_code, 1) << "stdout:\n" << failed.out << "stderr:\n" << failed.err;

  // Mixed nodes on spot capacity: a JobSet, one replicated job per kind, spot tolerations.
  const std::string mixed = plan_of("mixed.json", "--model tiny-llama --cluster spot-fleet");
  r = run_motley("export k8s --plan " + mixed +
                 " --image reg/motley:1 --checkpoint-claim ckpt -- run --plan "
                 "/etc/motley/plan.json --checkpoint-dir /checkpoints");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  docs = docs_of(r.out);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[1]["kind"], "JobSet");
  const auto& jobs = docs[1]["spec"]["replicatedJobs"];
  EXPECT_GE(jobs.size(), 2u);
  bool tolerates = false;
  std::set<int> mixed_ranks;
  std::ofstream(start) << docs[0]["data"]["start.sh"].get<std::string>();
  for (const auto& job : jobs) {
    const auto& spec = job["template"]["spec"]["template"]["spec"];
    tolerates = tolerates || spec.contains("tolerations");
    EXPECT_EQ(spec["volumes"].back()["persistentVolumeClaim"]["claimName"], "ckpt");
    for (int index = 0; index < job["template"]["spec"]["completions"].get<int>(); ++index) {
      RunResult ran = run_binary(
          "bash", start + " run",
          RunOptions{"", "MOTLEY=" + bin +
                             "/fake-motley MOTLEY_NODE_KIND=" + job["name"].get<std::string>() +
                             " JOB_COMPLETION_INDEX=" + std::to_string(index)});
      ASSERT_EQ(ran.exit_code, 0) << "stdout:\n" << ran.out << "stderr:\n" << ran.err;
      std::istringstream lines(ran.out);
      std::string line;
      std::getline(lines, line);
      while (std::getline(lines, line)) {
        std::istringstream in(line);
        int rank = -1;
        in >> rank;
        EXPECT_TRUE(mixed_ranks.insert(rank).second) << line;
      }
    }
  }
  EXPECT_TRUE(tolerates);
  const auto p = nlohmann::json::parse(read_file(mixed));
  size_t devices = 0;
  for (const auto& rep : p["replicas"]) {
    for (const auto& g : rep["groups"]) devices += g["devices"].size();
  }
  EXPECT_EQ(mixed_ranks.size(), devices);
  EXPECT_EQ(*mixed_ranks.rbegin(), static_cast<int>(devices) - 1);
  // The rendezvous is the pod of the node holding rank 0.
  const std::string master =
      jobs[0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"][3]["value"];
  EXPECT_EQ(master.rfind("motley-", 0), 0u) << master;

  // The NCCL / RCCL environment a cluster needs, after the manifests' own; NCCL_DEBUG replaced.
  r = run_motley("export k8s --plan " + same +
                 " --image reg/motley:1 --env NCCL_SOCKET_IFNAME=eth0 --env NCCL_DEBUG=INFO "
                 "--env NCCL_IB_HCA=mlx5_0 --env NCCL_SOCKET_IFNAME=ib0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto env = docs_of(r.out)[1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
                                 ["containers"][0]["env"];
  std::vector<std::string> pairs;
  for (const auto& e : env) {
    pairs.push_back(e["name"].get<std::string>() + "=" + e["value"].get<std::string>());
  }
  EXPECT_EQ(pairs, (std::vector<std::string>{"MASTER_PORT=29500", "NCCL_DEBUG=INFO",
                                             "MOTLEY_NODE_KIND=h100-sxm", "NCCL_SOCKET_IFNAME=ib0",
                                             "NCCL_IB_HCA=mlx5_0"}));

  expect_bad_input("export k8s --plan " + same, {"--image"});
  expect_bad_input("export k8s --plan " + same + " --image x --node-label H100", {"--node-label"});
  expect_bad_input("export k8s --plan " + same + " --image x --env NCCL_DEBUG",
                   {"--env: expected NAME=VALUE", "'NCCL_DEBUG'"});
  expect_bad_input("export k8s --plan " + same + " --image x --env 1X=2", {"--env", "'1X=2'"});
  expect_bad_input("export k8s --plan " + same + " --image x --env MASTER_PORT=1",
                   {"--env: MASTER_PORT is set by the manifests"});
}

TEST(CliTest, PlanAndSimulateUseTheSameSoftwareStack) {
  const TempDir scratch("cli_plan_stack");
  for (const std::string stack : {"", " --stack megatron-lm-2022"}) {
    SCOPED_TRACE(stack);
    const std::string file = scratch.file("plan.json");
    const std::string trace = scratch.file("trace.json");
    RunResult planned = run_motley(
        "plan --model llama-3-8b --cluster h100-a100 --quiet --json "
        "--max-plans 80 --out " +
        file + " --trace " + trace + stack);
    ASSERT_EQ(planned.exit_code, 0) << planned.err;
    const double reported = nlohmann::json::parse(planned.out)["iteration_time_s"].get<double>();
    // The file records the stack, so it prices alike without the flag.
    EXPECT_EQ(nlohmann::json::parse(read_file(file))["software_stack"]["name"],
              stack.empty() ? "megatron-core" : "megatron-lm-2022");
    RunResult simulated = run_motley("simulate --plan " + file + " --json");
    ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
    EXPECT_DOUBLE_EQ(nlohmann::json::parse(simulated.out)["iteration_time_s"].get<double>(),
                     reported);
    // The timeline `plan` draws (its trace, SVG and per-device table) is of the same pricing.
    double last_end_us = 0;
    const nlohmann::json events = nlohmann::json::parse(read_file(trace))["traceEvents"];
    for (const auto& e : events) {
      if (e.contains("dur")) {
        last_end_us = std::max(last_end_us, e["ts"].get<double>() + e["dur"].get<double>());
      }
    }
    EXPECT_NEAR(last_end_us * 1e-6, reported, 1e-9 * reported);
  }
  expect_bad_input("plan --model tiny-llama --stack no-such-stack --quiet",
                   {"--stack: ", "no-such-stack"});
}

TEST(CliTest, CompareListsEveryStrategyAboveTheLowerBound) {
  RunResult r = run_motley("compare --model tiny-llama --cluster h100-a100 --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  double bound = j["lower_bound_s"].get<double>();
  ASSERT_GT(bound, 0.0);
  std::vector<std::string> names;
  for (const auto& s : j["strategies"]) {
    names.push_back(s["name"].get<std::string>());
    if (!s["feasible"].get<bool>()) continue;
    EXPECT_GE(s["iteration_time_s"].get<double>(), bound) << s["name"];
    EXPECT_GT(s["throughput_tokens_per_s"].get<double>(), 0.0);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"motley", "megatron-1f1b", "megatron-tuned",
                                             "megatron-interleaved", "zb-h1", "zb-v", "metis",
                                             "partition-only", "placement-only", "schedule-only"}));
}

// A cluster with a spot node: the plan prices interruptions (goodput, Daly's interval) and
// the budget and deadline constrain it.
TEST(CliTest, PlanPricesInterruptionsUnderBudgetAndDeadline) {
  const std::string base = "plan --model tiny-llama --cluster " +
                           data("../cluster/spot-and-on-demand.yaml") +
                           " --max-plans 200 --quiet --json";
  RunResult r = run_motley(base + " --objective cost");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& p = j["preemption"];
  const double t = j["iteration_time_s"].get<double>();
  if (p["interruptible_nodes"].get<int>() > 0) {
    EXPECT_LT(p["goodput"].get<double>(), 1.0);
    EXPECT_GT(p["goodput"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(p["checkpoint_interval_s"].get<double>(),
                     t * p["checkpoint_interval_iterations"].get<double>());
    // Two hours between preemptions of the one spot node.
    EXPECT_DOUBLE_EQ(p["mean_time_between_interruptions_s"].get<double>(), 7200.0);
    EXPECT_LT(j["dollars_per_million_tokens"].get<double>(),
              j["on_demand_dollars_per_million_tokens"].get<double>());
  } else {
    EXPECT_EQ(p["goodput"].get<double>(), 1.0);
  }

  // simulate prices the plan file exactly as plan priced it.
  const TempDir scratch("cli_preemption");
  const std::string written = scratch.file("spot-plan.json");
  RunResult planned = run_motley(base + " --objective cost --out " + written);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  RunResult simulated = run_motley("simulate --plan " + written + " --json");
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  auto pj = nlohmann::json::parse(planned.out), sj = nlohmann::json::parse(simulated.out);
  EXPECT_NEAR(sj["preemption"]["goodput"].get<double>(), pj["preemption"]["goodput"].get<double>(),
              1e-12);
  EXPECT_EQ(sj["preemption"]["checkpoint_interval_iterations"],
            pj["preemption"]["checkpoint_interval_iterations"]);
  EXPECT_NEAR(sj["dollars_per_million_tokens"].get<double>() /
                  pj["dollars_per_million_tokens"].get<double>(),
              1.0, 1e-9);
  EXPECT_NEAR(sj["on_demand_dollars_per_million_tokens"].get<double>() /
                  pj["on_demand_dollars_per_million_tokens"].get<double>(),
              1.0, 1e-9);

  // $5 an hour leaves the spot A100s alone.
  RunResult cheap = run_motley(base + " --budget 5");
  ASSERT_EQ(cheap.exit_code, 0) << cheap.err;
  auto c = nlohmann::json::parse(cheap.out);
  EXPECT_EQ(c["preemption"]["interruptible_nodes"].get<int>(), 1);
  RunResult none = run_motley(base + " --budget 0.5");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("budget: its devices cost $"), std::string::npos) << none.err;

  // A deadline no plan meets names the nearest plan's expected time.
  RunResult late = run_motley(base + " --deadline 1 --train-tokens 1e15");
  EXPECT_EQ(late.exit_code, 2);
  EXPECT_NE(late.err.find("past the deadline of 1.0 h"), std::string::npos) << late.err;

  RunResult text =
      run_motley("plan --model tiny-llama --cluster " + data("../cluster/spot-and-on-demand.yaml") +
                 " --max-plans 200 --quiet --budget 5");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("interruptions: 1 node can be interrupted, one interruption every 2.0 h"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("Daly's interval"), std::string::npos);
}

TEST(CliBadInputTest, InvalidPlansExitWithTheValidatorsMessage) {
  expect_bad_input("simulate --plan " + data("deadlock-plan.json"),
                   {"deadlock-plan.json", "deadlock", "device group 1", "1B0"});
  expect_bad_input("simulate --plan " + data("missing-action-plan.json"),
                   {"missing-action-plan.json", "stage 3, micro-batch 7", "3B7"});
  // Uniform stages of llama-3-8b at 32,768 tokens: the first device's warm-up does not fit.
  expect_bad_input(
      "simulate --schedule interleaved --model llama-3-8b --cluster h100x16 --micro-batches 32 "
      "--seq-len 32768",
      {"device 0 (H100-SXM) needs", "GiB", "but has 80 GiB"});
  expect_bad_input("simulate --schedule 2f2b --model tiny-llama", {"--schedule", "1f1b", "zb-v"});
  expect_bad_input("simulate --model tiny-llama", {"--plan", "--schedule"});
  expect_bad_input("plan --strategy fastest --model tiny-llama", {"--strategy", "megatron-1f1b"});
  expect_bad_input("compare --objective speed --model tiny-llama", {"--objective", "cost"});
  expect_bad_input("plan --model tiny-llama --deadline 24", {"--deadline", "--train-tokens"});
  expect_bad_input("compare --model tiny-llama --train-tokens 1e12", {"--train-tokens"});
  expect_bad_input("plan --model tiny-llama --budget -3", {"--budget"});
}

// Every file under examples/ is run, and its output must equal the golden transcript beside it
// (<file>.expected.txt); each example plan is also exported for every engine, each export beside
// it as <file>.<engine>.expected.txt. Commands run in the example's directory with its bare name,
// so transcripts do not depend on where the sources are. MOTLEY_UPDATE_GOLDEN=1 rewrites the
// transcripts instead.
TEST(ExamplesTest, EveryExampleMatchesItsGoldenTranscript) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(MOTLEY_SOURCE_DIR) / "examples";
  const bool update = std::getenv("MOTLEY_UPDATE_GOLDEN") != nullptr;
  // (transcript suffix, command before the plan, after it): the exports of a plan.
  const std::vector<std::array<std::string, 3>> exports = {
      {".megatron", "export megatron --plan ", ""},
      {".torch-pp", "export torch-pp --plan ", ""},
      {".slurm", "export slurm --plan ", ""},
      {".k8s", "export k8s --plan ", " --image registry.example.com/motley:1"}};
  const std::string kGolden = ".expected.txt";
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  auto check = [&](const fs::path& dir, const std::string& command, const std::string& golden) {
    RunResult r = run_binary(MOTLEY_BINARY, command, RunOptions{dir.string(), ""});
    ASSERT_EQ(r.exit_code, 0) << command << "\n" << r.err;
    if (update) {
      std::ofstream(golden) << r.out;
    } else {
      EXPECT_EQ(r.out, read_file(golden)) << "golden transcript differs: " << golden;
    }
  };
  int checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    const fs::path p = entry.path();
    const std::string name = p.filename().string();
    if (ends_with(name, kGolden)) {
      std::string input = p.string().substr(0, p.string().size() - kGolden.size());
      for (const auto& e : exports) {
        if (ends_with(input, e[0])) input.resize(input.size() - e[0].size());
      }
      EXPECT_TRUE(fs::exists(input)) << "golden transcript without its example: " << p;
      continue;
    }
    const fs::path dir = p.parent_path();
    if (dir.filename() == "plans") {
      check(dir, "simulate --plan " + name, p.string() + kGolden);
      for (const auto& e : exports) {
        check(dir, e[1] + name + e[2], p.string() + e[0] + kGolden);
      }
    } else if (dir.filename() == "profiles") {
      check(dir, "model show " + name, p.string() + kGolden);
    } else {
      ADD_FAILURE() << "no test runs " << p;
      continue;
    }
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

// Two runs of llama-3-8b on eight H100s with their layouts; `published` scales what motley
// predicts, so the fit has a known answer: a slower stack.
std::string calibration_cases(double first_s, double second_s) {
  nlohmann::json c = {{"format", "calibration-cases/1"},
                      {"cases",
                       {{{"id", "tp8"},
                         {"model", "llama-3-8b"},
                         {"cluster", "h100x8"},
                         {"tp", 8},
                         {"pp", 1},
                         {"dp", 1},
                         {"global_batch", 4},
                         {"micro_batch_size", 1},
                         {"seq_len", 2048},
                         {"recompute", "full"},
                         {"published", first_s}},
                        {{"id", "tp4-pp2"},
                         {"model", "llama-3-8b"},
                         {"cluster", "h100x8"},
                         {"tp", 4},
                         {"pp", 2},
                         {"dp", 1},
                         {"global_batch", 8},
                         {"micro_batch_size", 1},
                         {"seq_len", 2048},
                         {"schedule", "1f1b"},
                         {"recompute", "selective"},
                         {"published", second_s}}}}};
  return c.dump();
}

TEST(CliTest, CalibrateFitsAStackAndSimulateUsesIt) {
  TempDir dir("calibrate-fit");
  const std::string cases = dir.path() + "/cases.json";
  { std::ofstream(cases) << calibration_cases(1.0, 1.0); }
  RunResult r = run_motley("calibrate --cases " + cases + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json before = nlohmann::json::parse(r.out);
  ASSERT_EQ(before["cases"].size(), 2u);
  const double first = before["cases"][0]["predicted_s"].get<double>();
  const double second = before["cases"][1]["predicted_s"].get<double>();
  ASSERT_GT(first, 0);
  ASSERT_GT(second, 0);
  // Measured 30 % slower than predicted: the fit must slow the stack down to meet them.
  { std::ofstream(cases) << calibration_cases(1.3 * first, 1.3 * second); }
  const std::string out = dir.path() + "/cal.json";
  r = run_motley("calibrate --cases " + cases +
                 " --fit gemm_efficiency,memory_efficiency --json --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json fitted = nlohmann::json::parse(r.out);
  EXPECT_NEAR(fitted["start_mean_abs_error_pct"].get<double>(), 100 * (1 - 1 / 1.3), 0.01);
  EXPECT_LT(fitted["mean_abs_error_pct"].get<double>(), 5.0);
  nlohmann::json file = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(file["format"], "motley.calibration/1");
  EXPECT_EQ(file["base"], "megatron-core");
  EXPECT_EQ(file["fitted"].size(), 2u);
  EXPECT_EQ(file["stack"]["gradient_bucket_parameters"].get<double>(), 40e6);
  EXPECT_EQ(file["stack"]["gradient_bucket_parameters_per_replica"].get<double>(), 1e6);

  const std::string layout =
      " --model llama-3-8b --cluster h100x8 --schedule 1f1b --stages 1 --tensor-parallel 8"
      " --micro-batches 4 --seq-len 2048 --recompute full --json";
  RunResult base = run_motley("simulate" + layout);
  RunResult calibrated = run_motley("simulate" + layout + " --calibration " + out);
  ASSERT_EQ(base.exit_code, 0) << base.err;
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.err;
  const double t0 = nlohmann::json::parse(base.out)["iteration_time_s"].get<double>();
  const double t1 = nlohmann::json::parse(calibrated.out)["iteration_time_s"].get<double>();
  EXPECT_GT(t1, 1.15 * t0);

  // A plan priced with the calibration records its stack: the file alone prices it so, and a
  // flag still overrides what it records.
  const std::string plan = dir.path() + "/calibrated-plan.json";
  ASSERT_EQ(run_motley("simulate" + layout + " --calibration " + out + " --out " + plan).exit_code,
            0);
  RunResult recorded = run_motley("simulate --plan " + plan + " --json");
  ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(recorded.out)["iteration_time_s"].get<double>(), t1);
  RunResult overridden = run_motley("simulate --plan " + plan + " --json --stack megatron-core");
  ASSERT_EQ(overridden.exit_code, 0) << overridden.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(overridden.out)["iteration_time_s"].get<double>(), t0);

  // The recorded stack is checked as a calibration file's is.
  nlohmann::json edited = nlohmann::json::parse(read_file(plan));
  edited["software_stack"]["gemm_efficiency"] = 5;
  const std::string bad = dir.path() + "/bad-stack-plan.json";
  { std::ofstream(bad) << edited.dump(); }
  expect_bad_input("simulate --plan " + bad, {bad, "software_stack.gemm_efficiency", "0.3 to 1.1"});
  edited["software_stack"] = "megatron-core";
  { std::ofstream(bad) << edited.dump(); }
  expect_bad_input("simulate --plan " + bad, {bad, "software_stack", "object"});
}

// A case's recompute_layers is Megatron's --recompute-num-layers: priced as simulate prices the
// same layout with --recompute-layers, and between no recompute and recompute of every layer.
TEST(CliTest, CalibrateCaseRecomputesTheFirstLayersOfEachStage) {
  TempDir dir("calibrate-recompute-layers");
  const std::string cases = dir.path() + "/cases.json";
  auto predicted = [&](const std::string& recompute, int layers) {
    nlohmann::json c = nlohmann::json::parse(calibration_cases(1.0, 1.0));
    c["cases"].erase(0);
    c["cases"][0]["recompute"] = recompute;
    if (layers > 0) c["cases"][0]["recompute_layers"] = layers;
    { std::ofstream(cases) << c.dump(); }
    RunResult r = run_motley("calibrate --cases " + cases + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["cases"][0]["predicted_s"].get<double>()
                            : 0.0;
  };
  const double some = predicted("none", 5);
  const double none = predicted("none", 0);
  const double every = predicted("full", 0);
  EXPECT_GT(some, none);
  EXPECT_LT(some, every);
  RunResult sim = run_motley(
      "simulate --model llama-3-8b --cluster h100x8 --schedule 1f1b --stages 2 "
      "--tensor-parallel 4 --micro-batches 8 --seq-len 2048 --recompute-layers 5 --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(sim.out)["iteration_time_s"].get<double>(), some);
}

// A case's cp is Megatron's --context-parallel-size: dp replicas of cp devices each, priced as
// simulate prices dp x cp replicas in context groups of cp; the devices it needs count cp.
TEST(CliTest, CalibrateCaseSplitsSequencesOverContextGroups) {
  TempDir dir("calibrate-context");
  const std::string cases = dir.path() + "/cases.json";
  nlohmann::json c = nlohmann::json::parse(calibration_cases(1.0, 1.0));
  c["cases"].erase(0);
  c["cases"][0]["tp"] = 2;
  c["cases"][0]["cp"] = 2;
  c["cases"][0]["global_batch"] = 4;
  c["cases"][0]["recompute"] = "none";
  { std::ofstream(cases) << c.dump(); }
  RunResult r = run_motley("calibrate --cases " + cases + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double predicted = nlohmann::json::parse(r.out)["cases"][0]["predicted_s"].get<double>();
  RunResult sim = run_motley(
      "simulate --model llama-3-8b --cluster h100x8 --schedule 1f1b --stages 2 "
      "--tensor-parallel 2 --data-parallel 2 --context-parallel 2 --micro-batches 4 "
      "--seq-len 2048 --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(sim.out)["iteration_time_s"].get<double>(), predicted);
  c["cases"][0]["dp"] = 2;  // 2 x 2 x 2 x 2 = 16 devices on 8
  { std::ofstream(cases) << c.dump(); }
  expect_bad_input("calibrate --cases " + cases,
                   {cases, "cases[0].gpus", "tp x pp x cp x dp = 16 devices, the cluster has 8"});
}

// A case's ep is Megatron's --expert-model-parallel-size: priced as simulate prices the same
// layout with --expert-parallel (all-to-alls added, the experts' state split); a degree that
// does not divide the replicas is refused.
TEST(CliTest, CalibrateCaseSplitsExpertsOverReplicas) {
  TempDir dir("calibrate-experts");
  const std::string cases = dir.path() + "/cases.json";
  auto write_case = [&](int ep) {
    nlohmann::json c = {{"format", "calibration-cases/1"},
                        {"cases",
                         {{{"id", "moe"},
                           {"model", "mixtral-8x7b"},
                           {"cluster", "h100x16"},
                           {"tp", 2},
                           {"pp", 2},
                           {"dp", 4},
                           {"ep", ep},
                           {"global_batch", 16},
                           {"seq_len", 2048},
                           {"recompute", "full"},
                           {"published", 1.0}}}}};
    std::ofstream(cases) << c.dump();
  };
  auto predicted = [&](int ep) {
    write_case(ep);
    RunResult r = run_motley("calibrate --cases " + cases + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["cases"][0]["predicted_s"].get<double>()
                            : 0.0;
  };
  const double split = predicted(4);
  EXPECT_NE(split, predicted(1));
  RunResult sim = run_motley(
      "simulate --model mixtral-8x7b --cluster h100x16 --schedule 1f1b --stages 2 "
      "--tensor-parallel 2 --data-parallel 4 --expert-parallel 4 --micro-batches 4 "
      "--seq-len 2048 --recompute full --json");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(sim.out)["iteration_time_s"].get<double>(), split);
  // In Megatron's rank order the expert groups sit inside a node: simulate with
  // --rank-order megatron prices the case with "rank_order": "megatron" alike.
  write_case(4);
  nlohmann::json c = nlohmann::json::parse(read_file(cases));
  c["cases"][0]["rank_order"] = "megatron";
  { std::ofstream(cases) << c.dump(); }
  RunResult ordered = run_motley("calibrate --cases " + cases + " --json");
  ASSERT_EQ(ordered.exit_code, 0) << ordered.err;
  RunResult sim_ordered = run_motley(
      "simulate --model mixtral-8x7b --cluster h100x16 --schedule 1f1b --stages 2 "
      "--tensor-parallel 2 --data-parallel 4 --expert-parallel 4 --micro-batches 4 "
      "--seq-len 2048 --recompute full --rank-order megatron --json");
  ASSERT_EQ(sim_ordered.exit_code, 0) << sim_ordered.err;
  const double megatron_order =
      nlohmann::json::parse(ordered.out)["cases"][0]["predicted_s"].get<double>();
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(sim_ordered.out)["iteration_time_s"].get<double>(),
                   megatron_order);
  EXPECT_LT(megatron_order, split);  // the all-to-alls on NVLink, not across the nodes
  c["cases"][0]["rank_order"] = "tensor-first";
  { std::ofstream(cases) << c.dump(); }
  expect_bad_input("calibrate --cases " + cases,
                   {cases, "cases[0].rank_order", "\"pipeline\" or \"megatron\""});
  expect_bad_input("simulate --schedule 1f1b --rank-order tensor-first",
                   {"--rank-order", "pipeline or megatron", "tensor-first"});
  write_case(3);
  expect_bad_input("calibrate --cases " + cases,
                   {cases, "cases[0]", "expert_parallel 3 must divide the replica count (4)"});
}

// One layer of llama-3-8b at TP 2, forward and backward under a recompute policy.
nlohmann::json layer_case(const std::string& metric, const std::string& recompute,
                          double published_s) {
  return {{"id", metric + "-" + recompute},
          {"model", "llama-3-8b"},
          {"cluster", "h100x8"},
          {"layer", "layers.3"},
          {"tp", 2},
          {"micro_batch_size", 2},
          {"seq_len", 4096},
          {"recompute", recompute},
          {"metric", metric},
          {"published", published_s}};
}

// Layer cases price one layer's pass: the backward under full recomputation is the backward
// without it plus the forward again; a fit to layers measured 30 % slower finds a slower stack.
TEST(CliTest, CalibrateFitsMeasuredLayerTimes) {
  TempDir dir("calibrate-layers");
  const std::string cases = dir.path() + "/layers.json";
  auto write = [&](double scale, const std::vector<double>& published) {
    nlohmann::json c = {{"format", "calibration-cases/1"},
                        {"cases",
                         {layer_case("layer_forward_s", "none", scale * published[0]),
                          layer_case("layer_backward_s", "none", scale * published[1]),
                          layer_case("layer_backward_s", "full", scale * published[2])}}};
    std::ofstream(cases) << c.dump();
  };
  write(1.0, {1.0, 1.0, 1.0});
  RunResult r = run_motley("calibrate --cases " + cases + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["cases"].size(), 3u);
  const double forward = j["cases"][0]["predicted_s"].get<double>();
  const double backward = j["cases"][1]["predicted_s"].get<double>();
  const double recomputed = j["cases"][2]["predicted_s"].get<double>();
  ASSERT_GT(forward, 0);
  EXPECT_GT(backward, forward);
  EXPECT_NEAR(recomputed, backward + forward, 1e-12 * recomputed);

  write(1.3, {forward, backward, recomputed});
  r = run_motley("calibrate --cases " + cases + " --fit gemm_efficiency,memory_efficiency --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["start_mean_abs_error_pct"].get<double>(), 100 * (1 - 1 / 1.3), 0.01);
  EXPECT_LT(j["mean_abs_error_pct"].get<double>(), 5.0);
  EXPECT_LT(j["fitted"]["gemm_efficiency"].get<double>(), 1.0);

  nlohmann::json bad = {{"format", "calibration-cases/1"},
                        {"cases", {layer_case("layer_forward_s", "none", 1.0)}}};
  bad["cases"][0]["layer"] = "layers.99";
  std::ofstream(cases) << bad.dump();
  expect_bad_input("calibrate --cases " + cases, {cases, "cases[0].layer", "layers.99"});
  bad["cases"][0]["layer"] = "layers.0";
  bad["cases"][0]["pp"] = 2;
  std::ofstream(cases) << bad.dump();
  expect_bad_input("calibrate --cases " + cases, {cases, "cases[0].pp", "unknown field"});
  bad["cases"][0].erase("pp");
  bad["cases"][0]["metric"] = "layer_sideways_s";
  std::ofstream(cases) << bad.dump();
  expect_bad_input("calibrate --cases " + cases, {cases, "cases[0].metric", "layer_forward_s"});
}

TEST(CliTest, CalibrateRefusesBadCasesAndStacks) {
  TempDir dir("calibrate-bad");
  const std::string cases = dir.path() + "/cases.json";
  {
    nlohmann::json c = nlohmann::json::parse(calibration_cases(1.0, 1.0));
    c["cases"][1]["pipeline"] = 2;
    std::ofstream(cases) << c.dump();
  }
  expect_bad_input("calibrate --cases " + cases, {cases, "cases[1].pipeline", "unknown field"});
  {
    nlohmann::json c = nlohmann::json::parse(calibration_cases(1.0, 1.0));
    c["cases"][1]["recompute_layers"] = 3;  // with "recompute": "selective"
    std::ofstream(cases) << c.dump();
  }
  expect_bad_input("calibrate --cases " + cases,
                   {cases, "cases[1].recompute_layers", "\"recompute\": \"none\"", "selective"});
  {
    // A time no run takes: its error would print with hundreds of digits.
    nlohmann::json c = nlohmann::json::parse(calibration_cases(1.0, 1.0));
    c["cases"][0]["published"] = 1e-300;
    std::ofstream(cases) << c.dump();
  }
  expect_bad_input("calibrate --cases " + cases,
                   {cases, "cases[0].published", "expected a number from 1e-09 to 1e+07"});
  { std::ofstream(cases) << calibration_cases(1.0, 1.0); }
  expect_bad_input("calibrate --cases " + cases + " --stack megatron-1999",
                   {"--stack", "megatron-1999", "megatron-lm-2022"});
  expect_bad_input("calibrate --cases " + cases + " --fit warp_speed", {"warp_speed"});
  const std::string bad = dir.path() + "/cal.json";
  {
    std::ofstream(bad) << R"({"format": "motley.calibration/1", "base": "megatron-core",)"
                       << R"( "stack": {"memory_efficiency": 7}})";
  }
  expect_bad_input("simulate --schedule 1f1b --calibration " + bad,
                   {bad, "stack.memory_efficiency", "from 0.2 to 1"});
  {
    std::ofstream(bad) << R"({"format": "motley.calibration/1", "base": "megatron-core",)"
                       << R"( "stack": {"gradient_bucket_parameters": 0}})";
  }
  expect_bad_input("simulate --schedule 1f1b --calibration " + bad,
                   {bad, "stack.gradient_bucket_parameters", "from 1 to 1000000000000"});
}

}  // namespace

// The devices of every group of a plan file, replica by replica.
std::vector<std::vector<std::vector<int>>> plan_groups(const nlohmann::json& plan) {
  std::vector<std::vector<std::vector<int>>> out;
  for (const auto& rep : plan["replicas"]) {
    out.emplace_back();
    for (const auto& g : rep["groups"]) out.back().push_back(g["devices"].get<std::vector<int>>());
  }
  return out;
}

TEST(CliTest, PlanKeepsTheLayoutTheUserFixes) {
  const TempDir scratch("cli_plan_constraints");
  const std::string file = scratch.file("plan.json");
  RunResult r = run_motley(
      "plan --model tiny-llama --cluster h100-a100 --quiet --json --max-plans 80 "
      "--tensor-parallel 2 --pipeline-parallel 2 --data-parallel 2 --schedule zb-h1,adaptive "
      "--out " +
      file);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["constraints"]["tensor_parallel"], 2);
  EXPECT_EQ(j["constraints"]["pipeline_parallel"], 2);
  EXPECT_EQ(j["constraints"]["data_parallel"], 2);
  const auto plan = nlohmann::json::parse(read_file(file));
  const auto groups = plan_groups(plan);
  ASSERT_EQ(groups.size(), 2u);
  for (const auto& rep : groups) {
    ASSERT_EQ(rep.size(), 2u);
    for (const auto& g : rep) EXPECT_EQ(g.size(), 2u);
  }
  const std::string schedule = plan["schedule"].get<std::string>();
  EXPECT_TRUE(schedule == "zb-h1" || schedule.rfind("adaptive", 0) == 0) << schedule;
  // Every baseline keeps them too, or finds no plan.
  for (const auto& b : j["baselines"]) {
    if (b["feasible"].get<bool>()) {
      EXPECT_NE(b["detail"].get<std::string>().find("zb-h1"), std::string::npos) << b["detail"];
    }
  }
}

TEST(CliTest, PlanUsesOnlyTheDevicesItIsGiven) {
  const TempDir scratch("cli_plan_devices");
  // Each flag with the ids it leaves: 0-3 and node h100-1 (8-15), or every H100 (0-15).
  const std::vector<std::pair<std::string, std::set<int>>> cases = {
      {"--devices 0-3,h100-1", {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15}},
      {"--exclude-devices A100-80GB", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}};
  for (const auto& [flag, allowed] : cases) {
    SCOPED_TRACE(flag);
    const std::string file = scratch.file("plan.json");
    RunResult r = run_motley("plan --model tiny-llama --cluster h100-a100 --quiet --max-plans 80 " +
                             flag + " --out " + file);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("devices left out"), std::string::npos) << r.out;
    for (const auto& rep : plan_groups(nlohmann::json::parse(read_file(file)))) {
      for (const auto& g : rep) {
        for (int d : g) EXPECT_EQ(allowed.count(d), 1u) << d;
      }
    }
  }
}

TEST(CliTest, CompareReportsSpeedupsOverTheTunedMegatronLayout) {
  RunResult r = run_motley("compare --model tiny-llama --cluster h100-a100 --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  double tuned = 0, motley = 0, defaults = 1e300;
  for (const auto& s : j["strategies"]) {
    if (!s["feasible"].get<bool>()) continue;
    const double t = s["iteration_time_s"].get<double>();
    if (s["name"] == "megatron-tuned") tuned = t;
    if (s["name"] == "motley") motley = t;
    if (s["name"] == "megatron-1f1b" || s["name"] == "megatron-interleaved") {
      defaults = std::min(defaults, t);
    }
    EXPECT_TRUE(s.contains("speedup_over_megatron_tuned")) << s["name"];
  }
  ASSERT_GT(tuned, 0);
  EXPECT_LE(tuned, defaults * (1 + 1e-12));
  EXPECT_LE(motley, tuned * (1 + 1e-12));
  for (const auto& s : j["strategies"]) {
    if (s["name"] == "megatron-tuned") {
      EXPECT_DOUBLE_EQ(s["speedup_over_megatron_tuned"].get<double>(), 1.0);
    }
  }
}

TEST(CliTest, PlanRefusesConstraintsItCannotMeet) {
  const std::string base = "plan --model tiny-llama --cluster h100-a100 --quiet ";
  expect_bad_input(base + "--tensor-parallel 3", {"--tensor-parallel", "3"});
  expect_bad_input(base + "--pipeline-parallel 0", {"--pipeline-parallel", "0"});
  expect_bad_input(base + "--data-parallel -1", {"--data-parallel"});
  expect_bad_input(base + "--schedule fast", {"--schedule", "fast"});
  expect_bad_input(base + "--memory-headroom 1", {"--memory-headroom", "below 1"});
  expect_bad_input(base + "--memory-headroom nan", {"--memory-headroom", "nan"});
  expect_bad_input(base + "--exclude-devices 99", {"--exclude-devices", "'99'", "0 to 31"});
  expect_bad_input(base + "--exclude-devices 4-2",
                   {"--exclude-devices", "'4-2'", "from 4 down to 2"});
  expect_bad_input(base + "--devices gpu-node", {"--devices", "'gpu-node'"});
  expect_bad_input(base + "--devices 0,,1", {"--devices", "empty item"});
  expect_bad_input(base + "--exclude-devices 0-31", {"--exclude-devices", "leaves none"});
  expect_bad_input(base + "--devices 0 --exclude-devices 1", {"--devices", "--exclude-devices"});
  expect_bad_input(base + "--tensor-parallel 8 --pipeline-parallel 4 --data-parallel 2",
                   {"tensor x pipeline x data parallel", "64 devices"});
  expect_bad_input(base + "--pipeline-parallel 7", {"pipeline_parallel", "6 layers"});
}

TEST(CliTest, SimulateTakesLayerCountsPerStageAndTheDistributedOptimizer) {
  const TempDir scratch("cli_simulate_layout");
  const std::string file = scratch.file("plan.json");
  RunResult r = run_motley(
      "simulate --model tiny-llama --cluster h100x8 --schedule 1f1b --pipeline-parallel 2 "
      "--data-parallel 2 --partition 1,5 --zero1 --out " +
      file);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plan = nlohmann::json::parse(read_file(file));
  EXPECT_EQ(plan["zero_stage"].get<int>(), 1);
  ASSERT_EQ(plan["stages"].size(), 2u);
  EXPECT_EQ(plan["stages"][0]["layers"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(plan["stages"][1]["layers"], nlohmann::json::array({1, 6}));
  EXPECT_EQ(plan["replicas"].size(), 2u);
  // ZeRO-1 shards the optimizer state: the same layout without it needs more memory.
  RunResult with = run_motley(
      "simulate --model tiny-llama --cluster h100x8 --schedule 1f1b --stages 2 "
      "--data-parallel 2 --partition 1,5 --zero1 --json");
  RunResult without = run_motley(
      "simulate --model tiny-llama --cluster h100x8 --schedule 1f1b --stages 2 "
      "--data-parallel 2 --partition 1,5 --json");
  ASSERT_EQ(with.exit_code, 0) << with.err;
  ASSERT_EQ(without.exit_code, 0) << without.err;
  const auto peak = [](const std::string& out) {
    return nlohmann::json::parse(out)["devices"][0]["peak_memory_bytes"].get<double>();
  };
  EXPECT_LT(peak(with.out), peak(without.out));

  const std::string base =
      "simulate --model tiny-llama --cluster h100x8 --schedule 1f1b --stages 2 --partition ";
  expect_bad_input(base + "1,4", {"layer_counts", "summing to 5", "6 layers"});
  expect_bad_input(base + "1,2,3", {"layer_counts", "3 counts", "2 stages"});
  expect_bad_input(base + "0,6", {"--partition", "0,6"});
  expect_bad_input(base + "3,x", {"--partition", "3,x"});
}
