// plan::lower — derives communication from compute orders: for every dependency that crosses
// device groups, a send after the producing action on one side and a receive before the
// consuming action on the other. Messages on each channel (ordered pair of groups, direction)
// are numbered in the sender's order, and both ends use these numbers, so an executor that
// posts receives early (in channel order) and sends asynchronously cannot deadlock on a
// validated plan. Deterministic. Thread-safe free function; a Lowering is thread-compatible.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "motley/core/status.h"
#include "motley/plan/plan.h"

namespace motley {

enum class CommKind {
  kSendActivation,  // after F(s, j): to the group running stage s+1
  kRecvActivation,  // before F(s+1, j)
  kSendGradient,    // after B(s, j) (or fused backward): to the group running stage s-1
  kRecvGradient,    // before B(s-1, j)
};
const char* comm_kind_name(CommKind kind);

struct CommOp {
  CommKind kind = CommKind::kSendActivation;
  int stage = 0;  // the stage whose output travels (activation: s; gradient: s)
  int micro_batch = 0;
  int peer_group = 0;    // index into Replica::groups of the other end
  int64_t sequence = 0;  // position of this message on its channel, from 0
  friend bool operator==(const CommOp&, const CommOp&) = default;
};

using LoweredOp = std::variant<Action, CommOp>;

struct LoweredReplica {
  std::vector<std::vector<LoweredOp>> groups;  // per Replica::groups index
};

struct LoweredPlan {
  std::vector<LoweredReplica> replicas;
};

// REQUIRES: `plan` passed check_plan_structure (structure.h), as validate_plan ensures.
LoweredPlan lower_plan(const Plan& plan);

// lower_plan keeping its buffers between calls, for a caller that lowers thousands of plans
// (the simulator): lowering plans no larger, group by group, than earlier ones allocates
// nothing.
class Lowering {
 public:
  // The lowering of `plan`, valid until the next call. REQUIRES as lower_plan.
  const LoweredPlan& lower(const Plan& plan);

 private:
  LoweredPlan out_;
  std::vector<int64_t> sequence_;  // per payload, stage and micro-batch: its message number
  std::vector<int64_t> next_;      // per channel: the next message number
};

}  // namespace motley
