#include "space.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

namespace motley::tune_internal {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

namespace {

bool spans_nodes(const TypeInfo& type) { return type.nodes.size() > 1; }

// Coarse stage in-flight targets of the partition: what the shape's conventional schedule
// holds at its peak (1F1B's p - r; interleaved and V per chunk).
std::vector<int64_t> in_flight_targets(const ScheduleSpec& spec, int p, int64_t m) {
  const std::vector<int> stage_group = shape_stage_group(spec, p);
  std::vector<int64_t> out;
  for (int g : stage_group) {
    int64_t need = 0;
    switch (spec.shape) {
      case StageShape::kLinear:
        need = p - g;
        break;
      case StageShape::kInterleaved: {
        const int64_t v = spec.chunks;
        const int64_t total =
            std::min<int64_t>(v * m, int64_t{2} * (p - g - 1) + int64_t{v - 1} * p + 1);
        need = (total + v - 1) / v;
        break;
      }
      case StageShape::kV:
        need = p;
        break;
    }
    out.push_back(std::max<int64_t>(1, std::min(need, m)));
  }
  return out;
}

bool adapts_to_memory(const ScheduleSpec& spec) {
  return spec.adaptive || spec.kind == ScheduleKind::kZbH1 || spec.kind == ScheduleKind::kZbH2;
}

// Schedule's share of the non-bottleneck groups' time that remains as bubble, from the
// average group loads (docs/schedules.md's closed forms, per group).
double bubble_share(const ScheduleSpec& spec, double f, double b, double w) {
  const double total = f + b + w;
  if (total <= 0) return 1;
  const double h1 = std::max({f + b - w, f, b}) / total;
  const double h2 = std::max({f, b - f, f + b - 2 * w}) / total;
  const double v_shape = std::max(f, b) / (2 * total);
  if (spec.adaptive) {
    switch (spec.shape) {
      case StageShape::kLinear:
        return 0.5 * (h1 + h2);
      case StageShape::kInterleaved:
        return h1 / spec.chunks;
      case StageShape::kV:
        return std::max(f, b) / (spec.chunks * total);
    }
  }
  switch (spec.kind) {
    case ScheduleKind::kInterleaved:
      return 1.0 / spec.chunks;
    case ScheduleKind::kZbH1:
      return h1;
    case ScheduleKind::kZbH2:
      return h2;
    case ScheduleKind::kZbV:
    case ScheduleKind::kDualPipeV:
      return v_shape;
    default:
      return 1;
  }
}

}  // namespace

bool same_make(const Context& ctx, const std::vector<std::vector<int>>& a,
               const std::vector<std::vector<int>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t g = 0; g < a.size(); ++g) {
    if (a[g].size() != b[g].size() || ctx.type_of(a[g].front()) != ctx.type_of(b[g].front())) {
      return false;
    }
  }
  return true;
}

std::string group_signature(const Context& ctx, const std::vector<std::vector<int>>& groups) {
  // Built for every replica of every candidate: no temporaries.
  std::string s;
  s.reserve(groups.size() * 6);
  char digits[24];
  auto put = [&](int64_t value, char end) {
    s.append(digits, std::to_chars(digits, digits + sizeof(digits), value).ptr);
    s += end;
  };
  for (const auto& g : groups) {
    put(ctx.type_of(g.front()), 'x');
    put(static_cast<int64_t>(g.size()), ',');
  }
  return s;
}

bool PartitionCache::find(const std::string& key, Result<Partition>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  *out = it->second;
  return true;
}

void PartitionCache::put(const std::string& key, const Result<Partition>& value) {
  std::lock_guard<std::mutex> lock(mu_);
  map_.emplace(key, value);
}

std::vector<std::vector<int>> type_groups(const TypeInfo& type, int t) {
  std::vector<std::vector<int>> out;
  for (const auto& nd : type.node_devices) {
    for (size_t i = 0; i + t <= nd.size(); i += t) {
      out.emplace_back(nd.begin() + i, nd.begin() + i + t);
    }
  }
  return out;
}

const char* device_order_name(bool megatron_rank_order) {
  return megatron_rank_order ? "devices in Megatron-LM's rank order" : "devices in cluster order";
}

Result<Layout> cluster_order_layout(const Context& ctx, int t, int p, int d,
                                    bool megatron_rank_order) {
  const std::vector<Device>& devices = ctx.devices();
  if (static_cast<int64_t>(d) * p * t > static_cast<int64_t>(devices.size())) {
    return invalid_argument(fmt::format("layout: {} x {} x {} devices exceed the cluster's {}", d,
                                        p, t, devices.size()));
  }
  // Megatron-LM's groups split every layer evenly (heads, key/value heads, widths), as the
  // executor does too.
  if (std::optional<std::string> why = ctx.tensor_parallel_obstacle(t)) {
    return invalid_argument(fmt::format("layout: TP {} does not split {}", t, *why));
  }
  Layout layout;
  for (int k = 0; k < d; ++k) {
    std::vector<std::vector<int>> groups;
    for (int r = 0; r < p; ++r) {
      const int first = (megatron_rank_order ? r * d + k : k * p + r) * t;
      std::vector<int> group;
      for (int i = first; i < first + t; ++i) {
        if (devices[i].node != devices[first].node || devices[i].type != devices[first].type) {
          return invalid_argument(fmt::format("layout: devices {}-{} span nodes or device types",
                                              devices[first].id, devices[first + t - 1].id));
        }
        group.push_back(devices[i].id);
      }
      groups.push_back(std::move(group));
    }
    layout.replicas.push_back(std::move(groups));
  }
  layout.description = "TP " + std::to_string(t) + " x PP " + std::to_string(p) + " x DP " +
                       std::to_string(d) + ", " + device_order_name(megatron_rank_order);
  return layout;
}

std::vector<Layout> mixed_layouts(const Context& ctx) {
  const std::vector<TypeInfo>& types = ctx.types();
  const int k = static_cast<int>(types.size());
  std::vector<Layout> out;
  for (int mask = 1; mask < (1 << k); ++mask) {
    std::vector<int> used;
    for (int i = 0; i < k; ++i) {
      if (mask & (1 << i)) used.push_back(i);
    }
    const int n = static_cast<int>(used.size());
    if (n != k && n != k - 1 && n != 1) continue;
    // TP degrees: the same for every type, plus every combination when there are few.
    std::set<std::vector<int>> combos;
    for (int t : {1, 2, 4, 8}) {
      bool all = true;
      for (int i : used) {
        const auto& tps = types[i].tp_degrees;
        all = all && std::find(tps.begin(), tps.end(), t) != tps.end();
      }
      if (all) combos.insert(std::vector<int>(n, t));
    }
    size_t product = 1;
    for (int i : used) product *= types[i].tp_degrees.size();
    if (product > 0 && product <= 16) {
      std::vector<int> idx(n, 0);
      while (true) {
        std::vector<int> combo;
        for (int j = 0; j < n; ++j) combo.push_back(types[used[j]].tp_degrees[idx[j]]);
        combos.insert(combo);
        int j = 0;
        while (j < n && ++idx[j] == static_cast<int>(types[used[j]].tp_degrees.size())) {
          idx[j++] = 0;
        }
        if (j == n) break;
      }
    }
    // Type orders: every permutation for up to three types, else fastest and slowest first.
    std::vector<std::vector<int>> orders;
    std::vector<int> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    if (n <= 3) {
      do {
        orders.push_back(perm);
      } while (std::next_permutation(perm.begin(), perm.end()));
    } else {
      std::sort(perm.begin(), perm.end(), [&](int a, int b) {
        return types[used[a]].relative_speed > types[used[b]].relative_speed;
      });
      orders.push_back(perm);
      std::reverse(perm.begin(), perm.end());
      orders.push_back(perm);
    }
    for (const std::vector<int>& tps : combos) {
      std::vector<std::vector<std::vector<int>>> groups(n);
      int common = 0;
      for (int j = 0; j < n; ++j) {
        groups[j] = type_groups(types[used[j]], tps[j]);
        common = std::gcd(common, static_cast<int>(groups[j].size()));
      }
      for (int d : divisors(common)) {
        int p = 0;
        for (int j = 0; j < n; ++j) p += static_cast<int>(groups[j].size()) / d;
        if (p > ctx.num_layers()) continue;
        bool multi_node = false;
        for (int i : used) multi_node = multi_node || spans_nodes(types[i]);
        for (int inner = 0; inner < (d > 1 && multi_node ? 2 : 1); ++inner) {
          for (const std::vector<int>& order : orders) {
            Layout layout;
            for (int r = 0; r < d; ++r) {
              std::vector<std::vector<int>> pipeline;
              for (int j : order) {
                const int per = static_cast<int>(groups[j].size()) / d;
                for (int i = 0; i < per; ++i) {
                  // pp-inner: a replica takes a contiguous block; dp-inner: every d-th group.
                  const int index = inner == 0 ? r * per + i : i * d + r;
                  pipeline.push_back(groups[j][index]);
                }
              }
              layout.replicas.push_back(std::move(pipeline));
            }
            std::string text;
            for (int j : order) {
              text += (text.empty() ? "" : " | ") + types[used[j]].name + " x" +
                      std::to_string(groups[j].size() / d) + " TP" + std::to_string(tps[j]);
            }
            layout.description = "DP " + std::to_string(d) + " x [" + text + "]" +
                                 (inner == 1 ? ", replicas interleaved across nodes" : "");
            out.push_back(std::move(layout));
          }
        }
      }
    }
  }
  return out;
}

bool layout_meets_constraints(const Context& ctx, const Layout& layout) {
  const PlanConstraints& k = ctx.options().constraints;
  if (k.data_parallel > 0 && static_cast<int>(layout.replicas.size()) != k.data_parallel) {
    return false;
  }
  for (const auto& replica : layout.replicas) {
    if (k.pipeline_parallel > 0 && static_cast<int>(replica.size()) != k.pipeline_parallel) {
      return false;
    }
    for (const auto& group : replica) {
      if (k.tensor_parallel > 0 && static_cast<int>(group.size()) != k.tensor_parallel) {
        return false;
      }
    }
  }
  return true;
}

std::vector<Layout> constrained_layouts(const Context& ctx, std::vector<Layout> layouts) {
  const PlanConstraints& k = ctx.options().constraints;
  std::vector<Layout> out;
  for (Layout& l : layouts) {
    if (layout_meets_constraints(ctx, l)) out.push_back(std::move(l));
  }
  const int n = ctx.num_devices();
  // A batch too small for the cluster: no plan keeps more devices busy than its replicas (the
  // micro-batches, times the widest context group) x groups (one layer each at most) x the
  // widest TP degree. Beyond that every layout of all the devices is refused, so layouts of
  // d replicas of p groups of t devices on the first such groups of each device type, and in
  // cluster order, join them, as a smaller job would run (2 of 128 T4s for a tiny model and
  // one sequence).
  int widest = 1;
  for (const TypeInfo& type : ctx.types()) {
    for (int t : type.tp_degrees) widest = std::max(widest, t);
  }
  int cp = 1;
  for (int c : ctx.context_degrees()) cp = std::max(cp, c);
  const int64_t replicas = ctx.global_batch() * cp;
  auto add = [&out](Layout l) {
    if (std::find(out.begin(), out.end(), l) == out.end()) out.push_back(std::move(l));
  };
  // d replicas of p groups of t devices, in cluster order and on the first groups of each type.
  auto add_smaller = [&](int t, int p, int64_t d) {
    Result<Layout> l = cluster_order_layout(ctx, t, p, static_cast<int>(d));
    if (l.is_ok()) add(std::move(l.value()));
    for (const TypeInfo& type : ctx.types()) {
      if (std::find(type.tp_degrees.begin(), type.tp_degrees.end(), t) == type.tp_degrees.end()) {
        continue;
      }
      const std::vector<std::vector<int>> groups = type_groups(type, t);
      if (static_cast<int64_t>(groups.size()) < p * d) continue;
      Layout own;
      for (int64_t r = 0; r < d; ++r) {
        own.replicas.emplace_back(groups.begin() + r * p, groups.begin() + (r + 1) * p);
      }
      own.description = fmt::format("TP {} x PP {} x DP {} of the {}", t, p, d, type.name);
      add(std::move(own));
    }
  };
  if (k.pipeline_parallel == 0 && k.data_parallel == 0) {
    if (replicas * ctx.num_layers() * widest >= n) return out;
    for (int t : {1, 2, 4, 8}) {
      if (k.tensor_parallel > 0 && t != k.tensor_parallel) continue;
      for (int p = 1; p <= std::min(n / t, ctx.num_layers()); ++p) {
        for (int64_t d = 1; d <= replicas && static_cast<int64_t>(t) * p * d <= n; d *= 2) {
          add_smaller(t, p, d);
        }
      }
    }
    return out;
  }
  // A fixed depth or replica count may leave devices over: the cluster-order layouts of that
  // shape on the first t x p x d devices, as a Megatron-LM job of that world size runs. With
  // the depth fixed and the replicas left to the search, the batch may hold fewer sequences
  // than the devices hold replicas (one sequence, PP 1, on 24 devices), which only context
  // parallelism could feed: fewer replicas then join them, as above.
  for (int t : {1, 2, 4, 8}) {
    if (k.tensor_parallel > 0 && t != k.tensor_parallel) continue;
    std::vector<int> depths;
    if (k.pipeline_parallel > 0) {
      depths.push_back(k.pipeline_parallel);
    } else {
      for (int p = 1; p <= std::min(n / t, ctx.num_layers()); ++p) depths.push_back(p);
    }
    for (int p : depths) {
      const int d = k.data_parallel > 0 ? k.data_parallel : n / (t * p);
      if (d < 1 || static_cast<int64_t>(t) * p * d > n) continue;
      Result<Layout> l = cluster_order_layout(ctx, t, p, d);
      if (l.is_ok()) add(std::move(l.value()));
      if (k.data_parallel > 0 || d <= ctx.global_batch()) continue;
      for (int64_t fewer = 1; fewer <= replicas && fewer < d; fewer *= 2) add_smaller(t, p, fewer);
    }
  }
  return out;
}

std::vector<Layout> separate_layouts(const Context& ctx) {
  const std::vector<TypeInfo>& types = ctx.types();
  if (types.size() < 2) return {};
  const int64_t b = ctx.baseline_micro_batch_size();
  const int64_t total = ctx.global_batch() / b;
  double speed_sum = 0;
  for (const TypeInfo& t : types) speed_sum += t.relative_speed * t.count;
  // Per type, the three pipelines of that type alone with the best estimated rate.
  using Replicas = std::vector<std::vector<std::vector<int>>>;  // replica -> group -> devices
  std::vector<std::vector<Replicas>> options;                   // type -> option
  for (const TypeInfo& type : types) {
    const int64_t share =
        std::max<int64_t>(1, std::llround(total * type.relative_speed * type.count / speed_sum));
    std::vector<std::pair<double, Replicas>> ranked;
    for (int t : type.tp_degrees) {
      const auto groups = type_groups(type, t);
      const int g = static_cast<int>(groups.size());
      for (int d : divisors(g)) {
        const int p = g / d;
        if (p > ctx.num_layers() || d > share) continue;
        Layout layout;
        for (int r = 0; r < d; ++r) {
          layout.replicas.emplace_back(groups.begin() + std::ptrdiff_t{r} * p,
                                       groups.begin() + std::ptrdiff_t{r + 1} * p);
        }
        // Rate of this option on its share of the batch, 1F1B on a balanced partition.
        Candidate c;
        c.micro_batch_size = b;
        c.schedule = ScheduleSpec::named(ScheduleKind::k1f1b);
        // Every pipeline of the option is p groups of t devices of this type, the make the
        // partition depends on (as the search's partition cache has it): one partition serves
        // all d of them. On 8,192 devices of a type, one per pipeline took a second.
        const int64_t m = std::max<int64_t>(1, share / d);
        PartitionRequest req;
        req.num_layers = ctx.num_layers();
        for (const auto& grp : layout.replicas[0]) req.stage_groups.push_back(DeviceGroup{grp});
        req.in_flight = in_flight_targets(c.schedule, p, m);
        req.memory_budget.assign(p, ctx.capacity(layout.replicas[0][0][0]));
        req.memory.data_parallel = d;
        req.memory.zero_stage = ctx.options().zero_stage.value_or(0);
        req.fused_backward = runs_fused_backward(c.schedule);
        const Result<Partition> part = balanced_partition(req, ctx.cost(b));
        if (!part.is_ok()) {
          if (part.status().code() == StatusCode::kInfeasible) ctx.note_memory_refusal();
          continue;
        }
        for (const auto& pipeline : layout.replicas) {
          PipelineSpec spec;
          spec.groups = pipeline;
          spec.bounds = part->bounds;
          spec.recompute = part->recompute;
          spec.micro_batches = m;
          c.replicas.push_back(std::move(spec));
        }
        double worst = 0;
        for (int r = 0; r < d; ++r) {
          worst = std::max(worst, replica_estimate(ctx, c, r, c.replicas[r].micro_batches));
        }
        ranked.emplace_back(worst / static_cast<double>(share), layout.replicas);
      }
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Replicas> keep;
    for (size_t i = 0; i < ranked.size() && i < 3; ++i) keep.push_back(ranked[i].second);
    if (keep.empty()) return {};  // a type that cannot hold the model alone
    options.push_back(std::move(keep));
  }
  std::vector<Layout> out;
  std::vector<size_t> idx(types.size(), 0);
  while (true) {
    Layout layout;
    for (size_t t = 0; t < types.size(); ++t) {
      for (const auto& pipeline : options[t][idx[t]]) layout.replicas.push_back(pipeline);
    }
    layout.description = "separate pipelines per device type";
    out.push_back(std::move(layout));
    size_t j = 0;
    while (j < types.size() && ++idx[j] == options[j].size()) idx[j++] = 0;
    if (j == types.size()) break;
  }
  return out;
}

std::vector<int64_t> split_micro_batches(const std::vector<double>& slope,
                                         const std::vector<double>& offset, int64_t total) {
  const size_t n = slope.size();
  MOTLEY_CHECK(total >= static_cast<int64_t>(n), "fewer micro-batches than replicas");
  std::vector<int64_t> m(n, 1);
  using Item = std::pair<double, size_t>;  // time with one more micro-batch, replica
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> next;
  for (size_t k = 0; k < n; ++k) next.emplace(slope[k] * 2 + offset[k], k);
  for (int64_t left = total - static_cast<int64_t>(n); left > 0; --left) {
    const size_t k = next.top().second;
    next.pop();
    ++m[k];
    next.emplace(slope[k] * static_cast<double>(m[k] + 1) + offset[k], k);
  }
  return m;
}

PassOverhead pass_overhead(const Context& ctx, const CostModel& cost, const Candidate& c,
                           int replica, size_t stage, const ComputeTimes& t,
                           PassOverheadCache* cache) {
  PassOverhead out;
  const PipelineSpec& rep = c.replicas[replica];
  const int g = shape_stage_group(c.schedule, static_cast<int>(rep.groups.size()))[stage];
  const LayerRange layers{rep.bounds[stage], rep.bounds[stage + 1]};
  const DeviceGroup group{rep.groups[g]};
  const bool fused = runs_fused_backward(c.schedule);
  const int zero = ctx.options().zero_stage.value_or(c.zero_stage);
  // The ring of replicas [first, last) at this group index: first devices of each.
  auto ring = [&](size_t first, size_t last) {
    std::vector<int> out;
    for (size_t q = first; q < last && q < c.replicas.size(); ++q) {
      const PipelineSpec& other = c.replicas[q];
      out.push_back(other.groups[std::min<size_t>(g, other.groups.size() - 1)][0]);
    }
    return out;
  };
  if (zero >= 2 && c.replicas.size() > 1) {
    const std::array<int, 4> key{g, layers.begin, layers.end, group.tp()};
    DataParallelSync stage1;
    bool known = false;
    if (cache != nullptr) {
      const auto it = cache->zero_sync.find(key);
      known = it != cache->zero_sync.end();
      if (known) stage1 = it->second;
    }
    if (!known) {
      MemoryOptions whole;  // no ZeRO; expert parallelism's share of the experts
      whole.data_parallel = static_cast<int64_t>(c.replicas.size());
      whole.expert_parallel = c.expert_parallel;
      stage1 = data_parallel_sync(cost, ring(0, c.replicas.size()),
                                  cost.stage_memory(layers, group, whole), 1,
                                  CollectiveAlgorithm::kAuto);
      if (cache != nullptr) cache->zero_sync.emplace(key, stage1);
    }
    const Seconds backward = fused ? t.fused_backward() : t.backward_input;
    const ShardedPassOverhead o = sharded_pass_overhead(
        zero, stage1, t.forward, backward, fused ? t.fused_backward() : t.backward_weight);
    out.forward += o.forward.value();
    out.backward += o.backward.value();
    out.weight += o.gradient.value();
  }
  if (c.expert_parallel > 1) {
    const size_t e = static_cast<size_t>(c.expert_parallel);
    const size_t first = static_cast<size_t>(replica) / e * e;
    const std::vector<int> devices = ring(first, first + e);
    double exchange = 0;
    for (int l = layers.begin; l < layers.end; ++l) {
      const Bytes bytes = cost.expert_dispatch_bytes(l);
      if (bytes.value() <= 0) continue;
      exchange += 2 * cost.expert_exchange_time(l, devices, bytes / static_cast<double>(group.tp()),
                                                CollectiveAlgorithm::kAuto)
                          .value();
    }
    out.forward += exchange;
    out.backward += exchange;
  }
  if (c.context_parallel > 1) {
    // Ring attention over the replica's context group (the simulator's rule, on the first
    // device of each member's group).
    const size_t cp = static_cast<size_t>(c.context_parallel);
    const size_t first = static_cast<size_t>(replica) / cp * cp;
    const std::vector<int> devices = ring(first, first + cp);
    const int members = static_cast<int>(devices.size());
    for (int l = layers.begin; l < layers.end; ++l) {
      const CostModel::ContextExchange x = cost.context_exchange(l, group);
      if (x.bytes.value() <= 0 || devices.size() < 2) continue;
      double hop = 0, hop_back = 0;
      for (size_t q = 0; q < devices.size(); ++q) {
        const int next = devices[(q + 1) % devices.size()];
        hop = std::max(hop, cost.p2p_time(devices[q], next, x.bytes).value());
        hop_back = std::max(hop_back, cost.p2p_time(devices[q], next, x.bytes * 2.0).value());
      }
      out.forward += ring_exchange_exposure(members, Seconds(hop), x.forward_attention).value();
      out.backward +=
          ring_exchange_exposure(members, Seconds(hop_back), x.backward_attention).value();
    }
  }
  return out;
}

bool splits_embedding(const Context& ctx) {
  return embedding_vocab(ctx.model()) > 0 && ctx.num_layers() >= 3;
}

std::vector<double> vocab_shard_shares(const Context& ctx, const CostModel& cost,
                                       const Candidate& c,
                                       const std::vector<std::vector<int>>& groups, int layer,
                                       int64_t granule) {
  const int64_t vocab = layer == 0 ? embedding_vocab(ctx.model()) : head_vocab(ctx.model());
  if (granule <= 0) granule = vocab_row_granule(c);
  std::vector<int64_t> ends;
  if (layer != 0 && !c.head_shares.empty() && c.head_shares.size() == groups.size()) {
    ends = vocab_shard_ends_by_weight(vocab, c.head_shares, granule);
  } else {
    std::vector<double> time;
    for (const std::vector<int>& g : groups) {
      const ComputeTimes t =
          cost.compute(LayerRange{layer, layer + 1}, DeviceGroup{g}, RecomputePolicy::kNone);
      time.push_back((t.forward + t.backward()).value());
    }
    ends = vocab_shard_ends(vocab, time, granule);
  }
  std::vector<double> shares;
  int64_t begin = 0;
  for (int64_t end : ends) {
    shares.push_back(static_cast<double>(end - begin) / static_cast<double>(vocab));
    begin = end;
  }
  return shares;
}

std::vector<ComputeTimes> vocab_shard_times(const Context& ctx, const CostModel& cost,
                                            const Candidate& c, int replica) {
  if (!c.vocab_parallel) return {};
  const std::vector<std::vector<int>>& groups = c.replicas[replica].groups;
  std::vector<ComputeTimes> out(groups.size());
  std::vector<int> layers{ctx.num_layers() - 1};
  if (c.vocab_embedding) layers.push_back(0);
  for (int layer : layers) {
    const std::vector<double> shares = vocab_shard_shares(ctx, cost, c, groups, layer);
    for (size_t g = 0; g < groups.size(); ++g) {
      const ComputeTimes t = cost.compute(LayerRange{layer, layer + 1, shares[g]},
                                          DeviceGroup{groups[g]}, RecomputePolicy::kNone);
      out[g].forward += t.forward;
      out[g].backward_input += t.backward_input;
      out[g].backward_weight += t.backward_weight;
    }
  }
  return out;
}

LayerRange own_layers(const Context& ctx, const Candidate& c, const PipelineSpec& rep,
                      size_t stage) {
  LayerRange layers{rep.bounds[stage], rep.bounds[stage + 1]};
  if (c.vocab_parallel) {
    layers.end = std::min(layers.end, ctx.num_layers() - 1);
    if (c.vocab_embedding) layers.begin = std::max(layers.begin, 1);
    layers.end = std::max(layers.end, layers.begin);
  }
  return layers;
}

double replica_estimate(const Context& ctx, const Candidate& c, int replica, int64_t m,
                        PassOverheadCache* cache) {
  const CostModel& cost = ctx.cost(c.micro_batch_size, c.sequence_parallel, c.context_parallel);
  const PipelineSpec& rep = c.replicas[replica];
  const int p = static_cast<int>(rep.groups.size());
  const std::vector<int> stage_group = shape_stage_group(c.schedule, p);
  std::vector<double> load(p, 0);
  const bool fused = runs_fused_backward(c.schedule);
  double f = 0, b = 0, w = 0;
  auto add = [&](int g, const ComputeTimes& t) {
    f += t.forward.value();
    b += (t.backward_input + t.recompute).value();
    w += t.backward_weight.value();
    load[g] += (t.forward + (fused ? t.fused_backward() : t.backward()) + t.recompute).value();
  };
  for (size_t s = 0; s + 1 < rep.bounds.size(); ++s) {
    const int g = stage_group[s];
    const LayerRange layers = own_layers(ctx, c, rep, s);
    if (layers.size() == 0) continue;
    const ComputeTimes t = cost.compute(layers, DeviceGroup{rep.groups[g]}, rep.recompute[s]);
    add(g, t);
    load[g] += pass_overhead(ctx, cost, c, replica, s, t, cache).total();
  }
  const std::vector<ComputeTimes> shards = vocab_shard_times(ctx, cost, c, replica);
  for (size_t g = 0; g < shards.size(); ++g) add(static_cast<int>(g), shards[g]);
  double longest = 0, chain = 0;
  for (size_t s = 0; s + 2 < rep.bounds.size(); ++s) {
    const int a = stage_group[s], z = stage_group[s + 1];
    if (a == z) continue;
    const double hop = cost.p2p_time(rep.groups[a][0], rep.groups[z][0],
                                     cost.boundary_bytes(rep.bounds[s + 1] - 1))
                           .value();
    longest = std::max(longest, hop);
    chain += hop;
  }
  const double bottleneck = *std::max_element(load.begin(), load.end());
  const double sum = std::accumulate(load.begin(), load.end(), 0.0);
  const double per_micro_batch = std::max(bottleneck, longest);
  return static_cast<double>(m) * per_micro_batch +
         bubble_share(c.schedule, f / p, b / p, w / p) * (sum - bottleneck) + 2 * chain;
}

std::vector<size_t> estimated_replicas(const Context& ctx, const Candidate& c,
                                       const LayoutFacts* facts) {
  std::vector<size_t> out;
  std::set<std::vector<int64_t>> makes;
  std::vector<int64_t> key;
  auto make_key = [&](const PipelineSpec& rep, std::vector<int64_t>& into) {
    into.push_back(rep.micro_batches);
    for (const auto& g : rep.groups) {
      into.push_back(ctx.type_of(g.front()));
      into.push_back(static_cast<int64_t>(g.size()));
    }
    into.push_back(-1);
    into.insert(into.end(), rep.bounds.begin(), rep.bounds.end());
    for (RecomputePolicy policy : rep.recompute) into.push_back(static_cast<int64_t>(policy));
  };
  // Expert and context parallelism price each replica with its own group of replicas (those
  // groups are consecutive replicas): every replica of the first block of each make, blocks
  // being the groups' common period and a block's make its replicas' makes in order. Blocks of
  // one make differ only in where their devices sit, which the first one's collectives stand
  // for, as a replica's transfers do below. (Pricing every replica took the whole budget of a
  // Mixtral search on 16,384 devices before anything was simulated.)
  const size_t e = static_cast<size_t>(std::max(c.expert_parallel, 1));
  const size_t cp = static_cast<size_t>(std::max(c.context_parallel, 1));
  if (e > 1 || cp > 1) {
    const size_t period = std::lcm(e, cp);
    for (size_t first = 0; first < c.replicas.size(); first += period) {
      key.clear();
      const size_t last = std::min(first + period, c.replicas.size());
      key.push_back(static_cast<int64_t>(last - first));
      for (size_t q = first; q < last; ++q) {
        make_key(c.replicas[q], key);
        key.push_back(-2);
      }
      if (!makes.insert(key).second) continue;
      for (size_t q = first; q < last; ++q) out.push_back(q);
    }
    return out;
  }
  for (size_t r = 0; r < c.replicas.size(); ++r) {
    const PipelineSpec& rep = c.replicas[r];
    // (Most replicas are alike the one before, whose key is in already. Built from a layout,
    // replicas of one make hold its first one's layers and recompute.)
    if (r > 0) {
      const PipelineSpec& before = c.replicas[r - 1];
      if (rep.micro_batches == before.micro_batches &&
          (facts != nullptr ? facts->make[r] == facts->make[r - 1]
                            : rep.bounds == before.bounds && rep.recompute == before.recompute &&
                                  same_make(ctx, rep.groups, before.groups))) {
        continue;
      }
    }
    key.clear();
    make_key(rep, key);
    if (makes.insert(key).second) out.push_back(r);
  }
  return out;
}

double estimate(const Context& ctx, const Candidate& c, const LayoutFacts* facts) {
  const CostModel& cost = ctx.cost(c.micro_batch_size, c.sequence_parallel, c.context_parallel);
  const std::vector<size_t> estimated = estimated_replicas(ctx, c, facts);
  double pipelines = 0;
  PassOverheadCache shared;
  for (size_t r : estimated) {
    pipelines = std::max(pipelines, replica_estimate(ctx, c, static_cast<int>(r),
                                                     c.replicas[r].micro_batches, &shared));
  }
  MemoryOptions mem;
  mem.data_parallel = static_cast<int64_t>(c.replicas.size());
  mem.zero_stage = ctx.options().zero_stage.value_or(c.zero_stage);
  mem.expert_parallel = c.expert_parallel;
  // The stages of the group holding the first layer finish last; what their gradient
  // reductions leave after the last backward (and under ZeRO-1 the weight gathers after the
  // first forward) is exposed, as the simulator prices it (docs/simulator.md).
  double all_reduce = 0;
  if (c.replicas.size() > 1) {
    const PipelineSpec& first = c.replicas[0];
    const std::vector<int> sg =
        shape_stage_group(c.schedule, static_cast<int>(first.groups.size()));
    const int64_t replicas = static_cast<int64_t>(c.replicas.size());
    std::vector<int> own;
    if (facts == nullptr) {
      own.reserve(c.replicas.size());
      for (const PipelineSpec& rep : c.replicas) own.push_back(rep.groups[0][0]);
    }
    const std::vector<int>& ring = facts != nullptr ? facts->ring : own;
    const DeviceGroup group{first.groups[0]};
    for (size_t s = 0; s + 1 < first.bounds.size(); ++s) {
      if (sg[s] != 0) continue;
      const LayerRange layers{first.bounds[s], first.bounds[s + 1]};
      const ComputeTimes t = cost.compute(layers, group, first.recompute[s]);
      MemoryOptions whole;  // no ZeRO; expert parallelism's share of the experts
      whole.data_parallel = replicas;
      whole.expert_parallel = c.expert_parallel;
      const StageMemory unsharded = cost.stage_memory(layers, group, whole);
      const DataParallelSync sync =
          data_parallel_sync(cost, ring, unsharded, mem.zero_stage, CollectiveAlgorithm::kAuto);
      all_reduce += exposed_data_parallel_sync(cost, sync, layers, group, replicas,
                                               t.fused_backward(), t.forward)
                        .value();
    }
  }
  double optimizer = 0;
  for (size_t r : estimated) {
    const PipelineSpec& rep = c.replicas[r];
    if (!ctx.options().optimizer_step) break;
    const std::vector<int> sg = shape_stage_group(c.schedule, static_cast<int>(rep.groups.size()));
    std::vector<double> step(rep.groups.size(), 0);
    for (size_t s = 0; s + 1 < rep.bounds.size(); ++s) {
      const int g = sg[s];
      const BytesPerSecond bw = ctx.types()[ctx.type_of(rep.groups[g][0])].type->memory_bandwidth;
      step[g] += optimizer_step_or_state_pass(cost, LayerRange{rep.bounds[s], rep.bounds[s + 1]},
                                              DeviceGroup{rep.groups[g]}, mem, bw)
                     .value();
    }
    optimizer = std::max(optimizer, *std::max_element(step.begin(), step.end()));
  }
  // A tied head's gradients summed with its embedding's where two groups hold them, as the
  // simulator prices it.
  double tied_sum = 0;
  if (const std::optional<CostModel::TiedLayers> tied = cost.tied_layers()) {
    for (size_t r : estimated) {
      const PipelineSpec& rep = c.replicas[r];
      const std::vector<int> sg =
          shape_stage_group(c.schedule, static_cast<int>(rep.groups.size()));
      int a = -1, b = -1;
      for (size_t s = 0; s + 1 < rep.bounds.size(); ++s) {
        if (rep.bounds[s] <= tied->first && tied->first < rep.bounds[s + 1]) a = sg[s];
        if (rep.bounds[s] <= tied->second && tied->second < rep.bounds[s + 1]) b = sg[s];
      }
      if (a < 0 || b < 0 || a == b) continue;
      tied_sum = std::max(tied_sum, tied_gradient_sum(cost, rep.groups[a], rep.groups[b],
                                                      CollectiveAlgorithm::kAuto)
                                        .value());
    }
  }
  return pipelines + all_reduce + optimizer + tied_sum;
}

double candidate_price_per_second(const Context& ctx, const Candidate& c) {
  double price = 0;
  for (const PipelineSpec& rep : c.replicas) {
    for (const auto& g : rep.groups) {
      for (int d : g) price += ctx.price_per_second(d);
    }
  }
  return price;
}

bool over_budget(const Context& ctx, double price_per_second) {
  const double budget = ctx.options().budget_per_hour;
  return budget > 0 && price_per_second * 3600.0 > budget * (1 + 1e-12);
}

bool has_tensor_parallel_group(const Context& ctx, const Layout& layout) {
  if (!ctx.searches_sequence_parallel()) return false;
  for (const auto& rep : layout.replicas) {
    for (const auto& g : rep) {
      if (g.size() > 1) return true;
    }
  }
  return false;
}

double objective_estimate(const Context& ctx, const Candidate& c, const LayoutFacts* facts) {
  const double price =
      facts != nullptr ? facts->price_per_second : candidate_price_per_second(ctx, c);
  if (over_budget(ctx, price)) return std::numeric_limits<double>::infinity();
  const double time = estimate(ctx, c, facts);
  if (ctx.options().objective != TuneObjective::kCost) return time;
  return time * price / candidate_preemption(ctx, c, time).goodput;
}

Result<Candidate> build_candidate(const Context& ctx, const Layout& layout,
                                  const ScheduleSpec& schedule, int64_t b,
                                  const BuildOptions& options) {
  Candidate c;
  MOTLEY_RETURN_IF_ERROR(build_candidate_into(ctx, layout, schedule, b, options, c));
  return c;
}

LayoutFacts layout_facts(const Context& ctx, const Layout& layout) {
  LayoutFacts f;
  const size_t replicas = layout.replicas.size();
  // A layout may hold tens of thousands of replicas, most of them of the make of the one
  // before.
  f.make.resize(replicas);
  std::unordered_map<std::string, int> index;
  for (size_t r = 0; r < replicas; ++r) {
    if (r > 0 && same_make(ctx, layout.replicas[r], layout.replicas[r - 1])) {
      f.make[r] = f.make[r - 1];
      continue;
    }
    std::string s = group_signature(ctx, layout.replicas[r]);
    const auto [it, added] = index.emplace(s, static_cast<int>(f.makes.size()));
    if (added) f.makes.push_back(std::move(s));
    f.make[r] = it->second;
  }
  // The speed is the make's (a group's devices are of one type): summed once per make.
  std::vector<double> make_speed(f.makes.size(), -1);
  f.speed.resize(replicas);
  f.ring.resize(replicas);
  for (size_t r = 0; r < replicas; ++r) {
    double& s = make_speed[static_cast<size_t>(f.make[r])];
    if (s < 0) {
      s = 0;
      for (const auto& g : layout.replicas[r]) {
        for (int d : g) s += ctx.types()[ctx.type_of(d)].relative_speed;
      }
    }
    f.speed[r] = s;
    f.speed_sum += s;
    f.ring[r] = layout.replicas[r][0][0];
    for (const auto& g : layout.replicas[r]) {
      for (int d : g) f.price_per_second += ctx.price_per_second(d);
    }
  }
  return f;
}

namespace {

// build_candidate_into with the layout's facts; `groups_current` when out's replicas already
// hold the layout's groups, in order.
Status build_into(const Context& ctx, const Layout& layout, const LayoutFacts& facts,
                  bool groups_current, const ScheduleSpec& schedule, int64_t b,
                  const BuildOptions& options, Candidate& out);

}  // namespace

Status build_candidate_into(const Context& ctx, const Layout& layout, const ScheduleSpec& schedule,
                            int64_t b, const BuildOptions& options, Candidate& out) {
  return build_into(ctx, layout, layout_facts(ctx, layout), false, schedule, b, options, out);
}

Status build_candidate_into(const Context& ctx, const Layout& layout, const ScheduleSpec& schedule,
                            int64_t b, const BuildOptions& options, BuildScratch& scratch) {
  if (scratch.layout != &layout) {
    scratch.facts = layout_facts(ctx, layout);
    scratch.layout = &layout;
    scratch.groups_current = false;
  }
  const bool current = scratch.groups_current;
  scratch.groups_current = false;  // (a build that fails may leave some replicas as they were)
  MOTLEY_RETURN_IF_ERROR(
      build_into(ctx, layout, scratch.facts, current, schedule, b, options, scratch.candidate));
  scratch.groups_current = true;
  return Status::ok();
}

namespace {

// Whether some layer alone, with the most recompute allowed and one micro-batch in flight,
// needs more than a stage's memory budget on that stage's group.
bool some_layer_exceeds_a_share(const PartitionRequest& req, const CostModel& cost) {
  const int groups = *std::max_element(req.stage_owner.begin(), req.stage_owner.end()) + 1;
  std::vector<bool> seen(static_cast<size_t>(groups), false);
  for (size_t s = 0; s < req.stage_groups.size(); ++s) {
    const auto g = static_cast<size_t>(req.stage_owner[s]);
    if (seen[g]) continue;
    seen[g] = true;
    const int first = req.spread_embedding ? 1 : 0;
    const int last = req.spread_head ? req.num_layers - 1 : req.num_layers;
    const int stage = static_cast<int>(s);
    for (int l = first; l < last; ++l) {
      if (stage_need(req, cost, stage, l, l + 1, req.policies.back(), 1) > req.memory_budget[s]) {
        return true;
      }
    }
  }
  return false;
}

// `part` where every group holds its stages' weights, gradients, optimizer state and their
// in-flight activations (req.in_flight) together within its devices' capacity; else infeasible.
// For partitions made with each stage allowed the group's whole capacity.
Result<Partition> fits_groups(Partition part, const PartitionRequest& req, const CostModel& cost,
                              const Context& ctx) {
  const int groups = *std::max_element(req.stage_owner.begin(), req.stage_owner.end()) + 1;
  std::vector<double> need(static_cast<size_t>(groups), 0.0);
  std::vector<double> capacity(need.size(), 0.0);
  for (size_t s = 0; s + 1 < part.bounds.size(); ++s) {
    const auto g = static_cast<size_t>(req.stage_owner[s]);
    need[g] += stage_need(req, cost, static_cast<int>(s), part.bounds[s], part.bounds[s + 1],
                          part.recompute[s], req.in_flight[s])
                   .value();
    capacity[g] = ctx.capacity(req.stage_groups[s].devices[0]).value();
  }
  for (size_t g = 0; g < need.size(); ++g) {
    if (need[g] > capacity[g]) {
      return infeasible(fmt::format("candidate: group {} needs {:.1f} GiB, more than {:.1f} GiB", g,
                                    need[g] / kGiB, capacity[g] / kGiB));
    }
  }
  return part;
}

Status build_into(const Context& ctx, const Layout& layout, const LayoutFacts& facts,
                  bool groups_current, const ScheduleSpec& schedule, int64_t b,
                  const BuildOptions& options, Candidate& out) {
  const int layers = ctx.num_layers();
  const int64_t total = ctx.global_batch() / b;
  const int replicas = static_cast<int>(layout.replicas.size());
  // (A context group's members share their micro-batches: one per group is enough.)
  const int context_members =
      std::max(1, ctx.options().context_parallel > 1 ? ctx.options().context_parallel
                                                     : options.context_parallel);
  if (total < replicas / context_members) {
    return invalid_argument(
        fmt::format("candidate: {} micro-batches for {} replicas", total, replicas));
  }
  // Every field afresh; the replicas' buffers kept for the new ones to fill.
  std::vector<PipelineSpec> buffers = std::move(out.replicas);
  out = Candidate{};
  out.replicas = std::move(buffers);
  Candidate& c = out;
  size_t filled = 0;  // replicas written so far, each into a kept buffer where there is one
  auto next_replica = [&]() -> PipelineSpec& {
    if (filled == c.replicas.size()) c.replicas.emplace_back();
    return c.replicas[filled++];
  };
  c.micro_batch_size = b;
  c.schedule = schedule;
  const int zero = ctx.options().zero_stage.value_or(replicas > 1 ? options.zero_stage : 0);
  if (zero >= 2 && total % replicas != 0) {
    return invalid_argument(fmt::format(
        "candidate: ZeRO-{} needs equal micro-batch counts, and {} do not split over {} replicas",
        zero, total, replicas));
  }
  c.zero_stage = zero;
  const int e =
      ctx.options().expert_parallel > 0 ? ctx.options().expert_parallel : options.expert_parallel;
  if (e > 1 && (replicas % e != 0 || total % replicas != 0)) {
    return invalid_argument(
        fmt::format("candidate: expert parallelism {} needs it to divide the {} replicas and equal "
                    "micro-batch counts ({} micro-batches)",
                    e, replicas, total));
  }
  c.expert_parallel = e;
  const int cp = ctx.options().context_parallel > 1 ? ctx.options().context_parallel
                                                    : options.context_parallel;
  const int64_t context_groups = replicas / std::max(cp, 1);
  if (cp > 1 && (e > 1 || replicas % cp != 0 || total < context_groups)) {
    return invalid_argument(
        fmt::format("candidate: context parallelism {} needs it to divide the {} replicas, no "
                    "expert parallelism, and a micro-batch per group ({} micro-batches)",
                    cp, replicas, total));
  }
  const std::vector<std::string>& makes = facts.makes;
  const std::vector<int>& make = facts.make;
  // A context group's members exchange each stage's keys and values TP rank by TP rank and run
  // in lockstep: they are of one make.
  for (int r = 0; cp > 1 && r < replicas; ++r) {
    const int lead = r / cp * cp;
    if (make[r] != make[static_cast<size_t>(lead)]) {
      return invalid_argument(fmt::format(
          "candidate: context parallelism {} needs each group of {} replicas of one make; "
          "replica {} differs from replica {}",
          cp, cp, r, lead));
    }
  }
  c.context_parallel = std::max(cp, 1);
  c.sequence_parallel = options.sequence_parallel && has_tensor_parallel_group(ctx, layout);
  if (options.vocab_parallel) {
    const size_t p = layout.replicas[0].size();
    bool equal = true;
    for (const auto& rep : layout.replicas) equal = equal && rep.size() == p;
    if (!schedule.adaptive || options.split || !equal || p < 2 ||
        p > static_cast<size_t>(kMaxVocabShards) ||
        head_vocab(ctx.model()) < static_cast<int64_t>(p) || ctx.num_layers() < 2) {
      return invalid_argument(
          "candidate: vocabulary parallelism needs the adaptive scheduler, the balanced "
          "partition, replicas of 2 or more groups each, as many each, and a head with a row per "
          "group");
    }
  }
  c.vocab_parallel = options.vocab_parallel;
  c.vocab_embedding = options.vocab_parallel && options.vocab_embedding && splits_embedding(ctx);
  // The shards' rows come in multiples of every group's TP degree, as assemble_plan will split
  // them (vocab_row_granule of the whole candidate): taken from the layout, since the candidate
  // holds only the replicas built so far while it is being built. (Only with the head split:
  // the sweeps build candidates of tens of thousands of groups.)
  int64_t granule = 1;
  for (size_t r = 0; c.vocab_parallel && r < layout.replicas.size(); ++r) {
    granule = vocab_row_granule(layout.replicas[r], granule);
  }
  const CostModel& cost = ctx.cost(b, c.sequence_parallel, c.context_parallel);
  // A first guess of each replica's micro-batches (for the memory targets): by device speed.
  const std::vector<double>& speed = facts.speed;
  const double speed_sum = facts.speed_sum;
  // Replicas of one make (and so of one first guess) get one partition: the first one's,
  // copied (the partition cache's key is a function of the two and of the candidate).
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  std::vector<size_t> first_of_make(makes.size(), kNone);
  for (int r = 0; r < replicas; ++r) {
    const auto& groups = layout.replicas[r];
    const int p = static_cast<int>(groups.size());
    const int stages = p * schedule.chunks;
    if (stages > layers) {
      return invalid_argument(fmt::format("candidate: {} stages for {} layers", stages, layers));
    }
    const size_t index = filled;
    PipelineSpec& spec = next_replica();
    if (!groups_current) spec.groups = groups;
    size_t& first = first_of_make[static_cast<size_t>(make[r])];
    if (first != kNone) {
      const PipelineSpec& twin = c.replicas[first];
      spec.bounds = twin.bounds;
      spec.recompute = twin.recompute;
      spec.micro_batches = twin.micro_batches;
      continue;
    }
    first = index;
    // (A context group's members each run all of the group's micro-batches.)
    const int64_t guess =
        c.context_parallel > 1
            ? std::max<int64_t>(1, total / context_groups)
            : std::max<int64_t>(1, options.proportional_micro_batches
                                       ? std::llround(total * speed[r] / speed_sum)
                                       : total / replicas);
    if (options.split) {
      if (stages > max_stages(*options.split, ctx.model())) {
        return invalid_argument(
            fmt::format("candidate: {} stages for the {} layers the {} partition splits", stages,
                        max_stages(*options.split, ctx.model()), layer_split_name(*options.split)));
      }
      spec.bounds = split_bounds(*options.split, ctx.model(), stages);
      spec.recompute.assign(stages, options.uniform_recompute);
    } else {
      const std::vector<int> stage_group = shape_stage_group(schedule, p);
      PartitionRequest req;
      req.num_layers = layers;
      for (int s = 0; s < stages; ++s) {
        const auto& g = groups[stage_group[s]];
        req.stage_groups.push_back(DeviceGroup{g});
        req.memory_budget.push_back(ctx.capacity(g[0]) / static_cast<double>(schedule.chunks));
      }
      req.in_flight = in_flight_targets(schedule, p, guess);
      req.memory.data_parallel = replicas;
      req.memory.zero_stage = zero;
      req.memory.expert_parallel = e;
      // (Context parallelism is in the cost model's workload: a member's share of each sequence.)
      req.fused_backward = runs_fused_backward(schedule);
      if (schedule.chunks > 1) req.stage_owner = stage_group;
      if (c.vocab_parallel) {
        // Each group's shards (of the head, and of the embedding where it is split), shared
        // among its stages as the memory budget is; the stages price their other layers only.
        req.spread_head = true;
        req.spread_embedding = c.vocab_embedding;
        std::vector<int> split{layers - 1};
        if (req.spread_embedding) split.push_back(0);
        req.shard_time.assign(stages, Seconds(0));
        req.shard_memory.assign(stages, Bytes(0));
        for (int layer : split) {
          const std::vector<double> shares =
              vocab_shard_shares(ctx, cost, c, groups, layer, granule);
          for (int s = 0; s < stages; ++s) {
            const int g = stage_group[s];
            const LayerRange shard{layer, layer + 1, shares[g]};
            const ComputeTimes t =
                cost.compute(shard, DeviceGroup{groups[g]}, RecomputePolicy::kNone);
            // A shard's activations live from its F to its W, which follows as soon as its
            // input's gradient is in: one micro-batch in flight (the adaptive scheduler holds
            // the real count to the budgets).
            MemoryOptions m = req.memory;
            m.in_flight_micro_batches = 1;
            const double per_stage = 1.0 / static_cast<double>(schedule.chunks);
            req.shard_time[s] += (t.forward + t.backward()) * per_stage;
            req.shard_memory[s] +=
                cost.stage_memory(shard, DeviceGroup{groups[g]}, m).total() * per_stage;
          }
        }
      }
      // The search's cache serves every candidate of the same make and shape.
      PartitionCache* const cache = options.cache;
      std::string key;
      if (cache != nullptr) {
        key = std::to_string(b) + "/" + std::to_string(static_cast<int>(schedule.shape)) + "/" +
              std::to_string(schedule.chunks) + "/" + std::to_string(replicas) + "/" +
              makes[make[r]] + "/";
        for (int64_t x : req.in_flight) key += std::to_string(x) + ",";
        key += adapts_to_memory(schedule) ? "a" : "f";
        if (zero > 0) key += "z" + std::to_string(zero);
        if (e > 1) key += "e" + std::to_string(e);
        if (c.context_parallel > 1) key += "c" + std::to_string(c.context_parallel);
        if (req.fused_backward) key += "u";
        if (c.sequence_parallel) key += "s";
        if (c.vocab_parallel) key += "v";
        if (c.vocab_embedding) key += "E";
      }
      Result<Partition> part = infeasible("");
      if (cache == nullptr || !cache->find(key, &part)) {
        part = balanced_partition(req, cost);
        // Schedules that adapt to memory can run with fewer micro-batches in flight.
        if (!part.is_ok() && part.status().code() == StatusCode::kInfeasible &&
            adapts_to_memory(schedule)) {
          req.in_flight.assign(stages, 1);
          part = balanced_partition(req, cost);
          // A group's share per stage can be less than one layer needs (a large MoE layer on a
          // zigzag of three): then let each stage take up to the group's whole capacity, and
          // check the group's stages together.
          if (!part.is_ok() && part.status().code() == StatusCode::kInfeasible &&
              schedule.chunks > 1 && some_layer_exceeds_a_share(req, cost)) {
            for (int s = 0; s < stages; ++s) {
              req.memory_budget[s] = ctx.capacity(groups[stage_group[s]][0]);
            }
            part = balanced_partition(req, cost);
            if (part.is_ok()) part = fits_groups(std::move(part.value()), req, cost, ctx);
          }
        }
        if (!part.is_ok() && part.status().code() == StatusCode::kInfeasible) {
          ctx.note_memory_refusal();
        }
        if (cache != nullptr) cache->put(key, part);
      }
      if (!part.is_ok()) return part.status();
      spec.bounds = part->bounds;
      spec.recompute = part->recompute;
    }
    spec.micro_batches = guess;
  }
  c.replicas.resize(filled);

  // Micro-batch counts: equal for replicas of the same make, else by estimated speed.
  bool identical = true;
  for (int r = 1; r < replicas && identical; ++r) identical = make[r] == make[0];
  if (c.context_parallel > 1) {
    for (int r = 0; r < replicas; ++r) {
      const int64_t g = r / c.context_parallel;
      c.replicas[r].micro_batches = total / context_groups + (g < total % context_groups ? 1 : 0);
    }
  } else if (identical || !options.proportional_micro_batches || zero >= 2 || e > 1) {
    for (int r = 0; r < replicas; ++r) {
      c.replicas[r].micro_batches = total / replicas + (r < total % replicas ? 1 : 0);
    }
  } else {
    std::vector<double> slope, offset;
    PassOverheadCache shared;
    for (int r = 0; r < replicas; ++r) {
      const double one = replica_estimate(ctx, c, r, 1, &shared);
      const double two = replica_estimate(ctx, c, r, 2, &shared);
      slope.push_back(two - one);
      offset.push_back(one - (two - one));
    }
    const std::vector<int64_t> m = split_micro_batches(slope, offset, total);
    for (int r = 0; r < replicas; ++r) c.replicas[r].micro_batches = m[r];
  }
  return Status::ok();
}

}  // namespace

std::string describe_layout(const Context& ctx, const std::vector<PipelineSpec>& replicas) {
  // Replicas of the same make are counted together.
  std::vector<std::pair<std::string, int>> kinds;
  for (const PipelineSpec& rep : replicas) {
    std::string text;
    size_t i = 0;
    while (i < rep.groups.size()) {
      size_t j = i;
      const int type = ctx.type_of(rep.groups[i][0]);
      const size_t tp = rep.groups[i].size();
      while (j < rep.groups.size() && ctx.type_of(rep.groups[j][0]) == type &&
             rep.groups[j].size() == tp) {
        ++j;
      }
      text += (text.empty() ? "" : " | ") + ctx.types()[type].name + " x" + std::to_string(j - i) +
              " TP" + std::to_string(tp);
      i = j;
    }
    if (!kinds.empty() && kinds.back().first == text) {
      ++kinds.back().second;
    } else {
      kinds.emplace_back(text, 1);
    }
  }
  std::string out;
  for (const auto& [text, count] : kinds) {
    out += (out.empty() ? "" : " + ") + std::to_string(count) + " x [" + text + "]";
  }
  return out;
}

}  // namespace motley::tune_internal
