#include "motley/exec/rank_layout.h"

#include <algorithm>

#include "motley/core/check.h"

namespace motley {

RankLayout::RankLayout(const Plan& plan) : ranks_of_stage_(plan.stages.size()) {
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    const Replica& replica = plan.replicas[r];
    first_rank_.push_back(static_cast<int>(places_.size()));
    for (size_t g = 0; g < replica.groups.size(); ++g) {
      places_.push_back(RankPlace{static_cast<int>(r), static_cast<int>(g)});
      stages_of_rank_.emplace_back();
    }
    for (size_t s = 0; s < replica.stage_group.size(); ++s) {
      const int rank = first_rank_[r] + replica.stage_group[s];
      stages_of_rank_[rank].push_back(static_cast<int>(s));
      ranks_of_stage_[s].push_back(rank);
    }
  }
  for (auto& ranks : ranks_of_stage_) std::sort(ranks.begin(), ranks.end());
}

int RankLayout::rank_of(int replica, int group) const {
  MOTLEY_CHECK(replica >= 0 && replica < static_cast<int>(first_rank_.size()), "no such replica");
  return first_rank_[replica] + group;
}

RankPlace RankLayout::place_of(int rank) const {
  MOTLEY_CHECK(rank >= 0 && rank < world_size(), "no such rank");
  return places_[rank];
}

const std::vector<int>& RankLayout::stages_of(int rank) const {
  MOTLEY_CHECK(rank >= 0 && rank < world_size(), "no such rank");
  return stages_of_rank_[rank];
}

const std::vector<int>& RankLayout::stage_ranks(int stage) const {
  MOTLEY_CHECK(stage >= 0 && stage < static_cast<int>(ranks_of_stage_.size()), "no such stage");
  return ranks_of_stage_[stage];
}

MessageTag message_tag(int64_t step, CommKind kind, int64_t sequence) {
  MOTLEY_CHECK(sequence >= 0 && sequence < kMaxChannelSequence, "channel sequence out of range");
  MOTLEY_CHECK(step >= 0, "negative step");
  const bool gradient = kind == CommKind::kSendGradient || kind == CommKind::kRecvGradient;
  return ((step % 256) << 23) | (sequence << 1) | (gradient ? 1 : 0);
}

int64_t channel_length(const LoweredPlan& lowered) {
  int64_t length = 0;
  for (const LoweredReplica& replica : lowered.replicas) {
    for (const auto& ops : replica.groups) {
      for (const LoweredOp& op : ops) {
        if (const auto* comm = std::get_if<CommOp>(&op)) {
          length = std::max(length, comm->sequence + 1);
        }
      }
    }
  }
  return length;
}

}  // namespace motley
