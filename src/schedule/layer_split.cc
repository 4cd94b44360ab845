#include "motley/schedule/layer_split.h"

#include "motley/core/check.h"

namespace motley {

std::vector<int> uniform_bounds(int num_layers, int stages) {
  MOTLEY_CHECK(stages >= 1 && stages <= num_layers, "uniform_bounds: need 1 <= stages <= layers");
  std::vector<int> bounds{0};
  const int base = num_layers / stages, extra = num_layers % stages;
  for (int s = 0; s < stages; ++s) bounds.push_back(bounds.back() + base + (s < extra ? 1 : 0));
  return bounds;
}

}  // namespace motley
