#include "node_ranks.h"

#include <algorithm>

namespace motley::cli {

PlanRanks plan_ranks(const Plan& plan, const ClusterSpec& cluster) {
  const std::vector<Device> devices = cluster_devices(cluster);
  PlanRanks out;
  std::map<int, size_t> slot;  // cluster node -> index into out.nodes
  for (const Replica& r : plan.replicas) {
    for (const DeviceGroupSchedule& g : r.groups) {
      for (int d : g.devices) {
        const Device& dev = devices[d];
        auto [it, added] = slot.emplace(dev.node, out.nodes.size());
        if (added) out.nodes.push_back(NodeRanks{dev.node, {}, {}});
        out.nodes[it->second].local_rank.emplace_back(dev.local_index, out.world++);
        ++out.nodes[it->second].types[dev.type];
      }
    }
  }
  std::sort(out.nodes.begin(), out.nodes.end(),
            [](const NodeRanks& a, const NodeRanks& b) { return a.node < b.node; });
  for (NodeRanks& n : out.nodes) std::sort(n.local_rank.begin(), n.local_rank.end());
  for (size_t i = 0; i < out.nodes.size(); ++i) {
    auto it = std::find_if(out.kinds.begin(), out.kinds.end(),
                           [&](const NodeKind& k) { return k.types == out.nodes[i].types; });
    if (it == out.kinds.end()) {
      out.kinds.push_back(NodeKind{out.nodes[i].types, {}});
      it = out.kinds.end() - 1;
    }
    it->nodes.push_back(static_cast<int>(i));
  }
  return out;
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace motley::cli
