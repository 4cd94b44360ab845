// The options of `motley run` and what they name: the RunOptions struct, their declaration on
// a CLI11 command, and the plan, model and cluster a run trains. Shared by motley-run, which
// runs them, and by motley's forwarder, which reads the same arguments to compute an
// emulation's factors before handing over (run_emulation.h). It runs nothing. Thread-compatible.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/core/status.h"
#include "motley/exec/checkpoint_store.h"
#include "motley/model/model.h"
#include "motley/plan/plan.h"
#include "motley/plan/plan_json.h"

namespace motley::cli {

struct RunOptions {
  std::string plan;
  std::string model;
  std::string cluster;
  int64_t steps = 10;
  std::string data;
  std::string checkpoint_dir;
  bool resume = false;
  std::optional<int64_t> checkpoint_every;  // unset: only after the last step
  std::optional<int> keep_checkpoints;      // unset: kDefaultKeptCheckpoints
  std::string trace;
  bool json = false;
  bool sequential = false;
  bool emulate = false;
  uint64_t seed = 0;
  double learning_rate = 1e-3;
  double timeout_s = 30;
  double rendezvous_timeout_s = 300;
  std::optional<int> threads;  // unset: max(1, cores / ranks on this machine)
  std::string emulate_speeds = "peak";
  std::string precision = "fp32";  // or "bf16": autocast on the device (precision.h)
  std::string device = "cpu";      // or "cuda", "cuda:N" (compute_device.h)
  std::string transport = "auto";  // under WORLD_SIZE: "gloo", "nccl" or "auto"
  // The emulation's factors, computed by motley (not an option users give; see run_emulation.h).
  int emulation_fd = -1;
  // On a GPU: the simulator's peak memory per plan device, "b0,b1,..." (from motley, as above).
  std::string predicted_device_memory;
};

// Declares every user-facing option of `motley run` on `cmd`, writing into `opt`;
// `default_data` is what --data's help names as its default. The parser refuses a number out
// of its option's range (option_checks.h).
void add_run_options(CLI::App* cmd, RunOptions* opt, const std::string& default_data);

// Declares on `cmd` the hidden options through which motley hands motley-run what it computed
// (the emulation's factors, the predicted device memory).
void add_handover_options(CLI::App* cmd, RunOptions* opt);

// The options `args` (the arguments after `run`) give, parsed as motley-run's `run` command
// declares them: nullopt when they ask for help or the version; otherwise the error, worded as
// motley-run words it ("... (see 'motley run --help')"), when they do not parse.
Result<std::optional<RunOptions>> parse_run_arguments(const std::vector<std::string>& args);

// The refusals of `opt` that need neither libtorch nor the plan's files: no --plan, a
// checkpoint option without --checkpoint-dir, an unknown --emulate-speeds, --sequential with
// an option it does not take. motley-run checks these first, then the device.
Status check_run_options(const RunOptions& opt);

// What a run trains: the plan, and the model and cluster it carries (or --model / --cluster).
using RunInputs = PlanInputs;

// Loads the plan file `opt.plan` and the model and cluster a run uses with it
// (load_plan_inputs). Errors: a missing or malformed file, a spec that is not the plan's.
Result<RunInputs> load_run_inputs(const RunOptions& opt);

// validate_plan with the specs' hashes but without memory limits (the cluster's memory is not
// this CPU's); errors name the plan file.
Status validate_run_inputs(const RunInputs& inputs, const RunOptions& opt);

}  // namespace motley::cli
