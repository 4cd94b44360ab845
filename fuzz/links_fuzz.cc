// A measured links file (motley.links/1, what `profile comm` writes and a cluster's
// measured_links names). An accepted file writes YAML that reads back to the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/cluster/measured_links.h"

namespace motley::fuzz {

int links_target(const uint8_t* data, size_t size) {
  const std::optional<Json> document = parse_input(data, size, Syntax::kYaml);
  if (!document) return 0;
  const std::optional<LinksFile> links =
      read_input(*document, [](const Json& j) { return links_from_json(JsonField(j, kSource)); });
  if (!links) return 0;
  check_reads_back(
      *links, links_to_yaml,
      [](const std::string& yaml) -> Result<LinksFile> {
        MOTLEY_ASSIGN_OR_RETURN(Json reread, reparse_yaml(yaml));
        return links_from_json(JsonField(reread, kSource));
      },
      "a written links file");
  return 0;
}

}  // namespace motley::fuzz
