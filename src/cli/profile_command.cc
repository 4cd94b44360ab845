// `motley profile`, in motley-profile (it links libtorch through the profile module): a parent
// command whose subcommands measure this machine. `profile layers` times each distinct layer of
// a model with the executor's layers (profile/layer_profiler.h) and prints a table or writes a
// motley.profile/2 file.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "motley/cluster/detect.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/exec/compute_device.h"
#include "motley/model/limits.h"
#include "motley/model/model_json.h"
#include "motley/model/profile.h"
#include "motley/profile/layer_profiler.h"
#include "motley/report/text_table.h"
#include "motley/report/units_format.h"
#include "option_checks.h"
#include "output_options.h"
#include "profile_commands.h"

namespace motley::cli {
namespace {

struct ProfileLayersOptions {
  std::string model;
  std::string out;
  std::string precision = "fp32";
  std::string device = "cpu";
  std::vector<int> tp;
  int64_t micro_batch_size = 1;
  int64_t seq_len = 0;
  int threads = 1;
  int warmup = 2;
  int min_repeats = 5;
  int max_repeats = 100;
  double rse = 0.02;
  double max_time = 10;
  uint64_t seed = 0;
};

// "layers.0", or "layers.0 (+3 alike)" for a layer standing for others.
std::string layer_label(const ModelSpec& model, const DistinctLayer& d) {
  const std::string& name = model.layers[d.layers[0]].name;
  return d.layers.size() == 1 ? name : fmt::format("{} (+{} alike)", name, d.layers.size() - 1);
}

std::string time_cell(const std::optional<Seconds>& t) { return t ? format_time(*t) : "-"; }

std::string table(const ModelSpec& model, const LayerProfile& p) {
  std::string out = fmt::format(
      "model {}: {} layers, {} distinct, measured on this machine's {} (device type '{}')\n"
      "micro-batch {} x {} tokens, {}, {} intra-op thread{}; medians per micro-batch (the "
      "optimizer: per step)\n",
      model.name, model.layers.size(), p.distinct.size(),
      p.device_type == kCpuDeviceType ? "CPU" : "GPU", p.device_type, p.micro_batch_size, p.seq_len,
      precision_name(p.precision), p.threads, p.threads == 1 ? "" : "s");
  TextTable t({"layer", "TP", "F", "B", "W", "R (selective)", "optimizer", "samples", "rse"});
  t.set_alignment({TextTable::Align::kLeft});
  std::vector<std::string> notes;
  for (const DistinctLayer& d : p.distinct) {
    for (const LayerMeasurement& m : d.measurements) {
      t.add_row({layer_label(model, d), std::to_string(m.tp), time_cell(m.times.forward),
                 time_cell(m.times.backward_input), time_cell(m.times.backward_weight),
                 time_cell(m.times.selective_recompute), format_time(m.optimizer_step),
                 std::to_string(m.samples) + (m.stable ? "" : "*"), format_percent(m.rse)});
    }
    for (const auto& [degree, why] : d.skipped_tp) {
      notes.push_back(fmt::format("{}: not measured at TP {}: {}", model.layers[d.layers[0]].name,
                                  degree, why));
    }
  }
  out += t.to_string();
  bool unstable = false;
  bool tp = false;
  for (const DistinctLayer& d : p.distinct) {
    for (const LayerMeasurement& m : d.measurements) {
      unstable = unstable || !m.stable;
      tp = tp || m.tp > 1;
    }
  }
  if (unstable) {
    out += "* stopped by the sample cap or the time budget before the rse target\n";
  }
  if (tp) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    out += fmt::format(
        "TP t: t ranks as threads of this process over the in-process transport, all-reduces "
        "included, each phase the slowest rank's; they share this machine's {} core{}\n",
        cores, cores == 1 ? "" : "s");
  }
  for (const std::string& n : notes) out += n + "\n";
  return out;
}

Status profile_layers_command(const ProfileLayersOptions& opt) {
  if (opt.max_repeats < opt.min_repeats) {
    return invalid_argument(fmt::format("--max-repeats ({}) must be at least --min-repeats ({})",
                                        opt.max_repeats, opt.min_repeats));
  }
  MOTLEY_RETURN_IF_ERROR(check_output_options({{"--out", opt.out}}));
  MOTLEY_ASSIGN_OR_RETURN(ModelSpec model, load_model(opt.model));
  LayerProfileOptions o;
  o.micro_batch_size = opt.micro_batch_size;
  o.seq_len = opt.seq_len;
  o.tp_degrees = opt.tp;
  o.threads = opt.threads;
  o.precision = opt.precision == "bf16" ? Precision::kBf16Autocast : Precision::kFp32;
  o.seed = opt.seed;
  MOTLEY_ASSIGN_OR_RETURN(const c10::Device requested, parse_compute_device(opt.device));
  MOTLEY_ASSIGN_OR_RETURN(o.device, resolve_compute_device(requested, 0));
  if (const std::optional<GpuProperties> gpu = gpu_properties(o.device)) {
    // The profile names the GPU by its catalog type, so that plans can use its times.
    const Bytes memory(static_cast<double>(gpu->memory_bytes));
    const std::optional<std::string> type = match_device_type(gpu->name, memory);
    if (!type) {
      return invalid_argument(fmt::format(
          "--device {}: '{}' ({}) matches no device type of the catalog (docs/devices.md), so "
          "its times could not be planned with",
          o.device.str(), gpu->name, format_bytes(memory)));
    }
    o.device_type = *type;
    o.available_memory = memory;
  }
  o.warmup = opt.warmup;
  o.min_repeats = opt.min_repeats;
  o.max_repeats = opt.max_repeats;
  o.target_rse = opt.rse;
  o.max_time = Seconds(opt.max_time);
  if (::isatty(STDERR_FILENO)) {
    o.on_progress = [](const std::string& what) {
      std::fprintf(stderr, "motley: profiling %s\n", what.c_str());
    };
  }
  MOTLEY_ASSIGN_OR_RETURN(LayerProfile p, profile_layers(o, model));
  if (o.precision != p.precision) {
    std::fprintf(stderr,
                 "motley: note: --precision bf16: this libtorch cannot autocast to bf16 on the "
                 "CPU; measured in fp32\n");
  }
  if (opt.out.empty()) {
    std::fputs(table(model, p).c_str(), stdout);
    return Status::ok();
  }
  OutputFiles files;
  files.add(opt.out, profile_to_json(p.profile).dump(2) + "\n");
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::printf("wrote %s: %zu layers (%zu distinct) measured on '%s'\n", opt.out.c_str(),
              model.layers.size(), p.distinct.size(), p.device_type.c_str());
  return Status::ok();
}

void add_profile_layers_command(CLI::App& profile, Action* action) {
  auto opt = std::make_shared<ProfileLayersOptions>();
  CLI::App* cmd = profile.add_subcommand(
      "layers",
      "Time F, B, W and the selective-recompute part of each distinct layer of a model with the "
      "executor's layers on this machine (see docs/profiling.md)");
  cmd->add_option("--model", opt->model, "Preset name or model / HF config.json / profile path")
      ->required();
  cmd->add_option("--micro-batch-size", opt->micro_batch_size, "Sequences per micro-batch")
      ->check(integer_in(1, kMaxMicroBatchSize))
      ->capture_default_str();
  cmd->add_option("--seq-len", opt->seq_len, "Tokens per sequence (default: the model's)")
      ->check(integer_in(1, kMaxSeqLen));
  cmd->add_option("--tp", opt->tp,
                  "Tensor-parallel degrees to measure besides 1, e.g. 2,4: each runs as that many "
                  "ranks on threads of this process over the in-process transport")
      ->delimiter(',')
      ->check(integer_in(2, kMaxProfileTpRanks));
  cmd->add_option("--out", opt->out, "Write the profile (motley.profile/2) here");
  cmd->add_option("--threads", opt->threads,
                  "Intra-op threads, shared by all ranks (1: what one executor rank gets)")
      ->check(integer_in(1, kMaxOptionThreads))
      ->capture_default_str();
  cmd->add_option("--precision", opt->precision,
                  "fp32, or bf16: under autocast to bf16 on the device, as 'motley run "
                  "--precision bf16'")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--device", opt->device,
                  "cpu, or cuda / cuda:N: the layers on that GPU, the profile naming its catalog "
                  "type (needs a build against a CUDA-enabled libtorch)")
      ->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "Samples run and discarded before measuring")
      ->check(integer_in(0, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--min-repeats", opt->min_repeats, "Samples kept at least")
      ->check(integer_in(1, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--max-repeats", opt->max_repeats, "Samples kept at most")
      ->check(integer_in(2, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--rse", opt->rse,
                  "Stop once the relative standard error of the mean per sample is at most this")
      ->check(positive_number(0.5))
      ->capture_default_str();
  cmd->add_option("--max-time", opt->max_time,
                  "Seconds of kept samples per layer and degree, at most")
      ->check(positive_number(kMaxOptionSeconds))
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Seed of the weights and inputs")
      ->check(unsigned_integer())
      ->capture_default_str();
  cmd->callback([opt, action] { *action = [opt] { return profile_layers_command(*opt); }; });
}

}  // namespace

void add_profile_command(CLI::App& app, Action* action) {
  CLI::App* profile = app.add_subcommand(
      "profile",
      "Measure this machine: per-layer times (layers), communication between ranks (comm)");
  profile->require_subcommand(1);
  add_profile_layers_command(*profile, action);
  add_profile_comm_command(*profile, action);
}

}  // namespace motley::cli
