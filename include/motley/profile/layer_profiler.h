// Layer profiling: the forward (F), input-gradient (B), weight-gradient (W) and
// selective-recompute times of each distinct layer of a model, measured with the executor's own
// layers (exec/stage_module.h) on this process's CPU — alone, and as tensor-parallel groups whose
// ranks run as threads over the in-process transport, collectives included — and the profile
// (model/profile.h) they make. It neither prints nor writes files (`motley profile layers` does).
// Not thread-safe: it sets the process's intra-op thread count; one call at a time per process.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "motley/core/status.h"
#include "motley/core/units.h"
#include "motley/exec/precision.h"
#include "motley/model/model.h"

namespace motley {

// The device type a profile measured on this machine names: the device catalog has no CPU
// entry (cluster/device_catalog.h), so the cost model does not resolve it to a catalog device.
inline constexpr const char* kCpuDeviceType = "cpu";
// The most ranks one tensor-parallel measurement runs as threads of this process.
inline constexpr int kMaxProfileTpRanks = 256;

struct LayerProfileOptions {
  int64_t micro_batch_size = 1;
  int64_t seq_len = 0;          // 0: the model's default_seq_len
  std::vector<int> tp_degrees;  // each >= 2, measured besides the layer alone (degree 1)
  int threads = 1;              // intra-op threads (ATen's and OpenBLAS's), shared by all ranks
  Precision precision = Precision::kFp32;
  // Where the layers run (compute_device.h) and the device type the profile names for it: the
  // CPU (kCpuDeviceType), or a GPU and its catalog name (e.g. "H100-SXM"). Weights and inputs
  // are drawn on the CPU and moved, and every phase is timed after the GPU finished it.
  c10::Device device = c10::kCPU;
  std::string device_type = kCpuDeviceType;
  uint64_t seed = 0;  // weights, as the executor draws them (StageModuleOptions::seed)
  // The stopping rule (docs/profiling.md): `warmup` samples are discarded; then samples are
  // taken until the relative standard error of the mean of F+B+W+R per sample is at most
  // `target_rse` after at least `min_repeats` samples, or `max_repeats` samples were taken, or
  // `max_time` has passed since the first kept sample (after at least one).
  int warmup = 2;
  int min_repeats = 5;
  int max_repeats = 100;
  double target_rse = 0.02;
  Seconds max_time = Seconds(10);
  // What the memory check compares with; nullopt: MemAvailable of /proc/meminfo (no check when
  // that cannot be read).
  std::optional<Bytes> available_memory;
  // Called before each measurement with a line saying what is measured; may be empty.
  std::function<void(const std::string&)> on_progress;
};

// One distinct layer at one tensor-parallel degree.
struct LayerMeasurement {
  int tp = 1;
  // Medians per sample. A TP sample's phase takes the slowest rank's time (the group is done
  // when its last rank is). backward_input is 0 for the embedding (its input is token ids);
  // selective_recompute is absent for layers without attention.
  MeasuredTimes times;
  // The AdamW step over the layer's parameters (the executor's update, its OptimizerOptions
  // defaults), per rank; taken once per sample, after the backwards.
  Seconds optimizer_step;
  int samples = 0;      // kept, after warm-up
  double rse = 0;       // relative standard error of the mean of the per-sample totals
  bool stable = false;  // stopped by the rse rule, not by max_repeats or max_time
  Seconds elapsed;      // wall time of the kept samples
};

// Layers with identical shapes: measured once, at the first.
struct DistinctLayer {
  std::vector<int> layers;  // model layer indices, increasing; layers[0] is the one measured
  // Degree 1 first, then each requested degree the layer splits evenly over.
  std::vector<LayerMeasurement> measurements;
  // Degrees it does not split over, with the reason (tensor_parallel_obstacle).
  std::vector<std::pair<int, std::string>> skipped_tp;
  Bytes param_bytes;       // the executor's tensors of the whole layer (fp32 master weights)
  Bytes activation_bytes;  // model/layer_cost.h's estimate, no recompute, in the profile's dtype
  Bytes output_bytes;      // the tensor the layer's forward returned (the head: its loss)
};

struct LayerProfile {
  ModelSpec profile;  // one kMeasured layer per model layer, with the model's names
  std::vector<DistinctLayer> distinct;
  std::string device_type;                 // kCpuDeviceType
  Precision precision = Precision::kFp32;  // as run (bf16 falls back to fp32 where unavailable)
  int64_t seq_len = 0;
  int64_t micro_batch_size = 0;
  int threads = 1;
};

// Groups the layers of `model` whose shapes are identical (everything but the name), in order
// of first appearance.
std::vector<std::vector<int>> distinct_layer_groups(const ModelSpec& model);

// Measures every distinct layer of `model` at degree 1 and at each of options.tp_degrees it
// splits over. Before anything is allocated it refuses (invalid_argument, naming the layer and
// the option to change): options out of range, layer kinds the executor does not run, and a layer
// whose weights, gradients and activations at this shape (times the ranks of a TP measurement)
// would not fit in the available memory. REQUIRES: `model` passed validate_model.
Result<LayerProfile> profile_layers(const LayerProfileOptions& options, const ModelSpec& model);

}  // namespace motley
