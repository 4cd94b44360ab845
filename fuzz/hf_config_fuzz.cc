// A Hugging Face config.json as `model show` and `--model` read it: JSON, then the import. An
// imported model must also be a valid motley model whose JSON form reads back the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/model/hf_config.h"
#include "motley/model/model_json.h"

namespace motley::fuzz {

int hf_config_target(const uint8_t* data, size_t size) {
  const std::optional<Json> document = parse_input(data, size, Syntax::kJson);
  if (!document) return 0;
  const std::optional<ModelSpec> model =
      read_input(*document, [](const Json& j) { return import_hf_config(j, kSource); });
  if (!model) return 0;
  check_reads_back(
      *model, model_to_json, [](const Json& j) { return model_from_json(j, kSource); },
      "a written model");
  return 0;
}

}  // namespace motley::fuzz
