// RankLayout: how a plan's devices become executor ranks (one rank per device: replicas in
// order, groups in order within a replica, a tensor-parallel group's devices in order), which
// ranks hold each stage, which rank of a neighbouring group sends or receives each pipeline
// message, and the message tags derived from the task graph's channel sequence numbers.
// Knows nothing of tensors or transports. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "motley/plan/plan.h"
#include "motley/plan/task_graph.h"

namespace motley {

struct RankPlace {
  int replica = 0;
  int group = 0;    // index into Plan::replicas[replica].groups
  int tp_rank = 0;  // index into the group's devices
  int tp_size = 1;  // the group's device count: its tensor-parallel degree
  int device = 0;   // the cluster device id this rank stands for
};

class RankLayout {
 public:
  // REQUIRES: `plan` passed validate_plan (every group runs at least one stage).
  explicit RankLayout(const Plan& plan);

  // The number of devices over all replicas' groups.
  int world_size() const { return static_cast<int>(places_.size()); }
  // Rank = devices of the groups before (`replica`, `group`) + `tp_rank`.
  int rank_of(int replica, int group, int tp_rank = 0) const;
  RankPlace place_of(int rank) const;
  // The ranks of one device group (its tensor-parallel group), increasing.
  std::vector<int> group_ranks(int replica, int group) const;
  // The stages whose layer ranges hold model layer `layer`, increasing: one, or the vocabulary
  // shards of a split embedding or head (plan.h, Stage); none for a layer no stage holds.
  const std::vector<int>& stages_of_layer(int layer) const;
  // The stages `rank` runs, increasing.
  const std::vector<int>& stages_of(int rank) const;
  // Every rank that runs `stage`: each replica's group for it, all its devices; increasing.
  const std::vector<int>& stage_ranks(int stage) const;

  // Pipeline messages between two groups of one replica. Every rank of a tensor-parallel group
  // holds the whole hidden state, so a receiving rank with index i takes its copy from the
  // sending group's rank i mod t_sender; a sending rank therefore serves every receiving rank
  // whose index is congruent to its own (none when the receiver is smaller than its index).
  int pipeline_source(int rank, int sending_group) const;
  std::vector<int> pipeline_destinations(int rank, int receiving_group) const;

  // Which ranks sum the gradient of a parameter that `rank` holds for its stage `stage` and that
  // model layers `layers` read (StageParameter::layers; a layer no stage holds counts as
  // `stage`'s): the ranks of every group running a stage that holds one of them. When
  // `plain_shard` (TensorSlice::exclusive), no such layer is split into vocabulary shards (whose
  // groups hold different rows at the same index) and every such group has this rank's degree,
  // only the rank of this rank's index in each group, summing local shards; otherwise all their
  // ranks, summing full-size contributions (`full_size`). docs/executor.md, "Which ranks sum
  // which gradient".
  struct GradientSumRanks {
    std::vector<int> ranks;  // increasing
    bool full_size = false;
  };
  GradientSumRanks gradient_sum_ranks(int rank, int stage, const std::vector<int>& layers,
                                      bool plain_shard) const;

 private:
  std::vector<RankPlace> places_;
  std::vector<std::vector<int>> first_rank_;  // [replica][group] -> rank of its device 0
  std::vector<std::vector<int>> stages_of_rank_;
  std::vector<std::vector<int>> ranks_of_stage_;
  std::vector<std::vector<int>> stages_of_layer_;
};

// Whether the executor runs `plan`'s expert parallelism with its exchanges: expert_parallel > 1
// and the replicas of every expert-parallel group have the same device-group sizes, stage
// placement and action lists, so that the members exchange tokens in lockstep. Otherwise every
// replica holds every expert (the same numbers, without the exchange).
bool exchanges_experts(const Plan& plan);
// Likewise for context parallelism: context_parallel > 1 and every context-parallel group's
// replicas alike, so that each member runs its share of every sequence and attention gathers
// the members' keys and values. Otherwise every member runs whole sequences (the same numbers,
// without the split).
bool splits_sequences(const Plan& plan);

// Tags: bit 0 the payload (0 activation, 1 gradient), bits 1..22 the message's sequence number
// on its channel, bits 23..30 the training step modulo 256. A link carries one channel per
// direction and payload, so (peer, tag) names exactly one message of a step; the step bits
// keep a fast sender's next step apart from a slow receiver's current one.
inline constexpr int64_t kMaxChannelSequence = int64_t{1} << 22;
// The tag is a MessageTag (transport.h). REQUIRES: is_message(kind), 0 <= sequence <
// kMaxChannelSequence, step >= 0.
int64_t message_tag(int64_t step, TaskKind kind, int64_t sequence);

// The largest sequence number of `graph`'s messages plus one (0 when nothing is sent); a plan
// whose value exceeds kMaxChannelSequence cannot be run.
int64_t channel_length(const TaskGraph& graph);

}  // namespace motley
