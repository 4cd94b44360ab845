#include "labels.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "motley/plan/plan_json.h"

namespace motley::plan_labels {
namespace {

std::string join_ints(const std::vector<int>& values, const char* separator) {
  return fmt::format("{}", fmt::join(values, separator));
}

}  // namespace

std::string field(const std::string& path, const std::string& what) {
  return fmt::format("field '{}': {}", path, what);
}

std::string replica_path(int replica) { return fmt::format("replicas[{}]", replica); }

std::string group_path(int replica, int group) {
  return fmt::format("{}.groups[{}]", replica_path(replica), group);
}

std::string action_path(int replica, int group, int index) {
  return fmt::format("{}.actions[{}]", group_path(replica, group), index);
}

std::string action_label(const Action& a) {
  return fmt::format("{} ({})", action_to_string(a), stage_mb(a.stage, a.micro_batch));
}

std::string stage_mb(int stage, int micro_batch) {
  return fmt::format("stage {}, micro-batch {}", stage, micro_batch);
}

std::string ids(const std::string& singular, const std::string& plural, int64_t count) {
  if (count <= 0) return fmt::format("no {}", plural);
  if (count == 1) return fmt::format("only {} 0", singular);
  return fmt::format("{} 0-{}", plural, count - 1);
}

std::string Labels::group(int r, int g) const {
  const Replica& rep = plan_.replicas[r];
  std::string out = plan_.replicas.size() > 1 ? fmt::format("replica {} device group {}", r, g)
                                              : fmt::format("device group {}", g);
  if (g >= 0 && g < static_cast<int>(rep.groups.size()) && !rep.groups[g].devices.empty()) {
    const std::vector<int>& d = rep.groups[g].devices;
    out += fmt::format(" ({} {})", d.size() == 1 ? "device" : "devices", join_ints(d, ","));
  }
  return out;
}

std::string Labels::group_with_stages(int r, int g) const {
  std::vector<int> stages;
  const Replica& rep = plan_.replicas[r];
  for (size_t s = 0; s < rep.stage_group.size(); ++s) {
    if (rep.stage_group[s] == g) stages.push_back(static_cast<int>(s));
  }
  std::string out = group(r, g);
  if (!stages.empty()) {
    out += fmt::format(", which runs {} {}", stages.size() > 1 ? "stages" : "stage",
                       join_ints(stages, ", "));
  }
  return out;
}

std::string Labels::replica(int r) const {
  return plan_.replicas.size() > 1 ? fmt::format("replica {}", r) : std::string("the replica");
}

}  // namespace motley::plan_labels
