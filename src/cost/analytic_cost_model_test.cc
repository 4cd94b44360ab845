#include "motley/cost/analytic_cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace motley {
namespace {

// Closed-form expectations are evaluated in a different order than the implementation sums
// them; a relative tolerance of 1e-12 still catches any wrong term.
void expect_close(double actual, double expected) {
  EXPECT_NEAR(actual, expected, std::abs(expected) * 1e-12);
}

const DeviceType& catalog(const std::string& name) { return *find_device_type(name).value(); }

// The curve of matmul_efficiency, written out again: eff_max * F / (F + peak * 2 us).
double efficiency(const DeviceType& d, double flops) {
  const double half = std::max(d.peak_bf16.value(), d.peak_fp16.value()) * 2e-6;
  return d.matmul_efficiency * flops / (flops + half);
}

// max(F / (peak * eff(F)), bytes / memory bandwidth) for bf16.
double roofline(const DeviceType& d, double flops, double bytes) {
  const double compute = flops > 0 ? flops / (d.peak_bf16.value() * efficiency(d, flops)) : 0;
  return std::max(compute, bytes / d.memory_bandwidth.value());
}

constexpr double kNvlinkBandwidth = 450e9;
constexpr double kNvlinkLatency = 1e-6;
constexpr double kNicBandwidth = 50e9;
constexpr double kNicLatency = 2e-6;
constexpr double kNetworkLatency = 1e-6;

NodeSpec node(const std::string& name, const std::string& type, int count, int nic_count) {
  NodeSpec n;
  n.name = name;
  n.devices = {NodeDevices{type, count}};
  n.interconnect =
      LinkSpec{LinkKind::kNvlink, BytesPerSecond(kNvlinkBandwidth), Seconds(kNvlinkLatency)};
  n.pcie = LinkSpec{LinkKind::kPcie, gigabytes_per_second(64), microseconds(2)};
  n.nic = LinkSpec{LinkKind::kInfiniband, BytesPerSecond(kNicBandwidth), Seconds(kNicLatency)};
  n.nic_count = nic_count;
  return n;
}

ClusterSpec one_node(const std::string& type, int count) {
  ClusterSpec c;
  c.name = "one-node";
  c.nodes = {node("n0", type, count, count)};
  c.network = LinkSpec{LinkKind::kInfiniband, gigabytes_per_second(1000), Seconds(kNetworkLatency)};
  return c;
}

// Two nodes of four H100 each; one NIC per device unless `nic_count` says otherwise.
ClusterSpec two_nodes(int nic_count = 4) {
  ClusterSpec c;
  c.name = "two-nodes";
  c.nodes = {node("n0", "H100-SXM", 4, nic_count), node("n1", "H100-SXM", 4, nic_count)};
  c.network = LinkSpec{LinkKind::kInfiniband, gigabytes_per_second(1000), Seconds(kNetworkLatency)};
  return c;
}

Layer ffn_layer(const std::string& name) {
  Layer l;
  l.name = name;
  l.kind = LayerKind::kFeedForward;
  l.ffn = FeedForwardShape{4096, 14336, Activation::kSwiGlu, false};
  l.num_norms = 1;
  return l;
}

Layer attention_layer(const std::string& name) {
  Layer l;
  l.name = name;
  l.kind = LayerKind::kAttention;
  AttentionShape a;
  a.hidden = 4096;
  a.num_heads = 32;
  a.num_kv_heads = 8;
  a.head_dim = 128;
  l.attention = a;
  l.num_norms = 1;
  return l;
}

ModelSpec model_of(std::vector<Layer> layers) {
  ModelSpec m;
  m.name = "test";
  m.layers = std::move(layers);
  return m;
}

AnalyticCostOptions workload(int64_t seq_len, int64_t micro_batch_size = 1) {
  AnalyticCostOptions o;
  o.workload.seq_len = seq_len;
  o.workload.micro_batch_size = micro_batch_size;
  o.workload.dtype = DType::kBFloat16;
  return o;
}

// The cost model of `m` (which outlives it); the inputs are valid.
std::unique_ptr<AnalyticCostModel> analytic(const ModelSpec& m, const ClusterSpec& cluster,
                                            const AnalyticCostOptions& options) {
  Result<std::unique_ptr<AnalyticCostModel>> made =
      AnalyticCostModel::create(m, cluster, options, m.name);
  MOTLEY_CHECK(made.is_ok(), made.status().message());
  return std::move(made.value());
}

const LayerRange kFirst{0, 1};

// ---- pure pieces ----

TEST(MatmulEfficiency, SmoothCurveTowardsTheDeviceBest) {
  DeviceType d;
  d.peak_bf16 = teraflops(100);
  d.peak_fp16 = teraflops(100);
  d.matmul_efficiency = 0.8;
  // F_half = 100e12 * 2e-6 = 2e8 FLOPs.
  EXPECT_DOUBLE_EQ(matmul_efficiency(d, Flops(2e8)), 0.4);
  EXPECT_DOUBLE_EQ(matmul_efficiency(d, Flops(6e8)), 0.6);
  EXPECT_NEAR(matmul_efficiency(d, Flops(2e14)), 0.8, 1e-5);
  EXPECT_EQ(matmul_efficiency(d, Flops(0)), 0.0);
}

TEST(MatmulEfficiency, SaturationSizeUsesTheTensorRate) {
  // A device without bf16 units (bf16 at the fp32 rate) saturates like its fp16 tensor cores.
  DeviceType d;
  d.peak_bf16 = teraflops(15);
  d.peak_fp16 = teraflops(120);
  d.matmul_efficiency = 0.5;
  EXPECT_DOUBLE_EQ(matmul_efficiency(d, Flops(120e12 * 2e-6)), 0.25);
}

TEST(Roofline, PicksTheSlowerOfComputeAndMemory) {
  DeviceType d;
  d.peak_bf16 = teraflops(100);
  d.peak_fp16 = teraflops(100);
  d.peak_fp32 = FlopsPerSecond(0);
  d.matmul_efficiency = 0.8;
  d.memory_bandwidth = gigabytes_per_second(1000);
  // 6e8 FLOPs at 100e12 * 0.6 = 1e-5 s; 1e6 bytes at 1e12 B/s = 1e-6 s.
  EXPECT_DOUBLE_EQ(roofline_time(d, DType::kBFloat16, Flops(6e8), Bytes(1e6)).value(), 1e-5);
  // 1e8 bytes: 1e-4 s.
  EXPECT_DOUBLE_EQ(roofline_time(d, DType::kBFloat16, Flops(6e8), Bytes(1e8)).value(), 1e-4);
  EXPECT_EQ(roofline_time(d, DType::kBFloat16, Flops(0), Bytes(0)).value(), 0.0);
  // No fp32 rate: the pass cannot run there.
  EXPECT_TRUE(std::isinf(roofline_time(d, DType::kFloat32, Flops(1), Bytes(0)).value()));
}

TEST(OptimizerBytes, SixteenOrEighteenPerParameter) {
  OptimizerBytesPerParam b = optimizer_bytes_per_param(DType::kBFloat16, false);
  EXPECT_EQ(b.weights, 2);
  EXPECT_EQ(b.gradients, 2);
  EXPECT_EQ(b.optimizer_state, 12);  // fp32 master 4 + two fp32 moments 8
  EXPECT_EQ(b.total(), 16);
  b = optimizer_bytes_per_param(DType::kBFloat16, true);
  EXPECT_EQ(b.gradients, 4);
  EXPECT_EQ(b.total(), 18);
  // fp32 training needs no master copy.
  b = optimizer_bytes_per_param(DType::kFloat32, true);
  EXPECT_EQ(b.weights, 4);
  EXPECT_EQ(b.optimizer_state, 8);
  EXPECT_EQ(b.total(), 16);
}

TEST(KernelCounts, PerLayerKind) {
  KernelCounts k = kernel_counts(ffn_layer("f"));
  EXPECT_EQ(k.forward, 5);
  EXPECT_EQ(k.backward_input, 5);
  EXPECT_EQ(k.backward_weight, 3);
  Layer block = attention_layer("b");
  block.kind = LayerKind::kDecoderBlock;
  block.ffn = FeedForwardShape{4096, 14336, Activation::kSwiGlu, false};
  k = kernel_counts(block);
  EXPECT_EQ(k.forward, 11);
  EXPECT_EQ(k.backward_weight, 6);
  Layer measured;
  measured.kind = LayerKind::kMeasured;
  k = kernel_counts(measured);
  EXPECT_EQ(k.forward + k.backward_input + k.backward_weight, 0);
}

TEST(AttentionCore, CausalFullAndWindowed) {
  Layer l = attention_layer("a");
  Workload w;
  w.seq_len = 4096;
  w.micro_batch_size = 2;
  // 2 FLOPs * b * heads * s(s+1)/2 pairs * (q/k 128 + v 128).
  EXPECT_DOUBLE_EQ(attention_core_forward_flops(l, w).value(),
                   2.0 * 2 * 32 * (4096.0 * 4097 / 2) * 256);
  l.attention->sliding_window = 1024;
  EXPECT_DOUBLE_EQ(attention_core_forward_flops(l, w).value(),
                   2.0 * 2 * 32 * (1024.0 * 1025 / 2 + 3072.0 * 1024) * 256);
  l.attention->sliding_window = 0;
  l.attention->causal = false;
  EXPECT_DOUBLE_EQ(attention_core_forward_flops(l, w).value(), 2.0 * 2 * 32 * 4096.0 * 4096 * 256);
  EXPECT_EQ(attention_core_forward_flops(ffn_layer("f"), w).value(), 0.0);
}

// ---- compute ----

TEST(AnalyticCompute, ForwardIsRooflinePlusLaunchOverhead) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, one_node("H100-SXM", 2), workload(4096));
  const LayerCost& c = cost->layer_costs()[0];
  const DeviceType& h100 = catalog("H100-SXM");
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{0}}, RecomputePolicy::kNone);
  // A large GEMM layer is compute-bound: the FLOPs term wins.
  const double flops_term =
      c.forward.value() / (h100.peak_bf16.value() * efficiency(h100, c.forward.value()));
  ASSERT_GT(flops_term, c.forward_memory.value() / h100.memory_bandwidth.value());
  expect_close(t.forward.value(), flops_term + 5 * 3e-6);
  expect_close(
      t.backward_input.value(),
      roofline(h100, c.backward_input.value(), c.backward_input_memory.value()) + 5 * 3e-6);
  expect_close(
      t.backward_weight.value(),
      roofline(h100, c.backward_weight.value(), c.backward_weight_memory.value()) + 3 * 3e-6);
  EXPECT_EQ(t.recompute.value(), 0.0);
}

TEST(AnalyticCompute, MemoryBoundLayerPicksTheBytesTerm) {
  // One token: every weight is read once for two FLOPs, far below any GPU's ridge point.
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, one_node("H100-SXM", 1), workload(1));
  const LayerCost& c = cost->layer_costs()[0];
  const DeviceType& h100 = catalog("H100-SXM");
  const double bytes_term = c.forward_memory.value() / h100.memory_bandwidth.value();
  ASSERT_GT(bytes_term,
            c.forward.value() / (h100.peak_bf16.value() * efficiency(h100, c.forward.value())));
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{0}}, RecomputePolicy::kNone);
  expect_close(t.forward.value(), bytes_term + 5 * 3e-6);
}

TEST(AnalyticCompute, TensorParallelSplitsWorkAndAddsTheAllReduce) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, one_node("H100-SXM", 2), workload(4096));
  const LayerCost& c = cost->layer_costs()[0];
  ASSERT_EQ(c.tp_allreduces, 1);
  const DeviceType& h100 = catalog("H100-SXM");
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{0, 1}}, RecomputePolicy::kNone);
  // Ring all-reduce over 2 devices: 2 latencies and n over NVLink.
  const double allreduce = 2 * kNvlinkLatency + c.output_bytes.value() / kNvlinkBandwidth;
  expect_close(
      t.forward.value(),
      roofline(h100, c.forward.value() / 2, c.forward_memory.value() / 2) + 5 * 3e-6 + allreduce);
  expect_close(t.backward_input.value(),
               roofline(h100, c.backward_input.value() / 2, c.backward_input_memory.value() / 2) +
                   5 * 3e-6 + allreduce);
  expect_close(t.backward_weight.value(),
               roofline(h100, c.backward_weight.value() / 2, c.backward_weight_memory.value() / 2) +
                   3 * 3e-6);
}

TEST(AnalyticCompute, TensorParallelOverFourDevicesUsesTheRingFormula) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, one_node("H100-SXM", 4), workload(4096));
  const LayerCost& c = cost->layer_costs()[0];
  const DeviceType& h100 = catalog("H100-SXM");
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{3, 1, 0, 2}}, RecomputePolicy::kNone);
  const double allreduce = 6 * kNvlinkLatency + 1.5 * c.output_bytes.value() / kNvlinkBandwidth;
  const double expected =
      roofline(h100, c.forward.value() / 4, c.forward_memory.value() / 4) + 5 * 3e-6 + allreduce;
  expect_close(t.forward.value(), expected);
  // A node too large for the precomputed subsets prices the group directly, the same way.
  const auto big = analytic(m, one_node("H100-SXM", 12), workload(4096));
  expect_close(
      big->compute(kFirst, DeviceGroup{{9, 2, 11, 5}}, RecomputePolicy::kNone).forward.value(),
      expected);
}

TEST(AnalyticCompute, RecomputePolicies) {
  ModelSpec m = model_of({attention_layer("attn")});
  const auto cost = analytic(m, one_node("H100-SXM", 2), workload(4096));
  const DeviceType& h100 = catalog("H100-SXM");
  const double core = 2.0 * 1 * 32 * (4096.0 * 4097 / 2) * 256;
  for (int tp : {1, 2}) {
    DeviceGroup g;
    for (int d = 0; d < tp; ++d) g.devices.push_back(d);
    ComputeTimes none = cost->compute(kFirst, g, RecomputePolicy::kNone);
    ComputeTimes selective = cost->compute(kFirst, g, RecomputePolicy::kSelective);
    ComputeTimes full = cost->compute(kFirst, g, RecomputePolicy::kFull);
    EXPECT_EQ(none.recompute.value(), 0.0);
    // The attention core's FLOPs only (no launch overhead, no collective).
    expect_close(selective.recompute.value(),
                 core / tp / (h100.peak_bf16.value() * efficiency(h100, core / tp)));
    // The whole forward pass again, its all-reduce included.
    EXPECT_EQ(full.recompute, full.forward);
    EXPECT_EQ(full.forward, none.forward);
    EXPECT_EQ(selective.backward_input, none.backward_input);
  }
}

TEST(AnalyticCompute, RangeIsTheSumOfItsLayers) {
  ModelSpec m =
      model_of({attention_layer("a0"), ffn_layer("f0"), attention_layer("a1"), ffn_layer("f1")});
  const auto cost = analytic(m, one_node("H100-SXM", 2), workload(4096));
  for (int tp : {1, 2}) {
    DeviceGroup g;
    for (int d = 0; d < tp; ++d) g.devices.push_back(d);
    ComputeTimes whole = cost->compute(LayerRange{1, 4}, g, RecomputePolicy::kSelective);
    double f = 0, b = 0, w = 0, r = 0;
    for (int i = 1; i < 4; ++i) {
      ComputeTimes one = cost->compute(LayerRange{i, i + 1}, g, RecomputePolicy::kSelective);
      f += one.forward.value();
      b += one.backward_input.value();
      w += one.backward_weight.value();
      r += one.recompute.value();
    }
    expect_close(whole.forward.value(), f);
    expect_close(whole.backward_input.value(), b);
    expect_close(whole.backward_weight.value(), w);
    expect_close(whole.recompute.value(), r);
  }
  ComputeTimes empty = cost->compute(LayerRange{2, 2}, DeviceGroup{{0}}, RecomputePolicy::kFull);
  EXPECT_EQ(empty.forward.value() + empty.backward().value() + empty.recompute.value(), 0.0);
}

TEST(AnalyticCompute, SlowerDeviceTakesLonger) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  ClusterSpec c = one_node("H100-SXM", 1);
  c.nodes.push_back(node("n1", "A100-80GB", 1, 1));
  const auto cost = analytic(m, c, workload(4096));
  const LayerCost& lc = cost->layer_costs()[0];
  ComputeTimes a100 = cost->compute(kFirst, DeviceGroup{{1}}, RecomputePolicy::kNone);
  expect_close(
      a100.forward.value(),
      roofline(catalog("A100-80GB"), lc.forward.value(), lc.forward_memory.value()) + 5 * 3e-6);
  EXPECT_GT(a100.forward, cost->compute(kFirst, DeviceGroup{{0}}, RecomputePolicy::kNone).forward);
}

TEST(AnalyticCompute, SafeFromSeveralThreads) {
  // Immutable after construction: concurrent callers see the single-threaded answers.
  ModelSpec m = model_of({attention_layer("a0"), ffn_layer("f0"), attention_layer("a1")});
  const auto cost = analytic(m, one_node("H100-SXM", 4), workload(2048));
  const ComputeTimes expected =
      cost->compute(LayerRange{0, 3}, DeviceGroup{{0, 1}}, RecomputePolicy::kFull);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 2000; ++k) {
        ComputeTimes t =
            cost->compute(LayerRange{0, 3}, DeviceGroup{{0, 1}}, RecomputePolicy::kFull);
        if (t.forward != expected.forward || t.recompute != expected.recompute) ++mismatches[i];
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(mismatches[i], 0);
}

// ---- measured layers ----

Layer measured_layer() {
  Layer l;
  l.name = "mixer";
  l.kind = LayerKind::kMeasured;
  MeasuredLayer m;
  m.measured_on = "A100-80GB";
  m.times = MeasuredTimes{milliseconds(10), milliseconds(12), milliseconds(8), std::nullopt};
  m.times_by_device["H100"] = MeasuredTimes{milliseconds(4), std::nullopt, std::nullopt, std::nullopt};
  m.seq_len = 4096;
  m.micro_batch_size = 1;
  m.param_bytes = Bytes(2e8);
  m.activation_bytes = Bytes(3e8);
  m.output_bytes = Bytes(1e7);
  l.measured = m;
  return l;
}

// One node each of A100, H100 and MI300X, one device per node.
ClusterSpec mixed_cluster() {
  ClusterSpec c;
  c.name = "mixed";
  c.nodes = {node("a", "A100-80GB", 2, 2), node("h", "H100-SXM", 1, 1), node("m", "MI300X", 1, 1)};
  c.nodes[2].interconnect.kind = LinkKind::kXgmi;
  c.network = LinkSpec{LinkKind::kInfiniband, gigabytes_per_second(1000), Seconds(kNetworkLatency)};
  return c;
}

double achievable(const std::string& type) {
  const DeviceType& d = catalog(type);
  return d.peak_bf16.value() * d.matmul_efficiency;
}

TEST(AnalyticMeasured, OwnDeviceUsesTheMeasuredTimes) {
  ModelSpec m = model_of({measured_layer()});
  const auto cost = analytic(m, mixed_cluster(), workload(4096));
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{0}}, RecomputePolicy::kNone);
  EXPECT_DOUBLE_EQ(t.forward.value(), 10e-3);
  EXPECT_DOUBLE_EQ(t.backward_input.value(), 12e-3);
  EXPECT_DOUBLE_EQ(t.backward_weight.value(), 8e-3);
  EXPECT_EQ(cost->compute(kFirst, DeviceGroup{{0}}, RecomputePolicy::kSelective).recompute.value(),
            0.0);
  EXPECT_DOUBLE_EQ(
      cost->compute(kFirst, DeviceGroup{{0}}, RecomputePolicy::kFull).recompute.value(), 10e-3);
}

TEST(AnalyticMeasured, OverrideWinsPerFieldAndMissingFieldsAreScaled) {
  ModelSpec m = model_of({measured_layer()});
  const auto cost = analytic(m, mixed_cluster(), workload(4096));
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{2}}, RecomputePolicy::kNone);
  const double ratio = achievable("A100-80GB") / achievable("H100-SXM");
  EXPECT_DOUBLE_EQ(t.forward.value(), 4e-3);
  expect_close(t.backward_input.value(), 12e-3 * ratio);
  expect_close(t.backward_weight.value(), 8e-3 * ratio);
}

TEST(AnalyticMeasured, OtherDeviceScaledByAchievableMatmulRate) {
  ModelSpec m = model_of({measured_layer()});
  const auto cost = analytic(m, mixed_cluster(), workload(4096));
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{3}}, RecomputePolicy::kNone);
  // (312 TFLOP/s * 0.87) / (1307.4 TFLOP/s * 0.51).
  const double ratio = achievable("A100-80GB") / achievable("MI300X");
  expect_close(t.forward.value(), 10e-3 * ratio);
  expect_close(t.backward_input.value(), 12e-3 * ratio);
  expect_close(t.backward_weight.value(), 8e-3 * ratio);
}

TEST(AnalyticMeasured, TokensScaleTimesAndBytesLinearly) {
  ModelSpec m = model_of({measured_layer()});
  // Twice the sequence and twice the micro-batch: 4x the tokens.
  const auto cost = analytic(m, mixed_cluster(), workload(8192, 2));
  ComputeTimes own = cost->compute(kFirst, DeviceGroup{{0}}, RecomputePolicy::kNone);
  EXPECT_DOUBLE_EQ(own.forward.value(), 40e-3);
  EXPECT_DOUBLE_EQ(own.backward_weight.value(), 32e-3);
  ComputeTimes overridden = cost->compute(kFirst, DeviceGroup{{2}}, RecomputePolicy::kNone);
  EXPECT_DOUBLE_EQ(overridden.forward.value(), 16e-3);
  EXPECT_DOUBLE_EQ(cost->boundary_bytes(0).value(), 4e7);
  StageMemory mem = cost->stage_memory(kFirst, DeviceGroup{{0}}, MemoryOptions{});
  EXPECT_DOUBLE_EQ(mem.activations_per_micro_batch.value(), 12e8);
}

TEST(AnalyticMeasured, TensorParallelDividesTheMeasuredTimes) {
  ModelSpec m = model_of({measured_layer()});
  const auto cost = analytic(m, mixed_cluster(), workload(4096));
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{0, 1}}, RecomputePolicy::kNone);
  EXPECT_DOUBLE_EQ(t.forward.value(), 5e-3);
  EXPECT_DOUBLE_EQ(t.backward_input.value(), 6e-3);
  EXPECT_DOUBLE_EQ(t.backward_weight.value(), 4e-3);
}

TEST(AnalyticMeasured, MemoryFromTheProfile) {
  ModelSpec m = model_of({measured_layer()});
  const auto cost = analytic(m, mixed_cluster(), workload(4096));
  StageMemory mem = cost->stage_memory(kFirst, DeviceGroup{{0}}, MemoryOptions{});
  const double params = 2e8 / 2;  // bf16 weights
  EXPECT_DOUBLE_EQ(mem.weights.value(), 2e8);
  EXPECT_DOUBLE_EQ(mem.gradients.value(), 4 * params);
  EXPECT_DOUBLE_EQ(mem.optimizer_state.value(), 12 * params);
  EXPECT_DOUBLE_EQ(mem.activations_per_micro_batch.value(), 3e8);
}

TEST(AnalyticMeasured, ValidateNamesTheLayerAndField) {
  ModelSpec m = model_of({ffn_layer("ffn"), measured_layer()});
  EXPECT_TRUE(AnalyticCostModel::validate(m, workload(4096), "prof.json").is_ok());

  m.layers[1].measured->measured_on = "Z9000";
  Status s = AnalyticCostModel::validate(m, workload(4096), "prof.json");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("prof.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("layers[1] ('mixer')"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'measured_on'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Z9000"), std::string::npos) << s.message();

  m = model_of({measured_layer()});
  m.layers[0].measured->times_by_device["Q1"] = MeasuredTimes{};
  s = AnalyticCostModel::validate(m, workload(4096), "prof.json");
  EXPECT_NE(s.message().find("'times_by_device.Q1'"), std::string::npos) << s.message();

  m = model_of({measured_layer()});
  m.layers[0].measured->times.backward_weight.reset();
  s = AnalyticCostModel::validate(m, workload(4096), "prof.json");
  EXPECT_NE(s.message().find("'times'"), std::string::npos) << s.message();

  s = AnalyticCostModel::validate(m, workload(0), "prof.json");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sequence length"), std::string::npos) << s.message();
}

TEST(AnalyticMeasured, CreateRefusesWhatValidateRefuses) {
  ModelSpec m = model_of({ffn_layer("ffn"), measured_layer()});
  EXPECT_TRUE(
      AnalyticCostModel::create(m, one_node("H100-SXM", 1), workload(4096), "prof.json").is_ok());
  m.layers[1].measured->measured_on = "Z9000";
  const Status expected = AnalyticCostModel::validate(m, workload(4096), "prof.json");
  Result<std::unique_ptr<AnalyticCostModel>> made =
      AnalyticCostModel::create(m, one_node("H100-SXM", 1), workload(4096), "prof.json");
  ASSERT_FALSE(made.is_ok());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(made.status().message(), expected.message());
  made = AnalyticCostModel::create(model_of({ffn_layer("ffn")}), one_node("H100-SXM", 1),
                                   workload(4096, 0), "test");
  ASSERT_FALSE(made.is_ok());
  EXPECT_EQ(made.status().message(), "test: micro-batch size: expected a positive integer, got 0");
}

// ---- memory ----

TEST(AnalyticMemory, SixteenOrEighteenBytesPerParameter) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  AnalyticCostOptions o = workload(4096);
  o.fp32_grad_accumulation = false;
  const auto bf16_grads = analytic(m, one_node("H100-SXM", 2), o);
  const double p = static_cast<double>(bf16_grads->layer_costs()[0].stored_params);
  // 3 projections of 4096 x 14336 and one norm of 4096.
  ASSERT_EQ(p, 3.0 * 4096 * 14336 + 4096);
  StageMemory mem = bf16_grads->stage_memory(kFirst, DeviceGroup{{0}}, MemoryOptions{});
  EXPECT_DOUBLE_EQ(mem.weights.value(), 2 * p);
  EXPECT_DOUBLE_EQ(mem.gradients.value(), 2 * p);
  EXPECT_DOUBLE_EQ(mem.optimizer_state.value(), 12 * p);
  EXPECT_DOUBLE_EQ(mem.weights.value() + mem.gradients.value() + mem.optimizer_state.value(),
                   16 * p);

  const auto fp32_grads = analytic(m, one_node("H100-SXM", 2), workload(4096));
  mem = fp32_grads->stage_memory(kFirst, DeviceGroup{{0}}, MemoryOptions{});
  EXPECT_DOUBLE_EQ(mem.gradients.value(), 4 * p);
  EXPECT_DOUBLE_EQ(mem.weights.value() + mem.gradients.value() + mem.optimizer_state.value(),
                   18 * p);
}

TEST(AnalyticMemory, ZeroOneShardsTheOptimizerStateOnly) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, one_node("H100-SXM", 2), workload(4096));
  const double p = static_cast<double>(cost->layer_costs()[0].stored_params);
  MemoryOptions o;
  o.data_parallel = 4;
  StageMemory unsharded = cost->stage_memory(kFirst, DeviceGroup{{0}}, o);
  EXPECT_DOUBLE_EQ(unsharded.optimizer_state.value(), 12 * p);
  o.zero1 = true;
  StageMemory sharded = cost->stage_memory(kFirst, DeviceGroup{{0}}, o);
  EXPECT_DOUBLE_EQ(sharded.optimizer_state.value(), 3 * p);
  EXPECT_EQ(sharded.weights, unsharded.weights);
  EXPECT_EQ(sharded.gradients, unsharded.gradients);
}

TEST(AnalyticMemory, ActivationsPerPolicyTimesInFlightAndSplitByTensorParallelism) {
  ModelSpec m = model_of({attention_layer("a0"), ffn_layer("f0"), attention_layer("a1")});
  const auto cost = analytic(m, one_node("H100-SXM", 2), workload(4096));
  const auto& lc = cost->layer_costs();
  for (RecomputePolicy policy :
       {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
    const int k = static_cast<int>(policy);
    const double per_mb = lc[0].activation_bytes[k].value() + lc[1].activation_bytes[k].value() +
                          lc[2].activation_bytes[k].value();
    MemoryOptions o;
    o.recompute = policy;
    o.in_flight_micro_batches = 3;
    StageMemory one = cost->stage_memory(LayerRange{0, 3}, DeviceGroup{{0}}, o);
    expect_close(one.activations_per_micro_batch.value(), per_mb);
    expect_close(one.activations.value(), 3 * per_mb);
    StageMemory two = cost->stage_memory(LayerRange{0, 3}, DeviceGroup{{0, 1}}, o);
    expect_close(two.activations.value(), 3 * per_mb / 2);
  }
  // Fewer bytes kept as more is recomputed.
  EXPECT_LT(lc[0].activation_bytes[2], lc[0].activation_bytes[1]);
  EXPECT_LT(lc[0].activation_bytes[1], lc[0].activation_bytes[0]);
}

TEST(AnalyticMemory, TensorParallelShardsTheModelState) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, one_node("H100-SXM", 2), workload(4096));
  StageMemory one = cost->stage_memory(kFirst, DeviceGroup{{0}}, MemoryOptions{});
  StageMemory two = cost->stage_memory(kFirst, DeviceGroup{{0, 1}}, MemoryOptions{});
  EXPECT_DOUBLE_EQ(two.weights.value(), one.weights.value() / 2);
  EXPECT_DOUBLE_EQ(two.gradients.value(), one.gradients.value() / 2);
  EXPECT_DOUBLE_EQ(two.optimizer_state.value(), one.optimizer_state.value() / 2);
}

TEST(AnalyticMemory, CommunicationBuffersDoubleBufferBothBoundaries) {
  ModelSpec m = model_of({attention_layer("a0"), ffn_layer("f0"), attention_layer("a1")});
  const auto cost = analytic(m, one_node("H100-SXM", 2), workload(4096));
  const double in = cost->boundary_bytes(0).value();
  const double out = cost->boundary_bytes(1).value();
  EXPECT_EQ(cost->boundary_bytes(1), cost->layer_costs()[1].output_bytes);
  // Middle stage: activation in and gradient back, two buffers each.
  StageMemory middle = cost->stage_memory(LayerRange{1, 2}, DeviceGroup{{0}}, MemoryOptions{});
  EXPECT_DOUBLE_EQ(middle.communication_buffers.value(), 2 * (in + out));
  StageMemory middle_tp =
      cost->stage_memory(LayerRange{1, 2}, DeviceGroup{{0, 1}}, MemoryOptions{});
  EXPECT_DOUBLE_EQ(middle_tp.communication_buffers.value(), (in + out));
  // The first stage receives no activation, the last no gradient, the whole model neither.
  EXPECT_DOUBLE_EQ(cost->stage_memory(LayerRange{0, 1}, DeviceGroup{{0}}, MemoryOptions{})
                       .communication_buffers.value(),
                   2 * in);
  EXPECT_DOUBLE_EQ(cost->stage_memory(LayerRange{2, 3}, DeviceGroup{{0}}, MemoryOptions{})
                       .communication_buffers.value(),
                   2 * out);
  EXPECT_EQ(cost->stage_memory(LayerRange{0, 3}, DeviceGroup{{0}}, MemoryOptions{})
                .communication_buffers.value(),
            0.0);
  StageMemory whole = cost->stage_memory(LayerRange{0, 3}, DeviceGroup{{0}}, MemoryOptions{});
  EXPECT_DOUBLE_EQ(
      whole.total().value(),
      (whole.weights + whole.gradients + whole.optimizer_state + whole.activations).value());
}

// ---- communication ----

TEST(AnalyticComm, PointToPoint) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, two_nodes(), workload(4096));
  const Bytes n(1e8);
  EXPECT_EQ(cost->p2p_time(3, 3, n).value(), 0.0);
  EXPECT_DOUBLE_EQ(cost->p2p_time(0, 1, n).value(), kNvlinkLatency + 1e8 / kNvlinkBandwidth);
  // Across nodes: NIC, fabric and NIC latencies; the NIC is the bottleneck.
  EXPECT_DOUBLE_EQ(cost->p2p_time(1, 5, n).value(),
                   kNicLatency + kNetworkLatency + kNicLatency + 1e8 / kNicBandwidth);
}

TEST(AnalyticComm, RingUsesTheSlowestHopAndLargestLatency) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, two_nodes(), workload(4096));
  const double n = 1e9;
  const double cross_latency = 2 * kNicLatency + kNetworkLatency;
  const AlphaBeta ring = cost->ring_parameters(std::vector<int>{7, 0, 1, 2, 3, 4, 5, 6});
  EXPECT_DOUBLE_EQ(ring.latency.value(), cross_latency);
  EXPECT_DOUBLE_EQ(ring.bandwidth.value(), kNicBandwidth);
  std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  expect_close(
      cost->collective_time(Collective::kAllReduce, all, Bytes(n), CollectiveAlgorithm::kRing)
          .value(),
      14 * cross_latency + 1.75 * n / kNicBandwidth);
  expect_close(
      cost->collective_time(Collective::kAllGather, all, Bytes(n), CollectiveAlgorithm::kRing)
          .value(),
      7 * cross_latency + 0.875 * n / kNicBandwidth);
  // Inside one node the ring runs over NVLink.
  expect_close(cost->collective_time(Collective::kAllReduce, {4, 5, 6, 7}, Bytes(n),
                                     CollectiveAlgorithm::kRing)
                   .value(),
               6 * kNvlinkLatency + 1.5 * n / kNvlinkBandwidth);
  // One participant (and duplicates of it) costs nothing.
  EXPECT_EQ(
      cost->collective_time(Collective::kAllReduce, {2, 2}, Bytes(n), CollectiveAlgorithm::kAuto)
          .value(),
      0.0);
}

TEST(AnalyticComm, HierarchicalBeatsTheRingWhenEachDeviceHasANic) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, two_nodes(4), workload(4096));
  const double n = 1e9;
  const double cross_latency = 2 * kNicLatency + kNetworkLatency;
  std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  // RS(4) and AG(4) over NVLink, AR(2) of n/4 over one NIC per ring (four rings, four NICs).
  const double intra = 3 * kNvlinkLatency + 0.75 * n / kNvlinkBandwidth;
  const double inter = 2 * cross_latency + 1.0 * (n / 4) / kNicBandwidth;
  const double hierarchical = intra + inter + intra;
  const double ring = 14 * cross_latency + 1.75 * n / kNicBandwidth;
  expect_close(cost->collective_time(Collective::kAllReduce, all, Bytes(n),
                                     CollectiveAlgorithm::kHierarchical)
                   .value(),
               hierarchical);
  ASSERT_LT(hierarchical, ring);
  expect_close(
      cost->collective_time(Collective::kAllReduce, all, Bytes(n), CollectiveAlgorithm::kAuto)
          .value(),
      hierarchical);
  // Reduce-scatter: intra RS, then inter RS of n/4.
  expect_close(cost->collective_time(Collective::kReduceScatter, all, Bytes(n),
                                     CollectiveAlgorithm::kHierarchical)
                   .value(),
               intra + cross_latency + 0.5 * (n / 4) / kNicBandwidth);
}

TEST(AnalyticComm, SharedNicMakesTheRingWinOverSlowIntraNodeLinks) {
  // PCIe inside the nodes (20 GB/s) and one 50 GB/s NIC per node: the four inter-node rings
  // of the hierarchical algorithm share that NIC, 12.5 GB/s each.
  ClusterSpec c = two_nodes(1);
  for (NodeSpec& n : c.nodes) {
    n.devices[0].type = "L40S";
    n.interconnect = LinkSpec{LinkKind::kPcie, gigabytes_per_second(20), microseconds(3)};
    n.pcie = n.interconnect;
  }
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, c, workload(4096));
  const double n = 1e9;
  const double pcie = 20e9;
  const double cross_latency = 2 * kNicLatency + kNetworkLatency;  // 5 us > 3 us
  std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  const double ring = 14 * cross_latency + 1.75 * n / pcie;
  const double intra = 3 * 3e-6 + 0.75 * n / pcie;
  const double inter = 2 * cross_latency + (n / 4) / (kNicBandwidth / 4);
  const double hierarchical = intra + inter + intra;
  expect_close(
      cost->collective_time(Collective::kAllReduce, all, Bytes(n), CollectiveAlgorithm::kRing)
          .value(),
      ring);
  expect_close(cost->collective_time(Collective::kAllReduce, all, Bytes(n),
                                     CollectiveAlgorithm::kHierarchical)
                   .value(),
               hierarchical);
  ASSERT_LT(ring, hierarchical);
  expect_close(
      cost->collective_time(Collective::kAllReduce, all, Bytes(n), CollectiveAlgorithm::kAuto)
          .value(),
      ring);
}

TEST(AnalyticComm, AllToAllPricedAtTheSlowestExchangeStep) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const double n = 1e9;
  const double cross_latency = 2 * kNicLatency + kNetworkLatency;
  std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  // One NIC per device: the step where everyone sends across uses each NIC once.
  const auto own_nics = analytic(m, two_nodes(4), workload(4096));
  expect_close(
      own_nics->collective_time(Collective::kAllToAll, all, Bytes(n), CollectiveAlgorithm::kAuto)
          .value(),
      7 * cross_latency + 0.875 * n / kNicBandwidth);
  // One NIC per node: four transfers share it in that step.
  const auto shared_nic = analytic(m, two_nodes(1), workload(4096));
  expect_close(
      shared_nic->collective_time(Collective::kAllToAll, all, Bytes(n), CollectiveAlgorithm::kRing)
          .value(),
      7 * cross_latency + 0.875 * n / (kNicBandwidth / 4));
}

}  // namespace
}  // namespace motley
