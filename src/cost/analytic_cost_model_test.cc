#include "motley/cost/analytic_cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
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

// Llama 3's output layer: 128,256 tokens over a hidden size of 4,096, untied.
Layer llama_head() {
  Layer head;
  head.name = "head";
  head.kind = LayerKind::kHead;
  head.head = HeadShape{128256, 4096, false};
  head.num_norms = 1;
  return head;
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

DeviceType test_device() {
  DeviceType d;
  d.name = "test";
  d.peak_bf16 = teraflops(100);
  d.peak_fp16 = teraflops(100);
  d.peak_fp32 = FlopsPerSecond(0);
  d.matmul_efficiency = 0.8;
  d.memory_bandwidth = gigabytes_per_second(1000);
  return d;
}

SoftwareStack test_stack() {
  SoftwareStack s;
  s.gemm_efficiency = 0.9;
  s.gemm_half_dim = 64;
  s.memory_efficiency = 0.5;
  s.kernel_overhead = microseconds(4);
  s.attention_forward_efficiency = 0.5;
  s.attention_backward_efficiency = 0.25;
  return s;
}

Kernel gemm(KernelPass pass, double m, double n, double k, GemmSplit split) {
  Kernel g;
  g.kind = KernelKind::kGemm;
  g.pass = pass;
  g.m = m;
  g.n = n;
  g.k = k;
  g.split = split;
  g.flops = 2 * m * n * k;
  return g;
}

// The sum of kernel_time over one pass of one layer: what compute() adds before collectives.
double pass_time(const Layer& layer, const AnalyticCostOptions& o, KernelPass pass,
                 const DeviceType& d, int tp) {
  Workload w = o.workload;
  double sum = 0;
  for (const Kernel& k : layer_kernels(layer, w)) {
    if (k.pass != pass) continue;
    sum += kernel_time(k, d, w.dtype, tp, o.sequence_parallel, w.dropout, o.stack).value();
  }
  return sum;
}

TEST(GemmEfficiency, EachSmallDimensionCostsItsShare) {
  const DeviceType d = test_device();
  SoftwareStack s = test_stack();
  // Every dimension at the half size: (1/2)^3 of 0.8 * 0.9.
  EXPECT_DOUBLE_EQ(gemm_efficiency(s, d, 64, 64, 64), 0.72 / 8);
  // One skinny dimension: 192 / (192 + 64) = 3/4.
  EXPECT_DOUBLE_EQ(gemm_efficiency(s, d, 1e300, 1e300, 192), 0.72 * 0.75);
  s.gemm_half_dim = 0;  // no shape penalty: the large-GEMM rate
  EXPECT_DOUBLE_EQ(gemm_efficiency(s, d, 8, 8, 8), 0.72);
}

TEST(KernelTime, GemmIsTheSlowerOfComputeAndMemoryPlusALaunch) {
  const DeviceType d = test_device();
  SoftwareStack s = test_stack();
  s.gemm_half_dim = 0;
  // 2 * 1024^3 FLOPs at 72 TFLOP/s, against 3 * 1024^2 * 2 bytes at 500 GB/s.
  const Kernel g = gemm(KernelPass::kForward, 1024, 1024, 1024, GemmSplit::kN);
  const double compute = 2.0 * 1024 * 1024 * 1024 / 72e12;
  ASSERT_GT(compute, 3.0 * 1024 * 1024 * 2 / 500e9);
  expect_close(kernel_time(g, d, DType::kBFloat16, 1, false, false, s).value(), compute + 4e-6);
  // Two rows: memory-bound, the weight read dominates.
  const Kernel thin = gemm(KernelPass::kForward, 2, 1024, 1024, GemmSplit::kN);
  const double bytes = 2.0 * (2 * 1024 + 1024 * 1024 + 2 * 1024);
  expect_close(kernel_time(thin, d, DType::kBFloat16, 1, false, false, s).value(),
               bytes / 500e9 + 4e-6);
  // No fp32 rate: the kernel cannot run there.
  EXPECT_TRUE(std::isinf(kernel_time(g, d, DType::kFloat32, 1, false, false, s).value()));
}

TEST(KernelTime, Fp8GemmRunsAtTheFp8PeakAfterCastingItsActivation) {
  DeviceType d = test_device();
  d.peak_fp8 = teraflops(200);
  SoftwareStack s = test_stack();
  s.gemm_half_dim = 0;
  s.fp8_gemm_efficiency = 0.75;
  // 2 * 4096^3 FLOPs at 200 * 0.8 * 0.9 * 0.75 = 108 TFLOP/s (compute-bound: one-byte inputs
  // and a BF16 output are 4 * 4096^2 bytes at 500 GB/s), plus the cast of the 4096 x 4096
  // activation, read in BF16 and written in FP8 (3 bytes an element) at 500 GB/s; a launch
  // each.
  const Kernel g = gemm(KernelPass::kForward, 4096, 4096, 4096, GemmSplit::kN);
  const double product = 2.0 * 4096 * 4096 * 4096 / 108e12;
  ASSERT_GT(product, 4.0 * 4096 * 4096 / 500e9);
  const double cast = 3.0 * 4096 * 4096 / 500e9;
  expect_close(fp8_gemm_time(g, d, DType::kBFloat16, 1, s).value(), product + cast + 8e-6);
  // Tensor parallelism splits the product (column-parallel: n / 4); every rank casts the whole
  // m x k activation.
  const double quarter = product / 4 + cast;
  expect_close(fp8_gemm_time(g, d, DType::kBFloat16, 4, s).value(), quarter + 8e-6);
}

TEST(KernelTime, TensorParallelDividesTheSplitDimension) {
  const DeviceType d = test_device();
  const SoftwareStack s = test_stack();
  // Column-parallel over 4: the output features go from 4096 to 1024, with their efficiency.
  const Kernel column = gemm(KernelPass::kForward, 8192, 4096, 4096, GemmSplit::kN);
  const Kernel quarter = gemm(KernelPass::kForward, 8192, 1024, 4096, GemmSplit::kNone);
  EXPECT_EQ(kernel_time(column, d, DType::kBFloat16, 4, false, false, s),
            kernel_time(quarter, d, DType::kBFloat16, 1, false, false, s));
  // A replicated GEMM does all its work on every device.
  const Kernel replicated = gemm(KernelPass::kForward, 8192, 4096, 4096, GemmSplit::kNone);
  EXPECT_EQ(kernel_time(replicated, d, DType::kBFloat16, 4, false, false, s),
            kernel_time(replicated, d, DType::kBFloat16, 1, false, false, s));
}

TEST(KernelTime, StreamWorkIsSplitOnlyUnderSequenceParallelism) {
  const DeviceType d = test_device();
  const SoftwareStack s = test_stack();
  Kernel norm;
  norm.kind = KernelKind::kStream;
  norm.bytes = 1e9;
  Kernel act = norm;
  act.kind = KernelKind::kElementwise;
  // 1 GB at 500 GB/s.
  expect_close(kernel_time(norm, d, DType::kBFloat16, 4, false, false, s).value(), 2e-3 + 4e-6);
  expect_close(kernel_time(norm, d, DType::kBFloat16, 4, true, false, s).value(), 0.5e-3 + 4e-6);
  expect_close(kernel_time(act, d, DType::kBFloat16, 4, false, false, s).value(), 0.5e-3 + 4e-6);
}

TEST(KernelTime, EagerAttentionPaysForAllScoresAndTheirPasses) {
  const DeviceType d = test_device();
  SoftwareStack s = test_stack();
  s.gemm_half_dim = 0;
  Kernel core;
  core.kind = KernelKind::kAttention;
  core.pass = KernelPass::kForward;
  core.batch_heads = 8;
  core.q_len = 1024;
  core.pairs = 1024.0 * 1025 / 2;
  core.qk_dim = 64;
  core.v_dim = 64;
  core.flops = 2 * 8 * (64 + 64) * core.pairs;
  core.bytes = 1e6;
  // Fused: the causal FLOPs at half the peak (the traffic is far below).
  expect_close(kernel_time(core, d, DType::kBFloat16, 1, false, false, s).value(),
               core.flops / 50e12 + 4e-6);
  s.attention = AttentionImplementation::kEager;
  const double scores = 8.0 * 1024 * 1024;
  auto gemm_time = [&](double flops, double bytes) {
    return std::max(flops / 72e12, bytes / 500e9) + 4e-6;
  };
  const double qk = gemm_time(2 * scores * 64, 2 * 8 * 2 * 1024 * 64.0 + 2 * scores);
  const double av = gemm_time(2 * scores * 64, 2 * scores + 2 * 8 * 2 * 1024 * 64.0);
  const double softmax = 2 * 2 * scores / 500e9 + 4e-6;
  const double dropout = (2 * 2 + 1) * scores / 500e9 + 4e-6;
  expect_close(kernel_time(core, d, DType::kBFloat16, 1, false, true, s).value(),
               qk + av + softmax + dropout);
  expect_close(kernel_time(core, d, DType::kBFloat16, 1, false, false, s).value(),
               qk + av + softmax);
  // Backward: two GEMMs per forward GEMM, the softmax gradient reads two and writes one.
  core.pass = KernelPass::kBackwardInput;
  expect_close(kernel_time(core, d, DType::kBFloat16, 1, false, false, s).value(),
               2 * qk + 2 * av + 3 * 2 * scores / 500e9 + 4e-6);
  // Heads split across TP: a quarter of the batches.
  Kernel quarter = core;
  quarter.batch_heads = 2;
  EXPECT_EQ(kernel_time(core, d, DType::kBFloat16, 4, false, false, s),
            kernel_time(quarter, d, DType::kBFloat16, 1, false, false, s));
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

// ---- compute ----

TEST(AnalyticCompute, EachPassIsTheSumOfItsKernels) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const AnalyticCostOptions o = workload(4096);
  const auto cost = analytic(m, one_node("H100-SXM", 2), o);
  const DeviceType& h100 = catalog("H100-SXM");
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{0}}, RecomputePolicy::kNone);
  expect_close(t.forward.value(), pass_time(m.layers[0], o, KernelPass::kForward, h100, 1));
  expect_close(t.backward_input.value(),
               pass_time(m.layers[0], o, KernelPass::kBackwardInput, h100, 1));
  expect_close(t.backward_weight.value(),
               pass_time(m.layers[0], o, KernelPass::kBackwardWeight, h100, 1));
  EXPECT_EQ(t.recompute.value(), 0.0);
  // norm, fused gate+up, activation, down, residual add: five launches in F.
  int forward_kernels = 0;
  for (const Kernel& k : layer_kernels(m.layers[0], o.workload)) {
    forward_kernels += k.pass == KernelPass::kForward ? 1 : 0;
  }
  EXPECT_EQ(forward_kernels, 5);
}

TEST(AnalyticCompute, TensorParallelSplitsWorkAndAddsTheAllReduce) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  AnalyticCostOptions o = workload(4096);
  const auto cost = analytic(m, one_node("H100-SXM", 2), o);
  const LayerCost& c = cost->layer_costs()[0];
  ASSERT_EQ(c.tp_allreduces, 1);
  const DeviceType& h100 = catalog("H100-SXM");
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{0, 1}}, RecomputePolicy::kNone);
  // Ring all-reduce over 2 devices: 2 latencies and n over NVLink at the stack's bus bandwidth.
  const double allreduce =
      2 * kNvlinkLatency +
      c.output_bytes.value() / (kNvlinkBandwidth * o.stack.collective_efficiency);
  expect_close(t.forward.value(),
               pass_time(m.layers[0], o, KernelPass::kForward, h100, 2) + allreduce);
  expect_close(t.backward_input.value(),
               pass_time(m.layers[0], o, KernelPass::kBackwardInput, h100, 2) + allreduce);
  expect_close(t.backward_weight.value(),
               pass_time(m.layers[0], o, KernelPass::kBackwardWeight, h100, 2));
  // A stack that hides a share of the collectives exposes the rest.
  o.stack.tp_overlap = 0.75;
  const auto overlapped = analytic(m, one_node("H100-SXM", 2), o);
  expect_close(
      overlapped->compute(kFirst, DeviceGroup{{0, 1}}, RecomputePolicy::kNone).forward.value(),
      pass_time(m.layers[0], o, KernelPass::kForward, h100, 2) + 0.25 * allreduce);
}

TEST(AnalyticCompute, TensorParallelOverFourDevicesUsesTheRingFormula) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const AnalyticCostOptions o = workload(4096);
  const auto cost = analytic(m, one_node("H100-SXM", 4), o);
  const LayerCost& c = cost->layer_costs()[0];
  const DeviceType& h100 = catalog("H100-SXM");
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{3, 1, 0, 2}}, RecomputePolicy::kNone);
  const double allreduce =
      6 * kNvlinkLatency +
      1.5 * c.output_bytes.value() / (kNvlinkBandwidth * o.stack.collective_efficiency);
  const double expected = pass_time(m.layers[0], o, KernelPass::kForward, h100, 4) + allreduce;
  expect_close(t.forward.value(), expected);
  // A node too large for the precomputed subsets prices the group directly, the same way.
  const auto big = analytic(m, one_node("H100-SXM", 12), o);
  expect_close(
      big->compute(kFirst, DeviceGroup{{9, 2, 11, 5}}, RecomputePolicy::kNone).forward.value(),
      expected);
}

// Context parallelism: each device of a TP group passes its heads' share of the chunk's keys
// and values, beside the attention core its own kernels take.
TEST(AnalyticCompute, ContextExchangeIsTheChunksKeysAndValuesBesideTheAttentionCore) {
  ModelSpec m = model_of({attention_layer("attn"), ffn_layer("ffn")});
  AnalyticCostOptions o = workload(8192);
  o.workload.context_parallel = 4;
  const auto cost = analytic(m, one_node("H100-SXM", 2), o);
  const DeviceType& h100 = catalog("H100-SXM");
  // 2048 tokens of 8 key and 8 value heads of 128, bf16.
  const double kv = 2.0 * 2048 * (8 * 128 + 8 * 128);
  for (int tp : {1, 2}) {
    const DeviceGroup g{tp == 1 ? std::vector<int>{0} : std::vector<int>{0, 1}};
    const CostModel::ContextExchange x = cost->context_exchange(0, g);
    EXPECT_EQ(x.bytes.value(), kv / tp);
    double forward = 0, backward = 0;
    for (const Kernel& k : layer_kernels(m.layers[0], o.workload)) {
      if (k.kind != KernelKind::kAttention) continue;
      const double t = kernel_time(k, h100, o.workload.dtype, tp, false, false, o.stack).value();
      (k.pass == KernelPass::kForward ? forward : backward) += t;
    }
    EXPECT_GT(forward, 0);
    expect_close(x.forward_attention.value(), forward);
    expect_close(x.backward_attention.value(), backward);
    EXPECT_EQ(cost->context_exchange(1, g).bytes.value(), 0);  // no attention
  }
  o.workload.context_parallel = 1;
  EXPECT_EQ(
      analytic(m, one_node("H100-SXM", 2), o)->context_exchange(0, DeviceGroup{{0}}).bytes.value(),
      0);
}

TEST(AnalyticCompute, SequenceParallelismSplitsTheResidualStream) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  AnalyticCostOptions o = workload(4096);
  const auto plain = analytic(m, one_node("H100-SXM", 4), o);
  o.sequence_parallel = true;
  const auto sp = analytic(m, one_node("H100-SXM", 4), o);
  const DeviceGroup g{{0, 1, 2, 3}};
  // The norm and the residual add run on a quarter of the tokens; the collective costs the same.
  EXPECT_LT(sp->compute(kFirst, g, RecomputePolicy::kNone).forward,
            plain->compute(kFirst, g, RecomputePolicy::kNone).forward);
  const DeviceGroup one{{0}};
  EXPECT_EQ(sp->compute(kFirst, one, RecomputePolicy::kNone).forward,
            plain->compute(kFirst, one, RecomputePolicy::kNone).forward);
}

TEST(AnalyticCompute, RecomputePolicies) {
  ModelSpec m = model_of({attention_layer("attn")});
  const AnalyticCostOptions o = workload(4096);
  const auto cost = analytic(m, one_node("H100-SXM", 2), o);
  const DeviceType& h100 = catalog("H100-SXM");
  for (int tp : {1, 2}) {
    DeviceGroup g;
    for (int d = 0; d < tp; ++d) g.devices.push_back(d);
    ComputeTimes none = cost->compute(kFirst, g, RecomputePolicy::kNone);
    ComputeTimes selective = cost->compute(kFirst, g, RecomputePolicy::kSelective);
    ComputeTimes full = cost->compute(kFirst, g, RecomputePolicy::kFull);
    EXPECT_EQ(none.recompute.value(), 0.0);
    // The attention core's forward kernel only (no collective).
    double core = 0;
    for (const Kernel& k : layer_kernels(m.layers[0], o.workload)) {
      if (k.kind == KernelKind::kAttention && k.pass == KernelPass::kForward) {
        core += kernel_time(k, h100, DType::kBFloat16, tp, false, false, o.stack).value();
      }
    }
    ASSERT_GT(core, 0);
    expect_close(selective.recompute.value(), core);
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
  const AnalyticCostOptions o = workload(4096);
  const auto cost = analytic(m, c, o);
  ComputeTimes a100 = cost->compute(kFirst, DeviceGroup{{1}}, RecomputePolicy::kNone);
  expect_close(a100.forward.value(),
               pass_time(m.layers[0], o, KernelPass::kForward, catalog("A100-80GB"), 1));
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
  m.times = MeasuredTimes{milliseconds(10), milliseconds(12), milliseconds(8), std::nullopt,
                          std::nullopt};
  m.times_by_device["H100"] =
      MeasuredTimes{milliseconds(4), std::nullopt, std::nullopt, std::nullopt, std::nullopt};
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

// A measured fused backward (B and W in one pass) is what a fused backward costs; without one
// it costs B + W. Scaled to another device like the other times.
TEST(AnalyticMeasured, FusedBackwardAsMeasured) {
  ModelSpec m = model_of({measured_layer(), measured_layer()});
  m.layers[1].name = "mixer2";
  m.layers[0].measured->times.backward = milliseconds(15);
  const auto cost = analytic(m, mixed_cluster(), workload(4096));
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{0}}, RecomputePolicy::kNone);
  EXPECT_DOUBLE_EQ(t.fused_backward().value(), 15e-3);
  EXPECT_DOUBLE_EQ(t.backward().value(), 20e-3);
  t = cost->compute(LayerRange{1, 2}, DeviceGroup{{0}}, RecomputePolicy::kNone);
  EXPECT_DOUBLE_EQ(t.fused_backward().value(), 20e-3);
  t = cost->compute(LayerRange{0, 2}, DeviceGroup{{0}}, RecomputePolicy::kNone);
  EXPECT_DOUBLE_EQ(t.fused_backward().value(), 35e-3);
  const double ratio = achievable("A100-80GB") / achievable("MI300X");
  t = cost->compute(kFirst, DeviceGroup{{3}}, RecomputePolicy::kNone);
  expect_close(t.fused_backward().value(), 15e-3 * ratio);
}

// A profile whose W walks the whole backward again (as the executor's did before it split its
// backward at the weight products): a stage starting
// at the first layer takes data, needs no input gradient, and its B does nothing while its W is
// the walk; its fused backward costs the same. Other stages, and profiles timing W alone, keep
// B and W as measured.
TEST(AnalyticMeasured, AFullBackwardWeightPassLeavesTheFirstStageNoInputGradient) {
  ModelSpec m = model_of({measured_layer(), measured_layer(), measured_layer()});
  m.layers[1].name = "mixer1";
  m.layers[2].name = "mixer2";
  m.layers[1].measured->times.backward = milliseconds(17);
  const auto plain = analytic(m, mixed_cluster(), workload(4096));
  for (Layer& l : m.layers) l.measured->weight_pass = WeightPass::kFullBackward;
  const auto walks = analytic(m, mixed_cluster(), workload(4096));
  for (const DeviceGroup& g : {DeviceGroup{{0}}, DeviceGroup{{0, 1}}, DeviceGroup{{3}}}) {
    const ComputeTimes before = plain->compute(LayerRange{0, 2}, g, RecomputePolicy::kNone);
    const ComputeTimes after = walks->compute(LayerRange{0, 2}, g, RecomputePolicy::kNone);
    EXPECT_EQ(after.backward_input.value(), 0.0);
    EXPECT_DOUBLE_EQ(after.forward.value(), before.forward.value());
    expect_close(after.fused_backward().value(), before.fused_backward().value());
    const ComputeTimes layers =
        plain->compute(LayerRange{0, 2}, DeviceGroup{{g.devices[0]}}, RecomputePolicy::kNone);
    // W: the measured walks (no tensor parallelism: exactly the layers' W).
    if (g.tp() == 1) {
      EXPECT_DOUBLE_EQ(after.backward_weight.value(), layers.backward_weight.value());
    }
    const ComputeTimes middle = walks->compute(LayerRange{1, 3}, g, RecomputePolicy::kNone);
    const ComputeTimes middle_plain = plain->compute(LayerRange{1, 3}, g, RecomputePolicy::kNone);
    EXPECT_DOUBLE_EQ(middle.backward_input.value(), middle_plain.backward_input.value());
    EXPECT_DOUBLE_EQ(middle.backward_weight.value(), middle_plain.backward_weight.value());
  }
  const ComputeTimes first =
      walks->compute(LayerRange{0, 2}, DeviceGroup{{0}}, RecomputePolicy::kNone);
  EXPECT_DOUBLE_EQ(first.backward_weight.value(), 16e-3);
  EXPECT_DOUBLE_EQ(first.fused_backward().value(), 20e-3 + 17e-3);
}

// A measured optimizer step: summed over the range on its own device type, scaled by the ratio
// of memory bandwidths on another, split over the TP group and, under ZeRO, over the replicas;
// a layer of the range without a measurement is priced from its memory traffic.
TEST(AnalyticMeasured, OptimizerStepAsMeasuredAndShardedAsTheParameters) {
  ModelSpec m = model_of({measured_layer(), measured_layer()});
  m.layers[1].name = "mixer2";
  m.layers[0].measured->optimizer_step = milliseconds(3);
  m.layers[1].measured->optimizer_step = milliseconds(5);
  const auto cost = analytic(m, mixed_cluster(), workload(4096));
  const MemoryOptions plain;
  expect_close(cost->optimizer_step_time(LayerRange{0, 2}, DeviceGroup{{0}}, plain)->value(), 8e-3);
  expect_close(cost->optimizer_step_time(LayerRange{0, 2}, DeviceGroup{{0, 1}}, plain)->value(),
               4e-3);
  MemoryOptions zero;
  zero.zero_stage = 1;
  zero.data_parallel = 4;
  expect_close(cost->optimizer_step_time(LayerRange{1, 2}, DeviceGroup{{0}}, zero)->value(),
               5e-3 / 4);
  const double ratio = catalog("A100-80GB").memory_bandwidth / catalog("MI300X").memory_bandwidth;
  expect_close(cost->optimizer_step_time(LayerRange{0, 1}, DeviceGroup{{3}}, plain)->value(),
               3e-3 * ratio);
  m.layers[1].measured->optimizer_step.reset();
  const auto partial = analytic(m, mixed_cluster(), workload(4096));
  const double traffic =
      partial->optimizer_step_time(LayerRange{1, 2}, DeviceGroup{{0}}, plain)->value();
  EXPECT_GT(traffic, 0);
  expect_close(partial->optimizer_step_time(LayerRange{0, 2}, DeviceGroup{{0}}, plain)->value(),
               3e-3 + traffic);
}

// Mixed-precision AdamW as memory traffic, per parameter a device updates (p of them, fp32
// gradients): the fp16 loss scale's unscale and inf check (read and write, 8), the gradient
// norm (4), the update (gradients 4, master weights and two moments read and written, 24), the
// master weights copied into the working ones (4 + 2), and every gradient the device holds
// zeroed (4): 50 bytes for fp16, 42 for bf16 (no loss scale); fp32 has no master copy and
// updates the weights in place: 4 + 4 + 16 + 8 + 4 = 36. At the stack's memory-bound rate.
TEST(AnalyticOptimizerStep, MixedPrecisionAdamAsMemoryTraffic) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const DeviceType& h100 = catalog("H100-SXM");
  for (const auto& [dtype, bytes] : std::vector<std::pair<DType, double>>{
           {DType::kFloat16, 50}, {DType::kBFloat16, 42}, {DType::kFloat32, 36}}) {
    AnalyticCostOptions o = workload(4096);
    o.workload.dtype = dtype;
    o.stack.memory_efficiency = 0.5;
    const auto cost = analytic(m, one_node("H100-SXM", 8), o);
    const double p = static_cast<double>(cost->layer_costs()[0].stored_params);
    const double rate = h100.memory_bandwidth.value() * 0.5;
    expect_close(cost->optimizer_step_time(kFirst, DeviceGroup{{0}}, MemoryOptions{})->value(),
                 bytes * p / rate);
    // TP 2 and ZeRO-1 over 4 replicas: the update covers p / 8, the zeroing all p / 2
    // gradients of the device.
    MemoryOptions zero;
    zero.zero_stage = 1;
    zero.data_parallel = 4;
    expect_close(cost->optimizer_step_time(kFirst, DeviceGroup{{0, 1}}, zero)->value(),
                 ((bytes - 4) * p / 8 + 4 * p / 2) / rate);
  }
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

TEST(AnalyticMeasured, TensorParallelWithoutAProfileIsSplitAtALossPlusCollectives) {
  ModelSpec m = model_of({measured_layer()});
  const AnalyticCostOptions o = workload(4096);
  const auto cost = analytic(m, mixed_cluster(), o);
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{0, 1}}, RecomputePolicy::kNone);
  // Half the work at 5 % loss for one doubling, and a block's two ring all-reduces of the
  // layer's 1e7 output bytes over the pair's NVLink at the stack's bus bandwidth.
  const double split = 1.05 / 2;
  const double allreduces =
      2 * (2 * kNvlinkLatency + 1e7 / (kNvlinkBandwidth * o.stack.collective_efficiency));
  expect_close(t.forward.value(), 10e-3 * split + allreduces);
  expect_close(t.backward_input.value(), 12e-3 * split + allreduces);
  expect_close(t.backward_weight.value(), 8e-3 * split);
  EXPECT_GT(t.forward.value(), 5e-3);  // never the free, ideal split
}

TEST(AnalyticMeasured, AProfileAtTheTensorParallelDegreeIsUsedAsMeasured) {
  ModelSpec m = model_of({measured_layer()});
  m.layers[0].measured->times_by_tp["A100"][2] = MeasuredTimes{
      milliseconds(7), milliseconds(8), milliseconds(5), milliseconds(1), std::nullopt};
  const auto cost = analytic(m, mixed_cluster(), workload(4096));
  ComputeTimes t = cost->compute(kFirst, DeviceGroup{{0, 1}}, RecomputePolicy::kSelective);
  EXPECT_DOUBLE_EQ(t.forward.value(), 7e-3);  // collectives included in the measurement
  EXPECT_DOUBLE_EQ(t.backward_input.value(), 8e-3);
  EXPECT_DOUBLE_EQ(t.backward_weight.value(), 5e-3);
  EXPECT_DOUBLE_EQ(t.recompute.value(), 1e-3);
  // A degree below 2 is refused, naming the field.
  m.layers[0].measured->times_by_tp["A100"][1] = MeasuredTimes{};
  Status s = AnalyticCostModel::validate(m, workload(4096), "prof.json");
  EXPECT_NE(s.message().find("times_by_tp.A100"), std::string::npos) << s.message();
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
  o.zero_stage = 1;
  StageMemory sharded = cost->stage_memory(kFirst, DeviceGroup{{0}}, o);
  EXPECT_DOUBLE_EQ(sharded.optimizer_state.value(), 3 * p);
  EXPECT_EQ(sharded.weights, unsharded.weights);
  EXPECT_EQ(sharded.gradients, unsharded.gradients);
  EXPECT_EQ(sharded.communication_buffers, unsharded.communication_buffers);
}

// ZeRO-2 shards the gradients too and holds two buckets of whole ones while they are
// reduce-scattered; ZeRO-3 shards the weights and holds the two largest layers' whole weights
// (the one in use and the one gathered ahead).
// Expert parallelism e keeps 1/e of the routed experts' state per replica; under ZeRO-1 their
// optimizer shards spread over the d/e replicas holding the same experts. The dispatch moves
// b s top_k hidden dtype bytes.
TEST(AnalyticMemory, ExpertParallelismSplitsTheRoutedExperts) {
  Layer moe;
  moe.name = "moe";
  moe.kind = LayerKind::kMoe;
  moe.moe = MoeShape{4096, 8, 2, 14336};
  moe.num_norms = 1;
  const ModelSpec model = model_of({moe});  // the cost model keeps a reference to it
  const auto cost = analytic(model, one_node("H100-SXM", 2), workload(4096));
  const auto& lc = cost->layer_costs();
  const double p = static_cast<double>(lc[0].stored_params);
  const double experts = static_cast<double>(lc[0].routed_expert_params);
  EXPECT_DOUBLE_EQ(experts, 8.0 * 3 * 4096 * 14336);
  EXPECT_DOUBLE_EQ(cost->expert_dispatch_bytes(0).value(), 2.0 * 4096 * 2 * 4096);
  MemoryOptions o;
  o.data_parallel = 4;
  o.expert_parallel = 2;
  StageMemory m = cost->stage_memory(kFirst, DeviceGroup{{0}}, o);
  EXPECT_DOUBLE_EQ(m.weights.value(), 2 * (p - experts / 2));
  EXPECT_DOUBLE_EQ(m.gradients.value(), 4 * (p - experts / 2));
  EXPECT_DOUBLE_EQ(m.optimizer_state.value(), 12 * (p - experts / 2));
  o.zero_stage = 1;
  m = cost->stage_memory(kFirst, DeviceGroup{{0}}, o);
  EXPECT_DOUBLE_EQ(m.optimizer_state.value(), 12 * ((p - experts) / 4 + experts / 2 / 2));
}

TEST(AnalyticMemory, ZeroTwoAndThreeShardGradientsAndWeightsWithTheirBuffers) {
  ModelSpec m = model_of({ffn_layer("f0"), attention_layer("a0"), ffn_layer("f1")});
  const auto cost = analytic(m, one_node("H100-SXM", 2), workload(4096));
  const auto& lc = cost->layer_costs();
  const double ffn = static_cast<double>(lc[0].stored_params);
  const double attention = static_cast<double>(lc[1].stored_params);
  const double p = 2 * ffn + attention;
  ASSERT_GT(ffn, attention);
  MemoryOptions o;
  o.data_parallel = 4;
  const StageMemory plain = cost->stage_memory(LayerRange{0, 3}, DeviceGroup{{0}}, o);
  // Megatron-Core's bucket: max(40e6, 1e6 x 4) parameters; two of them, at most the stage's.
  const double buffered = std::min(p, 2 * 40e6);
  o.zero_stage = 2;
  const StageMemory two = cost->stage_memory(LayerRange{0, 3}, DeviceGroup{{0}}, o);
  EXPECT_DOUBLE_EQ(two.weights.value(), 2 * p);
  EXPECT_DOUBLE_EQ(two.gradients.value(), 4 * p / 4);
  EXPECT_DOUBLE_EQ(two.optimizer_state.value(), 12 * p / 4);
  EXPECT_DOUBLE_EQ((two.communication_buffers - plain.communication_buffers).value(), 4 * buffered);
  o.zero_stage = 3;
  const StageMemory three = cost->stage_memory(LayerRange{0, 3}, DeviceGroup{{0}}, o);
  EXPECT_DOUBLE_EQ(three.weights.value(), 2 * p / 4);
  EXPECT_DOUBLE_EQ(three.gradients.value(), 4 * p / 4);
  EXPECT_DOUBLE_EQ((three.communication_buffers - plain.communication_buffers).value(),
                   4 * buffered + 2 * 2 * ffn);
  // One replica: nothing to shard, no buffers.
  o.data_parallel = 1;
  const StageMemory alone = cost->stage_memory(LayerRange{0, 3}, DeviceGroup{{0}}, o);
  EXPECT_DOUBLE_EQ(alone.weights.value(), 2 * p);
  EXPECT_EQ(alone.communication_buffers, plain.communication_buffers);
}

// ZeRO-3's gathered weights over every range of eleven layers of two sizes (ties included): the
// two largest layers of the range, as a walk over its layers finds them.
TEST(AnalyticMemory, ZeroThreeHoldsTheTwoLargestLayersOfEveryRange) {
  std::vector<Layer> layers;
  for (const char kind : std::string("faafaffafaa")) {
    const std::string name = std::string(1, kind) + std::to_string(layers.size());
    layers.push_back(kind == 'f' ? ffn_layer(name) : attention_layer(name));
  }
  const ModelSpec m = model_of(layers);
  const auto cost = analytic(m, one_node("H100-SXM", 2), workload(4096));
  const auto& lc = cost->layer_costs();
  MemoryOptions o;
  o.data_parallel = 4;
  const int n = static_cast<int>(layers.size());
  for (int begin = 0; begin < n; ++begin) {
    for (int end = begin + 1; end <= n; ++end) {
      std::vector<double> params;
      for (int l = begin; l < end; ++l) params.push_back(static_cast<double>(lc[l].stored_params));
      std::sort(params.rbegin(), params.rend());
      const double largest = params[0] + (params.size() > 1 ? params[1] : 0.0);
      o.zero_stage = 2;
      const Bytes two =
          cost->stage_memory(LayerRange{begin, end}, DeviceGroup{{0}}, o).communication_buffers;
      o.zero_stage = 3;
      const Bytes three =
          cost->stage_memory(LayerRange{begin, end}, DeviceGroup{{0}}, o).communication_buffers;
      EXPECT_DOUBLE_EQ((three - two).value(), 2 * largest) << begin << ".." << end;
    }
  }
}

TEST(AnalyticMemory, ActivationsPerPolicyTimesInFlightAndSplitByTensorParallelism) {
  ModelSpec m = model_of({attention_layer("a0"), ffn_layer("f0"), attention_layer("a1")});
  // Eager attention keeps its score tensors without recompute.
  AnalyticCostOptions eager = workload(4096);
  eager.stack = find_software_stack("megatron-lm-2022").value();
  ASSERT_EQ(eager.stack.attention, AttentionImplementation::kEager);
  const auto cost = analytic(m, one_node("H100-SXM", 2), eager);
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
  // A fused kernel keeps no scores, recompute or not: without recompute, what selective keeps.
  const auto fused = analytic(m, one_node("H100-SXM", 2), workload(4096));
  ASSERT_EQ(workload(4096).stack.attention, AttentionImplementation::kFused);
  const auto& fl = fused->layer_costs();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(fl[i].activation_bytes[0], lc[i].activation_bytes[1]) << i;
    EXPECT_EQ(fl[i].activation_bytes[1], lc[i].activation_bytes[1]) << i;
    EXPECT_EQ(fl[i].activation_bytes[2], lc[i].activation_bytes[2]) << i;
  }
  EXPECT_LT(fl[0].activation_bytes[0], lc[0].activation_bytes[0]);
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

// 4,096 tokens of bf16 priced under the named built-in stack.
AnalyticCostOptions on_stack(const char* stack) {
  AnalyticCostOptions o = workload(4096);
  o.stack = find_software_stack(stack).value();
  return o;
}

// megatron-core-fp8 prices the linear layers' GEMMs with fp8_gemm_time on a device with FP8
// units and leaves the rest as megatron-core prices it: the head, attention's core and the
// element-wise work, and every kernel of a device without FP8 units.
TEST(AnalyticFp8, LinearLayersOnlyAndOnlyWhereTheDeviceHasFp8) {
  const ModelSpec m = model_of({attention_layer("a"), ffn_layer("f"), llama_head()});
  AnalyticCostOptions bf16 = on_stack("megatron-core");
  const AnalyticCostOptions fp8 = on_stack("megatron-core-fp8");
  bf16.stack.fused_cross_entropy = fp8.stack.fused_cross_entropy;  // FP8 is the one difference
  ASSERT_TRUE(fp8.stack.fp8_linear);
  const DeviceGroup one{{0}};
  for (const char* type : {"H100-SXM", "A100-80GB"}) {
    const auto plain = analytic(m, one_node(type, 1), bf16);
    const auto quick = analytic(m, one_node(type, 1), fp8);
    const DeviceType& d = *find_device_type(type).value();
    for (int layer = 0; layer < 3; ++layer) {
      const LayerRange range{layer, layer + 1};
      const ComputeTimes a = plain->compute(range, one, RecomputePolicy::kNone);
      const ComputeTimes b = quick->compute(range, one, RecomputePolicy::kNone);
      if (d.peak_fp8.value() == 0 || layer == 2) {
        // (Up to rounding: the model keeps prefix sums over layers, which differ before it.)
        expect_close(b.forward.value(), a.forward.value());
        expect_close(b.backward_input.value(), a.backward_input.value());
        expect_close(b.backward_weight.value(), a.backward_weight.value());
        continue;
      }
      // Each GEMM's BF16 time gives way to its FP8 time; nothing else changes.
      Workload w = bf16.workload;
      double forward = a.forward.value();
      for (const Kernel& k : layer_kernels(m.layers[layer], w)) {
        if (k.kind != KernelKind::kGemm || k.pass != KernelPass::kForward) continue;
        forward += fp8_gemm_time(k, d, w.dtype, 1, fp8.stack).value() -
                   kernel_time(k, d, w.dtype, 1, false, w.dropout, bf16.stack).value();
      }
      expect_close(b.forward.value(), forward);
      // At the stack's FP8 rate every GEMM is quicker than in BF16, so each layer is too.
      EXPECT_LT(b.forward.value(), a.forward.value()) << layer;
    }
  }
}

// The cross-entropy's passes over the logits (T x V, split V/t ways): unfused (Megatron-LM's
// vocabulary-parallel cross-entropy on fp32 logits) reads and writes (d + 36) bytes per logit
// in six kernels forward and (d + 12) in two backward, keeping the 4-byte softmax; fused, d in
// one kernel forward and 2d in one backward, keeping the d-byte gradient. Nothing else moves.
TEST(AnalyticLoss, CrossEntropyPassesByImplementation) {
  const ModelSpec m = model_of({attention_layer("a"), ffn_layer("f"), llama_head()});
  AnalyticCostOptions unfused = on_stack("megatron-core");
  AnalyticCostOptions fused = unfused;
  ASSERT_FALSE(unfused.stack.fused_cross_entropy);
  fused.stack.fused_cross_entropy = true;
  const DeviceType& h100 = *find_device_type("H100-SXM").value();
  const double bandwidth = h100.memory_bandwidth.value() * unfused.stack.memory_efficiency;
  const double launch = unfused.stack.kernel_overhead.value();
  const double d = 2, tokens = 4096, vocab = 128256;
  const auto slow = analytic(m, one_node("H100-SXM", 2), unfused);
  const auto quick = analytic(m, one_node("H100-SXM", 2), fused);
  EXPECT_EQ(slow->layer_costs()[2].loss_softmax_bytes.value(), 4 * tokens * vocab);
  EXPECT_EQ(slow->layer_costs()[1].loss_softmax_bytes.value(), 0);
  for (const DeviceGroup& group : {DeviceGroup{{0}}, DeviceGroup{{0, 1}}}) {
    const double t = static_cast<double>(group.devices.size());
    const double logits = tokens * vocab / t;
    for (int layer = 0; layer < 3; ++layer) {
      const LayerRange range{layer, layer + 1};
      const ComputeTimes a = slow->compute(range, group, RecomputePolicy::kNone);
      const ComputeTimes b = quick->compute(range, group, RecomputePolicy::kNone);
      const bool head = layer == 2;
      expect_close(a.forward.value() - b.forward.value(),
                   head ? (d + 36 - d) * logits / bandwidth + 5 * launch : 0.0);
      expect_close(a.backward_input.value() - b.backward_input.value(),
                   head ? (d + 12 - 2 * d) * logits / bandwidth + launch : 0.0);
      expect_close(a.backward_weight.value(), b.backward_weight.value());
      for (RecomputePolicy policy :
           {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
        MemoryOptions o;
        o.recompute = policy;
        const double spared = head && policy != RecomputePolicy::kFull ? (4 - d) * logits : 0.0;
        expect_close(slow->stage_memory(range, group, o).activations_per_micro_batch.value() -
                         quick->stage_memory(range, group, o).activations_per_micro_batch.value(),
                     spared);
      }
    }
  }
}

// megatron-core-fp8 keeps the linear layers' saved inputs as 1-byte copies on a device with FP8
// units: the attention's QKV and output-projection inputs (T h each: 32 heads x 128 = 4096), the
// MLP's input and its down projection's input (T h + T f), at half their bf16 bytes; the head
// and full recompute keep what megatron-core keeps, as does every layer on an A100.
TEST(AnalyticFp8, LinearLayersKeepTheirSavedInputsInFp8) {
  const ModelSpec m = model_of({attention_layer("a"), ffn_layer("f"), llama_head()});
  AnalyticCostOptions bf16 = on_stack("megatron-core");
  const AnalyticCostOptions fp8 = on_stack("megatron-core-fp8");
  bf16.stack.fused_cross_entropy = fp8.stack.fused_cross_entropy;  // FP8 is the one difference
  const double tokens = 4096, h = 4096, f = 14336;
  const std::array<double, 3> linear_inputs = {2 * tokens * (h + h), 2 * tokens * (h + f), 0};
  for (const char* type : {"H100-SXM", "A100-80GB"}) {
    const auto plain = analytic(m, one_node(type, 2), bf16);
    const auto quick = analytic(m, one_node(type, 2), fp8);
    const bool has_fp8 = find_device_type(type).value()->peak_fp8.value() > 0;
    for (int layer = 0; layer < 3; ++layer) {
      EXPECT_EQ(plain->layer_costs()[layer].linear_input_bytes.value(), linear_inputs[layer]);
      for (RecomputePolicy policy :
           {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull}) {
        MemoryOptions o;
        o.recompute = policy;
        for (const DeviceGroup& group : {DeviceGroup{{0}}, DeviceGroup{{0, 1}}}) {
          const double t = static_cast<double>(group.devices.size());
          const LayerRange range{layer, layer + 1};
          const double saved =
              has_fp8 && policy != RecomputePolicy::kFull ? linear_inputs[layer] / 2 / t : 0.0;
          expect_close(
              quick->stage_memory(range, group, o).activations_per_micro_batch.value(),
              plain->stage_memory(range, group, o).activations_per_micro_batch.value() - saved);
        }
      }
    }
  }
}

// p = 3 * 4096 * 14336 + 4096 = 176,164,864 parameters per FFN layer.
TEST(AnalyticGradientBuckets, StageParametersPerDeviceOverTheStacksBucket) {
  ModelSpec m = model_of({ffn_layer("f0"), ffn_layer("f1"), ffn_layer("f2")});
  AnalyticCostOptions o = workload(4096);
  o.stack = find_software_stack("megatron-core").value();
  const auto cost = analytic(m, one_node("H100-SXM", 2), o);
  const double p = static_cast<double>(cost->layer_costs()[0].stored_params);
  ASSERT_EQ(p, 3.0 * 4096 * 14336 + 4096);
  // Megatron-Core: buckets of max(40 M, 1 M per replica) parameters.
  EXPECT_EQ(cost->gradient_buckets(LayerRange{0, 3}, DeviceGroup{{0}}, 8),
            static_cast<int>(std::ceil(3 * p / 40e6)));  // 14
  EXPECT_EQ(cost->gradient_buckets(LayerRange{0, 3}, DeviceGroup{{0, 1}}, 8),
            static_cast<int>(std::ceil(3 * p / 2 / 40e6)));  // 7
  EXPECT_EQ(cost->gradient_buckets(LayerRange{0, 3}, DeviceGroup{{0}}, 100),
            static_cast<int>(std::ceil(3 * p / 100e6)));  // 6
  EXPECT_EQ(cost->gradient_buckets(kFirst, DeviceGroup{{0}}, 1000), 1);
  // Megatron-LM of 2022 reduces after the backward: one bucket.
  o.stack = find_software_stack("megatron-lm-2022").value();
  EXPECT_EQ(analytic(m, one_node("H100-SXM", 2), o)
                ->gradient_buckets(LayerRange{0, 3}, DeviceGroup{{0}}, 8),
            1);
  // DDP's 25 MiB of fp32 gradients.
  o.stack = find_software_stack("pytorch-fsdp").value();
  EXPECT_EQ(analytic(m, one_node("H100-SXM", 2), o)->gradient_buckets(kFirst, DeviceGroup{{0}}, 8),
            static_cast<int>(std::ceil(p / (25.0 * 1024 * 1024 / 4))));  // 27
}

TEST(ExposedGradientReduction, OnlyWhatTheLastPassCannotHide) {
  // One bucket: all of it after the pass.
  EXPECT_EQ(exposed_gradient_reduction(Seconds(3), 1, Seconds(10)), Seconds(3));
  // Short reduction under a long pass: only the last bucket.
  EXPECT_DOUBLE_EQ(exposed_gradient_reduction(Seconds(1), 4, Seconds(2)).value(), 0.25);
  // Long reduction: the first bucket starts a quarter into the pass, the rest follow back to
  // back: 10 - 2 * 3/4.
  EXPECT_DOUBLE_EQ(exposed_gradient_reduction(Seconds(10), 4, Seconds(2)).value(), 8.5);
  // The two bounds meet where reduction = pass.
  EXPECT_DOUBLE_EQ(exposed_gradient_reduction(Seconds(2), 2, Seconds(2)).value(), 1.0);
}

// ZeRO-2 and -3 per micro-batch: a pass lengthens only by what its collective takes beyond it.
TEST(ShardedPassOverhead, OnlyWhatThePassCannotHide) {
  const DataParallelSync whole{Seconds(3), Seconds(2)};  // reduce-scatter 3 s, all-gather 2 s
  for (int stage : {0, 1}) {
    const ShardedPassOverhead o =
        sharded_pass_overhead(stage, whole, Seconds(1), Seconds(1), Seconds(1));
    EXPECT_EQ(o.forward + o.backward + o.gradient, Seconds(0)) << stage;
  }
  ShardedPassOverhead o = sharded_pass_overhead(2, whole, Seconds(1), Seconds(1.5), Seconds(1));
  EXPECT_EQ(o.forward, Seconds(0));
  EXPECT_EQ(o.backward, Seconds(0));
  EXPECT_DOUBLE_EQ(o.gradient.value(), 2.0);  // 3 - 1
  o = sharded_pass_overhead(3, whole, Seconds(1), Seconds(1.5), Seconds(4));
  EXPECT_DOUBLE_EQ(o.forward.value(), 1.0);   // 2 - 1
  EXPECT_DOUBLE_EQ(o.backward.value(), 0.5);  // 2 - 1.5
  EXPECT_EQ(o.gradient, Seconds(0));          // 3 under a 4 s pass
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

// The links' rates as the topology states them: no stack efficiency, so the alpha-beta formulas
// hold exactly.
AnalyticCostOptions ideal_links(AnalyticCostOptions o) {
  o.stack.collective_efficiency = 1.0;
  o.stack.p2p_efficiency = 1.0;
  return o;
}

TEST(AnalyticComm, StackEfficienciesScaleTheBandwidthNotTheLatency) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  AnalyticCostOptions o = workload(4096);
  o.stack.p2p_efficiency = 0.5;
  o.stack.collective_efficiency = 0.25;
  const auto cost = analytic(m, two_nodes(), o);
  const Bytes n(1e8);
  EXPECT_DOUBLE_EQ(cost->p2p_time(0, 1, n).value(),
                   kNvlinkLatency + 1e8 / (0.5 * kNvlinkBandwidth));
  // Two devices: one step each way, n / 2 per step, at a quarter of NVLink.
  const std::vector<int> pair{0, 1};
  EXPECT_DOUBLE_EQ(
      cost->collective_time(Collective::kAllReduce, pair, n, CollectiveAlgorithm::kRing).value(),
      2 * kNvlinkLatency + 1e8 / (0.25 * kNvlinkBandwidth));
}

TEST(AnalyticComm, PipelineMessagesTravelInSharesOnDisjointPaths) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  AnalyticCostOptions o = workload(4096);
  const auto own_nics = analytic(m, two_nodes(4), o);
  const DeviceGroup src{{0, 1, 2, 3}};
  const DeviceGroup dst{{4, 5, 6, 7}};
  CostModel::PipelineMessage x = own_nics->pipeline_message(src, dst, Bytes(8e6));
  EXPECT_DOUBLE_EQ(x.bytes.value(), 2e6);  // each rank its quarter, over its own NIC
  EXPECT_DOUBLE_EQ(x.bandwidth_efficiency, o.stack.p2p_efficiency);
  // One NIC per node: the shares queue on it, the whole message crosses it.
  const auto shared = analytic(m, two_nodes(1), o);
  EXPECT_DOUBLE_EQ(shared->pipeline_message(src, dst, Bytes(8e6)).bytes.value(), 8e6);
  // Without the scatter-gather optimization, always the whole message.
  o.stack.pipeline_scatter_gather = false;
  const auto whole = analytic(m, two_nodes(4), o);
  EXPECT_DOUBLE_EQ(whole->pipeline_message(src, dst, Bytes(8e6)).bytes.value(), 8e6);
}

TEST(AnalyticComm, PointToPoint) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, two_nodes(), ideal_links(workload(4096)));
  const Bytes n(1e8);
  EXPECT_EQ(cost->p2p_time(3, 3, n).value(), 0.0);
  EXPECT_DOUBLE_EQ(cost->p2p_time(0, 1, n).value(), kNvlinkLatency + 1e8 / kNvlinkBandwidth);
  // Across nodes: NIC, fabric and NIC latencies; the NIC is the bottleneck.
  EXPECT_DOUBLE_EQ(cost->p2p_time(1, 5, n).value(),
                   kNicLatency + kNetworkLatency + kNicLatency + 1e8 / kNicBandwidth);
}

TEST(AnalyticComm, RingUsesTheSlowestHopAndLargestLatency) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, two_nodes(), ideal_links(workload(4096)));
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

// xGMI joins every pair of a node's devices by a link of its own: the collective library's
// channels, each a ring in its own order, use a device's k - 1 links at once, so a ring
// collective over k devices moves its bytes at k - 1 links' rate. Two devices share one link.
// Behind PCIe switches the single ring stays (the NVSwitch case is the test above).
TEST(AnalyticComm, RingsInAnXgmiMeshUseEveryLinkOfADevice) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  constexpr double kPair = 64e9, kHop = 3e-6;
  ClusterSpec c = one_node("MI300X", 8);
  c.nodes[0].interconnect = LinkSpec{LinkKind::kXgmi, BytesPerSecond(kPair), Seconds(kHop)};
  const auto cost = analytic(m, c, ideal_links(workload(4096)));
  const double n = 1e9;
  auto all_reduce = [&](const std::vector<int>& devices) {
    return cost
        ->collective_time(Collective::kAllReduce, devices, Bytes(n), CollectiveAlgorithm::kRing)
        .value();
  };
  expect_close(all_reduce({0, 1, 2, 3, 4, 5, 6, 7}), 14 * kHop + 1.75 * n / (7 * kPair));
  expect_close(all_reduce({0, 1, 2, 3}), 6 * kHop + 1.5 * n / (3 * kPair));
  expect_close(all_reduce({2, 5}), 2 * kHop + 1.0 * n / kPair);
  // One ring alone, as ring_parameters prices it, crosses one link per hop.
  EXPECT_DOUBLE_EQ(cost->ring_parameters(std::vector<int>{0, 1, 2, 3}).bandwidth.value(), kPair);
  EXPECT_DOUBLE_EQ(cost->channel_parameters(std::vector<int>{0, 1, 2, 3}).bandwidth.value(),
                   3 * kPair);
  // A tensor-parallel layer's collectives are priced on the same channels. Doubling every
  // link's rate halves their byte time: a TP-4 group's 1.5 x the bytes over 3 links, a TP-2
  // group's 1 x the bytes over one, so the TP-4 group saves half as much (over one ring it
  // would save 1.5 times as much).
  ClusterSpec doubled = c;
  doubled.nodes[0].interconnect.bandwidth = BytesPerSecond(2 * kPair);
  const auto faster = analytic(m, doubled, ideal_links(workload(4096)));
  auto saved = [&](const DeviceGroup& g) {
    return (cost->compute(LayerRange{0, 1}, g, RecomputePolicy::kNone).forward -
            faster->compute(LayerRange{0, 1}, g, RecomputePolicy::kNone).forward)
        .value();
  };
  const double two = saved(DeviceGroup{{0, 1}});
  ASSERT_GT(two, 0);
  expect_close(saved(DeviceGroup{{0, 1, 2, 3}}), 0.5 * two);

  // Four A100s on PCIe, two behind each switch: no link of their own per pair, so the one ring
  // is the rate (every pair at once would share the uplinks).
  ClusterSpec pcie = one_node("A100-80GB", 4);
  pcie.nodes[0].interconnect = LinkSpec{LinkKind::kPcie, BytesPerSecond(0), Seconds(0)};
  pcie.nodes[0].devices_per_pcie_switch = 2;
  const auto tree = analytic(m, pcie, ideal_links(workload(4096)));
  const AlphaBeta one = tree->ring_parameters(std::vector<int>{0, 1, 2, 3});
  const AlphaBeta channels = tree->channel_parameters(std::vector<int>{0, 1, 2, 3});
  EXPECT_EQ(channels.bandwidth.value(), one.bandwidth.value());
  EXPECT_EQ(channels.latency.value(), one.latency.value());
}

// A collective the cluster measured over exactly a set of devices is priced from its sweep, for
// that op and that set only: the DP ring, the expert all-to-all and the TP group's all-reduces.
TEST(AnalyticComm, MeasuredCollectivesPriceTheirOpOverTheirDevices) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  ClusterSpec cluster = two_nodes();
  MeasuredCollective ar;
  ar.op = "all_reduce";
  ar.ranks = 2;
  ar.devices = {1, 0};
  ar.samples = {{Bytes(1e3), microseconds(40), {}, {}},
                {Bytes(1e6), microseconds(100), {}, {}},
                {Bytes(1e8), Seconds(0.01), {}, {}}};
  cluster.measured_collectives.push_back(ar);
  const AnalyticCostOptions o = ideal_links(workload(4096));
  const auto cost = analytic(m, cluster, o);
  const auto plain = analytic(m, two_nodes(), o);
  auto time = [](const AnalyticCostModel& c, Collective op, std::vector<int> devices, double n) {
    return c.collective_time(op, devices, Bytes(n), CollectiveAlgorithm::kAuto).value();
  };
  // Halfway between 1e6 and 1e8 bytes in size: halfway between their times, whatever the order
  // the devices are named in and whatever the algorithm asked for.
  expect_close(time(*cost, Collective::kAllReduce, {0, 1}, 50.5e6), 0.005 + 0.5 * 100e-6);
  expect_close(time(*cost, Collective::kAllReduce, {1, 0}, 10), 40e-6);
  expect_close(time(*cost, Collective::kAllReduce, {0, 1}, 4e8), 0.04);
  // Other ops and other sets keep the alpha-beta model.
  EXPECT_EQ(time(*cost, Collective::kAllGather, {0, 1}, 1e6),
            time(*plain, Collective::kAllGather, {0, 1}, 1e6));
  EXPECT_EQ(time(*cost, Collective::kAllReduce, {0, 1, 2}, 1e6),
            time(*plain, Collective::kAllReduce, {0, 1, 2}, 1e6));

  // The TP group {0, 1}: each of the layer's all-reduces from the sweep, at its output's size.
  const LayerCost& c = cost->layer_costs()[0];
  ASSERT_EQ(c.tp_allreduces, 1);
  const double n = c.output_bytes.value();
  ASSERT_GT(n, 1e6);
  ASSERT_LT(n, 1e8);
  const double measured = 100e-6 + (0.01 - 100e-6) * (n - 1e6) / (1e8 - 1e6);
  const DeviceGroup pair{{0, 1}};
  const ComputeTimes with = cost->compute(kFirst, pair, RecomputePolicy::kNone);
  const ComputeTimes without = plain->compute(kFirst, pair, RecomputePolicy::kNone);
  const double ring = 2 * kNvlinkLatency + n / (kNvlinkBandwidth * o.stack.collective_efficiency);
  const double exposed = 1.0 - o.stack.tp_overlap;
  expect_close(with.forward.value() - exposed * measured, without.forward.value() - exposed * ring);
  expect_close(with.backward_input.value() - exposed * measured,
               without.backward_input.value() - exposed * ring);
  EXPECT_EQ(with.backward_weight, without.backward_weight);
}

// A head tied to an embedding of its vocabulary and width is named with that embedding; an
// untied head names nothing.
TEST(AnalyticCost, TiedLayersAreTheHeadAndItsEmbedding) {
  Layer embed;
  embed.name = "embed";
  embed.kind = LayerKind::kEmbedding;
  embed.embedding = EmbeddingShape{1000, 4096, 0};
  Layer head;
  head.name = "head";
  head.kind = LayerKind::kHead;
  head.head = HeadShape{1000, 4096, true};
  ModelSpec m = model_of({embed, ffn_layer("ffn"), head});
  const auto tied = analytic(m, two_nodes(4), workload(128))->tied_layers();
  ASSERT_TRUE(tied.has_value());
  EXPECT_EQ(tied->first, 0);
  EXPECT_EQ(tied->second, 2);
  m.layers[2].head->tied = false;
  EXPECT_FALSE(analytic(m, two_nodes(4), workload(128))->tied_layers().has_value());
}

TEST(AnalyticComm, HierarchicalBeatsTheRingWhenEachDeviceHasANic) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, two_nodes(4), ideal_links(workload(4096)));
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

TEST(AnalyticComm, HierarchicalOverUnevenNodesIsPacedByTheFullerNode) {
  // Four devices of one node and two of the other: the intra-node phases take the four-device
  // ring's time; the four inter-node rings carry n / 2 each and the second node's two NICs
  // carry two of them each. The shape is kept per device set: asked again, in another order,
  // the price is the same.
  ModelSpec m = model_of({ffn_layer("ffn")});
  const auto cost = analytic(m, two_nodes(4), ideal_links(workload(4096)));
  const double n = 1e9;
  const double cross_latency = 2 * kNicLatency + kNetworkLatency;
  const double intra = 3 * kNvlinkLatency + 0.75 * n / kNvlinkBandwidth;
  const double inter = 2 * cross_latency + (n / 2) / (kNicBandwidth / 2);
  for (const std::vector<int>& devices :
       {std::vector<int>{0, 1, 2, 3, 4, 5}, std::vector<int>{5, 3, 4, 1, 0, 2}}) {
    expect_close(cost->collective_time(Collective::kAllReduce, devices, Bytes(n),
                                       CollectiveAlgorithm::kHierarchical)
                     .value(),
                 intra + inter + intra);
  }
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
  const auto cost = analytic(m, c, ideal_links(workload(4096)));
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

TEST(AnalyticComm, AllToAllPricedAtItsMostLoadedLink) {
  ModelSpec m = model_of({ffn_layer("ffn")});
  const double n = 1e9;
  const double block = n / 8;  // every device sends n/8 to each of the 7 others, all at once
  const double cross_latency = 2 * kNicLatency + kNetworkLatency;
  std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  // One NIC per device: each NIC carries its device's four blocks to the other node; the three
  // NVLink blocks inside the node travel beside them.
  const auto own_nics = analytic(m, two_nodes(4), ideal_links(workload(4096)));
  expect_close(
      own_nics->collective_time(Collective::kAllToAll, all, Bytes(n), CollectiveAlgorithm::kAuto)
          .value(),
      7 * cross_latency + block / (kNicBandwidth / 4));
  // One NIC per node: the node's four devices send four blocks each through it.
  const auto shared_nic = analytic(m, two_nodes(1), ideal_links(workload(4096)));
  expect_close(
      shared_nic->collective_time(Collective::kAllToAll, all, Bytes(n), CollectiveAlgorithm::kRing)
          .value(),
      7 * cross_latency + block / (kNicBandwidth / 16));
  // Inside one NVSwitch node it is the pairwise exchange: each port sends its k - 1 blocks.
  const std::vector<int> node{0, 1, 2, 3};
  const double nvlink = own_nics->topology().path(0, 1).bandwidth.value();
  expect_close(
      own_nics->collective_time(Collective::kAllToAll, node, Bytes(n), CollectiveAlgorithm::kAuto)
          .value(),
      pairwise_all_to_all_time(
          4, Bytes(n), AlphaBeta{own_nics->topology().path(0, 1).latency, BytesPerSecond(nvlink)})
          .value());
}

// A node-deduplicating dispatcher (DeepEP, HybridEP) sends a token once to each other node that
// holds any of its experts and forwards it there over NVLink; without it, or inside one node,
// the exchange is the all-to-all.
TEST(AnalyticComm, NodeDeduplicatedDispatchSendsATokenOncePerNode) {
  Layer moe;
  moe.name = "moe";
  moe.kind = LayerKind::kMoe;
  moe.moe = MoeShape{4096, 8, 2, 14336};  // 8 experts, 2 per token
  moe.num_norms = 1;
  const ModelSpec m = model_of({moe});
  const double n = 1e9;
  const std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<int> node{0, 1, 2, 3};
  AnalyticCostOptions plain = ideal_links(workload(4096));
  AnalyticCostOptions dedup = plain;
  dedup.stack.node_deduplicated_dispatch = true;
  const auto a2a = analytic(m, two_nodes(4), plain);
  const auto deep = analytic(m, two_nodes(4), dedup);
  for (const auto* cost : {a2a.get(), deep.get()}) {
    EXPECT_EQ(
        cost->expert_exchange_time(0, node, Bytes(n), CollectiveAlgorithm::kAuto),
        a2a->collective_time(Collective::kAllToAll, node, Bytes(n), CollectiveAlgorithm::kAuto));
  }
  EXPECT_EQ(a2a->expert_exchange_time(0, all, Bytes(n), CollectiveAlgorithm::kAuto),
            a2a->collective_time(Collective::kAllToAll, all, Bytes(n), CollectiveAlgorithm::kAuto));
  // Each node holds 4 of the 8 experts: a token needs the other node unless both its experts
  // are at home, C(4,2)/C(8,2) = 6/28. Each device sends that share of its n/2 bytes of tokens
  // through its own NIC to its counterpart; over NVLink it sends each of its 3 neighbours their
  // copies of its own tokens and of its counterpart's, 2 n/8, at a third of its port.
  const double cross_latency = 2 * kNicLatency + kNetworkLatency;
  const Path nvlink = deep->topology().path(0, 1);
  const double inter = (22.0 / 28.0) * (n / 2) / kNicBandwidth;
  const double intra = (2 * n / 8) / (nvlink.bandwidth.value() / 3);
  ASSERT_GT(inter, intra);
  expect_close(deep->expert_exchange_time(0, all, Bytes(n), CollectiveAlgorithm::kAuto).value(),
               cross_latency + 3 * nvlink.latency.value() + inter);
  EXPECT_LT(deep->expert_exchange_time(0, all, Bytes(n), CollectiveAlgorithm::kAuto),
            a2a->expert_exchange_time(0, all, Bytes(n), CollectiveAlgorithm::kAuto));
}

}  // namespace
}  // namespace motley
