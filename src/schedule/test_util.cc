#include "test_util.h"

#include "../plan/test_plans.h"
#include "motley/plan/plan_json.h"

namespace motley::schedule_testing {

ModelSpec tiny_model(int layers, const std::string& name) {
  return testing::small_model(layers, name);
}

ClusterSpec fixed_cluster(const std::vector<std::string>& node_types, int devices_per_node,
                          Seconds hop) {
  return make_fixed_cluster(node_types, devices_per_node,
                            LinkSpec{LinkKind::kNvlink, gigabytes_per_second(450), hop},
                            LinkSpec{LinkKind::kInfiniband, gigabytes_per_second(50), hop});
}

FixedLayer layer_ms(double f, double b, double w, double weights_gb, double act_gb) {
  FixedLayer l;
  l.times = {milliseconds(f), milliseconds(b), milliseconds(w), Seconds(0)};
  l.weights = Bytes(weights_gb * kGiga);
  l.activations = {Bytes(act_gb * kGiga), Bytes(act_gb * kGiga), Bytes(act_gb * kGiga)};
  return l;
}

std::string order_text(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) {
    if (!out.empty()) out += ' ';
    out += action_to_string(a);
  }
  return out;
}

}  // namespace motley::schedule_testing
