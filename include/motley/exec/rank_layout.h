// RankLayout: how a plan's device groups become executor ranks (one rank per device group,
// replicas in order, groups in order within a replica), which ranks hold each stage, and the
// message tags derived from the lowered plan's channel sequence numbers. Knows nothing of
// tensors or transports. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "motley/core/status.h"
#include "motley/exec/transport.h"
#include "motley/plan/lower.h"
#include "motley/plan/plan.h"

namespace motley {

struct RankPlace {
  int replica = 0;
  int group = 0;  // index into Plan::replicas[replica].groups
};

class RankLayout {
 public:
  // REQUIRES: `plan` passed validate_plan (every group runs at least one stage).
  explicit RankLayout(const Plan& plan);

  // The number of device groups over all replicas.
  int world_size() const { return static_cast<int>(places_.size()); }
  // Rank = groups of the replicas before `replica` + `group`.
  int rank_of(int replica, int group) const;
  RankPlace place_of(int rank) const;
  // The stages `rank` runs, increasing.
  const std::vector<int>& stages_of(int rank) const;
  // The ranks that run `stage`, one per replica, increasing.
  const std::vector<int>& stage_ranks(int stage) const;

 private:
  std::vector<RankPlace> places_;
  std::vector<int> first_rank_;  // [replica] -> rank of its group 0
  std::vector<std::vector<int>> stages_of_rank_;
  std::vector<std::vector<int>> ranks_of_stage_;
};

// Tags: bit 0 the payload (0 activation, 1 gradient), bits 1..22 the message's sequence number
// on its channel, bits 23..30 the training step modulo 256. A link carries one channel per
// direction and payload, so (peer, tag) names exactly one message of a step; the step bits
// keep a fast sender's next step apart from a slow receiver's current one.
inline constexpr int64_t kMaxChannelSequence = int64_t{1} << 22;
// REQUIRES: 0 <= sequence < kMaxChannelSequence, step >= 0.
MessageTag message_tag(int64_t step, CommKind kind, int64_t sequence);

// The largest sequence number in `lowered` plus one (0 when nothing is sent); a plan whose
// value exceeds kMaxChannelSequence cannot be run.
int64_t channel_length(const LoweredPlan& lowered);

}  // namespace motley
