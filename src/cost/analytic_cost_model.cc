#include "motley/cost/analytic_cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <string>

#include "motley/core/check.h"

namespace motley {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A scratch array on the stack when it holds at most N elements, on the heap beyond.
template <class T, size_t N>
class SmallBuffer {
 public:
  explicit SmallBuffer(size_t size) : size_(size) {
    if (size > N) heap_.resize(size);
  }
  T* begin() { return size_ > N ? heap_.data() : local_.data(); }
  T* end() { return begin() + size_; }

 private:
  std::array<T, N> local_;
  std::vector<T> heap_;
  size_t size_;
};

// A measured layer without a profile for a TP degree is split t ways at this loss per doubling
// of t, on top of its collectives (docs/timing-model.md, "Measured layers").
constexpr double kMeasuredTpLossPerDoubling = 0.05;
// The collectives a measured layer without a TP profile is charged: a transformer block's two
// all-reduces of its output per forward and per input-gradient pass.
constexpr int kMeasuredTpCollectives = 2;

double rate_of(const DeviceType& device, DType dtype, double efficiency) {
  return device.peak(dtype).value() * efficiency;
}

// max(compute, memory) + one launch; infinite when the device lacks the dtype.
double kernel_roofline(double flops, double rate, double bytes, double bandwidth, double overhead) {
  double compute = 0;
  if (flops > 0) compute = rate > 0 ? flops / rate : kInf;
  double memory = 0;
  if (bytes > 0) memory = bandwidth > 0 ? bytes / bandwidth : kInf;
  return std::max(compute, memory) + overhead;
}

std::string layer_field(size_t index, const Layer& layer) {
  return fmt::format("layers[{}] ('{}')", index, layer.name);
}

// The layers CostModel::tied_layers names for `model`.
std::optional<CostModel::TiedLayers> find_tied_layers(const ModelSpec& model) {
  const std::vector<Layer>& layers = model.layers;
  for (int h = static_cast<int>(layers.size()) - 1; h >= 0; --h) {
    if (!layers[h].head || !layers[h].head->tied) continue;
    for (int e = 0; e < h; ++e) {
      const std::optional<EmbeddingShape>& shape = layers[e].embedding;
      if (shape && shape->vocab == layers[h].head->vocab &&
          shape->hidden == layers[h].head->hidden) {
        return CostModel::TiedLayers{e, h};
      }
    }
    return std::nullopt;
  }
  return std::nullopt;
}

// The value `kept` holds for `key` in `table`, made by `make` (outside the lock) the first time
// it is asked for. Past `limit` device ids in all, every table is forgotten at once.
template <typename Kept, typename Value, typename Make>
Value keep_shape(Kept& kept, std::map<std::vector<int>, Value> Kept::*table,
                 const std::vector<int>& key, size_t limit, Make make) {
  {
    std::lock_guard<std::mutex> lock(kept.mu);
    auto it = (kept.*table).find(key);
    if (it != (kept.*table).end()) return it->second;
  }
  Value value = make();
  std::lock_guard<std::mutex> lock(kept.mu);
  if (kept.device_ids + key.size() > limit) kept.forget();
  if ((kept.*table).emplace(key, value).second) kept.device_ids += key.size();
  return value;
}

}  // namespace

double gemm_efficiency(const SoftwareStack& stack, const DeviceType& device, double m, double n,
                       double k) {
  const double half = stack.gemm_half_dim;
  auto fill = [half](double x) { return half > 0 ? x / (x + half) : 1.0; };
  return device.matmul_efficiency * stack.gemm_efficiency * fill(m) * fill(n) * fill(k);
}

namespace {

struct GemmShape {
  double m, n, k;
};

// A GEMM kernel's shape on one device of a TP group of t.
GemmShape device_shape(const Kernel& kernel, double t) {
  GemmShape s{kernel.m, kernel.n, kernel.k};
  switch (kernel.split) {
    case GemmSplit::kNone:
      break;
    case GemmSplit::kM:
      s.m /= t;
      break;
    case GemmSplit::kN:
      s.n /= t;
      break;
    case GemmSplit::kK:
      s.k /= t;
      break;
  }
  return s;
}

}  // namespace

Seconds fp8_gemm_time(const Kernel& kernel, const DeviceType& device, DType dtype, int tp,
                      const SoftwareStack& stack) {
  MOTLEY_CHECK(kernel.kind == KernelKind::kGemm && device.peak_fp8.value() > 0,
               "fp8_gemm_time of a kernel that is no GEMM or a device without FP8 units");
  const auto [m, n, k] = device_shape(kernel, static_cast<double>(std::max(tp, 1)));
  const double d = static_cast<double>(dtype_bytes(dtype));
  const double bandwidth = device.memory_bandwidth.value() * stack.memory_efficiency;
  const double launch = stack.kernel_overhead.value();
  const double c = kernel.count;
  const double rate =
      device.peak_fp8.value() * gemm_efficiency(stack, device, m, n, k) * stack.fp8_gemm_efficiency;
  // FP8 inputs (one byte each), the output in the model's dtype.
  const double product = kernel_roofline(2.0 * m * n * k * c, rate, c * (m * k + k * n + d * m * n),
                                         bandwidth, launch);
  // The cast of the m x k operand: read in the model's dtype, written in FP8.
  const double cast = kernel_roofline(0, 0, c * m * k * (d + 1), bandwidth, launch);
  return Seconds(product + cast);
}

Seconds kernel_time(const Kernel& kernel, const DeviceType& device, DType dtype, int tp,
                    bool sequence_parallel, bool dropout, const SoftwareStack& stack) {
  const double t = static_cast<double>(std::max(tp, 1));
  const double d = static_cast<double>(dtype_bytes(dtype));
  const double bandwidth = device.memory_bandwidth.value() * stack.memory_efficiency;
  const double launch = stack.kernel_overhead.value();
  switch (kernel.kind) {
    case KernelKind::kGemm: {
      const auto [m, n, k] = device_shape(kernel, t);
      const double c = kernel.count;
      const double flops = 2.0 * m * n * k * c;
      const double bytes = d * c * (m * k + k * n + m * n);
      return Seconds(
          kernel_roofline(flops, rate_of(device, dtype, gemm_efficiency(stack, device, m, n, k)),
                          bytes, bandwidth, launch));
    }
    case KernelKind::kAttention: {
      const bool forward = kernel.pass == KernelPass::kForward;
      if (stack.attention == AttentionImplementation::kFused) {
        const double efficiency =
            forward ? stack.attention_forward_efficiency : stack.attention_backward_efficiency;
        return Seconds(kernel_roofline(kernel.flops / t, rate_of(device, dtype, efficiency),
                                       kernel.bytes / t, bandwidth, launch));
      }
      // Eager: batched GEMMs over the full q_len^2 scores (a mask hides, it does not skip),
      // then softmax (and dropout) passes over them.
      const double batches = kernel.batch_heads / t;
      const double q = kernel.q_len;
      const double kv = kernel.kv_len > 0 ? kernel.kv_len : q;
      const double scores = batches * q * kv;
      const double qk_rate =
          rate_of(device, dtype, gemm_efficiency(stack, device, q, kv, kernel.qk_dim));
      const double av_rate =
          rate_of(device, dtype, gemm_efficiency(stack, device, q, kernel.v_dim, kv));
      const double qk_flops = 2.0 * scores * kernel.qk_dim;
      const double av_flops = 2.0 * scores * kernel.v_dim;
      const double qk_bytes = d * batches * (q + kv) * kernel.qk_dim + d * scores;
      const double av_bytes = d * scores + d * batches * (q + kv) * kernel.v_dim;
      if (forward) {
        // softmax reads and writes the scores; dropout reads them, writes them and a mask.
        const double softmax = 2.0 * d * scores;
        const double drop = dropout ? (2.0 * d + 1.0) * scores : 0.0;
        return Seconds(kernel_roofline(qk_flops, qk_rate, qk_bytes, bandwidth, launch) +
                       kernel_roofline(av_flops, av_rate, av_bytes, bandwidth, launch) +
                       kernel_roofline(0, 0, softmax, bandwidth, launch) +
                       (dropout ? kernel_roofline(0, 0, drop, bandwidth, launch) : 0.0));
      }
      // Backward: two GEMMs per forward GEMM; the softmax gradient reads y and dy and writes
      // dx, dropout's reads dy and the mask and writes dx.
      const double softmax = 3.0 * d * scores;
      const double drop = dropout ? (2.0 * d + 1.0) * scores : 0.0;
      return Seconds(2.0 * kernel_roofline(qk_flops, qk_rate, qk_bytes, bandwidth, launch) +
                     2.0 * kernel_roofline(av_flops, av_rate, av_bytes, bandwidth, launch) +
                     kernel_roofline(0, 0, softmax, bandwidth, launch) +
                     (dropout ? kernel_roofline(0, 0, drop, bandwidth, launch) : 0.0));
    }
    case KernelKind::kScan: {
      // The chunked scan runs as several kernels on the matrix units (Mamba-2's SSD): priced
      // at the large-GEMM rate, five launches.
      const double efficiency = device.matmul_efficiency * stack.gemm_efficiency;
      return Seconds(kernel_roofline(kernel.flops / t, rate_of(device, dtype, efficiency),
                                     kernel.bytes / t, bandwidth, 5.0 * launch));
    }
    case KernelKind::kElementwise:
      return Seconds(kernel_roofline(0, 0, kernel.bytes / t, bandwidth, launch));
    case KernelKind::kLoss: {
      // Each device of a TP group takes its 1/t of the vocabulary; the all-reduces of one
      // float per token (max, sum, target logit) are left out.
      const double logits = kernel.m * kernel.n / t;
      const bool forward = kernel.pass == KernelPass::kForward;
      if (stack.fused_cross_entropy) {
        return Seconds(kernel_roofline(0, 0, (forward ? d : 2.0 * d) * logits, bandwidth, launch));
      }
      // Megatron-LM's _VocabParallelCrossEntropy on fp32 logits, pass by pass: the upcast
      // (d + 4), max (4), subtract (8), exp (8), sum (4), divide (8); backward, the in-place
      // scale (8) and the cast back (4 + d).
      return Seconds(forward ? kernel_roofline(0, 0, (d + 36.0) * logits, bandwidth, 6.0 * launch)
                             : kernel_roofline(0, 0, (d + 12.0) * logits, bandwidth, 2.0 * launch));
    }
    case KernelKind::kStream:
      return Seconds(
          kernel_roofline(0, 0, kernel.bytes / (sequence_parallel ? t : 1.0), bandwidth, launch));
    case KernelKind::kGather:
      return Seconds(kernel_roofline(0, 0, kernel.bytes, bandwidth, launch));
  }
  return Seconds(0);
}

OptimizerBytesPerParam optimizer_bytes_per_param(DType dtype, bool fp32_grad_accumulation) {
  const double width = static_cast<double>(dtype_bytes(dtype));
  OptimizerBytesPerParam b;
  b.weights = width;
  b.gradients = fp32_grad_accumulation ? 4.0 : width;
  // An fp32 master copy exists only when the working weights are narrower than fp32.
  b.optimizer_state = (width < 4 ? 4.0 : 0.0) + 2 * 4.0;
  return b;
}

Status AnalyticCostModel::validate(const ModelSpec& model, const AnalyticCostOptions& options,
                                   const std::string& source) {
  if (options.workload.seq_len <= 0) {
    return invalid_argument(fmt::format("{}: sequence length: expected a positive integer, got {}",
                                        source, options.workload.seq_len));
  }
  if (options.workload.micro_batch_size <= 0) {
    return invalid_argument(fmt::format("{}: micro-batch size: expected a positive integer, got {}",
                                        source, options.workload.micro_batch_size));
  }
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const Layer& layer = model.layers[i];
    if (layer.kind != LayerKind::kMeasured) continue;
    const std::string where = fmt::format("{}: {}", source, layer_field(i, layer));
    if (!layer.measured) {
      return invalid_argument(
          fmt::format("{}: a measured layer needs its 'measured' times", where));
    }
    const MeasuredLayer& m = *layer.measured;
    Result<const DeviceType*> on = find_device_type(m.measured_on);
    if (!on.is_ok()) {
      return invalid_argument(
          fmt::format("{}: field 'measured_on': {}", where, on.status().message()));
    }
    if (!m.times.forward || !m.times.backward_input || !m.times.backward_weight) {
      return invalid_argument(fmt::format(
          "{}: field 'times': expected forward, backward_input and backward_weight times", where));
    }
    for (const auto& [name, times] : m.times_by_device) {
      Result<const DeviceType*> type = find_device_type(name);
      if (!type.is_ok()) {
        return invalid_argument(fmt::format("{}: field 'times_by_device.{}': {}", where, name,
                                            type.status().message()));
      }
    }
    for (const auto& [name, by_tp] : m.times_by_tp) {
      Result<const DeviceType*> type = find_device_type(name);
      if (!type.is_ok()) {
        return invalid_argument(
            fmt::format("{}: field 'times_by_tp.{}': {}", where, name, type.status().message()));
      }
      for (const auto& [tp, times] : by_tp) {
        if (tp < 2) {
          return invalid_argument(
              fmt::format("{}: field 'times_by_tp.{}': expected TP degrees of 2 or more, got {}",
                          where, name, tp));
        }
        if (!times.forward || !times.backward_input || !times.backward_weight) {
          return invalid_argument(
              fmt::format("{}: field 'times_by_tp.{}.{}': expected forward, backward_input and "
                          "backward_weight times",
                          where, name, tp));
        }
      }
    }
  }
  return Status::ok();
}

Result<std::unique_ptr<AnalyticCostModel>> AnalyticCostModel::create(
    const ModelSpec& model, const ClusterSpec& cluster, const AnalyticCostOptions& options,
    const std::string& source) {
  MOTLEY_RETURN_IF_ERROR(validate(model, options, source));
  return std::unique_ptr<AnalyticCostModel>(
      new AnalyticCostModel(model, cluster, paths_of(cluster), options));
}

Result<std::unique_ptr<AnalyticCostModel>> AnalyticCostModel::create(
    const ModelSpec& model, const ClusterSpec& cluster, const AnalyticCostOptions& options,
    const std::string& source, std::shared_ptr<Paths> paths) {
  MOTLEY_CHECK(paths != nullptr, "AnalyticCostModel::create without the cluster's paths");
  MOTLEY_RETURN_IF_ERROR(validate(model, options, source));
  return std::unique_ptr<AnalyticCostModel>(
      new AnalyticCostModel(model, cluster, std::move(paths), options));
}

class AnalyticCostModel::Paths {
 public:
  explicit Paths(const ClusterSpec& cluster) : topology(cluster) {
    for (const Device& d : topology.devices()) {
      if (d.node >= static_cast<int>(node_members.size())) node_members.resize(d.node + 1);
      node_members[d.node].push_back(d.id);
    }
    node_rings.resize(node_members.size());
    node_rings_once = std::make_unique<std::once_flag[]>(node_members.size());
    node_pairs.resize(node_members.size());
    node_pairs_once = std::make_unique<std::once_flag[]>(node_members.size());
  }

  const Topology topology;
  RingShapes shapes;
  // Ring parameters of every subset of a node's devices, indexed by the bit mask of their local
  // indices, worked out the first time a group of that node is priced (a search on thousands of
  // nodes prices groups on a few); none for nodes with more than kMaxSubsetDevices devices.
  std::vector<std::vector<int>> node_members;  // device ids by local index
  std::vector<std::vector<AlphaBeta>> node_rings;
  std::unique_ptr<std::once_flag[]> node_rings_once;
  // The path of every ordered pair of an xGMI node's devices (by local indices, n x n), for
  // channel_parameters: resolved once per node, the first time a set of its devices is priced.
  std::vector<std::vector<AlphaBeta>> node_pairs;
  std::unique_ptr<std::once_flag[]> node_pairs_once;
};

std::shared_ptr<AnalyticCostModel::Paths> AnalyticCostModel::paths_of(const ClusterSpec& cluster) {
  return std::make_shared<Paths>(cluster);
}

const Topology& AnalyticCostModel::topology() const { return *topology_; }

AnalyticCostModel::AnalyticCostModel(const ModelSpec& model, const ClusterSpec& cluster,
                                     std::shared_ptr<Paths> paths,
                                     const AnalyticCostOptions& options)
    : model_(model),
      options_(options),
      paths_(std::move(paths)),
      topology_(&paths_->topology),
      tied_(find_tied_layers(model)) {
  options_.workload.dropout = options.workload.dropout || model.dropout;
  for (const MeasuredCollective& c : cluster.measured_collectives) {
    const std::optional<Collective> op = collective_from_op(c.op);
    if (!op || c.devices.size() < 2 || c.samples.empty()) continue;  // the reader rules these out
    MeasuredSweep sweep{*op, c.devices, c.samples};
    std::sort(sweep.devices.begin(), sweep.devices.end());
    measured_collectives_.push_back(std::move(sweep));
  }
  const Workload& w = options_.workload;
  const size_t n = model_.layers.size();
  layer_costs_.reserve(n);
  kernels_.reserve(n);
  measured_.resize(n);
  first_weight_pass_walks_all_ =
      n > 0 && model_.layers[0].kind == LayerKind::kMeasured && model_.layers[0].measured &&
      model_.layers[0].measured->weight_pass == WeightPass::kFullBackward;

  for (size_t i = 0; i < n; ++i) {
    const Layer& layer = model_.layers[i];
    LayerCost cost = layer_cost(layer, w);
    // A fused attention kernel (FlashAttention, cuDNN) keeps no score tensors, recompute or not:
    // without recompute a layer keeps what selective recompute keeps.
    if (options_.stack.attention == AttentionImplementation::kFused) {
      cost.activation_bytes[static_cast<int>(RecomputePolicy::kNone)] =
          cost.activation_bytes[static_cast<int>(RecomputePolicy::kSelective)];
    }
    kernels_.push_back(layer_kernels(layer, w));
    if (layer.kind == LayerKind::kMeasured && layer.measured) {
      const MeasuredLayer& m = *layer.measured;
      MeasuredRates& rates = measured_[i];
      // Linear in tokens, by the rule layer_cost() scales the profile's bytes with.
      rates.token_scale = measured_token_scale(layer, w);
      Result<const DeviceType*> on = find_device_type(m.measured_on);
      if (on.is_ok()) {
        rates.measured_on = on.value()->name;
        rates.reference_rate = on.value()->peak(w.dtype).value() * on.value()->matmul_efficiency;
        rates.memory_bandwidth = on.value()->memory_bandwidth.value();
      }
      for (const auto& [name, times] : m.times_by_device) {
        Result<const DeviceType*> type = find_device_type(name);
        if (type.is_ok()) rates.overrides.emplace_back(type.value()->name, times);
      }
      for (const auto& [name, by_tp] : m.times_by_tp) {
        Result<const DeviceType*> type = find_device_type(name);
        if (type.is_ok()) rates.tp_overrides.emplace_back(type.value()->name, by_tp);
      }
    }
    layer_costs_.push_back(cost);
  }

  stored_params_prefix_.assign(n + 1, 0.0);
  expert_params_prefix_.assign(n + 1, 0.0);
  activation_prefix_.assign(n + 1, {0.0, 0.0, 0.0});
  fp8_saving_prefix_.assign(n + 1, 0.0);
  loss_saving_prefix_.assign(n + 1, 0.0);
  measured_steps_prefix_.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const LayerCost& c = layer_costs_[i];
    measured_steps_prefix_[i + 1] = measured_steps_prefix_[i] + (has_measured_step(i) ? 1 : 0);
    stored_params_prefix_[i + 1] = stored_params_prefix_[i] + static_cast<double>(c.stored_params);
    expert_params_prefix_[i + 1] =
        expert_params_prefix_[i] + static_cast<double>(c.routed_expert_params);
    for (int p = 0; p < 3; ++p) {
      activation_prefix_[i + 1][p] = activation_prefix_[i][p] + c.activation_bytes[p].value();
    }
    // FP8 linear layers keep their saved inputs as 1-byte copies instead of the dtype's.
    const double dtype = static_cast<double>(dtype_bytes(w.dtype));
    fp8_saving_prefix_[i + 1] =
        fp8_saving_prefix_[i] + c.linear_input_bytes.value() * (dtype - 1.0) / dtype;
    loss_saving_prefix_[i + 1] =
        loss_saving_prefix_[i] + c.loss_softmax_bytes.value() * std::max(4.0 - dtype, 0.0) / 4.0;
  }
  largest_params_.assign(1, std::vector<LargestTwo>(n));
  for (size_t i = 0; i < n; ++i) {
    largest_params_[0][i] = {stored_params_prefix_[i + 1] - stored_params_prefix_[i], 0,
                             static_cast<int>(i), -1};
  }
  for (size_t width = 2; width <= n; width *= 2) {
    const std::vector<LargestTwo>& half = largest_params_.back();
    std::vector<LargestTwo> level(n - width + 1);
    for (size_t i = 0; i + width <= n; ++i) {
      level[i] = larger_two(half[i], half[i + width / 2]);
    }
    largest_params_.push_back(std::move(level));
  }

  // One table per device type present, for every TP degree a node of that type allows.
  std::map<std::string, int> table_index;
  std::map<std::pair<int, std::string>, int> per_node;  // (node, type) -> devices
  table_of_device_.assign(topology_->devices().size(), 0);
  for (const Device& d : topology_->devices()) {
    auto [it, inserted] = table_index.emplace(d.type, static_cast<int>(tables_.size()));
    if (inserted) tables_.push_back(DeviceTables{&topology_->device_type(d.id), {}});
    table_of_device_[d.id] = it->second;
    ++per_node[{d.node, d.type}];
  }
  std::vector<int> max_tp(tables_.size(), 1);
  for (const auto& [key, count] : per_node) {
    int& m = max_tp[table_index[key.second]];
    m = std::max(m, count);
  }
  for (size_t ti = 0; ti < tables_.size(); ++ti) {
    DeviceTables& table = tables_[ti];
    table.by_tp.resize(max_tp[ti]);
    for (int t = 1; t <= max_tp[ti]; ++t) {
      std::vector<LayerTimes>& prefix = table.by_tp[t - 1].prefix;
      prefix.assign(n + 1, LayerTimes{});
      for (size_t i = 0; i < n; ++i) {
        LayerTimes x = layer_times(static_cast<int>(i), *table.type, t);
        prefix[i + 1] = {prefix[i].forward + x.forward,
                         prefix[i].backward_input + x.backward_input,
                         prefix[i].backward_weight + x.backward_weight,
                         prefix[i].selective_recompute + x.selective_recompute,
                         prefix[i].fused_saving + x.fused_saving,
                         prefix[i].collectives + x.collectives,
                         prefix[i].collective_bytes + x.collective_bytes};
      }
    }
  }
}

AnalyticCostModel::LayerTimes AnalyticCostModel::layer_times(int layer, const DeviceType& device,
                                                             int tp) const {
  const Layer& spec = model_.layers[layer];
  const DType dtype = options_.workload.dtype;
  const double t = static_cast<double>(tp);
  LayerTimes out;
  if (spec.kind == LayerKind::kMeasured && spec.measured) {
    const MeasuredLayer& m = *spec.measured;
    const MeasuredRates& rates = measured_[layer];
    // A profile of this device type at this TP degree: its times, collectives included.
    if (tp > 1) {
      for (const auto& [name, by_tp] : rates.tp_overrides) {
        if (name != device.name) continue;
        auto it = by_tp.find(tp);
        if (it == by_tp.end()) break;
        auto get = [&](std::optional<Seconds> MeasuredTimes::*field) {
          return (it->second.*field).has_value() ? (it->second.*field)->value() * rates.token_scale
                                                 : 0.0;
        };
        out.forward = get(&MeasuredTimes::forward);
        out.backward_input = get(&MeasuredTimes::backward_input);
        out.backward_weight = get(&MeasuredTimes::backward_weight);
        out.selective_recompute = get(&MeasuredTimes::selective_recompute);
        if (it->second.backward.has_value()) {
          out.fused_saving =
              out.backward_input + out.backward_weight - get(&MeasuredTimes::backward);
        }
        return out;
      }
    }
    // Another device type runs the measured work at the ratio of achievable matmul rates.
    double ratio = 1;
    if (!rates.measured_on.empty() && rates.measured_on != device.name) {
      const double rate = device.peak(dtype).value() * device.matmul_efficiency;
      ratio = rate > 0 ? rates.reference_rate / rate : kInf;
    }
    const MeasuredTimes* own = nullptr;
    for (const auto& [name, times] : rates.overrides) {
      if (name == device.name) own = &times;
    }
    // Without a profile at this degree: an even split at a loss per doubling, plus collectives.
    const double split = tp > 1 ? (1.0 + kMeasuredTpLossPerDoubling * std::log2(t)) / t : 1.0;
    auto pick = [&](std::optional<Seconds> MeasuredTimes::*field) {
      double base = 0;
      if (own != nullptr && (own->*field).has_value()) {
        base = (own->*field)->value();
      } else if ((m.times.*field).has_value()) {
        base = (m.times.*field)->value() * ratio;
      }
      return base * rates.token_scale * split;
    };
    out.forward = pick(&MeasuredTimes::forward);
    out.backward_input = pick(&MeasuredTimes::backward_input);
    out.backward_weight = pick(&MeasuredTimes::backward_weight);
    out.selective_recompute = pick(&MeasuredTimes::selective_recompute);
    const bool fused =
        (own != nullptr && own->backward.has_value()) || m.times.backward.has_value();
    if (fused) {
      out.fused_saving = out.backward_input + out.backward_weight - pick(&MeasuredTimes::backward);
    }
    if (tp > 1) {
      out.collectives = kMeasuredTpCollectives;
      out.collective_bytes = kMeasuredTpCollectives * layer_costs_[layer].output_bytes.value();
    }
    return out;
  }
  const SoftwareStack& stack = options_.stack;
  const bool fp8 = stack.fp8_linear && device.peak_fp8.value() > 0 && !spec.head && !spec.embedding;
  for (const Kernel& kernel : kernels_[layer]) {
    const double time = (fp8 && kernel.kind == KernelKind::kGemm
                             ? fp8_gemm_time(kernel, device, dtype, tp, stack)
                             : kernel_time(kernel, device, dtype, tp, options_.sequence_parallel,
                                           options_.workload.dropout, stack))
                            .value();
    switch (kernel.pass) {
      case KernelPass::kForward:
        out.forward += time;
        if (kernel.kind == KernelKind::kAttention) out.selective_recompute += time;
        break;
      case KernelPass::kBackwardInput:
        out.backward_input += time;
        break;
      case KernelPass::kBackwardWeight:
        out.backward_weight += time;
        break;
    }
  }
  if (tp > 1) {
    const LayerCost& c = layer_costs_[layer];
    out.collectives = c.tp_allreduces;
    out.collective_bytes = c.tp_allreduces * c.output_bytes.value();
  }
  return out;
}

ComputeTimes AnalyticCostModel::compute(LayerRange layers, const DeviceGroup& group,
                                        RecomputePolicy recompute) const {
  const int n = static_cast<int>(model_.layers.size());
  MOTLEY_CHECK(0 <= layers.begin && layers.begin <= layers.end && layers.end <= n,
               "layer range outside the model");
  MOTLEY_CHECK(!group.devices.empty(), "compute on an empty device group");
  if (layers.vocab_share != 1.0) return scaled(compute(whole(layers), group, recompute), layers);
  const int t = group.tp();
  MOTLEY_CHECK(
      group.devices[0] >= 0 && group.devices[0] < static_cast<int>(table_of_device_.size()),
      "compute on a device outside the cluster");
  const DeviceTables& table = tables_[table_of_device_[group.devices[0]]];
  LayerTimes sum;
  if (t <= static_cast<int>(table.by_tp.size())) {
    const std::vector<LayerTimes>& p = table.by_tp[t - 1].prefix;
    const LayerTimes& hi = p[layers.end];
    const LayerTimes& lo = p[layers.begin];
    sum = {hi.forward - lo.forward,
           hi.backward_input - lo.backward_input,
           hi.backward_weight - lo.backward_weight,
           hi.selective_recompute - lo.selective_recompute,
           hi.fused_saving - lo.fused_saving,
           hi.collectives - lo.collectives,
           hi.collective_bytes - lo.collective_bytes};
  } else {
    // A group larger than any node of its type holds: not precomputed, priced directly.
    for (int i = layers.begin; i < layers.end; ++i) {
      LayerTimes x = layer_times(i, *table.type, t);
      sum.forward += x.forward;
      sum.backward_input += x.backward_input;
      sum.backward_weight += x.backward_weight;
      sum.selective_recompute += x.selective_recompute;
      sum.fused_saving += x.fused_saving;
      sum.collectives += x.collectives;
      sum.collective_bytes += x.collective_bytes;
    }
  }
  // Each TP collective is a ring all-reduce of the layer's output over the group (with sequence
  // parallelism a reduce-scatter and an all-gather: the same ring cost), at the stack's bus
  // bandwidth, the part the stack does not overlap exposed:
  // summed over layers, 2(t-1) alpha * count + 2(t-1)/t * sum(bytes) / (beta * efficiency).
  // A cluster that measured the all-reduce over exactly this group prices each collective from
  // that sweep instead, at the layers' mean collective size (every collective of a layer moves
  // its output, so the sizes are equal within a stage of one layer shape).
  double comm = 0;
  if (t > 1 && sum.collectives > 0) {
    const SoftwareStack& stack = options_.stack;
    const std::vector<CollectiveSample>* sweep = nullptr;
    if (!measured_collectives_.empty()) {
      std::vector<int> set = group.devices;
      std::sort(set.begin(), set.end());
      sweep = measured_sweep(Collective::kAllReduce, set);
    }
    if (sweep != nullptr) {
      comm =
          sum.collectives *
          measured_collective_time(*sweep, Bytes(sum.collective_bytes / sum.collectives)).value();
    } else {
      const AlphaBeta ring = group_ring(group.devices);
      comm = 2.0 * (t - 1) * ring.latency.value() * sum.collectives +
             (2.0 * (t - 1) / t) * sum.collective_bytes /
                 (ring.bandwidth.value() * stack.collective_efficiency);
    }
    comm *= 1.0 - stack.tp_overlap;
  }
  ComputeTimes out;
  out.forward = Seconds(sum.forward + comm);
  out.backward_input = Seconds(sum.backward_input + comm);
  out.backward_weight = Seconds(sum.backward_weight);
  out.fused_backward_saving = Seconds(sum.fused_saving);
  if (layers.begin == 0 && first_weight_pass_walks_all_) {
    // The stage's input is data and needs no gradient, and a measured W walks the whole
    // backward by itself: B has nothing to do. W keeps the TP collectives of the walk; one
    // fused backward costs what it did.
    out.backward_weight = Seconds(sum.backward_weight + comm);
    out.fused_backward_saving = Seconds(sum.fused_saving - sum.backward_input);
    out.backward_input = Seconds(0);
  }
  switch (recompute) {
    case RecomputePolicy::kNone:
      out.recompute = Seconds(0);
      break;
    case RecomputePolicy::kSelective:
      out.recompute = Seconds(sum.selective_recompute);
      break;
    case RecomputePolicy::kFull:
      out.recompute = out.forward;
      break;
  }
  return out;
}

AnalyticCostModel::PipelineMessage AnalyticCostModel::pipeline_message(const DeviceGroup& src,
                                                                       const DeviceGroup& dst,
                                                                       Bytes bytes) const {
  PipelineMessage out{bytes, options_.stack.p2p_efficiency};
  const size_t k = std::min(src.devices.size(), dst.devices.size());
  if (!options_.stack.pipeline_scatter_gather || k < 2) return out;
  // Rank i of the sender sends its 1/k share to rank i of the receiver. The shares travel in
  // parallel only on disjoint paths (a NIC per device); where they share a link, they queue on
  // it and the whole message crosses it.
  std::vector<int> used;
  for (size_t i = 0; i < k; ++i) {
    const Path& p = topology_->path(src.devices[i], dst.devices[i]);
    used.insert(used.end(), p.links.begin(), p.links.end());
  }
  std::sort(used.begin(), used.end());
  if (std::adjacent_find(used.begin(), used.end()) != used.end()) return out;
  out.bytes = bytes / static_cast<double>(k);
  return out;
}

bool AnalyticCostModel::has_measured_step(size_t layer) const {
  const Layer& l = model_.layers[layer];
  return l.kind == LayerKind::kMeasured && l.measured && l.measured->optimizer_step;
}

Seconds AnalyticCostModel::update_traffic_time(LayerRange layers, const DeviceGroup& group,
                                               const MemoryOptions& options,
                                               const DeviceType& device) const {
  const StageMemory m = stage_memory(layers, group, options);
  const OptimizerBytesPerParam per_param =
      optimizer_bytes_per_param(options_.workload.dtype, options_.fp32_grad_accumulation);
  // The parameters this device updates: its share of the optimizer state.
  const double shard = m.optimizer_state.value() / per_param.optimizer_state;
  const double g = per_param.gradients;
  const double w = per_param.weights;
  const bool master = w < 4;  // an fp32 master copy beside narrower working weights
  double bytes = 0;
  // fp16's dynamic loss scale: the gradients unscaled and checked for inf / NaN in one pass.
  if (options_.workload.dtype == DType::kFloat16) bytes += 2 * g * shard;
  // Their norm, for clipping.
  bytes += g * shard;
  // Adam: reads the gradients, reads and writes the moments and the master weights (or, with
  // no master copy, the weights themselves).
  bytes += g * shard + 2 * per_param.optimizer_state * shard + (master ? 0 : 2 * w * shard);
  // The updated master weights copied into the working ones.
  if (master) bytes += (4 + w) * shard;
  // And the gradient buffer zeroed for the next iteration (all of it, sharded or not).
  bytes += m.gradients.value();
  return Seconds(bytes / (device.memory_bandwidth.value() * options_.stack.memory_efficiency));
}

std::optional<Seconds> AnalyticCostModel::optimizer_step_time(LayerRange layers,
                                                              const DeviceGroup& group,
                                                              const MemoryOptions& options) const {
  MOTLEY_CHECK(!group.devices.empty(), "an optimizer step on an empty device group");
  const DeviceType& device = *tables_[table_of_device_[group.devices[0]]].type;
  if (measured_steps_prefix_[layers.end] == measured_steps_prefix_[layers.begin]) {
    return update_traffic_time(layers, group, options, device);
  }
  double measured = 0;
  double traffic = 0;
  for (int i = layers.begin; i < layers.end; ++i) {
    if (!has_measured_step(i)) {
      traffic += update_traffic_time(LayerRange{i, i + 1}, group, options, device).value();
      continue;
    }
    // The update streams the parameters, their gradients and state through memory: another
    // device type takes it at the ratio of memory bandwidths.
    const double reference = measured_[i].memory_bandwidth;
    const double ratio = reference > 0 ? reference / device.memory_bandwidth.value() : 1.0;
    measured += model_.layers[i].measured->optimizer_step->value() * ratio;
  }
  // Each device of a TP group updates its 1/t; under ZeRO each replica its 1/d of that.
  double shards = static_cast<double>(group.tp());
  if (options.zero_stage >= 1) {
    shards *= static_cast<double>(std::max<int64_t>(1, options.data_parallel));
  }
  return Seconds((measured / shards + traffic) * layers.vocab_share);
}

StageMemory AnalyticCostModel::stage_memory(LayerRange layers, const DeviceGroup& group,
                                            const MemoryOptions& options) const {
  const int n = static_cast<int>(model_.layers.size());
  MOTLEY_CHECK(0 <= layers.begin && layers.begin <= layers.end && layers.end <= n,
               "layer range outside the model");
  if (layers.vocab_share != 1.0) return scaled(stage_memory(whole(layers), group, options), layers);
  const double t = static_cast<double>(std::max(group.tp(), 1));
  const double params = stored_params_prefix_[layers.end] - stored_params_prefix_[layers.begin];
  const OptimizerBytesPerParam per_param =
      optimizer_bytes_per_param(options_.workload.dtype, options_.fp32_grad_accumulation);
  const double d = static_cast<double>(std::max<int64_t>(options.data_parallel, 1));
  // Expert parallelism keeps 1/e of the routed experts per replica, whose ZeRO shards then
  // spread over the d/e replicas holding the same experts.
  const double e = static_cast<double>(std::clamp<int64_t>(options.expert_parallel, 1, d));
  const double experts = expert_params_prefix_[layers.end] - expert_params_prefix_[layers.begin];
  auto held = [&](int from_stage) {
    const bool sharded = options.zero_stage >= from_stage;
    return (params - experts) / (sharded ? d : 1.0) + experts / e / (sharded ? d / e : 1.0);
  };
  const int policy = static_cast<int>(options.recompute);

  StageMemory m;
  m.weights = Bytes(held(3) * per_param.weights / t);
  m.gradients = Bytes(held(2) * per_param.gradients / t);
  m.optimizer_state = Bytes(held(1) * per_param.optimizer_state / t);
  double activations =
      activation_prefix_[layers.end][policy] - activation_prefix_[layers.begin][policy];
  // FP8 linear layers (a stack's fp8_linear, on a device with FP8 units) keep the inputs saved
  // for their weight gradients in FP8; full recompute keeps only the stage inputs.
  if (options_.stack.fp8_linear && options.recompute != RecomputePolicy::kFull &&
      !group.devices.empty() &&
      tables_[table_of_device_[group.devices[0]]].type->peak_fp8.value() > 0) {
    activations -= fp8_saving_prefix_[layers.end] - fp8_saving_prefix_[layers.begin];
  }
  if (options_.stack.fused_cross_entropy && options.recompute != RecomputePolicy::kFull) {
    activations -= loss_saving_prefix_[layers.end] - loss_saving_prefix_[layers.begin];
  }
  m.activations_per_micro_batch = Bytes(activations / t);
  m.activations =
      m.activations_per_micro_batch * static_cast<double>(options.in_flight_micro_batches);
  // Double-buffered receives: the activation coming in and the gradient coming back, each
  // split t ways under sequence parallelism.
  Bytes in = layers.begin > 0 ? boundary_bytes(layers.begin - 1) : Bytes(0);
  Bytes out = layers.end < n && layers.end > 0 ? boundary_bytes(layers.end - 1) : Bytes(0);
  m.communication_buffers = (in + out) * 2.0 / t;
  if (d > 1 && options.zero_stage >= 2) {
    // ZeRO-2: a pass's whole gradients live until their bucket is reduce-scattered; two
    // buckets at a time (one reducing, one filling), at most the stage's. ZeRO-3: the whole
    // weights of the layer in use and of the one gathered ahead.
    const double bucket =
        std::max({options_.stack.gradient_bucket_parameters,
                  options_.stack.gradient_bucket_parameters_per_replica * d, 1.0});
    m.communication_buffers += Bytes(std::min(params / t, 2.0 * bucket) * per_param.gradients);
    if (options.zero_stage >= 3 && layers.end > layers.begin) {
      m.communication_buffers +=
          Bytes(largest_two_params(layers.begin, layers.end) * per_param.weights / t);
    }
  }
  return m;
}

AnalyticCostModel::LargestTwo AnalyticCostModel::larger_two(const LargestTwo& a,
                                                            const LargestTwo& b) {
  LargestTwo out;
  auto offer = [&](double value, int layer) {
    if (layer < 0 || layer == out.first_layer || layer == out.second_layer) return;
    if (out.first_layer < 0 || value > out.first) {
      out.second = out.first;
      out.second_layer = out.first_layer;
      out.first = value;
      out.first_layer = layer;
    } else if (out.second_layer < 0 || value > out.second) {
      out.second = value;
      out.second_layer = layer;
    }
  };
  offer(a.first, a.first_layer);
  offer(a.second, a.second_layer);
  offer(b.first, b.first_layer);
  offer(b.second, b.second_layer);
  return out;
}

double AnalyticCostModel::largest_two_params(int begin, int end) const {
  const int length = end - begin;
  int level = 0;
  while ((2 << level) <= length) ++level;
  const LargestTwo two =
      larger_two(largest_params_[level][begin], largest_params_[level][end - (1 << level)]);
  return two.first + two.second;
}

int AnalyticCostModel::parameter_gather_buckets(LayerRange layers, const DeviceGroup& group,
                                                int64_t data_parallel) const {
  return options_.stack.overlap_param_gather ? stack_buckets(layers, group, data_parallel) : 1;
}

int AnalyticCostModel::gradient_buckets(LayerRange layers, const DeviceGroup& group,
                                        int64_t data_parallel) const {
  return options_.stack.overlap_grad_reduce ? stack_buckets(layers, group, data_parallel) : 1;
}

int AnalyticCostModel::stack_buckets(LayerRange layers, const DeviceGroup& group,
                                     int64_t data_parallel) const {
  const SoftwareStack& stack = options_.stack;
  const double params = (stored_params_prefix_[layers.end] - stored_params_prefix_[layers.begin]) /
                        static_cast<double>(std::max(group.tp(), 1));
  const double bucket = std::max(
      {stack.gradient_bucket_parameters,
       stack.gradient_bucket_parameters_per_replica * static_cast<double>(data_parallel), 1.0});
  constexpr double kMaxBuckets = 1 << 20;
  return static_cast<int>(std::clamp(std::ceil(params / bucket), 1.0, kMaxBuckets));
}

Bytes AnalyticCostModel::expert_dispatch_bytes(int layer) const {
  MOTLEY_CHECK(0 <= layer && layer < static_cast<int>(layer_costs_.size()),
               "expert_dispatch_bytes of a layer outside the model");
  return layer_costs_[layer].expert_dispatch_bytes;
}

Seconds AnalyticCostModel::expert_exchange_time(int layer, const std::vector<int>& devices,
                                                Bytes bytes, CollectiveAlgorithm algorithm) const {
  MOTLEY_CHECK(0 <= layer && layer < static_cast<int>(model_.layers.size()),
               "expert_exchange_time of a layer outside the model");
  const std::optional<MoeShape>& moe = model_.layers[layer].moe;
  if (!options_.stack.node_deduplicated_dispatch || !moe) {
    return collective_time(Collective::kAllToAll, devices, bytes, algorithm);
  }
  std::vector<int> sorted(devices);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  const std::shared_ptr<const DispatchShape> shape = dispatch_shape(sorted);
  if (shape->members.size() < 2 || measured_sweep(Collective::kAllToAll, sorted) != nullptr) {
    return collective_time(Collective::kAllToAll, devices, bytes, algorithm);
  }
  const double k = static_cast<double>(sorted.size());
  const double experts = static_cast<double>(moe->num_experts);
  const double top_k = static_cast<double>(moe->top_k);
  // A token goes to another node when any of its top_k experts lives there: a node holding e
  // of the E experts (its members' share) misses it with probability C(E - e, top_k) / C(E,
  // top_k), routing being uniform. The most-hit node prices the sends to every node.
  double hit = 0;
  for (const size_t members : shape->members) {
    const double held = experts * static_cast<double>(members) / k;
    double miss = 1;
    for (double i = 0; i < top_k; ++i) miss *= std::max(0.0, (experts - held - i) / (experts - i));
    hit = std::max(hit, 1 - miss);
  }
  const double nodes = static_cast<double>(shape->members.size());
  // Across nodes: one send per token and other node, of a routed copy's bytes.
  const AlphaBeta across = achieved(shape->across);
  const double inter = hit * bytes.value() / top_k / across.bandwidth.value();
  // Inside the nodes, beside them: n / k bytes to each other member for each of the N nodes.
  const double intra = nodes * bytes.value() / k * shape->intra_seconds_per_byte /
                       options_.stack.collective_efficiency;
  return Seconds(across.latency.value() * (nodes - 1) + shape->intra_latency.value() +
                 std::max(inter, intra));
}

std::shared_ptr<const AnalyticCostModel::DispatchShape> AnalyticCostModel::dispatch_shape(
    const std::vector<int>& sorted_devices) const {
  return keep_shape(paths_->shapes, &RingShapes::dispatch, sorted_devices, kMaxShapeDevices, [&] {
    auto shape = std::make_shared<DispatchShape>();
    const std::vector<Device>& all = topology_->devices();
    std::map<int, std::vector<int>> by_node;  // the members by node, in device order
    for (int d : sorted_devices) by_node[all[d].node].push_back(d);
    for (const auto& [node, members] : by_node) shape->members.push_back(members.size());
    if (by_node.size() >= 2) {
      // Each device sends to the device at its position in every other node, all at once
      // (sharing what NICs they share).
      std::vector<std::pair<int, int>> sends;
      for (const auto& [node, members] : by_node) {
        for (size_t i = 0; i < members.size(); ++i) {
          for (const auto& [other, peers] : by_node) {
            if (other != node) sends.emplace_back(members[i], peers[i % peers.size()]);
          }
        }
      }
      shape->across = concurrent_parameters(sends);
      // Inside each node every member sends a block to every other at once: the node's
      // all-to-all shares, the slowest node's.
      for (const auto& [node, members] : by_node) {
        if (members.size() < 2) continue;
        const AlphaBeta ab = link_all_to_all(members);
        shape->intra_seconds_per_byte =
            std::max(shape->intra_seconds_per_byte, 1.0 / ab.bandwidth.value());
        shape->intra_latency =
            std::max(shape->intra_latency, ab.latency * static_cast<double>(members.size() - 1));
      }
    }
    return std::shared_ptr<const DispatchShape>(std::move(shape));
  });
}

CostModel::ContextExchange AnalyticCostModel::context_exchange(int layer,
                                                               const DeviceGroup& group) const {
  MOTLEY_CHECK(0 <= layer && layer < static_cast<int>(layer_costs_.size()),
               "context_exchange of a layer outside the model");
  MOTLEY_CHECK(!group.devices.empty() && group.devices[0] >= 0 &&
                   group.devices[0] < static_cast<int>(table_of_device_.size()),
               "context_exchange on a device outside the cluster");
  ContextExchange out;
  const int t = group.tp();
  out.bytes = layer_costs_[layer].context_exchange_bytes / static_cast<double>(t);
  if (out.bytes.value() <= 0) return out;
  const DeviceType& device = *tables_[table_of_device_[group.devices[0]]].type;
  for (const Kernel& kernel : kernels_[layer]) {
    if (kernel.kind != KernelKind::kAttention) continue;
    const Seconds time =
        kernel_time(kernel, device, options_.workload.dtype, t, options_.sequence_parallel,
                    options_.workload.dropout, options_.stack);
    (kernel.pass == KernelPass::kForward ? out.forward_attention : out.backward_attention) += time;
  }
  return out;
}

Bytes AnalyticCostModel::boundary_bytes(int layer) const {
  MOTLEY_CHECK(0 <= layer && layer < static_cast<int>(layer_costs_.size()),
               "boundary_bytes of a layer outside the model");
  return layer_costs_[layer].output_bytes;
}

Seconds AnalyticCostModel::p2p_time(int src, int dst, Bytes bytes) const {
  if (src == dst) return Seconds(0);
  const Path& path = topology_->path(src, dst);
  return path.latency + bytes / (path.bandwidth * options_.stack.p2p_efficiency);
}

AlphaBeta AnalyticCostModel::concurrent_parameters(
    std::span<const std::pair<int, int>> transfers) const {
  AlphaBeta out{Seconds(0), BytesPerSecond(kInf)};
  // Topology resolves a path each time it is asked: once per transfer here.
  SmallBuffer<Path, 32> paths(transfers.size());
  size_t crossings = 0;
  for (size_t i = 0; i < transfers.size(); ++i) {
    paths.begin()[i] = topology_->path(transfers[i].first, transfers[i].second);
    crossings += paths.begin()[i].links.size();
  }
  SmallBuffer<int, 256> used(crossings);
  int* next = used.begin();
  for (const Path& p : paths) next = std::copy(p.links.begin(), p.links.end(), next);
  std::sort(used.begin(), used.end());
  const std::vector<Link>& links = topology_->links();
  for (const Path& p : paths) {
    out.latency = std::max(out.latency, p.latency);
    double bandwidth = p.bandwidth.value();
    for (int link : p.links) {
      auto range = std::equal_range(used.begin(), used.end(), link);
      const double sharing = static_cast<double>(range.second - range.first);
      bandwidth = std::min(bandwidth, links[link].bandwidth.value() / sharing);
    }
    out.bandwidth = BytesPerSecond(std::min(out.bandwidth.value(), bandwidth));
  }
  return out;
}

AlphaBeta AnalyticCostModel::achieved(AlphaBeta ring) const {
  ring.bandwidth = ring.bandwidth * options_.stack.collective_efficiency;
  return ring;
}

AlphaBeta AnalyticCostModel::group_ring(const std::vector<int>& devices) const {
  const std::vector<Device>& all = topology_->devices();
  const int node = all[devices[0]].node;
  const std::vector<int>& members = paths_->node_members[node];
  const int local = static_cast<int>(members.size());
  if (local > kMaxSubsetDevices) return ring_parameters(devices);
  std::call_once(paths_->node_rings_once[node], [&] {
    std::vector<AlphaBeta>& table = paths_->node_rings[node];
    table.resize(size_t{1} << local);
    std::vector<int> subset;
    for (uint32_t mask = 0; mask < (uint32_t{1} << local); ++mask) {
      subset.clear();
      for (int i = 0; i < local; ++i) {
        if (mask & (uint32_t{1} << i)) subset.push_back(members[i]);
      }
      table[mask] = channel_parameters(subset);
    }
  });
  const std::vector<AlphaBeta>& rings = paths_->node_rings[node];
  uint32_t mask = 0;
  for (int d : devices) {
    if (all[d].node != node) return ring_parameters(devices);
    mask |= uint32_t{1} << all[d].local_index;
  }
  return rings[mask];
}

const std::vector<CollectiveSample>* AnalyticCostModel::measured_sweep(
    Collective collective, const std::vector<int>& sorted_devices) const {
  for (const MeasuredSweep& m : measured_collectives_) {
    if (m.op == collective && m.devices == sorted_devices) return &m.samples;
  }
  return nullptr;
}

AlphaBeta AnalyticCostModel::ring_parameters(std::span<const int> devices) const {
  // compute() prices TP groups through here millions of times: no heap for small groups.
  SmallBuffer<int, 16> ring(devices.size());
  std::copy(devices.begin(), devices.end(), ring.begin());
  std::sort(ring.begin(), ring.end());
  const size_t k = static_cast<size_t>(std::unique(ring.begin(), ring.end()) - ring.begin());
  if (k < 2) return AlphaBeta{Seconds(0), BytesPerSecond(kInf)};
  SmallBuffer<std::pair<int, int>, 16> transfers(k);
  for (size_t i = 0; i < k; ++i)
    transfers.begin()[i] = {ring.begin()[i], ring.begin()[(i + 1) % k]};
  return concurrent_parameters(std::span<const std::pair<int, int>>(transfers.begin(), k));
}

AlphaBeta AnalyticCostModel::channel_parameters(std::span<const int> devices) const {
  const AlphaBeta ring = ring_parameters(devices);
  if (devices.size() < 3) return ring;
  // Only xGMI gives every pair of a node's devices a link of its own (Topology's links); in
  // a node of at most kMaxSubsetDevices devices, whose subsets group_ring prices once each.
  const std::vector<Device>& all = topology_->devices();
  const int node = all[devices[0]].node;
  if (topology_->node_of(devices[0]).interconnect.kind != LinkKind::kXgmi) return ring;
  if (paths_->node_members[node].size() > static_cast<size_t>(kMaxSubsetDevices)) return ring;
  for (int d : devices) {
    if (all[d].node != node) return ring;
  }
  std::vector<int> sorted(devices.begin(), devices.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  const size_t k = sorted.size();
  if (k < 3) return ring;
  // Each ordered pair crosses its own xGMI link and no other pair's, so the exchange runs at
  // the slowest pair's rate, after the largest latency.
  const std::vector<int>& members = paths_->node_members[node];
  const size_t n = members.size();
  std::call_once(paths_->node_pairs_once[node], [&] {
    std::vector<AlphaBeta>& table = paths_->node_pairs[node];
    table.assign(n * n, AlphaBeta{Seconds(0), BytesPerSecond(kInf)});
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        if (i == j) continue;
        const Path p = topology_->path(members[i], members[j]);
        table[i * n + j] = AlphaBeta{p.latency, p.bandwidth};
      }
    }
  });
  const std::vector<AlphaBeta>& table = paths_->node_pairs[node];
  AlphaBeta every{Seconds(0), BytesPerSecond(kInf)};
  for (int from : sorted) {
    for (int to : sorted) {
      if (from == to) continue;
      const AlphaBeta& pair = table[static_cast<size_t>(all[from].local_index) * n +
                                    static_cast<size_t>(all[to].local_index)];
      every.latency = std::max(every.latency, pair.latency);
      every.bandwidth = BytesPerSecond(std::min(every.bandwidth.value(), pair.bandwidth.value()));
    }
  }
  const double rate = every.bandwidth.value() * static_cast<double>(k - 1);
  // Only a clear gain (a measured slow pair can make the single ring the faster).
  if (!(rate > ring.bandwidth.value() * (1 + 1e-9))) return ring;
  return AlphaBeta{std::max(ring.latency, every.latency), BytesPerSecond(rate)};
}

std::shared_ptr<const AnalyticCostModel::RingShape> AnalyticCostModel::ring_shape(
    const std::vector<int>& sorted_devices) const {
  return keep_shape(paths_->shapes, &RingShapes::shapes, sorted_devices, kMaxShapeDevices, [&] {
    auto shape = std::make_shared<RingShape>();
    shape->flat = channel_parameters(sorted_devices);
    std::vector<std::vector<int>> by_node;
    std::map<int, size_t> node_slot;
    for (int d : sorted_devices) {
      auto [it, inserted] = node_slot.emplace(topology_->devices()[d].node, by_node.size());
      if (inserted) by_node.emplace_back();
      by_node[it->second].push_back(d);
    }
    shape->nodes = static_cast<int>(by_node.size());
    if (shape->nodes >= 2) {
      shape->local_min = by_node[0].size();
      size_t local_max = 0;
      for (const auto& members : by_node) {
        shape->local_min = std::min(shape->local_min, members.size());
        local_max = std::max(local_max, members.size());
        const std::pair<int, AlphaBeta> own{static_cast<int>(members.size()),
                                            channel_parameters(members)};
        const bool known =
            std::any_of(shape->intra.begin(), shape->intra.end(), [&](const auto& x) {
              return x.first == own.first && x.second.latency == own.second.latency &&
                     x.second.bandwidth == own.second.bandwidth;
            });
        if (!known) shape->intra.push_back(own);
      }
      // One inter-node ring per local rank, all at once: they share the nodes' NICs. Nodes with
      // fewer participants reuse theirs; each ring carries the largest shard, n / min(local).
      std::vector<std::pair<int, int>> transfers;
      for (size_t r = 0; r < local_max; ++r) {
        for (size_t j = 0; j < by_node.size(); ++j) {
          const auto& from = by_node[j];
          const auto& to = by_node[(j + 1) % by_node.size()];
          transfers.emplace_back(from[r % from.size()], to[r % to.size()]);
        }
      }
      shape->inter = concurrent_parameters(transfers);
    }
    return std::shared_ptr<const RingShape>(std::move(shape));
  });
}

Seconds AnalyticCostModel::flat_time(Collective collective, const std::vector<int>& devices,
                                     Bytes bytes) const {
  const int k = static_cast<int>(devices.size());
  if (k < 2) return Seconds(0);
  if (collective != Collective::kAllToAll) {
    return flat_collective_time(collective, k, bytes, achieved(ring_shape(devices)->flat));
  }
  // NCCL's all-to-all is one group of sends and receives, every block under way at once: a
  // block of n / k bytes from every device to every other. Each link carries the blocks whose
  // paths cross it, so the time is the most loaded link's: its blocks at its rate, the k - 1
  // peers' latencies in turn. Inside an NVSwitch node that is a port's k - 1 blocks, as a
  // pairwise exchange; across nodes the NVLink and the NIC blocks travel side by side.
  const AlphaBeta ab = all_to_all_parameters(devices);
  const double block = bytes.value() / static_cast<double>(k);
  return Seconds(static_cast<double>(k - 1) * ab.latency.value() + block / ab.bandwidth.value());
}

AlphaBeta AnalyticCostModel::all_to_all_parameters(const std::vector<int>& sorted_devices) const {
  return achieved(link_all_to_all(sorted_devices));
}

AlphaBeta AnalyticCostModel::link_all_to_all(const std::vector<int>& sorted_devices) const {
  return keep_shape(paths_->shapes, &RingShapes::all_to_all, sorted_devices, kMaxShapeDevices, [&] {
    std::vector<std::pair<int, int>> blocks;
    blocks.reserve(sorted_devices.size() * (sorted_devices.size() - 1));
    for (int from : sorted_devices) {
      for (int to : sorted_devices) {
        if (from != to) blocks.emplace_back(from, to);
      }
    }
    return concurrent_parameters(blocks);
  });
}

Seconds AnalyticCostModel::hierarchical_time(Collective collective, const std::vector<int>& devices,
                                             Bytes bytes) const {
  if (collective == Collective::kAllToAll) return flat_time(collective, devices, bytes);
  const std::shared_ptr<const RingShape> shape = ring_shape(devices);
  if (shape->nodes < 2) return flat_time(collective, devices, bytes);
  // Intra-node phases run in every node at once; the slowest node sets the pace.
  auto intra = [&](Collective phase) {
    Seconds slowest(0);
    for (const auto& [local, ring] : shape->intra) {
      slowest = std::max(slowest, flat_collective_time(phase, local, bytes, achieved(ring)));
    }
    return slowest;
  };
  const Bytes shard = bytes / static_cast<double>(shape->local_min);
  switch (collective) {
    case Collective::kAllReduce:
      return intra(Collective::kReduceScatter) +
             ring_all_reduce_time(shape->nodes, shard, achieved(shape->inter)) +
             intra(Collective::kAllGather);
    case Collective::kReduceScatter:
      return intra(Collective::kReduceScatter) +
             ring_reduce_scatter_time(shape->nodes, shard, achieved(shape->inter));
    case Collective::kAllGather:
      return ring_all_gather_time(shape->nodes, shard, achieved(shape->inter)) +
             intra(Collective::kAllGather);
    case Collective::kAllToAll:
      break;
  }
  return flat_time(collective, devices, bytes);
}

Seconds AnalyticCostModel::collective_time(Collective collective, const std::vector<int>& devices,
                                           Bytes bytes, CollectiveAlgorithm algorithm) const {
  // Data-parallel rings of tens of thousands of devices come in ascending order already: those
  // are priced without a copy.
  const bool ascending = std::adjacent_find(devices.begin(), devices.end(),
                                            std::greater_equal<int>()) == devices.end();
  std::vector<int> copy;
  if (!ascending) {
    copy = devices;
    std::sort(copy.begin(), copy.end());
    copy.erase(std::unique(copy.begin(), copy.end()), copy.end());
  }
  const std::vector<int>& sorted = ascending ? devices : copy;
  if (sorted.size() < 2) return Seconds(0);
  // Measured over exactly these devices: the transport's own algorithm, as it ran.
  if (const std::vector<CollectiveSample>* sweep = measured_sweep(collective, sorted)) {
    return measured_collective_time(*sweep, bytes);
  }
  switch (algorithm) {
    case CollectiveAlgorithm::kRing:
      return flat_time(collective, sorted, bytes);
    case CollectiveAlgorithm::kHierarchical:
      return hierarchical_time(collective, sorted, bytes);
    case CollectiveAlgorithm::kAuto:
      return std::min(flat_time(collective, sorted, bytes),
                      hierarchical_time(collective, sorted, bytes));
  }
  return flat_time(collective, sorted, bytes);
}

}  // namespace motley
