// The fixed rule that splits a model's layers into contiguous pipeline stages by counting them,
// without pricing anything: the uniform split of make_uniform_plan and the tuner's uniform
// baselines. The balanced partition, which prices layers on their devices, is the tuner's
// (tune/partition.h). Pure functions; thread-safe.
#pragma once

#include <vector>

namespace motley {

// Stage s of S gets floor(L/S) layers, one more when s < L mod S (the first stages take the
// remainder). REQUIRES: 1 <= stages <= num_layers.
std::vector<int> uniform_bounds(int num_layers, int stages);

}  // namespace motley
