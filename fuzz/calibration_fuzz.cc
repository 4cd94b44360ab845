// A calibration file (motley.calibration/1, what `calibrate --fit --out` writes and
// `--calibration` reads). An accepted file writes JSON that reads back to the same.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/cost/software_stack.h"

namespace motley::fuzz {

int calibration_target(const uint8_t* data, size_t size) {
  Result<Json> json = parse_json(text(data, size), kSource);
  if (!json) {
    check_refusal(json.status());
    return 0;
  }
  Result<Calibration> calibration = calibration_from_json(*json, kSource);
  if (!calibration) {
    check_refusal(calibration.status());
    return 0;
  }
  const Json written = calibration_to_json(*calibration);
  Result<Calibration> again = calibration_from_json(written, kSource);
  if (!again) fail("a written calibration must read back", again.status().message());
  check_same(written, calibration_to_json(*again), "a written calibration must read back the same");
  return 0;
}

}  // namespace motley::fuzz
