// A plan file, as `simulate --plan` and `run --plan` read it: the schema, the embedded model
// and cluster and their hashes; a plan that carries both is then validated for runnability,
// which must end in a verdict, never a crash. An accepted plan writes a file that reads back to
// a plan that writes the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
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
  Result<Json> json = parse_json(text(data, size), kSource);
  if (!json) {
    check_refusal(json.status());
    return 0;
  }
  Result<PlanFile> file = plan_file_from_json(*json, kSource);
  if (!file) {
    check_refusal(file.status());
    return 0;
  }
  if (file->model && file->cluster) {
    (void)validate_plan(file->plan, *file->model, *file->cluster, ValidateOptions{});
  }
  const Json written = write_plan_file(*file);
  Result<PlanFile> again = plan_file_from_json(written, kSource);
  if (!again) fail("a written plan must read back", again.status().message());
  check_same(written, write_plan_file(*again), "a written plan must read back the same");
  return 0;
}

}  // namespace motley::fuzz
