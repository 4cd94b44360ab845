#include "cost_options.h"

#include <fmt/format.h>

#include "motley/plan/plan_workload.h"
#include "motley/plan/validate.h"

namespace motley::cli {

void add_stack_options(CLI::App* cmd, StackChoice* choice) {
  std::vector<std::string> names;
  for (const SoftwareStack& s : software_stacks()) names.push_back(s.name);
  CLI::Option* stack = cmd->add_option(
      "--stack", choice->stack,
      fmt::format("Software stack the cost model assumes: {} (default: the cluster's "
                  "software_stack, else {})",
                  join_alternatives(names), software_stacks().front().name));
  CLI::Option* calibration = cmd->add_option(
      "--calibration", choice->calibration,
      "A calibration file (motley calibrate --out): its fitted stack prices the plan");
  stack->excludes(calibration);
}

Result<SoftwareStack> resolve_stack(const StackChoice& choice, const ClusterSpec& cluster) {
  if (!choice.calibration.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(Calibration c, load_calibration(choice.calibration));
    return c.stack;
  }
  const std::string& name = !choice.stack.empty() ? choice.stack : cluster.software_stack;
  if (name.empty()) return software_stacks().front();
  Result<SoftwareStack> stack = find_software_stack(name);
  if (!stack.is_ok()) {
    return invalid_argument(
        fmt::format("{}: {}",
                    choice.stack.empty() ? fmt::format("{}: field 'software_stack'", cluster.name)
                                         : std::string("--stack"),
                    stack.status().message()));
  }
  return stack;
}

Result<SoftwareStack> resolve_plan_stack(const StackChoice& choice, const Plan& plan,
                                         const ClusterSpec& cluster, const std::string& source) {
  if (!choice.calibration.empty() || !choice.stack.empty() || !plan.software_stack) {
    return resolve_stack(choice, cluster);
  }
  JsonField recorded(*plan.software_stack, source, "software_stack");
  // A stack named after a built-in one takes that one's value for a field left out; any other
  // name (a calibrated stack's) the default stack's.
  SoftwareStack base = software_stacks().front();
  if (plan.software_stack->is_object() && plan.software_stack->contains("name") &&
      (*plan.software_stack)["name"].is_string()) {
    Result<SoftwareStack> named =
        find_software_stack((*plan.software_stack)["name"].get<std::string>());
    if (named.is_ok()) base = named.value();
  }
  return software_stack_from_json(recorded, base);
}

bool plan_optimizer_step(const Plan& plan) {
  return !plan.predicted || plan.predicted->optimizer_step;
}

void record_stack(const SoftwareStack& stack, Plan* plan) {
  plan->software_stack = software_stack_to_json(stack);
}

Result<AnalyticCostOptions> plan_cost_options(const Plan& plan, const ModelSpec& model,
                                              const ClusterSpec& cluster, const StackChoice& choice,
                                              const std::string& source) {
  AnalyticCostOptions options;
  options.workload = plan_workload(plan, model);
  options.sequence_parallel = plan.sequence_parallel;
  MOTLEY_ASSIGN_OR_RETURN(options.stack, resolve_plan_stack(choice, plan, cluster, source));
  return options;
}

Status validate_priced_plan(const Plan& plan, const ModelSpec& model, const ClusterSpec& cluster,
                            const AnalyticCostModel& cost, const std::string& source) {
  ValidateOptions validate;
  const int64_t replicas = static_cast<int64_t>(plan.replicas.size());
  validate.footprint = [&](int r, int g, int stage) {
    const Stage& st = plan.stages[stage];
    MemoryOptions m{st.recompute, 0, replicas, plan.zero_stage, plan.expert_parallel};
    StageMemory mem = stage_memory_with(
        cost, LayerRange{st.layer_begin, st.layer_end, vocab_share(plan.stages, stage)},
        DeviceGroup{plan.replicas[r].groups[g].devices}, m, st.recompute_layers);
    return StageFootprint{mem.total(), mem.activations_per_micro_batch,
                          mem.recomputed_activations_per_micro_batch};
  };
  Status valid = validate_plan(plan, model, cluster, validate);
  return valid.is_ok() ? valid : valid.with_context(source);
}

}  // namespace motley::cli
