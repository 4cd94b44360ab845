#include "test_plans.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "motley/core/check.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/spec_hash.h"

namespace motley::testing {

ModelSpec small_model(int layers, const std::string& name) {
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

ModelSpec model_with_head(int blocks, int64_t vocab, const std::string& name) {
  ModelSpec m = small_model(blocks, name);
  Layer embed;
  embed.name = "embed";
  embed.kind = LayerKind::kEmbedding;
  embed.embedding = EmbeddingShape{vocab, 64, 0};
  Layer head;
  head.name = "head";
  head.kind = LayerKind::kHead;
  head.head = HeadShape{vocab, 64, false};
  head.num_norms = 1;
  m.layers.insert(m.layers.begin(), embed);
  m.layers.push_back(head);
  return m;
}

Plan vocab_shard_plan() {
  const ModelSpec model = model_with_head(2);
  const ClusterSpec cluster = single_device_nodes(2);
  Plan p;
  p.model = model_ref(model);
  p.cluster = cluster_ref(cluster);
  p.micro_batch_size = 1;
  p.seq_len = 128;
  p.global_batch = 2;
  p.stages = {Stage{0, 2}, Stage{2, 3}, Stage{3, 4, RecomputePolicy::kNone, 0, 32},
              Stage{3, 4, RecomputePolicy::kNone, 32, 64}};
  p.replicas = {Replica{2,
                        {0, 1, 0, 1},
                        {DeviceGroupSchedule{{0},
                                             actions("0F0 0F1 2F0 2F1 2I0 2W0 2I1 2W1 "
                                                     "0I0 0W0 0I1 0W1")},
                         DeviceGroupSchedule{{1},
                                             actions("1F0 3F0 1F1 3F1 3I0 3W0 1I0 1W0 "
                                                     "3I1 3W1 1I1 1W1")}}}};
  p.schedule = "hand";
  return p;
}

namespace {

NodeSpec node(const std::string& name, const std::string& type, int count) {
  NodeSpec n;
  n.name = name;
  n.devices = {NodeDevices{type, count}};
  n.interconnect = LinkSpec{LinkKind::kNvlink, gigabytes_per_second(300), microseconds(2)};
  n.pcie = LinkSpec{LinkKind::kPcie, gigabytes_per_second(24), microseconds(3)};
  n.nic = LinkSpec{LinkKind::kInfiniband, gigabytes_per_second(50), microseconds(1)};
  return n;
}

}  // namespace

ClusterSpec single_device_nodes(int nodes, const std::string& type) {
  ClusterSpec c;
  c.name = "nodes-" + std::to_string(nodes);
  for (int i = 0; i < nodes; ++i) {
    std::string name = "n";
    name += std::to_string(i);
    c.nodes.push_back(node(name, type, 1));
  }
  c.network = LinkSpec{LinkKind::kInfiniband, gigabytes_per_second(50), microseconds(2)};
  return c;
}

ClusterSpec two_node_cluster() {
  ClusterSpec c;
  c.name = "two-nodes";
  c.nodes = {node("a", "H100-SXM", 4), node("b", "H100-SXM", 4)};
  c.network = LinkSpec{LinkKind::kInfiniband, gigabytes_per_second(50), microseconds(2)};
  return c;
}

std::vector<Action> actions(const std::string& text) {
  std::vector<Action> out;
  std::istringstream in(text);
  std::string token;
  while (in >> token) {
    Result<Action> a = parse_action(token);
    MOTLEY_CHECK(a.is_ok(), "bad action in a test: " + token);
    out.push_back(a.value());
  }
  return out;
}

std::vector<Action> one_f_one_b_order(int stages, int rank, int micro_batches, bool split) {
  std::vector<Action> out;
  auto backward = [&](int j) {
    if (split) {
      out.push_back({ActionKind::kBackwardInput, rank, j});
      out.push_back({ActionKind::kBackwardWeight, rank, j});
    } else {
      out.push_back({ActionKind::kBackward, rank, j});
    }
  };
  const int warmup = std::min(stages - rank - 1, micro_batches);
  for (int j = 0; j < warmup; ++j) out.push_back({ActionKind::kForward, rank, j});
  for (int i = 0; i < micro_batches - warmup; ++i) {
    out.push_back({ActionKind::kForward, rank, warmup + i});
    backward(i);
  }
  for (int j = micro_batches - warmup; j < micro_batches; ++j) backward(j);
  return out;
}

Plan one_f_one_b_plan(const ModelSpec& model, const ClusterSpec& cluster, int micro_batches,
                      bool split) {
  const int stages = static_cast<int>(model.layers.size());
  Plan plan;
  plan.model = model_ref(model);
  plan.cluster = cluster_ref(cluster);
  plan.micro_batch_size = 2;
  plan.seq_len = 128;
  plan.global_batch = int64_t{2} * micro_batches;
  plan.schedule = "1f1b";
  Replica replica;
  replica.micro_batches = micro_batches;
  for (int s = 0; s < stages; ++s) {
    plan.stages.push_back(Stage{s, s + 1, RecomputePolicy::kNone});
    replica.stage_group.push_back(s);
    replica.groups.push_back(
        DeviceGroupSchedule{{s}, one_f_one_b_order(stages, s, micro_batches, split)});
  }
  plan.replicas.push_back(std::move(replica));
  return plan;
}

Plan random_plan(std::mt19937& rng, int* stages_out) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int stages = pick(2, 5);
  const int groups = pick(1, stages);
  const int m = pick(1, 4);
  std::vector<int> stage_group(stages);
  for (int s = 0; s < stages; ++s) stage_group[s] = s < groups ? s : pick(0, groups - 1);
  std::shuffle(stage_group.begin(), stage_group.end(), rng);
  std::vector<std::vector<bool>> split(stages, std::vector<bool>(m));
  for (auto& row : split) {
    for (size_t j = 0; j < row.size(); ++j) row[j] = pick(0, 1) == 1;
  }
  // done[kind][s][j]
  std::map<std::tuple<ActionKind, int, int>, bool> done;
  auto is_done = [&](ActionKind k, int s, int j) { return done.count({k, s, j}) > 0; };
  auto backward_done = [&](int s, int j) {
    return is_done(ActionKind::kBackward, s, j) || is_done(ActionKind::kBackwardInput, s, j);
  };
  std::vector<std::vector<Action>> orders(groups);
  const int total = stages * m * 2 + [&] {
    int n = 0;
    for (auto& row : split)
      for (bool b : row) n += b ? 1 : 0;
    return n;
  }();
  for (int placed = 0; placed < total; ++placed) {
    std::vector<Action> ready;
    for (int s = 0; s < stages; ++s) {
      for (int j = 0; j < m; ++j) {
        if (!is_done(ActionKind::kForward, s, j) &&
            (s == 0 || is_done(ActionKind::kForward, s - 1, j))) {
          ready.push_back({ActionKind::kForward, s, j});
        }
        const bool can_backward = is_done(ActionKind::kForward, s, j) &&
                                  (s == stages - 1 ? true : backward_done(s + 1, j));
        if (!backward_done(s, j) && can_backward) {
          ready.push_back({split[s][j] ? ActionKind::kBackwardInput : ActionKind::kBackward, s, j});
        }
        if (split[s][j] && is_done(ActionKind::kBackwardInput, s, j) &&
            !is_done(ActionKind::kBackwardWeight, s, j)) {
          ready.push_back({ActionKind::kBackwardWeight, s, j});
        }
      }
    }
    const Action a = ready[pick(0, static_cast<int>(ready.size()) - 1)];
    done[{a.kind, a.stage, a.micro_batch}] = true;
    orders[stage_group[a.stage]].push_back(a);
  }
  Plan p = one_f_one_b_plan(small_model(stages), single_device_nodes(stages), m);
  p.replicas[0].stage_group = stage_group;
  p.replicas[0].groups.resize(groups);
  for (int g = 0; g < groups; ++g) p.replicas[0].groups[g].actions = orders[g];
  *stages_out = stages;
  return p;
}

}  // namespace motley::testing
