#include "labels.h"

#include <vector>

#include "motley/plan/plan_json.h"

namespace motley::plan_labels {
namespace {

std::string join_ints(const std::vector<int>& values, const char* separator) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += separator;
    out += std::to_string(values[i]);
  }
  return out;
}

}  // namespace

std::string field(const std::string& path, const std::string& what) {
  return "field '" + path + "': " + what;
}

std::string replica_path(int replica) { return "replicas[" + std::to_string(replica) + "]"; }

std::string group_path(int replica, int group) {
  return replica_path(replica) + ".groups[" + std::to_string(group) + "]";
}

std::string action_path(int replica, int group, int index) {
  return group_path(replica, group) + ".actions[" + std::to_string(index) + "]";
}

std::string action_label(const Action& a) {
  return action_to_string(a) + " (" + stage_mb(a.stage, a.micro_batch) + ")";
}

std::string stage_mb(int stage, int micro_batch) {
  return "stage " + std::to_string(stage) + ", micro-batch " + std::to_string(micro_batch);
}

std::string ids(const std::string& singular, const std::string& plural, int64_t count) {
  if (count <= 0) return "no " + plural;
  if (count == 1) return "only " + singular + " 0";
  return plural + " 0-" + std::to_string(count - 1);
}

std::string Labels::group(int r, int g) const {
  const Replica& rep = plan_.replicas[r];
  std::string out = plan_.replicas.size() > 1 ? "replica " + std::to_string(r) + " " : "";
  out += "device group " + std::to_string(g);
  if (g >= 0 && g < static_cast<int>(rep.groups.size()) && !rep.groups[g].devices.empty()) {
    const std::vector<int>& d = rep.groups[g].devices;
    out += (d.size() == 1 ? " (device " : " (devices ") + join_ints(d, ",") + ")";
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
    out += std::string(", which runs stage") + (stages.size() > 1 ? "s " : " ") +
           join_ints(stages, ", ");
  }
  return out;
}

std::string Labels::replica(int r) const {
  return plan_.replicas.size() > 1 ? "replica " + std::to_string(r) : std::string("the replica");
}

}  // namespace motley::plan_labels
