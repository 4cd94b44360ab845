// A Hugging Face config.json as `model show` and `--model` read it: JSON, then the import. An
// imported model must also be a valid motley model whose JSON form reads back the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/model/hf_config.h"

namespace motley::fuzz {

int hf_config_target(const uint8_t* data, size_t size) {
  Result<Json> json = parse_json(text(data, size), kSource);
  if (!json) {
    check_refusal(json.status());
    return 0;
  }
  Result<ModelSpec> model = import_hf_config(*json, kSource);
  if (!model) {
    check_refusal(model.status());
    return 0;
  }
  check_model_round_trip(*model);
  return 0;
}

}  // namespace motley::fuzz
