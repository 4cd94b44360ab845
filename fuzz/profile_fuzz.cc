// A measured profile (motley.profile/1 or /2), as `--model` reads it. An accepted profile
// writes a profile that reads back the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/model/profile.h"

namespace motley::fuzz {

int profile_target(const uint8_t* data, size_t size) {
  Result<Json> json = parse_json(text(data, size), kSource);
  if (!json) {
    check_refusal(json.status());
    return 0;
  }
  Result<ModelSpec> model = profile_from_json(*json, kSource);
  if (!model) {
    check_refusal(model.status());
    return 0;
  }
  const Json written = profile_to_json(*model);
  Result<ModelSpec> read = profile_from_json(written, kSource);
  if (!read) {
    fail("a written profile must read back", read.status().message());
  }
  check_same(written, profile_to_json(*read), "a written profile must read back the same");
  return 0;
}

}  // namespace motley::fuzz
