#include "motley/exec/host_memory.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "motley/exec/rank_layout.h"
#include "motley/model/layer_cost.h"

namespace motley {

TrainingState training_state_bytes(const Plan& plan, const ModelSpec& model, bool sequential,
                                   int only_rank) {
  if (sequential) {
    return {Bytes(16.0 * static_cast<double>(model_totals(model, Workload{}).total_params)), 1};
  }
  const RankLayout layout(plan);
  const double moments =
      plan.zero_stage >= 1 ? 8.0 / static_cast<double>(plan.replicas.size()) : 8.0;
  double bytes = 0;
  int ranks = 0;
  for (int r = 0; r < layout.world_size(); ++r) {
    if (only_rank >= 0 && r != only_rank) continue;
    ++ranks;
    double params = 0;
    for (int s : layout.stages_of(r)) {
      for (int l = plan.stages[s].layer_begin; l < plan.stages[s].layer_end; ++l) {
        params += static_cast<double>(layer_params(model.layers[l]));
      }
    }
    bytes += params / layout.place_of(r).tp_size * (8.0 + moments);
  }
  return {Bytes(bytes), ranks};
}

std::optional<Bytes> available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double value = 0;
  while (in >> key >> value >> unit) {
    if (key == "MemAvailable:") return Bytes(value * 1024.0);
  }
  return std::nullopt;
}

std::optional<HostMemoryShortfall> host_memory_shortfall(const Plan& plan, const ModelSpec& model,
                                                         bool sequential, int only_rank,
                                                         int local_ranks,
                                                         std::optional<Bytes> available) {
  if (!available) return std::nullopt;
  HostMemoryShortfall s;
  s.needed = training_state_bytes(plan, model, sequential, only_rank);
  s.available = *available;
  s.local_ranks = std::max(1, local_ranks);
  s.share = *available / static_cast<double>(s.local_ranks);
  if (s.needed.bytes <= s.share) return std::nullopt;
  return s;
}

bool keep_freed_host_buffers() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::string(tunables).find("glibc.malloc.") != std::string::npos) {
    return false;
  }
  // glibc's ceiling for the threshold: half its largest heap (64 MiB on 64-bit systems).
  constexpr int kMmapThresholdCeiling = 32 << 20;
  // Freed memory goes back to the kernel only once more than this lies at the top of the heap.
  constexpr int kTrimOnlyAbove = 1 << 30;
  return mallopt(M_MMAP_THRESHOLD, kMmapThresholdCeiling) == 1 &&
         mallopt(M_TRIM_THRESHOLD, kTrimOnlyAbove) == 1;
#else
  return false;
#endif
}

}  // namespace motley
