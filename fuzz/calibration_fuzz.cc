// A calibration file (motley.calibration/1, what `calibrate --fit --out` writes and
// `--calibration` reads). An accepted file writes JSON that reads back the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/cost/software_stack.h"

namespace motley::fuzz {

int calibration_target(const uint8_t* data, size_t size) {
  const auto read = [](const Json& j) { return calibration_from_json(j, kSource); };
  const std::optional<Json> document = parse_input(data, size, Syntax::kJson);
  if (!document) return 0;
  const std::optional<Calibration> calibration = read_input(*document, read);
  if (calibration)
    check_reads_back(*calibration, calibration_to_json, read, "a written calibration");
  return 0;
}

}  // namespace motley::fuzz
