// A checkpoint's manifest.json, as `run --resume` reads it before any layer file. An accepted
// manifest writes JSON that reads back the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/exec/checkpoint_format.h"

namespace motley::fuzz {

int checkpoint_manifest_target(const uint8_t* data, size_t size) {
  Result<Json> json = parse_json(text(data, size), kSource);
  if (!json) {
    check_refusal(json.status());
    return 0;
  }
  Result<CheckpointManifest> manifest = checkpoint_manifest_from_json(*json, kSource);
  if (!manifest) {
    check_refusal(manifest.status());
    return 0;
  }
  const Json written = checkpoint_manifest_to_json(*manifest);
  Result<CheckpointManifest> again = checkpoint_manifest_from_json(written, kSource);
  if (!again) fail("a written manifest must read back", again.status().message());
  check_same(written, checkpoint_manifest_to_json(*again),
             "a written manifest must read back the same");
  return 0;
}

}  // namespace motley::fuzz
