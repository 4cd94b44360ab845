// motley's own model JSON (motley.model/1), as `model show` and `--model` read it. An accepted
// model writes JSON that reads back the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/model/model_json.h"

namespace motley::fuzz {

int model_json_target(const uint8_t* data, size_t size) {
  Result<Json> json = parse_json(text(data, size), kSource);
  if (!json) {
    check_refusal(json.status());
    return 0;
  }
  Result<ModelSpec> model = model_from_json(*json, kSource);
  if (!model) {
    check_refusal(model.status());
    return 0;
  }
  check_model_round_trip(*model);
  return 0;
}

}  // namespace motley::fuzz
