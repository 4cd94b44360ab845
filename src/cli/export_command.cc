// `motley export`: a plan in the forms other engines read. `export torch-pp` writes a replica's
// schedule as PyTorch torch.distributed.pipelining's CSV (compute actions, and with --lowered
// the messages too; plan/torch_pp.h), prints the stage-to-rank map, and says what the CSV does
// not carry of the plan. `motley simulate --plan P --torch-pp-csv F` reads such a CSV back.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/torch_pp.h"
#include "motley/plan/validate.h"
#include "option_checks.h"
#include "output_options.h"

namespace motley::cli {
namespace {

struct TorchPpOptions {
  std::string plan;
  int replica = 0;
  std::string out;
  std::string lowered;
  bool json = false;
};

Status export_torch_pp(const TorchPpOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_output_options({{"--out", opt.out}, {"--lowered", opt.lowered}}));
  MOTLEY_ASSIGN_OR_RETURN(const PlanInputs in, load_plan_inputs(opt.plan));
  MOTLEY_RETURN_IF_ERROR(
      validate_plan(in.plan, in.model, in.cluster, ValidateOptions{}).with_context(opt.plan));
  const int replicas = static_cast<int>(in.plan.replicas.size());
  if (opt.replica >= replicas) {
    return invalid_argument(fmt::format("--replica: {} has {} replica{} (0 to {}), got {}",
                                        opt.plan, replicas, replicas == 1 ? "" : "s", replicas - 1,
                                        opt.replica));
  }
  const std::string compute = torch_pp_csv(in.plan, opt.replica, false);
  const std::vector<int> stage_ranks = torch_pp_stage_ranks(in.plan, opt.replica);
  const std::vector<std::string> limits = torch_pp_limits(in.plan, opt.replica);
  OutputFiles files;
  if (!opt.out.empty()) files.add(opt.out, compute);
  if (!opt.lowered.empty()) files.add(opt.lowered, torch_pp_csv(in.plan, opt.replica, true));
  std::string text;
  if (opt.json) {
    Json j{{"plan", opt.plan},
           {"replica", opt.replica},
           {"pipeline_ranks", in.plan.replicas[opt.replica].groups.size()},
           {"stages", in.plan.stages.size()},
           {"micro_batches", in.plan.replicas[opt.replica].micro_batches},
           {"stage_to_rank", stage_ranks},
           {"not_expressed", limits}};
    if (!opt.out.empty()) j["csv"] = opt.out;
    if (!opt.lowered.empty()) j["lowered_csv"] = opt.lowered;
    if (opt.out.empty() && opt.lowered.empty()) j["schedule"] = compute;
    text = j.dump(2) + "\n";
  } else if (opt.out.empty() && opt.lowered.empty()) {
    text = compute;  // the CSV alone, to pipe or redirect
  } else {
    text = fmt::format(
        "replica {} of {}: {} pipeline ranks, {} stages, {} micro-batches\nstage -> rank: {}\n",
        opt.replica, opt.plan, in.plan.replicas[opt.replica].groups.size(), in.plan.stages.size(),
        in.plan.replicas[opt.replica].micro_batches, fmt::join(stage_ranks, " "));
    for (const std::string& limit : limits) text += "not expressed: " + limit + "\n";
    for (const std::string* file : {&opt.out, &opt.lowered}) {
      if (!file->empty()) text += "wrote " + *file + "\n";
    }
  }
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::fputs(text.c_str(), stdout);
  return Status::ok();
}

}  // namespace

void add_export_command(CLI::App& app, Action* action) {
  CLI::App* cmd = app.add_subcommand("export", "Write a plan in the form another engine reads");
  cmd->require_subcommand(1);
  auto opt = std::make_shared<TorchPpOptions>();
  CLI::App* torch_pp = cmd->add_subcommand(
      "torch-pp", "A replica's schedule as PyTorch torch.distributed.pipelining CSV");
  torch_pp->footer(
      "One row per pipeline rank (the replica's device groups in order), one cell per action:\n"
      "0F3 forward, 1I3 input-gradient backward, 1W3 weight-gradient backward, 2B0 full\n"
      "backward; --lowered adds SEND_F / RECV_F / SEND_B / RECV_B. Stage indices are the plan's.\n"
      "Without --out or --lowered the CSV is printed. Read one back with\n"
      "'motley simulate --plan P --torch-pp-csv F'.");
  torch_pp->add_option("--plan", opt->plan, "The plan file")->required();
  torch_pp->add_option("--replica", opt->replica, "Which replica's schedule (default 0)")
      ->check(integer_in(0, kMaxOptionCount));
  torch_pp->add_option("--out", opt->out, "Write the compute-only CSV here");
  torch_pp->add_option("--lowered", opt->lowered, "Write the CSV with the messages here");
  torch_pp->add_flag("--json", opt->json, "Print one JSON object");
  torch_pp->callback([opt, action] { *action = [opt] { return export_torch_pp(*opt); }; });
}

}  // namespace motley::cli
