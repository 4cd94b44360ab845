// A checkpoint's manifest.json, as `run --resume` reads it before any layer file. An accepted
// manifest writes JSON that reads back the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/exec/checkpoint_format.h"

namespace motley::fuzz {

int checkpoint_manifest_target(const uint8_t* data, size_t size) {
  const auto read = [](const Json& j) { return checkpoint_manifest_from_json(j, kSource); };
  const std::optional<Json> document = parse_input(data, size, Syntax::kJson);
  if (!document) return 0;
  const std::optional<CheckpointManifest> manifest = read_input(*document, read);
  if (manifest) {
    check_reads_back(*manifest, checkpoint_manifest_to_json, read, "a written manifest");
  }
  return 0;
}

}  // namespace motley::fuzz
