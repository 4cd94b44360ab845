#include "run_options.h"

#include <fmt/format.h>

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "motley/model/model_json.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/validate.h"
#include "option_checks.h"

namespace motley::cli {

void add_run_options(CLI::App* cmd, RunOptions* opt, const std::string& default_data) {
  cmd->add_option("--plan", opt->plan,
                  "A plan file (it carries its model and cluster; motley.plan/1 files name them)")
      ->required();
  cmd->add_option("--model", opt->model,
                  "Model (default: the one the plan carries; must have the plan's hash)");
  cmd->add_option("--cluster", opt->cluster,
                  "Cluster (default: the one the plan carries; must have the plan's hash)");
  cmd->add_option("--steps", opt->steps, "Training steps to run now")
      ->check(integer_in(1, std::numeric_limits<int64_t>::max()))
      ->capture_default_str();
  cmd->add_option(
      "--data", opt->data,
      "Text file to train on (bytes as tokens), or 'synthetic' (default: " + default_data + ")");
  cmd->add_option("--checkpoint-dir", opt->checkpoint_dir,
                  "Save a checkpoint after the last step into its own directory here "
                  "(D/step-00000010), then point D/latest at it");
  cmd->add_flag("--resume", opt->resume,
                "Load the latest checkpoint of --checkpoint-dir first (needed when it has one)");
  cmd->add_option("--checkpoint-every", opt->checkpoint_every,
                  "Also save after every K-th step (counted from step 0)")
      ->check(integer_in(1, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--keep-checkpoints", opt->keep_checkpoints,
                  "How many of the newest checkpoints a save keeps (default: " +
                      std::to_string(kDefaultKeptCheckpoints) + ")")
      ->check(integer_in(1, 1000000));
  cmd->add_option("--trace", opt->trace,
                  "Write the measured Chrome trace (under WORLD_SIZE: one file per rank, "
                  "NAME.rankK.json, on the common time axis; motley launch merges them)");
  cmd->add_flag("--json", opt->json, "Print one JSON object");
  cmd->add_flag("--sequential", opt->sequential,
                "Run the sequential reference (same model, weights and global batch)");
  CLI::Option* emulate =
      cmd->add_flag("--emulate", opt->emulate,
                    "Emulate the plan's heterogeneous devices and links (scaled CPU time)");
  cmd->add_option("--emulate-speeds", opt->emulate_speeds,
                  "With --emulate, each device's speed: peak (its peak rate in the model's dtype) "
                  "or cost (the cost model's time for the rank's stages)")
      ->needs(emulate)
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Seed of the initial weights")
      ->check(unsigned_integer())
      ->capture_default_str();
  // Far above any AdamW rate in use (1e-5 to 1e-2), and within a float: 1e300 reached libtorch
  // and failed the first step with its own overflow message.
  cmd->add_option("--lr", opt->learning_rate, "AdamW learning rate")
      ->check(positive_number(1e3))
      ->capture_default_str();
  cmd->add_option("--precision", opt->precision,
                  "fp32, or bf16: forward and backward under autocast to bf16 on the device "
                  "(weights, gradients, optimizer and messages stay fp32; on the CPU fp32 when "
                  "this libtorch cannot)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--device", opt->device,
                  "Where each rank computes: cpu, cuda (each rank the GPU of its LOCAL_RANK, or "
                  "of its rank without WORLD_SIZE) or cuda:N; CUDA needs a build against a "
                  "CUDA-enabled libtorch")
      ->capture_default_str();
  cmd->add_option("--transport", opt->transport,
                  "Under WORLD_SIZE: gloo, nccl (GPU tensors; builds with CUDA) or auto (nccl "
                  "with a CUDA device, else gloo)")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}))
      ->capture_default_str();
  cmd->add_option("--threads", opt->threads,
                  "Intra-op threads per rank (default: max(1, cores / ranks on this machine))")
      ->check(integer_in(1, kMaxOptionThreads));
  cmd->add_option("--timeout", opt->timeout_s,
                  "Seconds any wait on another rank may take before the run fails")
      ->check(wait_seconds())
      ->capture_default_str();
  cmd->add_option("--rendezvous-timeout", opt->rendezvous_timeout_s,
                  "Seconds for joining the world and forming replica groups (under WORLD_SIZE)")
      ->check(wait_seconds())
      ->capture_default_str();
}

void add_handover_options(CLI::App* cmd, RunOptions* opt) {
  // The emulation's factors (run_emulation.h).
  cmd->add_option("--emulation-fd", opt->emulation_fd)
      ->check(integer_in(0, std::numeric_limits<int>::max()))
      ->group("");
  // On a GPU, the predicted peak memory of the plan's devices (run_emulation.h).
  cmd->add_option("--predicted-device-memory", opt->predicted_device_memory)->group("");
}

Result<std::optional<RunOptions>> parse_run_arguments(const std::vector<std::string>& args) {
  RunOptions opt;
  CLI::App app("", "motley");
  app.set_version_flag("--version", "motley");
  CLI::App* run = app.add_subcommand("run");
  add_run_options(run, &opt, "");
  add_handover_options(run, &opt);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // as CLI11 takes them
  reversed.push_back("run");
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return std::optional<RunOptions>();
  } catch (const CLI::CallForAllHelp&) {
    return std::optional<RunOptions>();
  } catch (const CLI::CallForVersion&) {
    return std::optional<RunOptions>();
  } catch (const CLI::ParseError& e) {
    return invalid_argument(fmt::format("{} (see 'motley run --help')", e.what()));
  }
  return std::optional<RunOptions>(opt);
}

Status check_run_options(const RunOptions& opt) {
  if (opt.plan.empty()) return invalid_argument("--plan: give the plan file to run");
  if ((opt.resume || opt.checkpoint_every || opt.keep_checkpoints) && opt.checkpoint_dir.empty()) {
    const char* option = opt.resume             ? "--resume"
                         : opt.checkpoint_every ? "--checkpoint-every"
                                                : "--keep-checkpoints";
    return invalid_argument(std::string(option) + " needs --checkpoint-dir");
  }
  if (opt.emulate_speeds != "peak" && opt.emulate_speeds != "cost") {
    return invalid_argument(
        fmt::format("--emulate-speeds: expected peak or cost, got '{}'", opt.emulate_speeds));
  }
  if (opt.sequential && (opt.emulate || !opt.checkpoint_dir.empty() || !opt.trace.empty())) {
    return invalid_argument(
        "--sequential runs the plain reference: it takes no --emulate, --checkpoint-dir or "
        "--trace");
  }
  return Status::ok();
}

Result<RunInputs> load_run_inputs(const RunOptions& opt) {
  // The plan carries its model and cluster; --model and --cluster may stand in for them.
  MOTLEY_ASSIGN_OR_RETURN(PlanInputs in,
                          load_plan_inputs(opt.plan, PlanSpecOverrides{opt.model, opt.cluster}));
  return RunInputs{std::move(in.plan), std::move(in.model), std::move(in.cluster)};
}

Status validate_run_inputs(const RunInputs& inputs, const RunOptions& opt) {
  Status valid = validate_plan(inputs.plan, inputs.model, inputs.cluster, ValidateOptions{});
  if (!valid.is_ok()) return valid.with_context(opt.plan);
  return valid;
}

}  // namespace motley::cli
