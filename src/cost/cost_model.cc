#include "motley/cost/cost_model.h"

namespace motley {

const char* collective_name(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce:
      return "all-reduce";
    case Collective::kReduceScatter:
      return "reduce-scatter";
    case Collective::kAllGather:
      return "all-gather";
    case Collective::kAllToAll:
      return "all-to-all";
  }
  return "?";
}

}  // namespace motley
