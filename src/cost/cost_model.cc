#include "motley/cost/cost_model.h"

#include <algorithm>

#include "motley/core/enum_names.h"

namespace motley {

// Indexed by Collective, in declaration order.
constexpr const char* kCollectiveNames[] = {"all-reduce", "reduce-scatter", "all-gather",
                                            "all-to-all"};
static_assert(std::size(kCollectiveNames) == static_cast<size_t>(Collective::kAllToAll) + 1);

const char* collective_name(Collective collective) { return name_in(kCollectiveNames, collective); }

Seconds exposed_gradient_reduction(Seconds reduction, int buckets, Seconds last_pass) {
  if (buckets <= 1) return reduction;
  const double n = buckets;
  const double r = reduction.value();
  return Seconds(std::max(r / n, r - last_pass.value() * (n - 1) / n));
}

}  // namespace motley
