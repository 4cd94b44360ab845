// The task graph of a plan; docs/plan-format.md, "Dependencies", gives the edges and why the
// ones left out change nothing.
#include "motley/plan/task_graph.h"

#include <algorithm>

#include "motley/core/check.h"

namespace motley {

void TaskGraph::assign(const Plan& plan, const LoweredPlan& lowered) {
  const int n_rep = static_cast<int>(plan.replicas.size());
  shape_ = pipeline_shape(plan);
  stage_group_.resize(n_rep);
  for (int r = 0; r < n_rep; ++r) stage_group_[r] = plan.replicas[r].stage_group;
  stages_ = shape_.stages;
  fan_out_ = std::max({1, shape_.vocab_shards, shape_.embedding_shards});
  nodes_.clear();
  edges_.clear();
  micro_batches_.resize(n_rep);
  replica_offset_.assign(n_rep + 1, 0);
  stream_offset_.assign(n_rep + 1, 0);
  for (int r = 0; r < n_rep; ++r) {
    const Replica& rep = plan.replicas[r];
    micro_batches_[r] = rep.micro_batches;
    replica_offset_[r + 1] = replica_offset_[r] + stages_ * rep.micro_batches;
    stream_offset_[r + 1] = stream_offset_[r] + static_cast<int64_t>(rep.groups.size());
  }
  const size_t slots = static_cast<size_t>(replica_offset_[n_rep]);
  for (auto* lookup : {&forward_, &backward_, &weight_, &recompute_}) lookup->assign(slots, -1);
  for (auto* lookup : {&activation_message_, &gradient_message_}) {
    lookup->assign(slots * fan_out_, -1);
  }
  group_begin_.resize(stream_offset_[n_rep]);
  group_size_.resize(stream_offset_[n_rep]);

  for (int r = 0; r < n_rep; ++r) {
    const Replica& rep = plan.replicas[r];
    for (size_t gi = 0; gi < rep.groups.size(); ++gi) {
      const int g = static_cast<int>(gi);
      const std::vector<Action>& list = rep.groups[g].actions;
      group_begin_[stream_offset_[r] + g] = size();
      group_size_[stream_offset_[r] + g] = static_cast<int32_t>(list.size());
      for (size_t k = 0; k < list.size(); ++k) {
        const Action& a = list[k];
        const size_t at = slot(r, a.stage, a.micro_batch);
        int32_t* lookup = nullptr;
        switch (a.kind) {
          case ActionKind::kForward:
            lookup = &forward_[at];
            break;
          case ActionKind::kBackwardInput:
          case ActionKind::kBackward:
            lookup = &backward_[at];
            break;
          case ActionKind::kBackwardWeight:
            lookup = &weight_[at];
            break;
          case ActionKind::kRecompute:
            lookup = &recompute_[at];
            break;
        }
        MOTLEY_CHECK(*lookup < 0, "TaskGraph: an action listed twice; was the plan checked?");
        *lookup = size();
        nodes_.push_back(TaskNode{task_kind(a.kind), r, g, a.stage, a.micro_batch, -1,
                                  static_cast<int32_t>(k), -1});
      }
    }
  }
  actions_ = size();
  for (int r = 0; r < n_rep; ++r) add_messages(r, lowered.replicas[r]);
  add_action_edges();
  succ_offset_.clear();  // not linked yet
}

// One node per send, numbered in each sender's order; a channel carries one message after
// another, so each waits for the previous one on its channel as well as for its producer.
void TaskGraph::add_messages(int r, const LoweredReplica& lowered) {
  const int n_groups = static_cast<int>(lowered.groups.size());
  const size_t channels = static_cast<size_t>(n_groups) * n_groups * 2;
  channel_last_.assign(channels, -1);
  channel_count_.assign(channels, 0);
  for (int g = 0; g < n_groups; ++g) {
    for (const LoweredOp& op : lowered.groups[g]) {
      const CommOp* c = std::get_if<CommOp>(&op);
      if (c == nullptr ||
          (c->kind != CommKind::kSendActivation && c->kind != CommKind::kSendGradient)) {
        continue;
      }
      const bool activation = c->kind == CommKind::kSendActivation;
      const size_t at = slot(r, c->stage, c->micro_batch);
      const size_t channel =
          (static_cast<size_t>(g) * n_groups + c->peer_group) * 2 + (activation ? 0 : 1);
      MOTLEY_CHECK(c->sequence == channel_count_[channel]++,
                   "TaskGraph: a message numbered out of its sender's order");
      const int32_t id = size();
      nodes_.push_back(
          TaskNode{activation ? TaskKind::kActivationMessage : TaskKind::kGradientMessage, r, g,
                   c->stage, c->micro_batch, c->peer_group, -1, static_cast<int32_t>(c->sequence)});
      (activation ? activation_message_
                  : gradient_message_)[at * fan_out_ + consumer_index(*c, r)] = id;
      add_edge(activation ? forward_[at] : backward_[at], id);
      if (channel_last_[channel] >= 0) add_edge(channel_last_[channel], id);
      channel_last_[channel] = id;
    }
  }
}

// Which of its producer's consumer stages a message goes to: the one on its peer group.
int TaskGraph::consumer_index(const CommOp& c, int replica) const {
  const Action produced{
      c.kind == CommKind::kSendActivation ? ActionKind::kForward : ActionKind::kBackwardInput,
      c.stage, c.micro_batch};
  const std::optional<Dependency> consumers = downstream_consumer(produced, shape_);
  MOTLEY_CHECK(consumers.has_value(), "TaskGraph: a message with no consumer");
  if (consumers->count == 1) return 0;
  const std::vector<int>& stage_group = stage_group_[replica];
  for (int k = 0; k < consumers->count; ++k) {
    if (stage_group[consumers->stage + k] == c.peer_group) return k;
  }
  MOTLEY_CHECK(false, "TaskGraph: a message to a group running none of its consumers");
  return 0;
}

void TaskGraph::add_action_edges() {
  for (int32_t v = 0; v < actions_; ++v) {
    if (nodes_[v].index > 0) add_edge(v - 1, v);
    for_each_input(v, [&](const TaskInput& in) {
      if (in.message >= 0) {
        add_edge(in.message, v);
      } else if (in.producer > v) {
        add_edge(in.producer, v);
      }
    });
  }
}

int32_t TaskGraph::add_node(const TaskNode& node) {
  nodes_.push_back(node);
  return size() - 1;
}

void TaskGraph::link() {
  const size_t n = nodes_.size();
  succ_offset_.assign(n + 1, 0);
  indegree_.assign(n, 0);
  for (const Edge& e : edges_) {
    ++succ_offset_[e.from + 1];
    ++indegree_[e.to];
  }
  for (size_t i = 0; i < n; ++i) succ_offset_[i + 1] += succ_offset_[i];
  succ_.resize(edges_.size());
  // Filled from the back, so that each list keeps the edges' order.
  for (size_t i = edges_.size(); i-- > 0;) {
    const Edge& e = edges_[i];
    succ_[--succ_offset_[e.from + 1]] = e.to;
  }
  // After the fill, succ_offset_[v + 1] points at v's first successor; shift back.
  for (size_t i = 0; i < n; ++i) succ_offset_[i] = succ_offset_[i + 1];
  succ_offset_[n] = static_cast<int32_t>(edges_.size());
}

int32_t TaskGraph::find(int replica, ActionKind kind, int stage, int micro_batch) const {
  const size_t at = slot(replica, stage, micro_batch);
  switch (kind) {
    case ActionKind::kForward:
      return forward_[at];
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward: {
      const int32_t b = backward_[at];
      return b >= 0 && nodes_[b].kind == task_kind(kind) ? b : -1;
    }
    case ActionKind::kBackwardWeight:
      return weight_[at];
    case ActionKind::kRecompute:
      return recompute_[at];
  }
  return -1;
}

int32_t TaskGraph::message(int replica, TaskKind kind, int stage, int micro_batch, int k) const {
  MOTLEY_CHECK(is_message(kind), "TaskGraph::message: not a message kind");
  const size_t at = slot(replica, stage, micro_batch) * fan_out_ + k;
  return kind == TaskKind::kActivationMessage ? activation_message_[at] : gradient_message_[at];
}

std::vector<int32_t> TaskGraph::sent_messages(int32_t id) const {
  const TaskNode& n = nodes_[id];
  const std::vector<int32_t>* lookup = nullptr;
  if (n.kind == TaskKind::kForward) {
    lookup = &activation_message_;
  } else if (n.kind == TaskKind::kBackwardInput || n.kind == TaskKind::kBackward) {
    lookup = &gradient_message_;
  } else {
    return {};
  }
  std::vector<int32_t> out;
  const size_t at = slot(n.replica, n.stage, n.micro_batch) * fan_out_;
  for (int k = 0; k < fan_out_; ++k) {
    if ((*lookup)[at + k] >= 0) out.push_back((*lookup)[at + k]);
  }
  return out;
}

int32_t TaskGraph::producer(int replica, const Dependency& d) const {
  const size_t at = slot(replica, d.stage, d.micro_batch);
  switch (d.producer) {
    case Producer::kForward:
      return forward_[at];
    case Producer::kInputBackward:
    case Producer::kBackwardInput:
      return backward_[at];
    case Producer::kRecompute:
      return recompute_[at];
  }
  return -1;
}

std::vector<TaskInput> TaskGraph::inputs(int32_t id) const {
  std::vector<TaskInput> out;
  for_each_input(id, [&](const TaskInput& in) { out.push_back(in); });
  return out;
}

void build_task_graph(const Plan& plan, const LoweredPlan& lowered, TaskGraph& graph) {
  graph.assign(plan, lowered);
  graph.link();
}

bool same_task_graph(const Replica& a, const Replica& b) {
  if (a.micro_batches != b.micro_batches || a.stage_group != b.stage_group ||
      a.groups.size() != b.groups.size()) {
    return false;
  }
  for (size_t g = 0; g < a.groups.size(); ++g) {
    if (a.groups[g].actions != b.groups[g].actions) return false;
  }
  return true;
}

}  // namespace motley
