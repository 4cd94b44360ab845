#include "motley/profile/layer_profiler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "motley/exec/compute_device.h"
#include "motley/exec/host_memory.h"
#include "motley/exec/split_backward.h"
#include "motley/exec/stage_module.h"
#include "motley/exec/train.h"
#include "motley/exec/transport.h"
#include "motley/model/layer_cost.h"
#include "motley/model/limits.h"
#include "motley/model/model_json.h"

namespace motley {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One sample's phases, in seconds; r < 0 when the layer has no attention core.
struct Sample {
  double f = 0, b = 0, w = 0, r = -1;
  double fused = 0;      // B and W in one backward pass, after a second F
  double optimizer = 0;  // the AdamW step over the layer's parameters, gradients in place
  double total() const { return f + b + w + std::max(r, 0.0); }
};

// What one rank needs to take samples of one layer: its stage, fixed inputs and the gradient
// that arrives from downstream, as the executor's F, B (I) and W actions see them.
class RankBench {
 public:
  static Result<std::unique_ptr<RankBench>> create(const ModelSpec& model, int layer,
                                                   const LayerProfileOptions& options,
                                                   int64_t seq_len, TensorParallelGroup group) {
    auto bench = std::unique_ptr<RankBench>(new RankBench());
    bench->precision_ = options.precision;
    bench->device_ = options.device;
    bench->store_ = ParameterStore(options.device);
    StageModuleOptions stage_options;
    stage_options.seed = options.seed;
    stage_options.seq_len = seq_len;
    stage_options.tensor_parallel = std::move(group);
    const int tp = stage_options.tensor_parallel.size;
    MOTLEY_ASSIGN_OR_RETURN(bench->stage_, make_transformer_stage(model, layer, layer + 1,
                                                                  stage_options, bench->store_));
    for (const StageParameter& p : bench->stage_->parameters()) bench->params_.push_back(p.tensor);
    // The executor's update (exec/optimizer.h wraps the same torch::optim::AdamW).
    const OptimizerOptions defaults;
    bench->optimizer_ = std::make_unique<torch::optim::AdamW>(
        bench->params_, torch::optim::AdamWOptions(defaults.learning_rate)
                            .betas({defaults.beta1, defaults.beta2})
                            .eps(defaults.epsilon)
                            .weight_decay(defaults.weight_decay));
    const int64_t b = options.micro_batch_size;
    const Layer& l = model.layers[layer];
    try {
      at::Generator generator =
          at::make_generator<at::CPUGeneratorImpl>(options.seed + static_cast<uint64_t>(layer));
      const int64_t vocab = model.layers.back().head ? model.layers.back().head->vocab
                            : l.embedding            ? l.embedding->vocab
                                                     : 2;
      const c10::Device device = options.device;
      if (bench->stage_->takes_tokens() || bench->stage_->produces_loss()) {
        bench->targets_ = at::randint(vocab, {b, seq_len}, generator, at::kLong).to(device);
      }
      if (bench->stage_->takes_tokens()) {
        bench->input_ =
            at::randint(l.embedding->vocab, {b, seq_len}, generator, at::kLong).to(device);
      } else {
        at::Tensor input = at::empty({b, seq_len, hidden_width_read(l)}, at::kFloat);
        input.normal_(0.0, 1.0, generator);
        bench->input_ = input.to(device).requires_grad_(true);
      }
      if (!bench->stage_->produces_loss()) {
        at::Tensor grad = at::empty({b, seq_len, hidden_width_written(l)}, at::kFloat);
        grad.normal_(0.0, 1e-3, generator);
        bench->grad_output_ = grad.to(device);
      }
    } catch (const std::exception& e) {
      return internal_error(fmt::format("layer '{}': preparing its inputs: {}", l.name, e.what()));
    }
    if (l.attention) {
      MOTLEY_ASSIGN_OR_RETURN(std::function<at::Tensor()> core,
                              attention_core_runner(l, b, seq_len, tp, options.device));
      bench->core_ = std::move(core);
    }
    return bench;
  }

  // One F, then B (the input's gradient and every gradient but the weight products') and W
  // (the weight products' gradients from what B left), as ActionInterpreter runs a split
  // backward (split_backward.h); another F and one backward computing both, as it runs a fused
  // one; then the attention core's forward as a selective recompute runs it. Throws what
  // libtorch or a collective throws.
  Sample sample() {
    Sample s;
    AutocastGuard autocast(precision_, device_.type());
    const SplitBackward::Recording recording(split_);
    Clock::time_point start = now();
    at::Tensor output = stage_->forward(input_, targets_);
    s.f = since(start);
    output_bytes_ = static_cast<double>(output.nbytes());
    const at::Tensor grad_output = stage_->produces_loss() ? at::ones_like(output) : grad_output_;
    DeferredWeightGradients deferred;
    start = now();
    split_.input_pass(output, grad_output, stage_->takes_tokens() ? at::Tensor() : input_, params_,
                      deferred);
    s.b = since(start);
    output = at::Tensor();
    start = now();
    deferred.apply();
    s.w = since(start);
    output = stage_->forward(input_, targets_);
    std::vector<at::Tensor> inputs = params_;
    if (!stage_->takes_tokens()) inputs.push_back(input_);
    start = now();
    torch::autograd::backward({output}, {grad_output}, /*retain_graph=*/false,
                              /*create_graph=*/false, inputs);
    s.fused = since(start);
    if (!params_.empty()) {
      start = now();
      optimizer_->step();
      s.optimizer = since(start);
      optimizer_->zero_grad();
    }
    if (core_) {
      start = now();
      at::Tensor recomputed = core_();
      s.r = since(start);
    }
    return s;
  }

  // The clock, read once the device has finished what was queued (a GPU runs kernels after
  // the host queued them), so each phase is timed from its first kernel to its last.
  Clock::time_point now() const {
    synchronize_device(device_);
    return Clock::now();
  }
  double since(Clock::time_point start) const {
    synchronize_device(device_);
    return seconds_since(start);
  }

  Bytes param_bytes() const {
    double bytes = 0;
    for (const at::Tensor& p : params_) bytes += static_cast<double>(p.nbytes());
    return Bytes(bytes);
  }
  Bytes output_bytes() const { return Bytes(output_bytes_); }

 private:
  RankBench() = default;

  Precision precision_ = Precision::kFp32;
  c10::Device device_ = c10::kCPU;
  SplitBackward split_;
  ParameterStore store_;
  std::unique_ptr<StageModule> stage_;
  std::vector<at::Tensor> params_;
  at::Tensor input_, targets_, grad_output_;
  std::function<at::Tensor()> core_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  double output_bytes_ = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The kept samples and the stopping rule over them.
class Samples {
 public:
  explicit Samples(const LayerProfileOptions& options) : options_(options) {}

  // Adds a sample (ignored during warm-up); returns whether to stop.
  bool add(const Sample& s) {
    if (seen_++ < options_.warmup) return false;
    if (kept_.empty()) start_ = Clock::now();
    kept_.push_back(s);
    const int n = static_cast<int>(kept_.size());
    if (n >= options_.min_repeats && rse() <= options_.target_rse) {
      stable_ = true;
      return true;
    }
    return n >= options_.max_repeats || seconds_since(start_) >= options_.max_time.value();
  }

  LayerMeasurement result(int tp) const {
    LayerMeasurement m;
    m.tp = tp;
    m.samples = static_cast<int>(kept_.size());
    m.rse = rse();
    m.stable = stable_;
    m.elapsed = Seconds(kept_.empty() ? 0.0 : seconds_since(start_));
    std::vector<double> f, b, w, r, fused, optimizer;
    for (const Sample& s : kept_) {
      optimizer.push_back(s.optimizer);
      f.push_back(s.f);
      b.push_back(s.b);
      w.push_back(s.w);
      fused.push_back(s.fused);
      if (s.r >= 0) r.push_back(s.r);
    }
    m.times.forward = Seconds(median(f));
    m.times.backward_input = Seconds(median(b));
    m.times.backward_weight = Seconds(median(w));
    m.times.backward = Seconds(median(fused));
    m.optimizer_step = Seconds(median(optimizer));
    if (!r.empty()) m.times.selective_recompute = Seconds(median(r));
    return m;
  }

 private:
  // Standard error of the mean of the totals over their mean; 0 for a single sample.
  double rse() const {
    const size_t n = kept_.size();
    if (n < 2) return 0;
    double mean = 0;
    for (const Sample& s : kept_) mean += s.total();
    mean /= static_cast<double>(n);
    double var = 0;
    for (const Sample& s : kept_) var += (s.total() - mean) * (s.total() - mean);
    var /= static_cast<double>(n - 1);
    return mean > 0 ? std::sqrt(var / static_cast<double>(n)) / mean : 0;
  }

  const LayerProfileOptions& options_;
  int seen_ = 0;
  std::vector<Sample> kept_;
  bool stable_ = false;
  Clock::time_point start_;
};

Result<LayerMeasurement> measure_alone(const ModelSpec& model, int layer,
                                       const LayerProfileOptions& options, int64_t seq_len,
                                       DistinctLayer* out) {
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<RankBench> bench,
                          RankBench::create(model, layer, options, seq_len, {}));
  Samples samples(options);
  try {
    while (!samples.add(bench->sample())) {
    }
  } catch (const std::exception& e) {
    return internal_error(fmt::format("layer '{}': {}", model.layers[layer].name, e.what()));
  }
  out->param_bytes = bench->param_bytes();
  out->output_bytes = bench->output_bytes();
  return samples.result(1);
}

// t ranks as threads over an in-process network, each holding its slice of the layer and summing
// over the group as the executor's tensor-parallel stages do. The ranks start every sample
// together (a barrier), so each phase's time includes waiting for the group's collectives.
Result<LayerMeasurement> measure_group(const ModelSpec& model, int layer,
                                       const LayerProfileOptions& options, int64_t seq_len, int t) {
  InProcessNetwork network(t);
  std::vector<int> ranks(static_cast<size_t>(t));
  for (int r = 0; r < t; ++r) ranks[r] = r;
  std::barrier<> sync(t);
  std::vector<Sample> round(static_cast<size_t>(t));
  Samples samples(options);
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  Status first_error;
  auto fail = [&](Status status) {
    {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (first_error.is_ok()) first_error = std::move(status);
    }
    failed = true;
    network.shut_down("another rank of the tensor-parallel measurement failed");
  };

  auto body = [&](int rank) {
    std::unique_ptr<Transport> transport = network.endpoint(rank);
    TensorParallelGroup group;
    group.rank = rank;
    group.size = t;
    Transport* net = transport.get();
    group.all_reduce = [net, &ranks](at::Tensor& x) {
      Status s = net->all_reduce_sum({x}, ranks);
      if (!s.is_ok()) throw std::runtime_error(s.message());
    };
    Result<std::unique_ptr<RankBench>> bench =
        RankBench::create(model, layer, options, seq_len, std::move(group));
    if (!bench.is_ok()) {
      fail(bench.status());
      sync.arrive_and_drop();
      return;
    }
    // Three barriers a sample: start together; all times written; the verdict read.
    while (true) {
      sync.arrive_and_wait();
      if (failed) return;
      try {
        round[rank] = (*bench)->sample();
      } catch (const std::exception& e) {
        fail(internal_error(fmt::format("layer '{}', tensor-parallel rank {} of {}: {}",
                                        model.layers[layer].name, rank, t, e.what())));
        sync.arrive_and_drop();
        return;
      }
      sync.arrive_and_wait();
      if (failed) return;
      if (rank == 0) {
        Sample slowest = round[0];
        for (const Sample& s : round) {
          slowest.f = std::max(slowest.f, s.f);
          slowest.b = std::max(slowest.b, s.b);
          slowest.w = std::max(slowest.w, s.w);
          slowest.r = std::max(slowest.r, s.r);
          slowest.optimizer = std::max(slowest.optimizer, s.optimizer);
        }
        stop = samples.add(slowest);
      }
      sync.arrive_and_wait();
      if (failed || stop) return;
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(t));
  for (int r = 0; r < t; ++r) threads.emplace_back(body, r);
  for (std::thread& th : threads) th.join();
  if (failed) return first_error;
  return samples.result(t);
}

// The bytes profiling `layer` over `t` ranks holds at once, generously: every rank draws the
// full weights before keeping its slice; weights and gradients; each rank's activations,
// inputs and output gradient; the executor's unfused attention keeps its b x heads x s x s
// scores and probabilities, their gradients and an s x s mask per rank.
double profiling_bytes(const Layer& l, int64_t b, int64_t s, int t) {
  const Workload w{s, b, DType::kFloat32, false};
  const LayerCost cost = layer_cost(l, w);
  const double params = static_cast<double>(layer_stored_params(l));
  const double tokens = static_cast<double>(b) * static_cast<double>(s);
  const double width =
      static_cast<double>(std::max({hidden_width_read(l), hidden_width_written(l), int64_t{1}}));
  double bytes = 4.0 * params * (t + 2);
  bytes += t * (cost.activation_bytes[static_cast<int>(RecomputePolicy::kNone)].value() +
                3 * 4.0 * tokens * width);
  if (l.attention) {
    const double sq = static_cast<double>(s) * static_cast<double>(s);
    bytes += 4 * 4.0 * static_cast<double>(b) * static_cast<double>(l.attention->num_heads) * sq +
             t * 4.0 * sq;
  }
  return bytes;
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024 * 1024)); }

Status check_options(const LayerProfileOptions& o, int64_t seq_len) {
  auto range = [](const char* what, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) {
      return invalid_argument(
          fmt::format("{}: expected an integer from {} to {}, got {}", what, lo, hi, v));
    }
    return Status::ok();
  };
  MOTLEY_RETURN_IF_ERROR(range("micro-batch size", o.micro_batch_size, 1, kMaxMicroBatchSize));
  MOTLEY_RETURN_IF_ERROR(range("sequence length", seq_len, 1, kMaxSeqLen));
  MOTLEY_RETURN_IF_ERROR(range("threads", o.threads, 1, 1024));
  MOTLEY_RETURN_IF_ERROR(range("warm-up samples", o.warmup, 0, 1'000'000));
  MOTLEY_RETURN_IF_ERROR(range("minimum samples", o.min_repeats, 1, 1'000'000));
  MOTLEY_RETURN_IF_ERROR(range("maximum samples", o.max_repeats, o.min_repeats, 1'000'000));
  for (int t : o.tp_degrees) {
    MOTLEY_RETURN_IF_ERROR(range("tensor-parallel degree", t, 2, kMaxProfileTpRanks));
  }
  if (!(o.target_rse > 0 && o.target_rse < 1)) {
    return invalid_argument(fmt::format(
        "relative standard error: expected a number above 0 and below 1, got {}", o.target_rse));
  }
  if (!(o.max_time.value() > 0) || !std::isfinite(o.max_time.value())) {
    return invalid_argument("time budget: expected a positive number of seconds");
  }
  return Status::ok();
}

}  // namespace

std::vector<std::vector<int>> distinct_layer_groups(const ModelSpec& model) {
  std::vector<std::vector<int>> groups;
  std::map<std::string, size_t> group_of;  // a layer's shape as JSON, without its name
  for (size_t i = 0; i < model.layers.size(); ++i) {
    ModelSpec one;
    one.layers.push_back(model.layers[i]);
    one.layers[0].name.clear();
    const std::string key = model_to_json(one)["layers"][0].dump();
    auto [it, inserted] = group_of.emplace(key, groups.size());
    if (inserted) groups.emplace_back();
    groups[it->second].push_back(static_cast<int>(i));
  }
  return groups;
}

Result<LayerProfile> profile_layers(const LayerProfileOptions& options, const ModelSpec& model) {
  const int64_t seq_len = options.seq_len > 0 ? options.seq_len : model.default_seq_len;
  MOTLEY_RETURN_IF_ERROR(check_options(options, seq_len));
  const std::string name = fmt::format("model '{}'", model.name);
  if (model.layers.empty()) return invalid_argument(name + ": no layers to profile");
  const std::vector<std::vector<int>> groups = distinct_layer_groups(model);

  // Everything that can be refused is refused before the first tensor.
  const std::optional<Bytes> available =
      options.available_memory ? options.available_memory : available_memory_bytes();
  std::vector<std::vector<int>> degrees(groups.size());
  std::vector<std::vector<std::pair<int, std::string>>> skipped(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const int i = groups[g][0];
    const Layer& l = model.layers[i];
    switch (l.kind) {
      case LayerKind::kMeasured:
      case LayerKind::kPatchEmbedding:
      case LayerKind::kVisionBlock:
      case LayerKind::kProjector:
        return invalid_argument(fmt::format(
            "{}: layer {} ('{}', {}): the executor does not run this layer kind, so it cannot be "
            "profiled; it runs embedding, attention, feed_forward, moe, mamba, decoder_block and "
            "head",
            name, i, l.name, layer_kind_name(l.kind)));
      default:
        break;
    }
    degrees[g].push_back(1);
    for (int t : options.tp_degrees) {
      if (std::find(degrees[g].begin(), degrees[g].end(), t) != degrees[g].end()) continue;
      if (auto obstacle = tensor_parallel_obstacle(l, t, /*vocabulary=*/true)) {
        skipped[g].emplace_back(t, *obstacle);
      } else {
        degrees[g].push_back(t);
      }
    }
    if (!available) continue;
    for (int t : degrees[g]) {
      const double need = profiling_bytes(l, options.micro_batch_size, seq_len, t);
      if (need > available->value()) {
        return invalid_argument(fmt::format(
            "{}: layer {} ('{}') needs about {} to profile at micro-batch size {} and sequence "
            "length {}{} (weights, gradients and activations), more than the {} available; "
            "use a smaller --seq-len or --micro-batch-size",
            name, i, l.name, gib(need), options.micro_batch_size, seq_len,
            t > 1 ? fmt::format(" over {} tensor-parallel ranks", t) : "",
            gib(available->value())));
      }
    }
  }

  LayerProfile out;
  out.device_type = options.device_type;
  out.precision =
      options.device.is_cpu() ? effective_precision(options.precision) : options.precision;
  out.seq_len = seq_len;
  out.micro_batch_size = options.micro_batch_size;
  out.threads = options.threads;
  LayerProfileOptions run = options;
  run.precision = out.precision;
  set_intra_op_threads(options.threads);

  const DType dtype =
      out.precision == Precision::kBf16Autocast ? DType::kBFloat16 : DType::kFloat32;
  for (size_t g = 0; g < groups.size(); ++g) {
    const int i = groups[g][0];
    const Layer& l = model.layers[i];
    DistinctLayer d;
    d.layers = groups[g];
    d.skipped_tp = skipped[g];
    d.activation_bytes = layer_cost(l, Workload{seq_len, options.micro_batch_size, dtype, false})
                             .activation_bytes[static_cast<int>(RecomputePolicy::kNone)];
    for (int t : degrees[g]) {
      if (options.on_progress) {
        options.on_progress(fmt::format(
            "layer {} ('{}'{}){}", i, l.name,
            d.layers.size() > 1 ? fmt::format(", and {} like it", d.layers.size() - 1) : "",
            t > 1 ? fmt::format(" over {} tensor-parallel ranks", t) : ""));
      }
      Result<LayerMeasurement> m = t == 1 ? measure_alone(model, i, run, seq_len, &d)
                                          : measure_group(model, i, run, seq_len, t);
      if (!m.is_ok()) return m.status().with_context(name);
      d.measurements.push_back(*m);
    }
    out.distinct.push_back(std::move(d));
  }

  // The profile: every layer gets its group's measurements.
  ModelSpec& p = out.profile;
  p.name = model.name;
  p.family = "profile";
  p.default_seq_len = seq_len;
  p.dtype = dtype;
  p.layers.resize(model.layers.size());
  for (const DistinctLayer& d : out.distinct) {
    MeasuredLayer m;
    m.measured_on = out.device_type;
    // W is timed as the executor runs it: the weight products' gradients alone (the default).
    m.times = d.measurements[0].times;
    m.optimizer_step = d.measurements[0].optimizer_step;
    for (size_t k = 1; k < d.measurements.size(); ++k) {
      m.times_by_tp[out.device_type][d.measurements[k].tp] = d.measurements[k].times;
    }
    m.seq_len = seq_len;
    m.micro_batch_size = options.micro_batch_size;
    m.param_bytes = d.param_bytes;
    m.activation_bytes = d.activation_bytes;
    m.output_bytes = d.output_bytes;
    for (int i : d.layers) {
      Layer& layer = p.layers[i];
      layer.name = model.layers[i].name;
      layer.kind = LayerKind::kMeasured;
      layer.measured = m;
    }
  }
  MOTLEY_RETURN_IF_ERROR(validate_model(p, name));
  return out;
}

}  // namespace motley
