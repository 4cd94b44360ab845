// motley against OctoPipe on OctoPipe's own profiled case (Nemotron-Nano-v2-9B on four GPUs, TP 1,
// PP 4, DP 1, eight micro-batches of one; iteration times without the optimizer step, as
// OctoPipe records them):
//   1. OctoPipe's recorded plan — its 24 stages and their placement — ordered by motley's
//      adaptive scheduler under the alternating rule (OctoPipe's own), with no memory limit
//      (OctoPipe's runtime sets none by default) and then within each device's memory;
//   2. motley's plan under OctoPipe's constraints, on the cluster given and on the same
//      cluster with each device's memory unbounded (141 GiB H200s, which compute at the H100's
//      rate), to show where memory binds.
//
//   octopipe_case PROFILE CLUSTER
//
// PROFILE and CLUSTER are ../shared/data/octopipe/'s files (the profile: embedding, 56 decoder
// layers, head).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "motley/cluster/cluster.h"
#include "motley/cost/analytic_cost_model.h"
#include "motley/cost/software_stack.h"
#include "motley/model/model_json.h"
#include "motley/plan/spec_hash.h"
#include "motley/schedule/adaptive_schedule.h"
#include "motley/sim/simulator.h"
#include "motley/tune/tune.h"

namespace motley {
namespace {

// OctoPipe's recorded plan (guojihu-hana/SimPipe images/octopipe.md, commit 96a7e3f): decoder
// layers per stage (the embedding joins stage 0, the head the last stage) and each device's
// stages.
const std::vector<int> kOctoPipeLayers = {2, 2, 2, 2, 2, 2, 2, 3, 2, 3, 2, 3,
                                          2, 3, 3, 2, 3, 3, 2, 2, 2, 3, 3, 1};
const std::vector<std::vector<int>> kOctoPipePlacement = {
    {0, 4, 8, 12, 16, 19, 20}, {1, 5, 9, 13, 17, 21}, {2, 6, 10, 14, 18, 22}, {3, 7, 11, 15, 23}};
constexpr double kOctoPipeRecorded = 0.8987;

std::unique_ptr<AnalyticCostModel> cost_model(const ModelSpec& model, const ClusterSpec& cluster) {
  AnalyticCostOptions o;
  o.workload.seq_len = model.default_seq_len;
  o.workload.micro_batch_size = 1;
  o.workload.dtype = model.dtype;
  o.stack = software_stacks().front();
  Result<std::unique_ptr<AnalyticCostModel>> cost =
      AnalyticCostModel::create(model, cluster, o, model.name);
  if (!cost.is_ok()) {
    std::fprintf(stderr, "%s\n", cost.status().message().c_str());
    std::exit(1);
  }
  return std::move(cost.value());
}

void report(const char* what, const Plan& plan, const CostModel& cost) {
  SimOptions options;
  options.optimizer_step = OptimizerStepModel::kNone;
  Result<SimResult> r = simulate(options, plan, cost);
  if (!r.is_ok()) {
    std::printf("| %s | %s |\n", what, r.status().message().c_str());
    return;
  }
  double peak = 0, capacity = 0;
  for (const DeviceStats& d : r->devices) {
    if (d.peak_memory.value() > peak) {
      peak = d.peak_memory.value();
      capacity = d.capacity.value();
    }
  }
  std::printf("| %s | %s | %.4f s | %+.1f%% | %.1f%% | %.1f / %.0f GiB%s |\n", what,
              plan.schedule.c_str(), r->iteration_time.value(),
              100 * (r->iteration_time.value() / kOctoPipeRecorded - 1), 100 * r->bubble_fraction,
              peak / kGiB, capacity / kGiB, r->fits_memory ? "" : " (over)");
}

// How OctoPipe's plan is held to memory: not at all, by waiting, or also by recomputing single
// micro-batches (the adaptive scheduler's recompute_single).
enum class Memory { kUnbounded, kWithin, kWithinRecomputingSome };

// OctoPipe's stages and placement, ordered by the alternating rule.
Plan octopipe_plan(const ModelSpec& model, const ClusterSpec& cluster, const CostModel& cost,
                   Memory memory_mode) {
  const bool memory_limit = memory_mode != Memory::kUnbounded;
  const bool single = memory_mode == Memory::kWithinRecomputingSome;
  std::vector<int> sizes = kOctoPipeLayers;
  sizes.front() += 1;  // the embedding
  sizes.back() += 1;   // the head
  const int stages = static_cast<int>(sizes.size());
  std::vector<int> stage_group(stages);
  for (int g = 0; g < 4; ++g) {
    for (int s : kOctoPipePlacement[g]) stage_group[s] = g;
  }
  Plan plan;
  plan.model = model_ref(model);
  plan.cluster = cluster_ref(cluster);
  plan.micro_batch_size = 1;
  plan.seq_len = model.default_seq_len;
  plan.global_batch = 8;
  plan.schedule =
      single ? "adaptive(alternate, eager-w, recompute-some)" : "adaptive(alternate, eager-w)";
  AdaptiveRequest req;
  req.num_groups = 4;
  req.stage_group = stage_group;
  req.micro_batches = 8;
  req.priority = AdaptivePriority::kAlternate;
  req.weight_fill = WeightFill::kAlways;
  std::vector<double> fixed(4, 0);
  int layer = 0;
  for (int s = 0; s < stages; ++s) {
    const LayerRange range{layer, layer + sizes[s]};
    layer += sizes[s];
    plan.stages.push_back(Stage{range.begin, range.end, RecomputePolicy::kNone});
    const DeviceGroup group{{stage_group[s]}};
    req.stage_times.push_back(cost.compute(range, group, RecomputePolicy::kNone));
    MemoryOptions memory;
    memory.in_flight_micro_batches = 0;
    const StageMemory m = cost.stage_memory(range, group, memory);
    req.activation_bytes.push_back(m.activations_per_micro_batch);
    if (single) {
      MemoryOptions full = memory;
      full.recompute = RecomputePolicy::kFull;
      req.recomputed_bytes.push_back(
          cost.stage_memory(range, group, full).activations_per_micro_batch);
      req.recompute_time.push_back(cost.compute(range, group, RecomputePolicy::kFull).recompute);
    }
    fixed[stage_group[s]] += m.total().value();
    if (s + 1 < stages) req.transfer_time.push_back(Seconds(0));
  }
  for (int g = 0; g < 4; ++g) {
    req.memory_budget.push_back(
        memory_limit ? cost.topology().device_type(g).memory - Bytes(fixed[g]) : Bytes(1e18));
  }
  Result<GroupOrders> orders = adaptive_schedule(req);
  if (!orders.is_ok()) {
    std::fprintf(stderr, "%s\n", orders.status().message().c_str());
    std::exit(1);
  }
  Replica rep;
  rep.micro_batches = 8;
  rep.stage_group = stage_group;
  for (int g = 0; g < 4; ++g) rep.groups.push_back(DeviceGroupSchedule{{g}, orders.value()[g]});
  plan.replicas.push_back(rep);
  return plan;
}

Plan motley_plan(const ModelSpec& model, const ClusterSpec& cluster,
                 std::optional<bool> vocab_parallel = false) {
  TuneOptions options;
  options.vocab_parallel = vocab_parallel;
  options.global_batch = 8;
  options.micro_batch_size = 1;
  options.constraints.tensor_parallel = 1;
  options.constraints.pipeline_parallel = 4;
  options.constraints.data_parallel = 1;
  // OctoPipe's times leave the optimizer step out: the search's objective does too.
  options.optimizer_step = false;
  Result<TuneResult> r = tune(options, model, cluster);
  if (!r.is_ok()) {
    std::fprintf(stderr, "%s\n", r.status().message().c_str());
    std::exit(1);
  }
  return r->plan;
}

int run(const std::string& profile, const std::string& cluster_path) {
  Result<ModelSpec> model = load_model(profile);
  Result<ClusterSpec> cluster = load_cluster(cluster_path);
  if (!model.is_ok() || !cluster.is_ok()) {
    std::fprintf(stderr, "%s\n",
                 (model.is_ok() ? cluster.status() : model.status()).message().c_str());
    return 1;
  }
  if (model->layers.size() != 58) {
    std::fprintf(stderr, "octopipe_case: expected the 58-layer Nemotron-Nano-v2-9B profile\n");
    return 1;
  }
  // The same cluster with memory that never binds: H200s run measured H100 work at the H100's
  // rate (the catalog's matmul rates are equal) and hold 141 GiB.
  ClusterSpec roomy = cluster.value();
  roomy.name += "-h200";
  for (NodeSpec& node : roomy.nodes) {
    for (NodeDevices& d : node.devices) d.type = "H200";
  }
  const std::unique_ptr<AnalyticCostModel> cost = cost_model(*model, *cluster);
  const std::unique_ptr<AnalyticCostModel> roomy_cost = cost_model(*model, roomy);

  std::printf("OctoPipe's recorded iteration: %.4f s\n\n", kOctoPipeRecorded);
  std::printf("| plan | schedule | iteration | vs OctoPipe | bubble | peak memory |\n");
  std::printf("|---|---|---|---|---|---|\n");
  report("OctoPipe's stages and placement, no memory limit",
         octopipe_plan(*model, *cluster, *cost, Memory::kUnbounded), *cost);
  report("OctoPipe's stages and placement, within memory",
         octopipe_plan(*model, *cluster, *cost, Memory::kWithin), *cost);
  report("OctoPipe's stages and placement, within memory, single micro-batches recomputed",
         octopipe_plan(*model, *cluster, *cost, Memory::kWithinRecomputingSome), *cost);
  report("motley plan, TP 1 PP 4 DP 1, head whole", motley_plan(*model, *cluster), *cost);
  report("motley plan, TP 1 PP 4 DP 1, head whole, memory unbounded (H200)",
         motley_plan(*model, roomy), *roomy_cost);
  // The profile states no vocabulary: motley reads it from the head's and the embedding's
  // bytes (model.h, head_vocab: 131,072 x 4,480 bf16 weights, the head's plus its final norm's
  // 4,480), so that vocabulary parallelism may split them; by default the search decides.
  report("motley plan, TP 1 PP 4 DP 1, vocabulary parallelism searched (the default)",
         motley_plan(*model, *cluster, std::nullopt), *cost);
  report("motley plan, TP 1 PP 4 DP 1, vocabulary parallelism forced",
         motley_plan(*model, *cluster, true), *cost);
  std::printf("\nVocabulary read from the profile's bytes: head %lld rows, embedding %lld rows\n",
              static_cast<long long>(head_vocab(*model)),
              static_cast<long long>(embedding_vocab(*model)));
  return 0;
}

}  // namespace
}  // namespace motley

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: octopipe_case PROFILE CLUSTER\n");
    return 2;
  }
  return motley::run(argv[1], argv[2]);
}
