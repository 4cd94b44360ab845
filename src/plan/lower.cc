// Lowering compute orders to point-to-point messages; docs/plan-format.md, "Lowering", gives
// the rules and why an executor following them cannot deadlock. Which results travel is the
// dependency rule's (dependencies.h): an input that crosses stages becomes a message when the
// two stages run on different groups.
#include "motley/plan/lower.h"

#include <algorithm>
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
Payload payload_of_action(ActionKind kind) {
  return kind == ActionKind::kForward ? kActivation : kGradient;
}

class ReplicaLowering {
 public:
  ReplicaLowering(const Plan& plan, const Replica& replica, std::vector<int64_t>& sequence,
                  std::vector<int64_t>& next)
      : replica_(replica),
        shape_(pipeline_shape(plan)),
        fan_out_(std::max({1, shape_.vocab_shards, shape_.embedding_shards})),
        micro_batches_(replica.micro_batches),
        sequence_(sequence),
        next_(next) {
    sequence_.assign(2 * static_cast<size_t>(shape_.stages) * micro_batches_ * fan_out_, -1);
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

  // Calls f(peer, k) for each consumer of what `a` produces that runs on another group: the
  // k-th of its consumer stages (one, or every vocabulary shard).
  template <typename F>
  void for_each_peer(const Action& a, int group, F&& f) const {
    const std::optional<Dependency> consumer = downstream_consumer(a, shape_);
    if (!consumer) return;
    for (int k = 0; k < consumer->count; ++k) {
      const int peer = group_of(consumer->stage + k);
      if (peer != group) f(peer, k);
    }
  }

  // Message numbers, per payload, producing stage, micro-batch and consumer stage k.
  int64_t& sequence(Payload payload, int stage, int micro_batch, int k) {
    return sequence_[((static_cast<size_t>(payload) * shape_.stages + stage) * micro_batches_ +
                      micro_batch) *
                         fan_out_ +
                     k];
  }

  // Numbers each message on its channel (sender, receiver, payload) in the sender's order.
  void number_messages() {
    const size_t groups = replica_.groups.size();
    for (size_t g = 0; g < groups; ++g) {
      const int src = static_cast<int>(g);
      for (const Action& a : replica_.groups[g].actions) {
        const Payload payload = payload_of_action(a.kind);
        for_each_peer(a, src, [&](int dst, int k) {
          sequence(payload, a.stage, a.micro_batch, k) = next_[(g * groups + dst) * 2 + payload]++;
        });
      }
    }
  }

  void lower_group(int group, std::vector<LoweredOp>& ops) {
    ops.clear();
    for (const Action& a : replica_.groups[group].actions) {
      for (const Dependency& d : data_dependencies(a, shape_)) {
        if (!d.crosses_stages) continue;
        for (int p = d.stage; p < d.stage + d.count; ++p) {
          if (group_of(p) != group) ops.push_back(receive(d, p, a));
        }
      }
      ops.push_back(a);
      const Payload payload = payload_of_action(a.kind);
      for_each_peer(a, group, [&](int peer, int k) {
        ops.push_back(
            CommOp{payload == kActivation ? CommKind::kSendActivation : CommKind::kSendGradient,
                   a.stage, a.micro_batch, peer, sequence(payload, a.stage, a.micro_batch, k)});
      });
    }
  }

  // The receive, before `a`, of what stage `stage` produced for it (dependency `d`).
  CommOp receive(const Dependency& d, int stage, const Action& a) {
    const Payload payload = payload_of(d.producer);
    // Which of the producer's consumer stages `a` is: its offset among them.
    const ActionKind produced =
        payload == kActivation ? ActionKind::kForward : ActionKind::kBackwardInput;
    const std::optional<Dependency> consumers =
        downstream_consumer(Action{produced, stage, a.micro_batch}, shape_);
    MOTLEY_CHECK(
        consumers && a.stage >= consumers->stage && a.stage < consumers->stage + consumers->count,
        "lower_plan: a crossing input its producer does not send");
    const int64_t seq = sequence(payload, stage, a.micro_batch, a.stage - consumers->stage);
    MOTLEY_CHECK(seq >= 0, "lower_plan: a message with no sender; was the plan validated?");
    return CommOp{payload == kActivation ? CommKind::kRecvActivation : CommKind::kRecvGradient,
                  stage, a.micro_batch, group_of(stage), seq};
  }

  const Replica& replica_;
  PipelineShape shape_;
  int fan_out_;
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
