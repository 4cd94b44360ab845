// motley's own model JSON (motley.model/1), as `model show` and `--model` read it. An accepted
// model writes JSON that reads back the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/model/model_json.h"

namespace motley::fuzz {

int model_json_target(const uint8_t* data, size_t size) {
  const auto read = [](const Json& j) { return model_from_json(j, kSource); };
  const std::optional<Json> document = parse_input(data, size, Syntax::kJson);
  if (!document) return 0;
  const std::optional<ModelSpec> model = read_input(*document, read);
  if (model) check_reads_back(*model, model_to_json, read, "a written model");
  return 0;
}

}  // namespace motley::fuzz
