// Internal to tune/: the search space before simulation — layouts (which devices form which
// tensor-parallel groups, pipelines and replicas), candidates built from a layout, a schedule
// and a micro-batch size (balanced or counted partition, micro-batch counts per replica), and the
// cheap estimate used to prune before simulating. Pure functions over a Context; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "candidate.h"
#include "context.h"
#include "motley/schedule/layer_split.h"
#include "motley/tune/partition.h"

namespace motley::tune_internal {

// The divisors of n > 0, ascending.
std::vector<int> divisors(int n);

// Replicas of device groups, each replica's groups in pipeline order.
struct Layout {
  std::vector<std::vector<std::vector<int>>> replicas;  // replica -> group -> device ids
  std::string description;
  bool operator==(const Layout&) const = default;
};

// The groups a type forms at tensor-parallel degree t, in cluster order (t consecutive devices
// of one node each). REQUIRES: t is one of the type's tp_degrees.
std::vector<std::vector<int>> type_groups(const TypeInfo& type, int t);

// TP x PP x DP over the devices in cluster order: replica k's group r = devices
// [(k p + r) t, (k p + r + 1) t), each pipeline on consecutive devices; with
// `megatron_rank_order`, devices [(r d + k) t, (r d + k + 1) t), Megatron-LM's rank order
// (tensor-, context-, expert- and data-parallel ranks inside the pipeline rank: a stage's
// replicas side by side). Error when a group would cross a node or a device type, or the
// cluster holds fewer than d p t devices.
Result<Layout> cluster_order_layout(const Context& ctx, int t, int p, int d,
                                    bool megatron_rank_order = false);
// "devices in Megatron-LM's rank order" or "devices in cluster order", as layouts say it.
const char* device_order_name(bool megatron_rank_order);

// Layouts whose replicas all have the same composition: for a subset of the device types, a TP
// degree per type, d replicas each holding 1/d of every type's groups as contiguous blocks in a
// type order, pipelines within nodes (pp-inner) or across them (dp-inner).
std::vector<Layout> mixed_layouts(const Context& ctx);
// Layouts whose replicas each use one device type, with their own depth and TP degree.
std::vector<Layout> separate_layouts(const Context& ctx);

// Whether every replica and group of `layout` has the constraints' DP, PP and TP degrees.
bool layout_meets_constraints(const Context& ctx, const Layout& layout);
// The layouts that meet the constraints, plus, where the pipeline depth or the replica count is
// fixed, the cluster-order layouts of that shape (which may leave devices idle).
std::vector<Layout> constrained_layouts(const Context& ctx, std::vector<Layout> layouts);

// Balanced partitions already computed, keyed by everything they depend on; shared by the
// threads that build candidates.
class PartitionCache {
 public:
  bool find(const std::string& key, Result<Partition>* out) const;
  void put(const std::string& key, const Result<Partition>& value);

 private:
  mutable std::mutex mu_;
  std::map<std::string, Result<Partition>> map_;
};

struct BuildOptions {
  // The partition mode: a counting rule (uniform, megatron), or none for the balanced partition.
  std::optional<LayerSplit> split;
  // Counted partitions: one policy for every stage.
  RecomputePolicy uniform_recompute = RecomputePolicy::kNone;
  // Micro-batch counts: proportional to each replica's estimated speed (false: equal counts,
  // the extra ones to the first replicas).
  bool proportional_micro_batches = true;
  PartitionCache* cache = nullptr;  // optional
  // The ZeRO stage across the replicas (Plan::zero_stage; 0 where there is one replica);
  // TuneOptions::zero_stage overrides it. Stages 2 and 3 need equal micro-batch counts: a
  // layout whose batch does not split evenly over its replicas is refused.
  int zero_stage = 0;
  // Expert parallelism over groups of this many replicas (Plan::expert_parallel); it must divide
  // the replicas and every MoE layer's experts, and keeps the micro-batch counts equal.
  int expert_parallel = 1;
  // Context parallelism over groups of this many consecutive replicas (Plan::context_parallel;
  // TuneOptions::context_parallel overrides it); it must divide the replicas, excludes expert
  // parallelism, and gives every member of a group the group's share of the micro-batches.
  // REQUIRES: 1 or one of the context's context_degrees().
  int context_parallel = 1;
  // Sequence parallelism inside the TP groups; only where the context searches it and the
  // layout has a group of more than one device (otherwise the candidate is built without).
  bool sequence_parallel = false;
  // Vocabulary parallelism (Candidate::vocab_parallel): the balanced partition leaves the head
  // (and the embedding, where splits_embedding) to their shards, one per group with rows by
  // speed (vocab_shard_ends). Adaptive schedules
  // only, on a model whose last layer is a head, replicas of equal group counts.
  bool vocab_parallel = false;
  // With vocab_parallel, the embedding split too where splits_embedding.
  bool vocab_embedding = false;
};

// A candidate for `layout` with `schedule` and micro-batch size `b`. Errors: invalid_argument
// when the shape does not fit (more stages than layers, a global batch that does not split),
// infeasible when the balanced partition does not fit memory.
Result<Candidate> build_candidate(const Context& ctx, const Layout& layout,
                                  const ScheduleSpec& schedule, int64_t b,
                                  const BuildOptions& options);
// The same, written into `out` (every field replaced), whose replicas' buffers are reused: a
// sweep over layouts of tens of thousands of replicas then allocates almost nothing after its
// first candidate. On an error `out` holds no usable candidate.
Status build_candidate_into(const Context& ctx, const Layout& layout, const ScheduleSpec& schedule,
                            int64_t b, const BuildOptions& options, Candidate& out);

// What every candidate built from one layout shares: each replica's make (an index into the
// distinct group_signature's), the relative speed of its devices, its first device (its place
// in the data-parallel ring the estimate prices), and the layout's price per second.
struct LayoutFacts {
  std::vector<int> make;
  std::vector<std::string> makes;
  std::vector<double> speed;
  double speed_sum = 0;
  std::vector<int> ring;
  double price_per_second = 0;
};
LayoutFacts layout_facts(const Context& ctx, const Layout& layout);

// One thread's scratch for building many candidates in turn: the candidate whose buffers each
// build reuses, and the facts of the layout it was last built from, kept while the builds come
// from that same layout object (with its replicas' groups, already in place). On 32,768
// replicas, classifying, pricing and copying every replica took most of each build.
struct BuildScratch {
  Candidate candidate;
  const Layout* layout = nullptr;  // whose facts `facts` holds
  LayoutFacts facts;
  bool groups_current = false;  // candidate.replicas hold layout's groups, in order
};
// build_candidate_into into scratch.candidate. REQUIRES: neither the layout object the scratch
// was last built from nor scratch.candidate is changed between builds.
Status build_candidate_into(const Context& ctx, const Layout& layout, const ScheduleSpec& schedule,
                            int64_t b, const BuildOptions& options, BuildScratch& scratch);

// Splits `total` micro-batches over replicas whose estimated time for m micro-batches is
// slope[k] * m + offset[k], minimizing the largest; every replica gets at least one.
// REQUIRES: total >= slope.size().
std::vector<int64_t> split_micro_batches(const std::vector<double>& slope,
                                         const std::vector<double>& offset, int64_t total);

// The cheap iteration-time estimate (seconds): per replica m * max group time plus the
// schedule's share of the other groups' time (1F1B: all of it, as Metis's
// (m-1) max + sum), the slowest boundary transfer where it exceeds compute, plus the exposed
// data-parallel all-reduce of the first stage and the optimizer step.
// Replicas of one make (group types and TP degrees, layers, recompute and micro-batch count)
// are estimated once, by the first of them (estimated_replicas): they differ only in where their
// devices sit, which the boundary transfers of the first stand for. Under expert or context
// parallelism, every replica of the first block of consecutive replicas (the groups' common
// period) of each make, whose collectives stand for the other blocks'.
// `facts` (optional) are those of the layout c was built from by build_candidate_into: the
// estimate is the same with them, and takes no step per replica that they spare.
double estimate(const Context& ctx, const Candidate& c, const LayoutFacts* facts = nullptr);
// The replicas `estimate` prices: the first of each make, or of each block of one make.
std::vector<size_t> estimated_replicas(const Context& ctx, const Candidate& c,
                                       const LayoutFacts* facts = nullptr);

// USD per second of the devices the candidate uses.
double candidate_price_per_second(const Context& ctx, const Candidate& c);
// Whether devices costing `price_per_second` exceed the options' budget_per_hour (if any).
bool over_budget(const Context& ctx, double price_per_second);
// Whether sequence parallelism means anything for `layout`: the context searches it and a
// group of the layout has more than one device.
bool has_tensor_parallel_group(const Context& ctx, const Layout& layout);

// The estimate of what the objective minimizes, for ranking candidates before simulation: the
// estimate, or under the cost objective the expected dollars per iteration (the devices' price
// over the goodput, preemption.h); infinite for a candidate over the budget.
double objective_estimate(const Context& ctx, const Candidate& c,
                          const LayoutFacts* facts = nullptr);
// The same for one replica, without all-reduce and optimizer.
// `cache` (optional, for one candidate) keeps the collectives its replicas share.
struct PassOverheadCache;
double replica_estimate(const Context& ctx, const Candidate& c, int replica, int64_t m,
                        PassOverheadCache* cache = nullptr);

// What every micro-batch's passes of stage `stage` of replica `replica` carry beyond their
// compute `t`, as the simulator prices them: ZeRO-2 and -3's collectives (sharded_pass_overhead,
// on the ring of the replicas' groups of the same index) and expert parallelism's all-to-alls
// (on the replica's expert group). Collectives are priced by `cost`, which may stand for a
// larger plan (the evaluator's subset of replicas).
struct PassOverhead {
  double forward = 0, backward = 0, weight = 0;
  double total() const { return forward + backward + weight; }
};
// ZeRO-2 and -3's ring is the same for every replica's groups of one index, so its price
// depends only on that index and the stage's layers and TP degree: `cache` keeps it across the
// replicas and stages of one candidate (and one cost model), which keeps a candidate of R
// replicas at O(R) collective pricings rather than O(R^2).
struct PassOverheadCache {
  std::map<std::array<int, 4>, DataParallelSync> zero_sync;  // (group, begin, end, tp)
};
PassOverhead pass_overhead(const Context& ctx, const CostModel& cost, const Candidate& c,
                           int replica, size_t stage, const ComputeTimes& t,
                           PassOverheadCache* cache = nullptr);

// Vocabulary parallelism: whether it can split the embedding too (the model's first layer states
// a vocabulary, and a layer lies between it and the head); each group's share of the rows of
// layer `layer` (the head, or the embedding 0) by its speed on it, or for the head by the
// candidate's head_shares where it has them (vocab_shard_ends, rows in multiples of the
// candidate's vocab_row_granule); each
// group's shards in replica `replica` of `c` priced on it, summed (empty when `c` splits
// nothing); and the layers of coarse stage `stage` the stage itself runs (the split layers left
// to the shards; possibly none). vocab_shard_shares takes the granule given where it is
// positive, else the candidate's (a candidate still being built holds only some replicas).
bool splits_embedding(const Context& ctx);
std::vector<double> vocab_shard_shares(const Context& ctx, const CostModel& cost,
                                       const Candidate& c,
                                       const std::vector<std::vector<int>>& groups, int layer,
                                       int64_t granule = 0);
std::vector<ComputeTimes> vocab_shard_times(const Context& ctx, const CostModel& cost,
                                            const Candidate& c, int replica);
LayerRange own_layers(const Context& ctx, const Candidate& c, const PipelineSpec& rep,
                      size_t stage);

// A pipeline's make: each group's device type and size, in order; equal for replicas that run
// alike (the partition cache, equal micro-batch counts, context groups of one make).
std::string group_signature(const Context& ctx, const std::vector<std::vector<int>>& groups);
// Whether two pipelines are of one make (group_signature equal), without building either.
bool same_make(const Context& ctx, const std::vector<std::vector<int>>& a,
               const std::vector<std::vector<int>>& b);

// A short description: "TP 1 x PP 8 x DP 2", "2 x [H100-SXM x4 TP2] + 1 x [A100-80GB x8]".
std::string describe_layout(const Context& ctx, const std::vector<PipelineSpec>& replicas);

}  // namespace motley::tune_internal
