#include "motley/tune/megatron.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "context.h"
#include "motley/plan/dependencies.h"
#include "motley/plan/spec_hash.h"
#include "motley/schedule/assemble.h"
#include "motley/schedule/schedule.h"
#include "motley/sim/simulator.h"
#include "motley/tune/preemption.h"

namespace motley {
namespace {

// The layers of a stage that Megatron-LM's recompute counts: its transformer layers, not the
// embedding or the head.
std::vector<int> recomputable_layers(const ModelSpec& model, const Stage& s) {
  std::vector<int> out;
  for (int l = s.layer_begin; l < s.layer_end; ++l) {
    const LayerKind kind = model.layers[l].kind;
    if (kind != LayerKind::kEmbedding && kind != LayerKind::kHead) out.push_back(l);
  }
  return out;
}

// Per-layer recompute as Megatron-LM's block method (--recompute-method block): the first N
// transformer layers of every stage, the others keeping their activations. N, the longest
// list (0: no stage lists layers); `exact` false when some stage recomputes other layers than
// its first min(N, k) or also a whole policy, which the block method cannot say.
struct BlockRecompute {
  int layers = 0;
  bool exact = true;
};
BlockRecompute block_recompute(const Plan& plan, const ModelSpec& model) {
  BlockRecompute b;
  for (const Stage& s : plan.stages) {
    b.layers = std::max(b.layers, static_cast<int>(s.recompute_layers.size()));
  }
  if (b.layers == 0) return b;
  for (const Stage& s : plan.stages) {
    const std::vector<int> own = recomputable_layers(model, s);
    const std::vector<int> first(own.begin(), own.begin() + std::min<size_t>(own.size(), b.layers));
    if (s.recompute != RecomputePolicy::kNone || s.recompute_layers != first) b.exact = false;
  }
  return b;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// One stage's part of the layout, or nullopt with `why` set when a stage boundary splits a
// decoder layer, or `no_letter` given the first layer (in model order) of each kind without a
// letter, so that a model of many such layers is named once per kind.
std::optional<std::string> stage_layout(const ModelSpec& model, const Stage& stage,
                                        std::set<std::string>* why,
                                        std::map<LayerKind, int>* no_letter) {
  std::string out;
  int run = 0;  // decoder layers waiting to be written as "t" or "t*N"
  auto flush = [&] {
    if (run == 1) out += "t";
    if (run > 1) out += fmt::format("t*{}", run);
    run = 0;
  };
  bool ok = true;
  for (int l = stage.layer_begin; l < stage.layer_end; ++l) {
    const Layer& layer = model.layers[l];
    switch (layer.kind) {
      case LayerKind::kDecoderBlock:
        ++run;
        break;
      case LayerKind::kAttention: {
        // Megatron's layer is attention and its MLP together: both must be in this stage.
        const bool paired =
            l + 1 < stage.layer_end && (model.layers[l + 1].kind == LayerKind::kFeedForward ||
                                        model.layers[l + 1].kind == LayerKind::kMoe);
        if (paired) {
          ++run;
          ++l;
        } else {
          why->insert(fmt::format(
              "a stage boundary inside a decoder layer (after '{}'): Megatron's layer is the "
              "attention and its MLP together",
              layer.name));
          ok = false;
        }
        break;
      }
      case LayerKind::kEmbedding:
        flush();
        out += "E";
        break;
      case LayerKind::kHead:
        flush();
        out += "L";
        break;
      default: {
        auto [at, inserted] = no_letter->emplace(layer.kind, l);
        if (!inserted) at->second = std::min(at->second, l);
        ok = false;
      }
    }
  }
  flush();
  if (!ok) return std::nullopt;
  return out;
}

// A hybrid model's layers as Megatron's --hybrid-override-pattern spells them (M a Mamba layer,
// * attention, - an MLP, E a mixture of experts; a decoder block is its attention and its MLP or
// MoE), without the embedding and the head; nullopt when the model has no Mamba layer or a layer
// with no symbol (`why` then says which).
bool is_hybrid(const ModelSpec& model) {
  return std::any_of(model.layers.begin(), model.layers.end(),
                     [](const Layer& l) { return l.kind == LayerKind::kMamba; });
}

std::optional<std::string> hybrid_pattern(const ModelSpec& model, std::vector<std::string>* why) {
  if (!is_hybrid(model)) return std::nullopt;
  std::string pattern;
  for (const Layer& l : model.layers) {
    switch (l.kind) {
      case LayerKind::kEmbedding:
      case LayerKind::kHead:
        break;
      case LayerKind::kMamba:
        pattern += 'M';
        break;
      case LayerKind::kAttention:
        pattern += '*';
        break;
      case LayerKind::kFeedForward:
        pattern += '-';
        break;
      case LayerKind::kMoe:
        pattern += 'E';
        break;
      case LayerKind::kDecoderBlock:
        pattern += l.moe ? "*E" : "*-";
        break;
      default:
        why->push_back(fmt::format(
            "layers of kind '{}' (e.g. '{}') in a hybrid model: --hybrid-override-pattern has "
            "symbols for Mamba (M), attention (*), MLP (-) and MoE (E) layers only",
            layer_kind_name(l.kind), l.name));
        return std::nullopt;
    }
  }
  return pattern;
}

// The pattern symbols each of the plan's stages holds (a decoder block stands for two), and
// whether every stage holds the same number, as MambaModel splits the pattern.
struct PatternSplit {
  std::vector<int> per_stage;
  bool even = true;
};
PatternSplit pattern_split(const Plan& plan, const ModelSpec& model, int pattern_length) {
  PatternSplit out;
  const int stages = static_cast<int>(plan.stages.size());
  for (const Stage& s : plan.stages) {
    int n = 0;
    for (int l = s.layer_begin; l < s.layer_end; ++l) {
      const LayerKind kind = model.layers[l].kind;
      if (kind != LayerKind::kEmbedding && kind != LayerKind::kHead) {
        n += kind == LayerKind::kDecoderBlock ? 2 : 1;
      }
    }
    out.per_stage.push_back(n);
    out.even = out.even && n * stages == pattern_length;
  }
  return out;
}

// The orders Megatron would run on replica `r`'s structure: 1F1B on a linear map, interleaved
// 1F1B on stage s -> group s mod p; nullopt (with `why`) for another map or a count it refuses.
std::optional<GroupOrders> megatron_orders(const Plan& plan, const Replica& r,
                                           std::vector<std::string>* why) {
  const int p = static_cast<int>(r.groups.size());
  const int stages = static_cast<int>(plan.stages.size());
  const bool linear = stages == p && std::all_of(r.stage_group.begin(), r.stage_group.end(),
                                                 [s = 0](int g) mutable { return g == s++; });
  bool interleaved = stages > p && stages % p == 0;
  for (int s = 0; interleaved && s < stages; ++s) interleaved = r.stage_group[s] == s % p;
  if (!linear && !interleaved) {
    why->push_back(
        "the stage map (a V shape or another placement of stages on ranks): Megatron places "
        "stage s on pipeline rank s mod pp");
    return std::nullopt;
  }
  ScheduleRequest request;
  request.num_groups = p;
  request.num_stages = stages;
  request.stage_group = r.stage_group;
  request.micro_batches = r.micro_batches;
  Result<GroupOrders> orders =
      generate_schedule(linear ? ScheduleKind::k1f1b : ScheduleKind::kInterleaved, request);
  if (!orders.is_ok()) {
    why->push_back(fmt::format("the interleaved schedule: {}", orders.status().message()));
    return std::nullopt;
  }
  return std::move(orders).value();
}

}  // namespace

MegatronArguments megatron_arguments(const Plan& plan, const ModelSpec& model,
                                     const ClusterSpec& cluster) {
  if (has_vocab_shards(plan.stages)) {
    MegatronArguments whole = megatron_arguments(without_vocab_shards(plan), model, cluster);
    whole.not_expressed.insert(
        whole.not_expressed.begin(),
        "vocabulary parallelism (the head, or the embedding, split by rows over the pipeline's "
        "devices): Megatron-LM keeps the output layer on the last pipeline stage and the "
        "embedding on the first; the arguments place them there");
    return whole;
  }
  MegatronArguments out;
  std::vector<std::string>& why = out.not_expressed;
  const Replica& first = plan.replicas.front();
  out.pipeline_parallel = static_cast<int>(first.groups.size());
  out.context_parallel = std::max(plan.context_parallel, 1);
  out.data_parallel = static_cast<int>(plan.replicas.size()) / out.context_parallel;
  out.tensor_parallel = static_cast<int>(first.groups.front().devices.size());
  out.virtual_stages = static_cast<int>(plan.stages.size()) / out.pipeline_parallel;

  // One shape for every rank: the same TP everywhere, the same pipeline in every replica.
  std::set<size_t> tps;
  std::set<int64_t> micro_batches;
  bool same_shape = true;
  for (const Replica& r : plan.replicas) {
    micro_batches.insert(r.micro_batches);
    same_shape =
        same_shape && r.groups.size() == first.groups.size() && r.stage_group == first.stage_group;
    for (const DeviceGroupSchedule& g : r.groups) tps.insert(g.devices.size());
  }
  if (tps.size() > 1) {
    std::vector<std::string> list;
    for (size_t t : tps) list.push_back(std::to_string(t));
    why.push_back(fmt::format(
        "tensor-parallel degrees that differ between stages or replicas ({}): Megatron has one "
        "--tensor-model-parallel-size",
        join(list, ", ")));
  }
  if (!same_shape) {
    why.push_back(
        "replicas of different pipelines (stage maps or depths): Megatron's data-parallel "
        "replicas are identical");
  }
  if (micro_batches.size() > 1) {
    std::vector<std::string> list;
    for (int64_t m : micro_batches) list.push_back(std::to_string(m));
    why.push_back(fmt::format(
        "uneven micro-batch counts across replicas ({}): Megatron gives every data-parallel rank "
        "global batch / (DP x micro-batch size)",
        join(list, ", ")));
  }
  // The order: what Megatron would run on each replica's structure, recompute aside.
  std::vector<std::string> order_why;
  std::optional<GroupOrders> expected = megatron_orders(plan, first, &order_why);
  bool same_order = expected.has_value();
  for (const Replica& r : plan.replicas) {
    if (!same_order) break;
    if (r.micro_batches != first.micro_batches) expected = megatron_orders(plan, r, &order_why);
    if (!expected) break;
    for (size_t g = 0; g < r.groups.size() && same_order; ++g) {
      std::vector<Action> actions;
      for (const Action& a : r.groups[g].actions) {
        if (a.kind != ActionKind::kRecompute) actions.push_back(a);
      }
      same_order = actions == (*expected)[g];
    }
  }
  why.insert(why.end(), order_why.begin(), order_why.end());
  if (expected && !same_order) {
    why.push_back(fmt::format(
        "the order of actions (schedule '{}'): Megatron runs 1F1B, or interleaved 1F1B with "
        "virtual stages, and nothing else",
        plan.schedule));
  }
  // Device types.
  std::set<std::string> types;
  const std::vector<Device> devices = cluster_devices(cluster);
  for (const Replica& r : plan.replicas) {
    for (const DeviceGroupSchedule& g : r.groups) {
      for (int d : g.devices) types.insert(devices[d].type);
    }
  }
  if (types.size() > 1) {
    const bool hybrid = is_hybrid(model);
    why.push_back(fmt::format(
        "mixed device types ({}): Megatron assumes identical devices and balances nothing by "
        "speed{}",
        join(std::vector<std::string>(types.begin(), types.end()), ", "),
        hybrid ? "" : "; the layout above still places the layers as the plan does"));
  }
  // Per-layer recompute: Megatron's block method, the first N layers of every stage.
  const BlockRecompute block = block_recompute(plan, model);
  if (!block.exact) {
    why.push_back(fmt::format(
        "per-layer recompute of other layers than the first {} of every stage: Megatron's block "
        "method recomputes the first N transformer layers of each stage in full and nothing "
        "else; the arguments use N = {}",
        block.layers, block.layers));
  }
  // Recompute of single micro-batches (R on a stage that keeps its activations).
  int64_t single = 0;
  for (const Replica& r : plan.replicas) single += micro_batches_recomputed_alone(plan.stages, r);
  if (single > 0) {
    why.push_back(fmt::format(
        "{} micro-batch{} recomputed alone on stages that keep their activations: Megatron "
        "recomputes every micro-batch of a stage or none; the arguments recompute none of them",
        single, single > 1 ? "es" : ""));
  }
  // Recompute: one policy for every stage.
  std::map<RecomputePolicy, int> policies;
  for (const Stage& s : plan.stages) ++policies[s.recompute];
  const RecomputePolicy recompute = policies.rbegin()->first;  // the most memory-saving used
  if (policies.size() > 1) {
    std::vector<std::string> list;
    for (const auto& [p, n] : policies) {
      list.push_back(fmt::format("{} on {}", recompute_policy_name(p), n));
    }
    why.push_back(fmt::format(
        "recompute that differs between stages ({} stages): Megatron's recompute is one policy "
        "for every stage; the arguments use '{}'",
        join(list, ", "), recompute_policy_name(recompute)));
  }

  // ZeRO-2 and -3 are Megatron-FSDP's sharding strategies, which Megatron-Core runs with TP but
  // without pipeline parallelism.
  const bool fsdp = plan.zero_stage >= 2 && plan.replicas.size() > 1;
  if (fsdp && plan.replicas[0].groups.size() > 1) {
    why.push_back(fmt::format(
        "ZeRO-{} with pipeline parallelism: Megatron-FSDP (--data-parallel-sharding-strategy) "
        "does not run with a pipeline; the arguments use the distributed optimizer (ZeRO-1)",
        plan.zero_stage));
  }

  // A hybrid (Mamba) model: Megatron's MambaModel reads the layers from a pattern and gives
  // every pipeline stage the same number of them.
  std::vector<std::string> hybrid_why;
  const std::optional<std::string> pattern = hybrid_pattern(model, &hybrid_why);
  why.insert(why.end(), hybrid_why.begin(), hybrid_why.end());
  int decoder_layers = 0;
  if (pattern) {
    out.hybrid_pattern = *pattern;
    decoder_layers = static_cast<int>(pattern->size());
    const PatternSplit split = pattern_split(plan, model, decoder_layers);
    if (!split.even) {
      why.push_back(fmt::format(
          "the layer split ({} pattern layers per stage): Megatron's hybrid model gives every "
          "pipeline stage the same number of its {} pattern layers",
          fmt::join(split.per_stage, ", "), decoder_layers));
    }
  } else if (hybrid_why.empty()) {
    // The layout, stage by stage in the plan's (global) stage order.
    std::set<std::string> layout_why;
    std::map<LayerKind, int> no_letter;  // kind -> its first layer
    std::vector<std::string> parts;
    bool layout_ok = true;
    for (const Stage& s : plan.stages) {
      std::optional<std::string> part = stage_layout(model, s, &layout_why, &no_letter);
      layout_ok = layout_ok && part.has_value();
      if (part) parts.push_back(*part);
    }
    for (const auto& [kind, first] : no_letter) {
      layout_why.insert(fmt::format(
          "layers of kind '{}' (e.g. '{}'): --pipeline-model-parallel-layout has letters for "
          "the embedding (E), decoder layers (t), MTP layers (m) and the loss (L) only",
          layer_kind_name(kind), model.layers[first].name));
    }
    for (const Layer& l : model.layers) {
      decoder_layers += l.kind == LayerKind::kDecoderBlock || l.kind == LayerKind::kAttention;
    }
    why.insert(why.end(), layout_why.begin(), layout_why.end());
    if (layout_ok) out.layout = join(parts, "|");
  }

  std::vector<std::string>& a = out.arguments;
  auto add = [&a](const std::string& flag, const std::string& value = "") {
    a.push_back(flag);
    if (!value.empty()) a.push_back(value);
  };
  add("--tensor-model-parallel-size", std::to_string(out.tensor_parallel));
  add("--pipeline-model-parallel-size", std::to_string(out.pipeline_parallel));
  if (!out.layout.empty()) add("--pipeline-model-parallel-layout", out.layout);
  if (!out.hybrid_pattern.empty()) add("--hybrid-override-pattern", out.hybrid_pattern);
  add("--num-layers", std::to_string(decoder_layers));
  add("--seq-length", std::to_string(plan.seq_len));
  add("--micro-batch-size", std::to_string(plan.micro_batch_size));
  add("--global-batch-size", std::to_string(plan.global_batch));
  if (model.dtype == DType::kBFloat16) add("--bf16");
  if (model.dtype == DType::kFloat16) add("--fp16");
  if (recompute == RecomputePolicy::kSelective) add("--recompute-granularity", "selective");
  if (recompute == RecomputePolicy::kFull) {
    add("--recompute-granularity", "full");
    add("--recompute-method", "uniform");
    add("--recompute-num-layers", "1");
  } else if (recompute == RecomputePolicy::kNone && block.layers > 0) {
    add("--recompute-granularity", "full");
    add("--recompute-method", "block");
    add("--recompute-num-layers", std::to_string(block.layers));
  }
  // (The distributed optimizer shards over the data- and context-parallel ranks together.)
  const int replicas = static_cast<int>(plan.replicas.size());
  if (plan.zero_stage >= 1 && replicas > 1) add("--use-distributed-optimizer");
  if (plan.zero_stage >= 2 && replicas > 1 && out.pipeline_parallel == 1) {
    add("--use-megatron-fsdp");
    add("--data-parallel-sharding-strategy",
        plan.zero_stage == 2 ? "optim_grads" : "optim_grads_params");
  }
  if (plan.sequence_parallel && out.tensor_parallel > 1) add("--sequence-parallel");
  if (plan.expert_parallel > 1) {
    add("--expert-model-parallel-size", std::to_string(plan.expert_parallel));
  }
  if (out.context_parallel > 1) {
    add("--context-parallel-size", std::to_string(out.context_parallel));
    add("--cp-comm-type", "p2p");  // ring attention, as the simulator prices it
  }

  // Global rank -> device, where every replica and group has the same shape.
  if (tps.size() == 1 && same_shape) {
    for (int pp = 0; pp < out.pipeline_parallel; ++pp) {
      for (int r = 0; r < replicas; ++r) {
        for (int tp = 0; tp < out.tensor_parallel; ++tp) {
          out.rank_devices.push_back(plan.replicas[r].groups[pp].devices[tp]);
        }
      }
    }
  }
  return out;
}

namespace {

// The plan's own structure as Megatron runs it, which is what its exported arguments run: the
// same devices, tensor-parallel groups, pipeline ranks (each stage of the first p on the group
// that ran it), replicas, layer split, micro-batch size, ZeRO-1 and sequence parallelism, with
// what Megatron imposes instead of the rest: stage s on pipeline rank s mod p, the 1F1B (or
// interleaved 1F1B) order, the same micro-batch count in every replica, one recompute policy
// (the most memory-saving the plan uses). Errors (invalid_argument, in words) when the structure
// has no Megatron form; infeasible when that form does not fit memory.
Result<Plan> megatron_form(const Plan& sharded, const ModelSpec& model, const ClusterSpec& cluster,
                           const CostModel& cost) {
  // Megatron-LM keeps the head whole on the last stage.
  const Plan plan = without_vocab_shards(sharded);
  const Replica& first = plan.replicas.front();
  const int p = static_cast<int>(first.groups.size());
  const size_t t = first.groups.front().devices.size();
  const int stages = static_cast<int>(plan.stages.size());
  const int64_t d = static_cast<int64_t>(plan.replicas.size());
  for (const Replica& r : plan.replicas) {
    if (static_cast<int>(r.groups.size()) != p) {
      return invalid_argument("its replicas have pipelines of different depths");
    }
    for (const DeviceGroupSchedule& g : r.groups) {
      if (g.devices.size() != t) return invalid_argument("its tensor-parallel degrees differ");
    }
  }
  if (stages % p != 0) {
    return invalid_argument(
        fmt::format("its {} stages do not fill {} pipeline ranks evenly", stages, p));
  }
  // A hybrid model's stages hold the same number of pattern layers in Megatron's MambaModel.
  std::vector<std::string> unused;
  const std::optional<std::string> pattern = hybrid_pattern(model, &unused);
  if (pattern && !pattern_split(plan, model, static_cast<int>(pattern->size())).even) {
    return invalid_argument(fmt::format(
        "its stages hold other numbers of the hybrid model's {} pattern layers than Megatron's "
        "even split",
        pattern->size()));
  }
  // Pipeline rank k is the group of stage k, so the first p stages must name p groups.
  for (const Replica& r : plan.replicas) {
    std::vector<int> first_groups(r.stage_group.begin(), r.stage_group.begin() + p);
    std::sort(first_groups.begin(), first_groups.end());
    if (std::adjacent_find(first_groups.begin(), first_groups.end()) != first_groups.end()) {
      return invalid_argument("its first stages do not run on one group each");
    }
  }
  // (A context group's members run the same micro-batches: Megatron's DP is d / CP.)
  const int64_t micro_batches = plan.global_batch / plan.micro_batch_size;
  const int64_t data_ranks = d / std::max(plan.context_parallel, 1);
  if (micro_batches % data_ranks != 0) {
    return invalid_argument(
        fmt::format("its {} micro-batches do not split evenly over {} data-parallel replicas",
                    micro_batches, data_ranks));
  }
  RecomputePolicy policy = RecomputePolicy::kNone;
  for (const Stage& s : plan.stages) policy = std::max(policy, s.recompute);
  const int v = stages / p;
  Candidate c;
  // Without a whole policy, per-layer recompute as the block method runs it.
  const BlockRecompute block = block_recompute(plan, model);
  if (policy == RecomputePolicy::kNone && block.layers > 0) {
    for (const Stage& s : plan.stages) {
      const std::vector<int> own = recomputable_layers(model, s);
      c.recompute_layers.insert(c.recompute_layers.end(), own.begin(),
                                own.begin() + std::min<size_t>(own.size(), block.layers));
    }
  }
  c.micro_batch_size = plan.micro_batch_size;
  c.schedule = ScheduleSpec::named(v == 1 ? ScheduleKind::k1f1b : ScheduleKind::kInterleaved, v);
  // Megatron-FSDP's ZeRO-2 and -3 run without a pipeline only.
  c.zero_stage = d > 1 ? (p > 1 ? std::min(plan.zero_stage, 1) : plan.zero_stage) : 0;
  c.expert_parallel = plan.expert_parallel;    // --expert-model-parallel-size
  c.context_parallel = plan.context_parallel;  // --context-parallel-size
  for (const Replica& r : plan.replicas) {
    PipelineSpec spec;
    for (int rank = 0; rank < p; ++rank)
      spec.groups.push_back(r.groups[r.stage_group[rank]].devices);
    spec.bounds.push_back(0);
    for (const Stage& s : plan.stages) spec.bounds.push_back(s.layer_end);
    spec.recompute.assign(stages, policy);
    spec.micro_batches = micro_batches / data_ranks;
    c.replicas.push_back(std::move(spec));
  }
  AssembleOptions options;
  options.model = model_ref(model);
  options.cluster = cluster_ref(cluster);
  options.num_layers = static_cast<int>(model.layers.size());
  options.seq_len = plan.seq_len;
  options.zero_stage = c.zero_stage;
  options.sequence_parallel = plan.sequence_parallel;
  options.global_batch = plan.global_batch;
  return assemble_plan(options, c, cost);
}

}  // namespace

Result<StrategyOutcome> closest_megatron_plan(const Plan& plan, const ModelSpec& model,
                                              const ClusterSpec& cluster, TuneOptions options) {
  const auto start = std::chrono::steady_clock::now();
  MOTLEY_ASSIGN_OR_RETURN(
      std::unique_ptr<CostModel> cost,
      tune_internal::make_cost_model(options, model, cluster, plan.seq_len, plan.micro_batch_size,
                                     plan.sequence_parallel, plan.context_parallel));
  Result<Plan> kept = megatron_form(plan, model, cluster, *cost);
  std::string why_not;
  if (kept.is_ok()) {
    SimOptions sim_options;
    if (!options.optimizer_step) sim_options.optimizer_step = OptimizerStepModel::kNone;
    Result<SimResult> sim = simulate(sim_options, kept.value(), *cost);
    if (sim.is_ok()) {
      StrategyOutcome o;
      o.strategy = "megatron-layout";
      o.feasible = true;
      const Replica& rep = kept->replicas.front();
      const RecomputePolicy policy = kept->stages.front().recompute;
      const BlockRecompute block = block_recompute(kept.value(), model);
      const std::string recompute =
          block.layers > 0
              ? fmt::format("the first {} layer(s) of every stage recomputed", block.layers)
              : fmt::format("recompute {} on every stage", recompute_policy_name(policy));
      const int cp = std::max(kept->context_parallel, 1);
      o.detail = fmt::format(
          "the plan's TP {} x PP {}{} x DP {} on its devices and its layer split, {} in every "
          "replica with Megatron's stage map and order, {}",
          rep.groups.front().devices.size(), rep.groups.size(),
          cp > 1 ? fmt::format(" x CP {}", cp) : std::string(), kept->replicas.size() / cp,
          kept->schedule, recompute);
      o.iteration_time = sim->iteration_time;
      o.tokens_per_s = sim->throughput_tokens_per_s;
      kept->predicted = PredictedMetrics{sim->iteration_time, sim->throughput_tokens_per_s,
                                         sim->bubble_fraction, "analytic"};
      kept->predicted->optimizer_step = options.optimizer_step;
      const PlanPricing pricing = price_plan(kept.value(), *cost, cluster, sim->iteration_time);
      o.preemption = pricing.preemption;
      o.dollars_per_million_tokens = pricing.dollars_per_million_tokens;
      o.on_demand_dollars_per_million_tokens = pricing.on_demand_dollars_per_million_tokens;
      o.plan = std::move(kept).value();
      o.search_time =
          Seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      o.candidates_evaluated = 1;
      return o;
    }
    why_not = sim.status().message();
  } else {
    why_not = kept.status().message();
  }
  options.global_batch = plan.global_batch;
  options.seq_len = plan.seq_len;
  options.micro_batch_size = plan.micro_batch_size;
  if (plan.zero_stage >= 1) options.zero_stage = 1;
  if (plan.expert_parallel > 1) options.expert_parallel = plan.expert_parallel;
  options.context_parallel = plan.context_parallel;
  options.report_baselines = false;
  options.warm_starts.clear();
  std::optional<StrategyOutcome> best;
  Status last;
  std::string failures;
  for (const char* strategy : {"megatron-1f1b", "megatron-interleaved"}) {
    options.strategy = strategy;
    Result<TuneResult> r = tune(options, model, cluster);
    if (!r.is_ok()) {
      if (last.is_ok() || r.status().code() != StatusCode::kInfeasible) last = r.status();
      failures += (failures.empty() ? "" : "; ") + r.status().message();
      continue;
    }
    if (!best || r->simulation.iteration_time < best->iteration_time) {
      StrategyOutcome o;
      o.strategy = strategy;
      o.feasible = true;
      const Replica& rep = r->plan.replicas.front();
      o.detail = fmt::format(
          "TP {} x PP {} x DP {}, {}, Megatron-LM's layer split (the plan's own layout has no "
          "Megatron form: {})",
          rep.groups.front().devices.size(), rep.groups.size(), r->plan.replicas.size(),
          r->plan.schedule, why_not);
      o.iteration_time = r->simulation.iteration_time;
      o.tokens_per_s = r->simulation.throughput_tokens_per_s;
      o.dollars_per_million_tokens = r->dollars_per_million_tokens;
      o.plan = std::move(r->plan);
      best = std::move(o);
    }
  }
  if (!best) {
    return last.code() == StatusCode::kInfeasible ? infeasible(failures) : last;
  }
  return *best;
}

}  // namespace motley
