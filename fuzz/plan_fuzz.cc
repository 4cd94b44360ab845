// A plan file, as `simulate --plan` and `run --plan` read it: the schema, the embedded model
// and cluster and their hashes; a plan that carries both is then validated for runnability,
// which must end in a verdict, never a crash. The software stack a plan records is read as the
// commands read it (cost_options.cc), and an accepted one writes JSON that reads back the same.
// An accepted plan writes a file that reads back to a plan that writes the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/cost/software_stack.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/validate.h"

namespace motley::fuzz {
namespace {

Json write_plan_file(const PlanFile& file) {
  if (file.model && file.cluster) return plan_to_json(file.plan, *file.model, *file.cluster);
  return plan_to_json(file.plan);
}

}  // namespace

int plan_target(const uint8_t* data, size_t size) {
  const auto read = [](const Json& j) { return plan_file_from_json(j, kSource); };
  const std::optional<Json> document = parse_input(data, size, Syntax::kJson);
  if (!document) return 0;
  const std::optional<PlanFile> file = read_input(*document, read);
  if (!file) return 0;
  if (file->model && file->cluster) {
    (void)validate_plan(file->plan, *file->model, *file->cluster, ValidateOptions{});
  }
  if (file->plan.software_stack) {
    const auto read_stack = [](const Json& j) {
      return software_stack_from_json(JsonField(j, kSource, "software_stack"),
                                      software_stacks().front());
    };
    const std::optional<SoftwareStack> stack = read_input(*file->plan.software_stack, read_stack);
    if (stack) check_reads_back(*stack, software_stack_to_json, read_stack, "a recorded stack");
  }
  check_reads_back(*file, write_plan_file, read, "a written plan");
  return 0;
}

}  // namespace motley::fuzz
