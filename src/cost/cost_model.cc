#include "motley/cost/cost_model.h"

#include "motley/core/enum_names.h"

namespace motley {

// Indexed by Collective, in declaration order.
constexpr const char* kCollectiveNames[] = {"all-reduce", "reduce-scatter", "all-gather",
                                            "all-to-all"};
static_assert(std::size(kCollectiveNames) == static_cast<size_t>(Collective::kAllToAll) + 1);

const char* collective_name(Collective collective) { return name_in(kCollectiveNames, collective); }

}  // namespace motley
