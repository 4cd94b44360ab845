// A measured links file (motley.links/1, what `profile comm` writes and a cluster's
// measured_links names). An accepted file writes YAML that reads back to the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/cluster/measured_links.h"

namespace motley::fuzz {

int links_target(const uint8_t* data, size_t size) {
  Result<Json> yaml = parse_yaml(text(data, size), kSource);
  if (!yaml) {
    check_refusal(yaml.status());
    return 0;
  }
  Result<LinksFile> links = links_from_json(JsonField(*yaml, kSource));
  if (!links) {
    check_refusal(links.status());
    return 0;
  }
  const std::string written = links_to_yaml(*links);
  Result<Json> reread = parse_yaml(written, kSource);
  if (!reread) fail("a written links file must parse as YAML", reread.status().message());
  Result<LinksFile> again = links_from_json(JsonField(*reread, kSource));
  if (!again) fail("a written links file must read back", again.status().message());
  check_same(Json(written), Json(links_to_yaml(*again)),
             "a written links file must read back the same");
  return 0;
}

}  // namespace motley::fuzz
