// The emulation's factors motley computes for motley-run: the cost model's message times
// exactly, its all-reduce times at every priced size (and between them, within one node, to
// rounding), the simulator's iteration, the peak slowdowns; and the handover through an
// in-memory file, of the factors or of the error met computing them.
#include "run_emulation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <memory>
#include <set>

#include "cost_options.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/exec/rank_layout.h"
#include "motley/model/model_json.h"
#include "motley/plan/plan_workload.h"
#include "motley/plan/spec_hash.h"
#include "motley/sim/simulator.h"

namespace motley::cli {
namespace {

std::string run_plan(const std::string& name) {
  return std::string(MOTLEY_TEST_DATA_DIR) + "/run/" + name;
}

RunInputs inputs_of(const std::string& plan) {
  RunOptions opt;
  opt.plan = plan;
  auto inputs = load_run_inputs(opt);
  EXPECT_TRUE(inputs.is_ok()) << inputs.status().message();
  return *inputs;
}

std::unique_ptr<AnalyticCostModel> cost_model_of(const RunInputs& in) {
  Result<std::unique_ptr<AnalyticCostModel>> cost = AnalyticCostModel::create(
      in.model, in.cluster, AnalyticCostOptions{plan_workload(in.plan, in.model)}, in.model.name);
  MOTLEY_CHECK(cost.is_ok(), cost.status().message());
  return std::move(cost.value());
}

// ZB-H1 over two replicas of two stages, moved onto the default cluster's two nodes: replica 0
// on H100s 0 and 1, replica 1 on A100s 8 and 9, so the replicas' sums cross nodes.
RunInputs two_node_inputs() {
  RunInputs in = inputs_of(run_plan("zb-h1-2stage-2replica-tiny-llama.json"));
  auto cluster = load_cluster("default");
  EXPECT_TRUE(cluster.is_ok());
  in.cluster = *cluster;
  in.plan.cluster = cluster_ref(in.cluster);
  in.plan.replicas[1].groups[0].devices = {8};
  in.plan.replicas[1].groups[1].devices = {9};
  RunOptions opt;
  opt.plan = "two-node plan";
  EXPECT_TRUE(validate_run_inputs(in, opt).is_ok()) << validate_run_inputs(in, opt).message();
  return in;
}

TEST(EmulationFactors, PeakSpeedsSlowEachRankByTheFastestPeakOverItsOwn) {
  const RunInputs in = inputs_of(run_plan("1f1b-2stage-h100-a100.json"));
  auto f = compute_emulation_factors(in, /*cost_speeds=*/false, "plan");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->speeds, "peak");
  EXPECT_EQ(f->device_types, (std::vector<std::string>{"H100-SXM", "A100-80GB"}));
  // tiny-llama trains in fp32: the catalog's FP32 peaks, 66.9 and 19.5 TFLOP/s.
  EXPECT_EQ(f->compute_slowdown, (std::vector<double>{1.0, 66.9 / 19.5}));
  EXPECT_EQ(f->wire_bytes_per_byte, 1.0);
  const std::unique_ptr<AnalyticCostModel> analytic = cost_model_of(in);
  const AnalyticCostModel& cost = *analytic;
  SimOptions sim;
  sim.source = "plan";
  auto simulated = simulate(sim, in.plan, cost);
  ASSERT_TRUE(simulated.is_ok());
  EXPECT_EQ(f->simulated_iteration, simulated->iteration_time);
  // The step's work on the H100 that runs natively: both stages, every micro-batch.
  double work = 0;
  for (const Stage& s : in.plan.stages) {
    const ComputeTimes t =
        cost.compute(LayerRange{s.layer_begin, s.layer_end}, DeviceGroup{{0}}, s.recompute);
    work += (t.forward + t.backward() + t.recompute).value();
  }
  EXPECT_EQ(f->cluster_step.value(), work * static_cast<double>(in.plan.replicas[0].micro_batches));

  auto by_cost = compute_emulation_factors(in, /*cost_speeds=*/true, "plan");
  ASSERT_TRUE(by_cost.is_ok());
  EXPECT_EQ(*std::min_element(by_cost->compute_slowdown.begin(), by_cost->compute_slowdown.end()),
            1.0);
  EXPECT_GT(by_cost->compute_slowdown[1], 1.0);
}

TEST(EmulationFactors, MessagesAndAllReducesCostTheCostModelsTimes) {
  const RunInputs in = two_node_inputs();
  auto f = compute_emulation_factors(in, false, "plan");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const std::unique_ptr<AnalyticCostModel> analytic = cost_model_of(in);
  const AnalyticCostModel& cost = *analytic;
  const RankLayout layout(in.plan);
  const EmulatedNetwork network(*f);
  for (int src = 0; src < layout.world_size(); ++src) {
    for (int dst = 0; dst < layout.world_size(); ++dst) {
      for (int64_t bytes : {int64_t{0}, int64_t{4}, int64_t{65536}, int64_t{123456789}}) {
        const Seconds want =
            cost.p2p_time(layout.place_of(src).device, layout.place_of(dst).device,
                          Bytes(static_cast<double>(bytes) * f->wire_bytes_per_byte));
        EXPECT_EQ(network.message_time(src, dst, bytes), want) << src << " -> " << dst;
      }
    }
  }

  // All-reduces: the cost model's time at every priced size, and in between.
  std::vector<std::vector<int>> priced;
  for (const EmulatedAllReduce& a : f->all_reduces) priced.push_back(a.ranks);
  EXPECT_EQ(priced, emulated_rank_sets(in.plan));
  const std::vector<Device> devices = cluster_devices(in.cluster);
  bool crossed = false;
  for (const EmulatedAllReduce& a : f->all_reduces) {
    std::vector<int> members;
    std::set<int> nodes;
    for (int r : a.ranks) {
      members.push_back(layout.place_of(r).device);
      nodes.insert(devices[members.back()].node);
    }
    auto exact = [&](double bytes) {
      return cost.collective_time(Collective::kAllReduce, members, Bytes(bytes),
                                  CollectiveAlgorithm::kAuto);
    };
    ASSERT_EQ(a.bytes, all_reduce_grid());
    for (size_t i = 0; i < a.bytes.size(); ++i) EXPECT_EQ(a.seconds[i], exact(a.bytes[i]).value());
    crossed = crossed || nodes.size() > 1;
    for (int64_t bytes : {int64_t{4}, int64_t{1000}, int64_t{3} << 20, int64_t{987654321}}) {
      const double want = exact(static_cast<double>(bytes)).value();
      const double got = network.all_reduce_time(a.ranks, bytes).value();
      // One node: one ring, affine in the size, so interpolation is exact to rounding.
      // Across nodes: within a few percent (docs/executor.md, "Emulation").
      EXPECT_NEAR(got, want, (nodes.size() == 1 ? 1e-12 : 0.05) * want)
          << ::testing::PrintToString(a.ranks) << " at " << bytes << " bytes";
    }
  }
  EXPECT_TRUE(crossed);
}

// Reads what a handover descriptor holds (and closes it).
Json read_all(int fd) {
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof(buffer))) > 0;) {
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  auto json = parse_json(text, "handover");
  EXPECT_TRUE(json.is_ok()) << text;
  return json.is_ok() ? *json : Json();
}

TEST(EmulationHandover, OnlyAnEmulatedRunGetsFactors) {
  const std::string plan = run_plan("1f1b-2stage-h100-a100.json");
  auto none = emulation_handover({"--plan", plan, "--steps", "2"});
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->has_value());
  auto unparsed = emulation_handover({"--plan", plan, "--emulate", "--steps", "two"});
  ASSERT_TRUE(unparsed.is_ok());
  EXPECT_FALSE(unparsed->has_value());  // motley-run reports the bad option itself

  auto fd = emulation_handover({"--plan=" + plan, "--emulate", "--json"});
  ASSERT_TRUE(fd.is_ok() && fd->has_value());
  auto factors = emulation_factors_from_json(read_all(**fd), "handover");
  ASSERT_TRUE(factors.is_ok()) << factors.status().message();
  EXPECT_EQ(factors->compute_slowdown, (std::vector<double>{1.0, 66.9 / 19.5}));
}

// On a GPU motley hands motley-run the simulator's peak memory of every device of the cluster,
// the plan's as `motley simulate --plan` finds them and 0 for the others; nothing on the CPU,
// for arguments that do not parse, or for a plan that cannot be priced.
TEST(PredictedMemoryHandover, TheSimulatorsPeakPerDeviceOnAGpuOnly) {
  const std::string plan = run_plan("1f1b-2stage-h100-a100.json");
  EXPECT_FALSE(predicted_memory_handover({"--plan", plan}).has_value());
  EXPECT_FALSE(predicted_memory_handover({"--plan", plan, "--device", "cpu"}).has_value());
  EXPECT_FALSE(predicted_memory_handover({"--plan", plan, "--steps", "two", "--device", "cuda"})
                   .has_value());
  EXPECT_FALSE(predicted_memory_handover({"--plan", "/nonexistent/plan.json", "--device", "cuda"})
                   .has_value());

  const std::optional<std::string> text =
      predicted_memory_handover({"--plan", plan, "--device", "cuda:0"});
  ASSERT_TRUE(text.has_value());
  const RunInputs in = inputs_of(plan);
  auto options = plan_cost_options(in.plan, in.model, in.cluster, StackChoice{}, "the plan");
  ASSERT_TRUE(options.is_ok());
  auto cost = AnalyticCostModel::create(in.model, in.cluster, *options, in.model.name);
  ASSERT_TRUE(cost.is_ok());
  auto sim = simulate(SimOptions{}, in.plan, **cost);
  ASSERT_TRUE(sim.is_ok());
  std::vector<std::string> want((*cost)->topology().devices().size(), "0");
  for (const DeviceStats& d : sim->devices) {
    ASSERT_GT(d.peak_memory.value(), 0.0);
    want[d.device] = fmt::format("{:.0f}", d.peak_memory.value());
  }
  EXPECT_EQ(*text, fmt::format("{}", fmt::join(want, ",")));
}

TEST(EmulationHandover, AnErrorTravelsInsteadOfTheFactors) {
  auto fd = emulation_handover({"--plan", "/nonexistent/plan.json", "--emulate"});
  ASSERT_TRUE(fd.is_ok() && fd->has_value());
  auto factors = emulation_factors_from_json(read_all(**fd), "handover");
  ASSERT_FALSE(factors.is_ok());
  EXPECT_EQ(factors.status().code(), StatusCode::kNotFound);
  EXPECT_NE(factors.status().message().find("/nonexistent/plan.json"), std::string::npos)
      << factors.status().message();
}

}  // namespace
}  // namespace motley::cli
