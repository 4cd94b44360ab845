// Lowering compute orders to point-to-point messages; docs/plan-format.md, "Lowering", gives
// the rules and why an executor following them cannot deadlock. Which results travel is the
// dependency rule's (dependencies.h): an input that crosses stages becomes a message when the
// two stages run on different groups.
#include "motley/plan/lower.h"

#include <optional>

#include "motley/core/check.h"
#include "motley/core/enum_names.h"
#include "motley/plan/dependencies.h"

namespace motley {
namespace {

enum Payload { kActivation = 0, kGradient = 1 };

// An activation is a forward's output; everything else that crosses stages is a gradient.
Payload payload_of(Producer producer) {
  return producer == Producer::kForward ? kActivation : kGradient;
}

class ReplicaLowering {
 public:
  ReplicaLowering(const Plan& plan, const Replica& replica, std::vector<int64_t>& sequence,
                  std::vector<int64_t>& next)
      : replica_(replica),
        stages_(static_cast<int>(plan.stages.size())),
        micro_batches_(replica.micro_batches),
        sequence_(sequence),
        next_(next) {
    sequence_.assign(2 * static_cast<size_t>(stages_) * micro_batches_, -1);
    const size_t groups = replica.groups.size();
    next_.assign(groups * groups * 2, 0);
  }

  void run(LoweredReplica& out) {
    number_messages();
    out.groups.resize(replica_.groups.size());
    for (size_t g = 0; g < replica_.groups.size(); ++g) {
      lower_group(static_cast<int>(g), out.groups[g]);
    }
  }

 private:
  int group_of(int stage) const { return replica_.stage_group[stage]; }

  // The group that consumes what `a` produces, or -1 when that is this group (or nobody).
  int send_peer(const Action& a, int group, Payload* payload) const {
    const std::optional<Dependency> consumer = downstream_consumer(a, stages_);
    if (!consumer || group_of(consumer->stage) == group) return -1;
    *payload = payload_of(consumer->producer);
    return group_of(consumer->stage);
  }

  int64_t& sequence(Payload payload, int stage, int micro_batch) {
    return sequence_[(static_cast<size_t>(payload) * stages_ + stage) * micro_batches_ +
                     micro_batch];
  }

  // Numbers each message on its channel (sender, receiver, payload) in the sender's order.
  void number_messages() {
    const size_t groups = replica_.groups.size();
    for (size_t g = 0; g < groups; ++g) {
      const int src = static_cast<int>(g);
      for (const Action& a : replica_.groups[g].actions) {
        Payload payload = kActivation;
        const int dst = send_peer(a, src, &payload);
        if (dst < 0) continue;
        sequence(payload, a.stage, a.micro_batch) = next_[(g * groups + dst) * 2 + payload]++;
      }
    }
  }

  void lower_group(int group, std::vector<LoweredOp>& ops) {
    ops.clear();
    for (const Action& a : replica_.groups[group].actions) {
      for (const Dependency& d : data_dependencies(a, stages_)) {
        if (d.crosses_stages && group_of(d.stage) != group) ops.push_back(receive(d));
      }
      ops.push_back(a);
      Payload payload = kActivation;
      const int peer = send_peer(a, group, &payload);
      if (peer >= 0) {
        ops.push_back(
            CommOp{payload == kActivation ? CommKind::kSendActivation : CommKind::kSendGradient,
                   a.stage, a.micro_batch, peer, sequence(payload, a.stage, a.micro_batch)});
      }
    }
  }

  CommOp receive(const Dependency& d) {
    const Payload payload = payload_of(d.producer);
    const int64_t seq = sequence(payload, d.stage, d.micro_batch);
    MOTLEY_CHECK(seq >= 0, "lower_plan: a message with no sender; was the plan validated?");
    return CommOp{payload == kActivation ? CommKind::kRecvActivation : CommKind::kRecvGradient,
                  d.stage, d.micro_batch, group_of(d.stage), seq};
  }

  const Replica& replica_;
  int stages_;
  int64_t micro_batches_;
  std::vector<int64_t>& sequence_;
  std::vector<int64_t>& next_;
};

void lower_into(const Plan& plan, LoweredPlan& out, std::vector<int64_t>& sequence,
                std::vector<int64_t>& next) {
  out.replicas.resize(plan.replicas.size());
  for (size_t r = 0; r < plan.replicas.size(); ++r) {
    ReplicaLowering(plan, plan.replicas[r], sequence, next).run(out.replicas[r]);
  }
}

}  // namespace

// Indexed by CommKind, in declaration order.
constexpr const char* kCommKindNames[] = {"send_activation", "recv_activation", "send_gradient",
                                          "recv_gradient"};
static_assert(std::size(kCommKindNames) == static_cast<size_t>(CommKind::kRecvGradient) + 1);

const char* comm_kind_name(CommKind kind) { return name_in(kCommKindNames, kind); }

LoweredPlan lower_plan(const Plan& plan) {
  LoweredPlan out;
  std::vector<int64_t> sequence, next;
  lower_into(plan, out, sequence, next);
  return out;
}

const LoweredPlan& Lowering::lower(const Plan& plan) {
  lower_into(plan, out_, sequence_, next_);
  return out_;
}

}  // namespace motley
