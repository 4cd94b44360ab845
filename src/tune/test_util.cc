#include "test_util.h"

namespace motley::tune_testing {

ModelSpec tiny_model(int layers, const std::string& name) {
  ModelSpec m;
  m.name = name;
  m.family = "test";
  m.default_seq_len = 128;
  for (int i = 0; i < layers; ++i) {
    Layer l;
    l.name = "block." + std::to_string(i);
    l.kind = LayerKind::kDecoderBlock;
    AttentionShape a;
    a.hidden = 64;
    a.num_heads = 4;
    a.num_kv_heads = 4;
    a.head_dim = 16;
    l.attention = a;
    FeedForwardShape f;
    f.hidden = 64;
    f.ffn_size = 256;
    l.ffn = f;
    l.num_norms = 2;
    m.layers.push_back(l);
  }
  return m;
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

}  // namespace motley::tune_testing
