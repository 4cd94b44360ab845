// Lowering compute orders to point-to-point messages; docs/plan-format.md, "Lowering", gives
// the rules and why an executor following them cannot deadlock.
#include "motley/plan/lower.h"

#include <map>
#include <tuple>

namespace motley {
namespace {

enum Payload { kActivation = 0, kGradient = 1 };

bool is_input_backward(ActionKind kind) {
  return kind == ActionKind::kBackwardInput || kind == ActionKind::kBackward;
}

class ReplicaLowering {
 public:
  ReplicaLowering(const Plan& plan, const Replica& replica)
      : replica_(replica),
        last_stage_(static_cast<int>(plan.stages.size()) - 1),
        micro_batches_(replica.micro_batches) {
    for (auto& seq : sequence_) seq.assign((last_stage_ + 1) * micro_batches_, -1);
  }

  LoweredReplica run() {
    number_messages();
    LoweredReplica out;
    for (size_t g = 0; g < replica_.groups.size(); ++g) {
      out.groups.push_back(lower_group(static_cast<int>(g)));
    }
    return out;
  }

 private:
  int group_of(int stage) const { return replica_.stage_group[stage]; }

  // The group that receives what `a` produces, or -1 when it stays on this group (or nowhere).
  int send_peer(const Action& a, int group, Payload* payload) const {
    if (a.kind == ActionKind::kForward && a.stage < last_stage_ && group_of(a.stage + 1) != group) {
      *payload = kActivation;
      return group_of(a.stage + 1);
    }
    if (is_input_backward(a.kind) && a.stage > 0 && group_of(a.stage - 1) != group) {
      *payload = kGradient;
      return group_of(a.stage - 1);
    }
    return -1;
  }

  int64_t& sequence(Payload payload, int stage, int micro_batch) {
    return sequence_[payload][static_cast<size_t>(stage) * micro_batches_ + micro_batch];
  }

  // Numbers each message on its channel (sender, receiver, payload) in the sender's order.
  void number_messages() {
    std::map<std::tuple<int, int, int>, int64_t> next;
    for (size_t g = 0; g < replica_.groups.size(); ++g) {
      const int src = static_cast<int>(g);
      for (const Action& a : replica_.groups[g].actions) {
        Payload payload = kActivation;
        const int dst = send_peer(a, src, &payload);
        if (dst >= 0) sequence(payload, a.stage, a.micro_batch) = next[{src, dst, payload}]++;
      }
    }
  }

  std::vector<LoweredOp> lower_group(int group) {
    std::vector<LoweredOp> ops;
    for (const Action& a : replica_.groups[group].actions) {
      const int s = a.stage;
      const int j = a.micro_batch;
      if (a.kind == ActionKind::kForward && s > 0 && group_of(s - 1) != group) {
        ops.push_back(receive(CommKind::kRecvActivation, kActivation, s - 1, j));
      }
      if (is_input_backward(a.kind) && s < last_stage_ && group_of(s + 1) != group) {
        ops.push_back(receive(CommKind::kRecvGradient, kGradient, s + 1, j));
      }
      ops.push_back(a);
      Payload payload = kActivation;
      const int peer = send_peer(a, group, &payload);
      if (peer >= 0) {
        ops.push_back(
            CommOp{payload == kActivation ? CommKind::kSendActivation : CommKind::kSendGradient, s,
                   j, peer, sequence(payload, s, j)});
      }
    }
    return ops;
  }

  CommOp receive(CommKind kind, Payload payload, int from_stage, int micro_batch) {
    const int64_t seq = sequence(payload, from_stage, micro_batch);
    MOTLEY_CHECK(seq >= 0, "lower_plan: a message with no sender; was the plan validated?");
    return CommOp{kind, from_stage, micro_batch, group_of(from_stage), seq};
  }

  const Replica& replica_;
  int last_stage_;
  int64_t micro_batches_;
  std::vector<int64_t> sequence_[2];  // [payload][stage * micro_batches + mb]
};

}  // namespace

const char* comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::kSendActivation:
      return "send_activation";
    case CommKind::kRecvActivation:
      return "recv_activation";
    case CommKind::kSendGradient:
      return "send_gradient";
    case CommKind::kRecvGradient:
      return "recv_gradient";
  }
  return "?";
}

LoweredPlan lower_plan(const Plan& plan) {
  LoweredPlan out;
  for (const Replica& replica : plan.replicas) {
    out.replicas.push_back(ReplicaLowering(plan, replica).run());
  }
  return out;
}

}  // namespace motley
