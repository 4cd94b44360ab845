// A measured profile (motley.profile/1 or /2), as `--model` reads it. An accepted profile
// writes a profile that reads back the same, and the vocabularies read from its head's and
// embedding's bytes (stated or not) are within a vocabulary's limits.
#include <string>

#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/model/limits.h"
#include "motley/model/model.h"
#include "motley/model/profile.h"

namespace motley::fuzz {

int profile_target(const uint8_t* data, size_t size) {
  const auto read = [](const Json& j) { return profile_from_json(j, kSource); };
  const std::optional<Json> document = parse_input(data, size, Syntax::kJson);
  if (!document) return 0;
  const std::optional<ModelSpec> model = read_input(*document, read);
  if (!model) return 0;
  check_reads_back(*model, profile_to_json, read, "a written profile");
  for (const int64_t vocab : {head_vocab(*model), embedding_vocab(*model)}) {
    if (vocab < 0 || vocab > kMaxVocab) {
      fail("a profile's vocabulary must be from 0 to 2^24", std::to_string(vocab));
    }
  }
  return 0;
}

}  // namespace motley::fuzz
