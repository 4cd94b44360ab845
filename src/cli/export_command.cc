// `motley export`: a plan in the forms other engines read. `export torch-pp` writes a replica's
// schedule as PyTorch torch.distributed.pipelining's CSV (plan/torch_pp.h; `motley simulate
// --torch-pp-csv` reads one back); `export megatron` Megatron-LM's arguments and the closest
// plan Megatron runs (tune/megatron.h); `export slurm` an sbatch script (slurm_script.h);
// `export k8s` Kubernetes manifests (k8s_manifests.h). Each says what its engine cannot carry.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "cost_options.h"
#include "format.h"
#include "k8s_manifests.h"
#include "motley/core/json.h"
#include "motley/core/output_files.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/torch_pp.h"
#include "motley/plan/validate.h"
#include "motley/report/units_format.h"
#include "motley/sim/simulator.h"
#include "motley/tune/megatron.h"
#include "option_checks.h"
#include "output_options.h"
#include "slurm_script.h"

namespace motley::cli {
namespace {

// The plan file with its model and cluster, checked as `motley simulate` checks it.
Result<PlanInputs> load_valid_plan(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(PlanInputs in, load_plan_inputs(path));
  MOTLEY_RETURN_IF_ERROR(
      validate_plan(in.plan, in.model, in.cluster, ValidateOptions{}).with_context(path));
  return in;
}

struct TorchPpOptions {
  std::string plan;
  int replica = 0;
  std::string out;
  std::string lowered;
  bool json = false;
};

Status export_torch_pp(const TorchPpOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_output_options({{"--out", opt.out}, {"--lowered", opt.lowered}}));
  MOTLEY_ASSIGN_OR_RETURN(const PlanInputs in, load_valid_plan(opt.plan));
  const int replicas = static_cast<int>(in.plan.replicas.size());
  if (opt.replica >= replicas) {
    return invalid_argument(fmt::format("--replica: {} has {} replica{} (0 to {}), got {}",
                                        opt.plan, replicas, replicas == 1 ? "" : "s", replicas - 1,
                                        opt.replica));
  }
  if (const int shard = first_vocab_shard(in.plan.stages); shard >= 0) {
    return invalid_argument(fmt::format(
        "{}: field 'stages[{}].vocab_rows': the plan splits a layer by vocabulary rows into "
        "shards, which run side by side; PyTorch's pipelining runs its stages one after another "
        "and cannot express them",
        opt.plan, shard));
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

struct MegatronOptions {
  std::string plan;
  std::string out;
  bool json = false;
  StackChoice stack;
};

std::string shell_words(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) {
    const bool plain = a.find_first_not_of(
                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "0123456789-_.=/") == std::string::npos;
    out += (out.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return out;
}

Status export_megatron(const MegatronOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_output_options({{"--out", opt.out}}));
  MOTLEY_ASSIGN_OR_RETURN(const PlanInputs in, load_valid_plan(opt.plan));
  const MegatronArguments args = megatron_arguments(in.plan, in.model, in.cluster);
  // The plan and, where Megatron cannot run it, the closest plan it can, priced alike.
  MOTLEY_ASSIGN_OR_RETURN(const AnalyticCostOptions cost_options,
                          plan_cost_options(in.plan, in.model, in.cluster, opt.stack, opt.plan));
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<AnalyticCostModel> cost,
      AnalyticCostModel::create(in.model, in.cluster, cost_options, "analytic"));
  // Priced as the plan was predicted, with or without the optimizer step.
  SimOptions sim_options;
  if (!plan_optimizer_step(in.plan)) sim_options.optimizer_step = OptimizerStepModel::kNone;
  MOTLEY_ASSIGN_OR_RETURN(const SimResult sim, simulate(sim_options, in.plan, *cost));
  std::optional<StrategyOutcome> closest;
  std::optional<MegatronArguments> closest_args;
  std::string no_closest;  // why no Megatron layout of the devices fits, where none does
  if (!args.not_expressed.empty()) {
    TuneOptions options;
    options.stack = cost_options.stack;
    options.time_budget = Seconds(60);
    options.optimizer_step = plan_optimizer_step(in.plan);
    Result<StrategyOutcome> found = closest_megatron_plan(in.plan, in.model, in.cluster, options);
    if (found.is_ok()) {
      closest = std::move(found).value();
      closest_args = megatron_arguments(closest->plan, in.model, in.cluster);
    } else if (found.status().code() == StatusCode::kInfeasible) {
      no_closest = found.status().message();
    } else {
      return found.status();
    }
  }
  OutputFiles files;
  if (!opt.out.empty()) files.add(opt.out, shell_words(args.arguments) + "\n");
  std::string text;
  const double t = sim.iteration_time.value();
  if (opt.json) {
    Json j{{"plan", opt.plan},
           {"tensor_parallel", args.tensor_parallel},
           {"pipeline_parallel", args.pipeline_parallel},
           {"data_parallel", args.data_parallel},
           {"context_parallel", args.context_parallel},
           {"virtual_stages", args.virtual_stages},
           {"layout", args.layout},
           {"hybrid_pattern", args.hybrid_pattern},
           {"arguments", args.arguments},
           {"rank_devices", args.rank_devices},
           {"not_expressed", args.not_expressed},
           {"iteration_time_s", t}};
    if (!no_closest.empty()) j["closest_error"] = no_closest;
    if (closest) {
      j["closest"] = Json{{"strategy", closest->strategy},
                          {"detail", closest->detail},
                          {"iteration_time_s", closest->iteration_time.value()},
                          {"slowdown", closest->iteration_time.value() / t},
                          {"arguments", closest_args->arguments},
                          {"rank_devices", closest_args->rank_devices},
                          {"not_expressed", closest_args->not_expressed}};
    }
    text = j.dump(2) + "\n";
  } else {
    text = fmt::format(
        "Megatron-LM arguments for {} ({} on {}): TP {} x PP {}{} x DP {}{}\n", opt.plan,
        in.model.name, in.cluster.name, args.tensor_parallel, args.pipeline_parallel,
        args.context_parallel > 1 ? fmt::format(" x CP {}", args.context_parallel) : std::string(),
        args.data_parallel,
        args.virtual_stages > 1 ? fmt::format(", {} virtual stages per rank", args.virtual_stages)
                                : std::string());
    text += "  " + shell_words(args.arguments) + "\n";
    if (!args.rank_devices.empty()) {
      text += fmt::format("global rank -> device: {}\n", fmt::join(args.rank_devices, " "));
    }
    if (args.not_expressed.empty()) {
      text += fmt::format("Megatron runs this plan as it is: {} per iteration\n",
                          format_time(sim.iteration_time));
    } else if (!closest) {
      for (const std::string& why : args.not_expressed) text += "not expressed: " + why + "\n";
      text +=
          "the arguments run a different plan, and no layout of the cluster's devices "
          "that Megatron-LM runs fits this model and batch: " +
          no_closest + "\n";
    } else {
      for (const std::string& why : args.not_expressed) text += "not expressed: " + why + "\n";
      text += fmt::format(
          "the arguments run a different plan; the closest Megatron plan, {} ({}): {} per "
          "iteration, {:.2f}x this plan's {}\n",
          closest->strategy, closest->detail, format_time(closest->iteration_time),
          closest->iteration_time.value() / t, format_time(sim.iteration_time));
      text += "  " + shell_words(closest_args->arguments) + "\n";
      if (!closest_args->rank_devices.empty()) {
        text += fmt::format("  global rank -> device: {}\n",
                            fmt::join(closest_args->rank_devices, " "));
      }
      for (const std::string& why : closest_args->not_expressed) {
        text += "  not expressed: " + why + "\n";
      }
    }
    if (!opt.out.empty()) text += "wrote " + opt.out + "\n";
  }
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::fputs(text.c_str(), stdout);
  return Status::ok();
}

struct SlurmCliOptions {
  std::string plan;
  std::string out;
  SlurmOptions script;
  std::vector<std::string> gres;  // TYPE=NAME
};

Status export_slurm(const SlurmCliOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_output_options({{"--out", opt.out}}));
  MOTLEY_ASSIGN_OR_RETURN(const PlanInputs in, load_valid_plan(opt.plan));
  SlurmOptions o = opt.script;
  o.plan_path = opt.plan;
  o.model_name = in.model.name;
  for (const std::string& g : opt.gres) {
    const size_t eq = g.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == g.size()) {
      return invalid_argument(
          fmt::format("--gres: expected DEVICE_TYPE=GRES_NAME (e.g. H100-SXM=h100), got '{}'", g));
    }
    MOTLEY_ASSIGN_OR_RETURN(const DeviceType* type, find_device_type(g.substr(0, eq)));
    o.gres_names[type->name] = g.substr(eq + 1);
  }
  for (const std::string* text : {&o.partition, &o.account, &o.time, &o.job_name}) {
    if (text->find_first_of(" \t\n'\"$`\\") != std::string::npos) {
      return invalid_argument(fmt::format(
          "--partition/--account/--time/--job-name: '{}' has a space or a shell character", *text));
    }
  }
  const std::string script = slurm_script(in.plan, in.cluster, o);
  if (opt.out.empty()) {
    std::fputs(script.c_str(), stdout);
    return Status::ok();
  }
  OutputFiles files;
  files.add(opt.out, script);
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::fputs(fmt::format("wrote {}: submit it with 'sbatch {}'\n", opt.out, opt.out).c_str(),
             stdout);
  return Status::ok();
}

struct K8sCliOptions {
  std::string plan;
  std::string out;
  K8sOptions manifests;
  std::vector<std::string> node_labels;  // TYPE=KEY=VALUE
  std::vector<std::string> env;          // NAME=VALUE
};

Status export_k8s(const K8sCliOptions& opt) {
  MOTLEY_RETURN_IF_ERROR(check_output_options({{"--out", opt.out}}));
  MOTLEY_ASSIGN_OR_RETURN(const PlanInputs in, load_valid_plan(opt.plan));
  K8sOptions o = opt.manifests;
  if (o.image.empty() || o.image.find_first_of(" \t\n") != std::string::npos) {
    return invalid_argument(
        "--image: expected a container image reference, e.g. "
        "registry.example.com/motley:1.0");
  }
  for (const std::string& l : opt.node_labels) {
    const size_t eq = l.find('=');
    const size_t eq2 = eq == std::string::npos ? eq : l.find('=', eq + 1);
    if (eq == std::string::npos || eq2 == std::string::npos || eq == 0 || eq2 == eq + 1) {
      return invalid_argument(
          fmt::format("--node-label: expected DEVICE_TYPE=KEY=VALUE (e.g. "
                      "MI300X=amd.com/gpu.product-name=AMD_Instinct_MI300X_OAM), got '{}'",
                      l));
    }
    MOTLEY_ASSIGN_OR_RETURN(const DeviceType* type, find_device_type(l.substr(0, eq)));
    o.node_labels[type->name] = l.substr(eq + 1);
  }
  for (const std::string& e : opt.env) {
    const size_t eq = e.find('=');
    const std::string key = e.substr(0, eq);
    const bool identifier = !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0])) &&
                            std::all_of(key.begin(), key.end(), [](char c) {
                              return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                            });
    if (eq == std::string::npos || !identifier) {
      return invalid_argument(
          fmt::format("--env: expected NAME=VALUE with NAME of letters, digits and '_' (e.g. "
                      "NCCL_SOCKET_IFNAME=eth0), got '{}'",
                      e));
    }
    if (key == "MASTER_ADDR" || key == "MASTER_PORT" || key == "MOTLEY_NODE_KIND") {
      return invalid_argument(fmt::format(
          "--env: {} is set by the manifests (the rendezvous; --master-port sets the port)", key));
    }
    o.env.emplace_back(key, e.substr(eq + 1));
  }
  MOTLEY_ASSIGN_OR_RETURN(o.plan_text, read_text_file(opt.plan));
  o.model_name = in.model.name;
  const K8sManifests m = k8s_manifests(in.plan, in.cluster, o);
  const std::string yaml = k8s_yaml(m);
  std::string notes;
  for (const std::string& n : m.notes) notes += "note: " + n + "\n";
  if (opt.out.empty()) {
    std::fputs(yaml.c_str(), stdout);
    std::fputs(notes.c_str(), stderr);
    return Status::ok();
  }
  OutputFiles files;
  files.add(opt.out, yaml);
  MOTLEY_RETURN_IF_ERROR(files.commit());
  std::fputs((notes + fmt::format("wrote {} ({} objects): apply it with 'kubectl apply -f {}'\n",
                                  opt.out, m.objects.size(), opt.out))
                 .c_str(),
             stdout);
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

  auto mopt = std::make_shared<MegatronOptions>();
  CLI::App* megatron =
      cmd->add_subcommand("megatron", "The plan as Megatron-LM's command-line arguments");
  megatron->footer(
      "TP and PP sizes, the per-stage layout (--pipeline-model-parallel-layout: E embedding, t\n"
      "decoder layer, L loss, '|' between stages, virtual stages continuing the list), micro\n"
      "and global batch, recompute, the distributed optimizer, sequence parallelism, and which\n"
      "global rank runs on which device. What Megatron cannot express is listed, and the\n"
      "closest plan it can run is simulated next to this one. See docs/exports.md.");
  megatron->add_option("--plan", mopt->plan, "The plan file")->required();
  megatron->add_option("--out", mopt->out, "Write the arguments here (one shell line)");
  megatron->add_flag("--json", mopt->json, "Print one JSON object");
  add_stack_options(megatron, &mopt->stack);
  megatron->callback([mopt, action] { *action = [mopt] { return export_megatron(*mopt); }; });

  auto sopt = std::make_shared<SlurmCliOptions>();
  CLI::App* slurm = cmd->add_subcommand(
      "slurm",
      "An sbatch script: one heterogeneous-job component per kind of node, one task per "
      "plan device");
  slurm->footer(
      "Components: the plan's nodes grouped by the devices they use (--nodes, --ntasks-per-node,\n"
      "--gres=gpu:TYPE:N, --exclusive), separated by '#SBATCH hetjob'. One srun step starts a\n"
      "task per plan device; each finds its plan node by its host's place in its component's\n"
      "node list and gets the rank motley's executor gives that device (RANK, WORLD_SIZE,\n"
      "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, MOTLEY_LOCAL_DEVICE), then runs\n"
      "'$MOTLEY <command>' (default: run --plan P). See docs/exports.md.\n"
      "Example: motley export slurm --plan P --partition gpu --time 04:00:00 --out job.sbatch "
      "-- run --plan P --steps 1000 --checkpoint-dir ckpt");
  slurm->add_option("--plan", sopt->plan, "The plan file (its path as the nodes see it)")
      ->required();
  slurm->add_option("--out", sopt->out, "Write the script here (default: print it)");
  slurm->add_option("--job-name", sopt->script.job_name,
                    "sbatch --job-name (default motley-MODEL)");
  slurm->add_option("--partition", sopt->script.partition, "sbatch --partition of every component");
  slurm->add_option("--account", sopt->script.account, "sbatch --account");
  slurm->add_option("--time", sopt->script.time, "sbatch --time, e.g. 04:00:00");
  slurm->add_option("--gres", sopt->gres,
                    "The site's GRES name of a device type, TYPE=NAME (repeatable; default: the "
                    "type's first word in lower case, H100-SXM -> h100)");
  slurm
      ->add_option("--master-port", sopt->script.master_port,
                   "Rank 0's TCP port (default 29500; MASTER_PORT in the job overrides it)")
      ->check(integer_in(1, 65535));
  slurm->add_option("command", sopt->script.command,
                    "The motley command each task runs, after '--' (default: run --plan P)");
  slurm->callback([sopt, action] { *action = [sopt] { return export_slurm(*sopt); }; });

  auto kopt = std::make_shared<K8sCliOptions>();
  CLI::App* k8s = cmd->add_subcommand(
      "k8s", "Kubernetes manifests: the plan in a ConfigMap and a PyTorchJob (or a JobSet)");
  k8s->footer(
      "One pod per plan node: a Kubeflow PyTorchJob (kubeflow.org/v1) when every node the plan\n"
      "uses is of one kind, else a JobSet (jobset.x-k8s.io/v1alpha2) with one replicated job per\n"
      "kind. Pods are selected by GPU model (nvidia.com/gpu.product, or --node-label), request\n"
      "nvidia.com/gpu, amd.com/gpu or habana.ai/gaudi, tolerate spot taints on spot nodes, and\n"
      "run /etc/motley/start.sh from the ConfigMap, which starts one process per device with the\n"
      "executor's rank for it. See docs/exports.md.");
  k8s->add_option("--plan", kopt->plan, "The plan file")->required();
  k8s->add_option("--image", kopt->manifests.image, "The container image (see Dockerfile)")
      ->required();
  k8s->add_option("--name", kopt->manifests.name,
                  "Name of the job and its ConfigMap (default "
                  "motley)");
  k8s->add_option("--namespace", kopt->manifests.namespace_name, "Namespace of every object");
  k8s->add_flag("--jobset", kopt->manifests.jobset, "A JobSet even when every node is of one kind");
  k8s->add_option("--checkpoint-claim", kopt->manifests.checkpoint_claim,
                  "A PersistentVolumeClaim mounted at /checkpoints");
  k8s->add_option("--node-label", kopt->node_labels,
                  "The node label selecting a device type, TYPE=KEY=VALUE (repeatable)");
  k8s->add_option("--master-port", kopt->manifests.master_port, "Rank 0's TCP port (default 29500)")
      ->check(integer_in(1, 65535));
  k8s->add_option("--env", kopt->env,
                  "NAME=VALUE in every process's environment, e.g. NCCL_SOCKET_IFNAME=eth0 or "
                  "NCCL_DEBUG=INFO (repeatable; RCCL reads the same NCCL_ names)");
  k8s->add_option("--out", kopt->out, "Write the manifests here (default: print them)");
  k8s->add_option("command", kopt->manifests.command,
                  "The motley command each process runs, after '--' (default: run --plan "
                  "/etc/motley/plan.json)");
  k8s->callback([kopt, action] { *action = [kopt] { return export_k8s(*kopt); }; });
}

}  // namespace motley::cli
