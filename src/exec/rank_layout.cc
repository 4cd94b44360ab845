#include "motley/exec/rank_layout.h"

#include <algorithm>
#include <set>
#include <utility>

#include "motley/core/check.h"

namespace motley {

RankLayout::RankLayout(const Plan& plan) : ranks_of_stage_(plan.stages.size()) {
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const Replica& replica = plan.replicas[r];
    first_rank_.emplace_back();
    for (size_t g = 0; g < replica.groups.size(); ++g) {
      const std::vector<int>& devices = replica.groups[g].devices;
      first_rank_[r].push_back(static_cast<int>(places_.size()));
      for (size_t d = 0; d < devices.size(); ++d) {
        places_.push_back(RankPlace{static_cast<int>(r), static_cast<int>(g), static_cast<int>(d),
                                    static_cast<int>(devices.size()), devices[d]});
        stages_of_rank_.emplace_back();
      }
    }
    for (size_t s = 0; s < replica.stage_group.size(); ++s) {
      for (int rank : group_ranks(static_cast<int>(r), replica.stage_group[s])) {
        stages_of_rank_[rank].push_back(static_cast<int>(s));
        ranks_of_stage_[s].push_back(rank);
      }
    }
  }
  for (auto& ranks : ranks_of_stage_) std::sort(ranks.begin(), ranks.end());
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const int end = std::max(0, plan.stages[s].layer_end);
    if (static_cast<int>(stages_of_layer_.size()) < end) stages_of_layer_.resize(end);
    for (int l = std::max(0, plan.stages[s].layer_begin); l < end; ++l) {
      stages_of_layer_[l].push_back(static_cast<int>(s));
    }
  }
}

const std::vector<int>& RankLayout::stages_of_layer(int layer) const {
  static const std::vector<int> kNone;
  return layer >= 0 && layer < static_cast<int>(stages_of_layer_.size()) ? stages_of_layer_[layer]
                                                                         : kNone;
}

int RankLayout::rank_of(int replica, int group, int tp_rank) const {
  MOTLEY_CHECK(replica >= 0 && replica < static_cast<int>(first_rank_.size()), "no such replica");
  MOTLEY_CHECK(group >= 0 && group < static_cast<int>(first_rank_[replica].size()),
               "no such group");
  const int rank = first_rank_[replica][group] + tp_rank;
  MOTLEY_CHECK(tp_rank >= 0 && tp_rank < places_[first_rank_[replica][group]].tp_size,
               "no such tensor-parallel rank");
  return rank;
}

RankPlace RankLayout::place_of(int rank) const {
  MOTLEY_CHECK(rank >= 0 && rank < world_size(), "no such rank");
  return places_[rank];
}

std::vector<int> RankLayout::group_ranks(int replica, int group) const {
  const int first = rank_of(replica, group);
  std::vector<int> ranks(static_cast<size_t>(places_[first].tp_size));
  for (size_t i = 0; i < ranks.size(); ++i) ranks[i] = first + static_cast<int>(i);
  return ranks;
}

const std::vector<int>& RankLayout::stages_of(int rank) const {
  MOTLEY_CHECK(rank >= 0 && rank < world_size(), "no such rank");
  return stages_of_rank_[rank];
}

const std::vector<int>& RankLayout::stage_ranks(int stage) const {
  MOTLEY_CHECK(stage >= 0 && stage < static_cast<int>(ranks_of_stage_.size()), "no such stage");
  return ranks_of_stage_[stage];
}

int RankLayout::pipeline_source(int rank, int sending_group) const {
  const RankPlace me = place_of(rank);
  const int first = rank_of(me.replica, sending_group);
  return first + me.tp_rank % places_[first].tp_size;
}

std::vector<int> RankLayout::pipeline_destinations(int rank, int receiving_group) const {
  const RankPlace me = place_of(rank);
  std::vector<int> out;
  for (int r : group_ranks(me.replica, receiving_group)) {
    if (places_[r].tp_rank % me.tp_size == me.tp_rank) out.push_back(r);
  }
  return out;
}

RankLayout::GradientSumRanks RankLayout::gradient_sum_ranks(int rank, int stage,
                                                            const std::vector<int>& layers,
                                                            bool plain_shard) const {
  const RankPlace me = place_of(rank);
  std::set<std::pair<int, int>> holders;  // (replica, group)
  bool alike = plain_shard;
  for (int l : layers) {
    std::vector<int> holding = stages_of_layer(l);
    if (holding.empty()) holding.push_back(stage);
    alike = alike && holding.size() == 1;
    for (int s : holding) {
      for (int r : stage_ranks(s)) holders.insert({places_[r].replica, places_[r].group});
    }
  }
  for (const auto& [replica, group] : holders) {
    alike = alike && places_[rank_of(replica, group)].tp_size == me.tp_size;
  }
  std::set<int> ranks;
  for (const auto& [replica, group] : holders) {
    if (alike) {
      ranks.insert(rank_of(replica, group, me.tp_rank));
    } else {
      for (int r : group_ranks(replica, group)) ranks.insert(r);
    }
  }
  return GradientSumRanks{std::vector<int>(ranks.begin(), ranks.end()), !alike};
}

int64_t message_tag(int64_t step, TaskKind kind, int64_t sequence) {
  MOTLEY_CHECK(is_message(kind), "a tag for a task that is no message");
  MOTLEY_CHECK(sequence >= 0 && sequence < kMaxChannelSequence, "channel sequence out of range");
  MOTLEY_CHECK(step >= 0, "negative step");
  const bool gradient = kind == TaskKind::kGradientMessage;
  return ((step % 256) << 23) | (sequence << 1) | (gradient ? 1 : 0);
}

int64_t channel_length(const TaskGraph& graph) {
  int64_t length = 0;
  for (int32_t v = graph.num_actions(); v < graph.size(); ++v) {
    const TaskNode& n = graph.node(v);
    if (is_message(n.kind)) length = std::max(length, static_cast<int64_t>(n.sequence) + 1);
  }
  return length;
}

namespace {

// Whether consecutive replicas in groups of `degree` have the same device-group sizes, stage
// placement and action lists, so that a group's members run in lockstep.
bool replica_groups_alike(const Plan& plan, int degree) {
  const size_t e = static_cast<size_t>(degree);
  if (e <= 1 || plan.replicas.size() % e != 0) return false;
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const Replica& lead = plan.replicas[r - r % e];
    const Replica& member = plan.replicas[r];
    if (!same_task_graph(lead, member)) return false;
    for (size_t g = 0; g < lead.groups.size(); ++g) {
      if (member.groups[g].devices.size() != lead.groups[g].devices.size()) return false;
    }
  }
  return true;
}

}  // namespace

bool exchanges_experts(const Plan& plan) {
  return replica_groups_alike(plan, plan.expert_parallel);
}

bool splits_sequences(const Plan& plan) {
  return replica_groups_alike(plan, plan.context_parallel);
}

}  // namespace motley
