// plan::task_graph — a plan as one graph: a node per compute action and per message (a send
// with its receive, from lower_plan), edges for each group's order, every action's inputs
// (data_dependencies) and each channel's order. Validation checks it for cycles, the simulator
// adds its tasks and runs it, an executor can read its program from it. No times, no costs.
// Thread-compatible; a built graph may be read from several threads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "motley/plan/dependencies.h"
#include "motley/plan/lower.h"
#include "motley/plan/plan.h"

namespace motley {

enum class TaskKind : uint8_t {
  // A compute action; the same order as ActionKind.
  kForward,
  kBackwardInput,
  kBackwardWeight,
  kBackward,
  kRecompute,
  kActivationMessage,  // the output of F(stage, mb), to the group of stage + 1
  kGradientMessage,    // the input gradient of I or B(stage, mb), to the group of stage - 1
  kExternal,           // a task the graph's user added (TaskGraph::add_node)
};
inline TaskKind task_kind(ActionKind kind) { return static_cast<TaskKind>(kind); }
inline bool is_action(TaskKind kind) { return kind <= TaskKind::kRecompute; }
inline bool is_message(TaskKind kind) {
  return kind == TaskKind::kActivationMessage || kind == TaskKind::kGradientMessage;
}
inline ActionKind action_kind(TaskKind kind) {
  MOTLEY_CHECK(is_action(kind), "action_kind: a message or external task is no action");
  return static_cast<ActionKind>(kind);
}

struct TaskNode {
  TaskKind kind = TaskKind::kExternal;
  int32_t replica = -1;
  int32_t group = -1;  // compute: its group; message: the sending group
  int32_t stage = -1;  // compute: its stage; message: the stage whose output travels
  int32_t micro_batch = -1;
  int32_t peer_group = -1;  // message: the receiving group
  int32_t index = -1;       // compute: position in its group's action list
  int32_t sequence = -1;    // message: position on its channel (lower.h), from 0
  friend bool operator==(const TaskNode&, const TaskNode&) = default;
};

// Where one input of a compute action comes from: the compute node that produces it and,
// when that node runs on another group, the message that carries it (else -1).
struct TaskInput {
  int32_t producer = -1;
  int32_t message = -1;
  friend bool operator==(const TaskInput&, const TaskInput&) = default;
};

// Node ids are int32 and dense: the compute actions first (by replica, group, position in the
// group's list), then the messages (by replica, sending group, the sender's order), then the
// nodes added with add_node. Edges, in the order they are added:
//   1. per message: its producer -> it; the previous message on its channel -> it;
//   2. per compute action: the group's previous action -> it; per input, the message -> it
//      when the producer runs on another group, or the producer -> it when the producer runs
//      on the same group but is listed later (a cycle: the plan deadlocks). An input listed
//      earlier on the same group adds nothing: the group's order already implies it.
// Successor lists keep that order (the simulator's tie-breaks depend on it).
class TaskGraph {
 public:
  // ---- building. The memory of earlier builds is reused: rebuilding for a plan no larger
  // than any before allocates nothing.

  // Replaces the graph with `plan`'s nodes, edges 1 and 2, and lookups; link() makes the
  // successor lists. REQUIRES: check_plan_structure(plan, ...) passed and `lowered` is
  // lower_plan(plan).
  void assign(const Plan& plan, const LoweredPlan& lowered);
  // A task of the user's own (a simulator's all-reduce), ordered by add_edge.
  int32_t add_node(const TaskNode& node);
  void add_edge(int32_t from, int32_t to) { edges_.push_back(Edge{from, to}); }
  // Builds the successor lists and in-degrees from the edges added so far.
  void link();

  // ---- nodes
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  int32_t num_actions() const { return actions_; }  // compute nodes: ids 0 .. num_actions() - 1
  const TaskNode& node(int32_t id) const { return nodes_[id]; }
  int num_replicas() const { return static_cast<int>(micro_batches_.size()); }
  int num_groups(int replica) const {
    return static_cast<int>(stream_offset_[replica + 1] - stream_offset_[replica]);
  }
  // The compute nodes of a group are ids group_begin .. group_begin + group_size - 1, in the
  // group's order.
  int32_t group_begin(int replica, int group) const {
    return group_begin_[stream_offset_[replica] + group];
  }
  int32_t group_size(int replica, int group) const {
    return group_size_[stream_offset_[replica] + group];
  }

  // ---- lookups; -1 when the plan has no such task. REQUIRES: the indices exist.
  int32_t find(int replica, ActionKind kind, int stage, int micro_batch) const;
  // I(stage, mb) or the fused B(stage, mb): the action that yields the stage input's gradient.
  int32_t input_backward(int replica, int stage, int micro_batch) const {
    return backward_[slot(replica, stage, micro_batch)];
  }
  // The message that carries `kind`'s payload of (stage, micro_batch) to its k-th consumer
  // stage (k > 0 only for what goes to every vocabulary shard): the activation of F, or the
  // input gradient of I or B. REQUIRES: is_message(kind).
  int32_t message(int replica, TaskKind kind, int stage, int micro_batch, int k = 0) const;
  // The messages carrying compute node `id`'s output to other groups (none, one, or one per
  // vocabulary shard on another group).
  std::vector<int32_t> sent_messages(int32_t id) const;
  // The node producing `dependency` (data_dependencies) in `replica` (of its first stage when
  // it names several); -1 for an optional one the plan does not list.
  int32_t producer(int replica, const Dependency& dependency) const;
  // Where each input of compute node `id` comes from, in data_dependencies order (one per
  // producing stage where an input names every vocabulary shard); optional inputs the plan does
  // not list are left out. An executor waits on the messages (its receives) right before the
  // action, and posts sent_messages(id) right after it.
  std::vector<TaskInput> inputs(int32_t id) const;
  // inputs(id) without allocating: calls f(const TaskInput&) for each.
  template <typename F>
  void for_each_input(int32_t id, F&& f) const;

  // ---- edges (REQUIRES: link() after the last change)
  std::span<const int32_t> successors(int32_t id) const {
    return {succ_.data() + succ_offset_[id], succ_.data() + succ_offset_[id + 1]};
  }
  int32_t indegree(int32_t id) const { return indegree_[id]; }
  size_t num_edges() const { return edges_.size(); }

 private:
  struct Edge {
    int32_t from;
    int32_t to;
  };
  size_t slot(int replica, int stage, int micro_batch) const {
    return static_cast<size_t>(replica_offset_[replica] +
                               static_cast<int64_t>(stage) * micro_batches_[replica] + micro_batch);
  }
  void add_messages(int replica, const LoweredReplica& lowered);
  int consumer_index(const CommOp& message, int replica) const;
  void add_action_edges();

  std::vector<TaskNode> nodes_;
  int32_t actions_ = 0;
  int stages_ = 0;
  PipelineShape shape_;
  int fan_out_ = 1;  // message slots per (stage, micro-batch): the larger shard count, or 1
  std::vector<std::vector<int>> stage_group_;  // per replica
  std::vector<Edge> edges_;
  std::vector<int32_t> succ_offset_;  // successors of v: succ_[succ_offset_[v] ..
  std::vector<int32_t> succ_;         //                      succ_offset_[v + 1])
  std::vector<int32_t> indegree_;

  std::vector<int64_t> micro_batches_;   // per replica
  std::vector<int64_t> replica_offset_;  // replica -> first (stage, micro-batch) slot
  std::vector<int64_t> stream_offset_;   // replica -> first group, over all replicas
  std::vector<int32_t> group_begin_, group_size_;
  // Per (replica, stage, micro-batch) slot.
  std::vector<int32_t> forward_, backward_, weight_, recompute_;
  // Per slot, per consumer stage (fan_out_ of them).
  std::vector<int32_t> activation_message_, gradient_message_;
  std::vector<int32_t> channel_last_;  // building: per (sender, receiver, payload)
  std::vector<int64_t> channel_count_;
};

template <typename F>
void TaskGraph::for_each_input(int32_t id, F&& f) const {
  const TaskNode& n = nodes_[id];
  for (const Dependency& d :
       data_dependencies(Action{action_kind(n.kind), n.stage, n.micro_batch}, shape_)) {
    for (int k = 0; k < d.count; ++k) {
      Dependency one = d;
      one.stage = d.stage + k;
      one.count = 1;
      const int32_t p = producer(n.replica, one);
      if (p < 0) {
        MOTLEY_CHECK(d.optional, "TaskGraph: an input the plan does not list; was it checked?");
        continue;
      }
      // Only an input from another stage can travel, and the lowering made a message for it
      // exactly when that stage runs on another group: the one to this node's stage.
      int32_t message = -1;
      if (d.crosses_stages) {
        const ActionKind produced =
            d.producer == Producer::kForward ? ActionKind::kForward : ActionKind::kBackwardInput;
        const std::optional<Dependency> consumers =
            downstream_consumer(Action{produced, one.stage, n.micro_batch}, shape_);
        const int slot_k = consumers && consumers->count > 1 ? n.stage - consumers->stage : 0;
        message = this->message(n.replica,
                                d.producer == Producer::kForward ? TaskKind::kActivationMessage
                                                                 : TaskKind::kGradientMessage,
                                one.stage, n.micro_batch, slot_k);
      }
      f(TaskInput{p, message});
    }
  }
}

// assign + link: the plan's graph on its own, as validation checks it.
void build_task_graph(const Plan& plan, const LoweredPlan& lowered, TaskGraph& graph);

// Whether two replicas have the same task graph: the same micro-batch count, stage-to-group map
// and every group's actions (devices do not enter a task graph, and replicas share no task).
bool same_task_graph(const Replica& a, const Replica& b);

}  // namespace motley
