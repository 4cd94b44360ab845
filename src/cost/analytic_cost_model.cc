#include "motley/cost/analytic_cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
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

// Tokens one sample brings to `layer`: vision layers have a fixed count, others the sequence.
double tokens_per_sample(const Layer& layer, int64_t seq_len) {
  return static_cast<double>(layer.tokens_per_sample > 0 ? layer.tokens_per_sample : seq_len);
}

KernelCounts attention_kernels(const AttentionShape& a) {
  // pre-norm, QKV projection, rotary embedding, fused attention core, output projection,
  // residual add; MLA adds its down/up projections and the latent norms.
  int extra_forward = (a.qk_norm ? 1 : 0) + (a.mla ? 4 : 0);
  return {6 + extra_forward, 6 + extra_forward, 3 + (a.mla ? 3 : 0)};
}

KernelCounts ffn_kernels() {
  // pre-norm, (fused gate and) up projection, activation, down projection, residual add.
  return {5, 5, 3};
}

KernelCounts moe_kernels(const MoeShape& m) {
  // pre-norm, router, top-k softmax, token permutation, grouped up projection, activation,
  // grouped down projection, un-permutation and weighting, residual add; shared experts add a
  // dense feed-forward's three.
  int shared = m.num_shared_experts > 0 ? 3 : 0;
  return {9 + shared, 9 + shared, 4 + (shared > 0 ? 2 : 0)};
}

KernelCounts operator+(KernelCounts a, KernelCounts b) {
  return {a.forward + b.forward, a.backward_input + b.backward_input,
          a.backward_weight + b.backward_weight};
}

std::string layer_field(size_t index, const Layer& layer) {
  return fmt::format("layers[{}] ('{}')", index, layer.name);
}

}  // namespace

double matmul_efficiency(const DeviceType& device, Flops flops) {
  if (flops.value() <= 0) return 0.0;
  const FlopsPerSecond tensor_peak = std::max(device.peak_bf16, device.peak_fp16);
  const Flops half = tensor_peak * kHalfEfficiencyTime;
  return device.matmul_efficiency * (flops.value() / (flops.value() + half.value()));
}

KernelCounts kernel_counts(const Layer& layer) {
  switch (layer.kind) {
    case LayerKind::kEmbedding: {
      // gather rows (+ add learned positions); no input gradient for token ids; the weight
      // gradient is a scatter-add per table.
      int tables = layer.embedding && layer.embedding->learned_positions > 0 ? 2 : 1;
      return {tables, 0, tables};
    }
    case LayerKind::kAttention:
      return layer.attention ? attention_kernels(*layer.attention) : KernelCounts{6, 6, 3};
    case LayerKind::kFeedForward:
      return ffn_kernels();
    case LayerKind::kMoe:
      return layer.moe ? moe_kernels(*layer.moe) : KernelCounts{9, 9, 4};
    case LayerKind::kMamba:
      // pre-norm, in_proj, causal conv1d, the chunked scan (about five kernels in the Mamba-2
      // reference implementation), gated norm, out_proj, residual add.
      return {11, 11, 4};
    case LayerKind::kDecoderBlock: {
      KernelCounts attn =
          layer.attention ? attention_kernels(*layer.attention) : KernelCounts{6, 6, 3};
      return attn + (layer.moe ? moe_kernels(*layer.moe) : ffn_kernels());
    }
    case LayerKind::kPatchEmbedding:
      // patch convolution, add positions; pixels need no gradient.
      return {2, 0, 2};
    case LayerKind::kVisionBlock: {
      KernelCounts attn =
          layer.attention ? attention_kernels(*layer.attention) : KernelCounts{6, 6, 3};
      return attn + ffn_kernels();
    }
    case LayerKind::kProjector:
      return layer.projector && layer.projector->ffn_size > 0 ? KernelCounts{3, 3, 2}
                                                              : KernelCounts{1, 1, 1};
    case LayerKind::kHead:
      // final norm, LM head projection, cross-entropy (log-sum-exp and loss).
      return {4, 4, 2};
    case LayerKind::kMeasured:
      return {0, 0, 0};
  }
  return {0, 0, 0};
}

Flops attention_core_forward_flops(const Layer& layer, const Workload& workload) {
  if (!layer.attention) return Flops(0);
  const AttentionShape& a = *layer.attention;
  const double s = tokens_per_sample(layer, workload.seq_len);
  const double w = static_cast<double>(std::max<int64_t>(a.sliding_window, 0));
  const bool windowed = w > 0 && w < s;
  // Query-key pairs scored per sample and head, counted as model/layer_cost.cc counts them.
  double pairs = 0;
  if (!a.causal) {
    pairs = s * (windowed ? w : s);
  } else if (!windowed) {
    pairs = s * (s + 1) / 2;
  } else {
    // Queries 0..w-1 see i+1 keys, the other s-w see w each.
    pairs = w * (w + 1) / 2 + (s - w) * w;
  }
  const double nope_rope = static_cast<double>(a.qk_nope_head_dim + a.qk_rope_head_dim);
  const double qk_dim = a.mla && nope_rope > 0 ? nope_rope : static_cast<double>(a.head_dim);
  const double v_dim = static_cast<double>(a.v_head_dim > 0 ? a.v_head_dim : a.head_dim);
  // 2 FLOPs per multiply-add: scores use qk_dim per pair, the weighted sum v_dim per pair.
  return Flops(2.0 * static_cast<double>(workload.micro_batch_size) *
               static_cast<double>(a.num_heads) * pairs * (qk_dim + v_dim));
}

Seconds roofline_time(const DeviceType& device, DType dtype, Flops flops, Bytes bytes) {
  double compute = 0;
  if (flops.value() > 0) {
    const double rate = device.peak(dtype).value() * matmul_efficiency(device, flops);
    compute = rate > 0 ? flops.value() / rate : kInf;
  }
  double memory = 0;
  if (bytes.value() > 0) {
    memory = device.memory_bandwidth.value() > 0 ? (bytes / device.memory_bandwidth).value() : kInf;
  }
  return Seconds(std::max(compute, memory));
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
  }
  return Status::ok();
}

AnalyticCostModel::AnalyticCostModel(const ModelSpec& model, const ClusterSpec& cluster,
                                     const AnalyticCostOptions& options)
    : model_(model), options_(options), topology_(cluster) {
  options_.workload.dropout = options.workload.dropout || model.dropout;
  const Workload& w = options_.workload;
  const size_t n = model_.layers.size();
  layer_costs_.reserve(n);
  kernels_.reserve(n);
  attention_core_flops_.reserve(n);
  measured_.resize(n);

  for (size_t i = 0; i < n; ++i) {
    const Layer& layer = model_.layers[i];
    LayerCost cost = layer_cost(layer, w);
    kernels_.push_back(kernel_counts(layer));
    attention_core_flops_.push_back(attention_core_forward_flops(layer, w).value());
    if (layer.kind == LayerKind::kMeasured && layer.measured) {
      const MeasuredLayer& m = *layer.measured;
      MeasuredRates& rates = measured_[i];
      // Linear in tokens, by the rule layer_cost() scales the profile's bytes with.
      rates.token_scale = measured_token_scale(layer, w);
      Result<const DeviceType*> on = find_device_type(m.measured_on);
      if (on.is_ok()) {
        rates.measured_on = on.value()->name;
        rates.reference_rate = on.value()->peak(w.dtype).value() * on.value()->matmul_efficiency;
      }
      for (const auto& [name, times] : m.times_by_device) {
        Result<const DeviceType*> type = find_device_type(name);
        if (type.is_ok()) rates.overrides.emplace_back(type.value()->name, times);
      }
      cost.tp_allreduces = 0;  // unknown split: measured layers are priced without collectives
    }
    layer_costs_.push_back(cost);
  }

  tp_allreduce_count_prefix_.assign(n + 1, 0.0);
  tp_allreduce_bytes_prefix_.assign(n + 1, 0.0);
  stored_params_prefix_.assign(n + 1, 0.0);
  activation_prefix_.assign(n + 1, {0.0, 0.0, 0.0});
  for (size_t i = 0; i < n; ++i) {
    const LayerCost& c = layer_costs_[i];
    tp_allreduce_count_prefix_[i + 1] = tp_allreduce_count_prefix_[i] + c.tp_allreduces;
    tp_allreduce_bytes_prefix_[i + 1] =
        tp_allreduce_bytes_prefix_[i] + c.tp_allreduces * c.output_bytes.value();
    stored_params_prefix_[i + 1] = stored_params_prefix_[i] + static_cast<double>(c.stored_params);
    for (int p = 0; p < 3; ++p) {
      activation_prefix_[i + 1][p] = activation_prefix_[i][p] + c.activation_bytes[p].value();
    }
  }

  // One table per device type present, for every TP degree a node of that type allows.
  std::map<std::string, int> table_index;
  std::map<std::pair<int, std::string>, int> per_node;  // (node, type) -> devices
  table_of_device_.assign(topology_.devices().size(), 0);
  for (const Device& d : topology_.devices()) {
    auto [it, inserted] = table_index.emplace(d.type, static_cast<int>(tables_.size()));
    if (inserted) tables_.push_back(DeviceTables{&topology_.device_type(d.id), {}});
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
        prefix[i + 1] = {prefix[i].forward + x.forward, prefix[i].backward_input + x.backward_input,
                         prefix[i].backward_weight + x.backward_weight,
                         prefix[i].selective_recompute + x.selective_recompute};
      }
    }
  }

  // TP groups live inside one node: price each subset of a small node's devices once.
  std::vector<std::vector<int>> members;
  for (const Device& d : topology_.devices()) {
    if (d.node >= static_cast<int>(members.size())) members.resize(d.node + 1);
    members[d.node].push_back(d.id);
  }
  node_rings_.resize(members.size());
  std::vector<int> subset;
  for (size_t node = 0; node < members.size(); ++node) {
    const int local = static_cast<int>(members[node].size());
    if (local > kMaxSubsetDevices) continue;
    node_rings_[node].resize(size_t{1} << local);
    for (uint32_t mask = 0; mask < (uint32_t{1} << local); ++mask) {
      subset.clear();
      for (int i = 0; i < local; ++i) {
        if (mask & (uint32_t{1} << i)) subset.push_back(members[node][i]);
      }
      node_rings_[node][mask] = ring_parameters(subset);
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
    auto pick = [&](std::optional<Seconds> MeasuredTimes::*field) {
      double base = 0;
      if (own != nullptr && (own->*field).has_value()) {
        base = (own->*field)->value();
      } else if ((m.times.*field).has_value()) {
        base = (m.times.*field)->value() * ratio;
      }
      return base * rates.token_scale / t;
    };
    out.forward = pick(&MeasuredTimes::forward);
    out.backward_input = pick(&MeasuredTimes::backward_input);
    out.backward_weight = pick(&MeasuredTimes::backward_weight);
    return out;
  }
  const LayerCost& c = layer_costs_[layer];
  const KernelCounts& k = kernels_[layer];
  auto pass = [&](Flops flops, Bytes bytes, int kernels) {
    return roofline_time(device, dtype, flops / t, bytes / t).value() +
           kernels * kKernelOverhead.value();
  };
  out.forward = pass(c.forward, c.forward_memory, k.forward);
  out.backward_input = pass(c.backward_input, c.backward_input_memory, k.backward_input);
  out.backward_weight = pass(c.backward_weight, c.backward_weight_memory, k.backward_weight);
  out.selective_recompute =
      roofline_time(device, dtype, Flops(attention_core_flops_[layer] / t), Bytes(0)).value();
  return out;
}

ComputeTimes AnalyticCostModel::compute(LayerRange layers, const DeviceGroup& group,
                                        RecomputePolicy recompute) const {
  const int n = static_cast<int>(model_.layers.size());
  MOTLEY_CHECK(0 <= layers.begin && layers.begin <= layers.end && layers.end <= n,
               "layer range outside the model");
  MOTLEY_CHECK(!group.devices.empty(), "compute on an empty device group");
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
    sum = {hi.forward - lo.forward, hi.backward_input - lo.backward_input,
           hi.backward_weight - lo.backward_weight,
           hi.selective_recompute - lo.selective_recompute};
  } else {
    // A group larger than any node of its type holds: not precomputed, priced directly.
    for (int i = layers.begin; i < layers.end; ++i) {
      LayerTimes x = layer_times(i, *table.type, t);
      sum.forward += x.forward;
      sum.backward_input += x.backward_input;
      sum.backward_weight += x.backward_weight;
      sum.selective_recompute += x.selective_recompute;
    }
  }
  // Each TP all-reduce is a ring all-reduce of the layer's output over the group:
  // summed over layers, 2(t-1) alpha * count + 2(t-1)/t * sum(bytes) / beta.
  double comm = 0;
  const double count =
      tp_allreduce_count_prefix_[layers.end] - tp_allreduce_count_prefix_[layers.begin];
  if (t > 1 && count > 0) {
    const AlphaBeta ring = group_ring(group.devices);
    const double bytes =
        tp_allreduce_bytes_prefix_[layers.end] - tp_allreduce_bytes_prefix_[layers.begin];
    comm = 2.0 * (t - 1) * ring.latency.value() * count +
           (2.0 * (t - 1) / t) * bytes / ring.bandwidth.value();
  }
  ComputeTimes out;
  out.forward = Seconds(sum.forward + comm);
  out.backward_input = Seconds(sum.backward_input + comm);
  out.backward_weight = Seconds(sum.backward_weight);
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

StageMemory AnalyticCostModel::stage_memory(LayerRange layers, const DeviceGroup& group,
                                            const MemoryOptions& options) const {
  const int n = static_cast<int>(model_.layers.size());
  MOTLEY_CHECK(0 <= layers.begin && layers.begin <= layers.end && layers.end <= n,
               "layer range outside the model");
  const double t = static_cast<double>(std::max(group.tp(), 1));
  const double params = stored_params_prefix_[layers.end] - stored_params_prefix_[layers.begin];
  const OptimizerBytesPerParam per_param =
      optimizer_bytes_per_param(options_.workload.dtype, options_.fp32_grad_accumulation);
  const double zero_shards =
      options.zero1 ? static_cast<double>(std::max<int64_t>(options.data_parallel, 1)) : 1.0;
  const int policy = static_cast<int>(options.recompute);

  StageMemory m;
  m.weights = Bytes(params * per_param.weights / t);
  m.gradients = Bytes(params * per_param.gradients / t);
  m.optimizer_state = Bytes(params * per_param.optimizer_state / t / zero_shards);
  m.activations_per_micro_batch = Bytes(
      (activation_prefix_[layers.end][policy] - activation_prefix_[layers.begin][policy]) / t);
  m.activations =
      m.activations_per_micro_batch * static_cast<double>(options.in_flight_micro_batches);
  // Double-buffered receives: the activation coming in and the gradient coming back, each
  // split t ways under sequence parallelism.
  Bytes in = layers.begin > 0 ? boundary_bytes(layers.begin - 1) : Bytes(0);
  Bytes out = layers.end < n && layers.end > 0 ? boundary_bytes(layers.end - 1) : Bytes(0);
  m.communication_buffers = (in + out) * 2.0 / t;
  return m;
}

Bytes AnalyticCostModel::boundary_bytes(int layer) const {
  MOTLEY_CHECK(0 <= layer && layer < static_cast<int>(layer_costs_.size()),
               "boundary_bytes of a layer outside the model");
  return layer_costs_[layer].output_bytes;
}

Seconds AnalyticCostModel::p2p_time(int src, int dst, Bytes bytes) const {
  if (src == dst) return Seconds(0);
  const Path& path = topology_.path(src, dst);
  return path.latency + bytes / path.bandwidth;
}

AlphaBeta AnalyticCostModel::concurrent_parameters(
    std::span<const std::pair<int, int>> transfers) const {
  AlphaBeta out{Seconds(0), BytesPerSecond(kInf)};
  size_t crossings = 0;
  for (const auto& [src, dst] : transfers) crossings += topology_.path(src, dst).links.size();
  SmallBuffer<int, 256> used(crossings);
  int* next = used.begin();
  for (const auto& [src, dst] : transfers) {
    const Path& p = topology_.path(src, dst);
    next = std::copy(p.links.begin(), p.links.end(), next);
  }
  std::sort(used.begin(), used.end());
  const std::vector<Link>& links = topology_.links();
  for (const auto& [src, dst] : transfers) {
    const Path& p = topology_.path(src, dst);
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

AlphaBeta AnalyticCostModel::group_ring(const std::vector<int>& devices) const {
  const std::vector<Device>& all = topology_.devices();
  const int node = all[devices[0]].node;
  const std::vector<AlphaBeta>& rings = node_rings_[node];
  if (rings.empty()) return ring_parameters(devices);
  uint32_t mask = 0;
  for (int d : devices) {
    if (all[d].node != node) return ring_parameters(devices);
    mask |= uint32_t{1} << all[d].local_index;
  }
  return rings[mask];
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

Seconds AnalyticCostModel::flat_time(Collective collective, const std::vector<int>& devices,
                                     Bytes bytes) const {
  const int k = static_cast<int>(devices.size());
  if (k < 2) return Seconds(0);
  if (collective != Collective::kAllToAll) {
    return flat_collective_time(collective, k, bytes, ring_parameters(devices));
  }
  // Pairwise exchange: in step s every device sends its block to the device s places ahead.
  // Every step is priced like the slowest one (largest latency, smallest share of bandwidth).
  AlphaBeta worst{Seconds(0), BytesPerSecond(kInf)};
  std::vector<std::pair<int, int>> step;
  for (int s = 1; s < k; ++s) {
    step.clear();
    for (int i = 0; i < k; ++i) step.emplace_back(devices[i], devices[(i + s) % k]);
    const AlphaBeta ab = concurrent_parameters(step);
    worst.latency = std::max(worst.latency, ab.latency);
    worst.bandwidth = std::min(worst.bandwidth, ab.bandwidth);
  }
  return pairwise_all_to_all_time(k, bytes, worst);
}

Seconds AnalyticCostModel::hierarchical_time(Collective collective, const std::vector<int>& devices,
                                             Bytes bytes) const {
  std::vector<std::vector<int>> by_node;
  std::map<int, size_t> node_slot;
  for (int d : devices) {
    auto [it, inserted] = node_slot.emplace(topology_.devices()[d].node, by_node.size());
    if (inserted) by_node.emplace_back();
    by_node[it->second].push_back(d);
  }
  const int nodes = static_cast<int>(by_node.size());
  if (nodes < 2 || collective == Collective::kAllToAll)
    return flat_time(collective, devices, bytes);

  // Intra-node phases run in every node at once; the slowest node sets the pace.
  size_t local_min = by_node[0].size();
  size_t local_max = 0;
  for (const auto& members : by_node) {
    local_min = std::min(local_min, members.size());
    local_max = std::max(local_max, members.size());
  }
  auto intra = [&](Collective phase) {
    Seconds slowest(0);
    for (const auto& members : by_node) {
      const int local = static_cast<int>(members.size());
      slowest =
          std::max(slowest, flat_collective_time(phase, local, bytes, ring_parameters(members)));
    }
    return slowest;
  };
  // One inter-node ring per local rank, all at once: they share the nodes' NICs. Nodes with
  // fewer participants reuse theirs; each ring carries the largest shard, n / min(local).
  std::vector<std::pair<int, int>> transfers;
  for (size_t r = 0; r < local_max; ++r) {
    for (int j = 0; j < nodes; ++j) {
      const auto& from = by_node[j];
      const auto& to = by_node[(j + 1) % nodes];
      transfers.emplace_back(from[r % from.size()], to[r % to.size()]);
    }
  }
  const AlphaBeta inter = concurrent_parameters(transfers);
  const Bytes shard = bytes / static_cast<double>(local_min);
  switch (collective) {
    case Collective::kAllReduce:
      return intra(Collective::kReduceScatter) + ring_all_reduce_time(nodes, shard, inter) +
             intra(Collective::kAllGather);
    case Collective::kReduceScatter:
      return intra(Collective::kReduceScatter) + ring_reduce_scatter_time(nodes, shard, inter);
    case Collective::kAllGather:
      return ring_all_gather_time(nodes, shard, inter) + intra(Collective::kAllGather);
    case Collective::kAllToAll:
      break;
  }
  return flat_time(collective, devices, bytes);
}

Seconds AnalyticCostModel::collective_time(Collective collective, const std::vector<int>& devices,
                                           Bytes bytes, CollectiveAlgorithm algorithm) const {
  std::vector<int> sorted(devices);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  if (sorted.size() < 2) return Seconds(0);
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
