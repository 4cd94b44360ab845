#include "motley/plan/task_graph.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "motley/plan/plan_json.h"
#include "motley/plan/validate.h"
#include "test_plans.h"

// In the test helpers' namespace, so they need no using-declarations.
namespace motley::testing {
namespace {

Plan two_groups(const std::string& group0, const std::string& group1) {
  Plan p = one_f_one_b_plan(small_model(2), single_device_nodes(2), 2);
  p.replicas[0].groups[0].actions = actions(group0);
  p.replicas[0].groups[1].actions = actions(group1);
  return p;
}

TaskGraph graph_of(const Plan& p) {
  TaskGraph graph;
  build_task_graph(p, lower_plan(p), graph);
  return graph;
}

std::vector<int32_t> successors(const TaskGraph& graph, int32_t id) {
  const std::span<const int32_t> s = graph.successors(id);
  return std::vector<int32_t>(s.begin(), s.end());
}

// Group 1 takes micro-batch 1 first (docs/plan-format.md, "Lowering"): the sends of each
// channel are numbered in the sender's order and the receiver waits for the one it consumes.
TEST(TaskGraph, NodesAndEdgesOfTwoGroups) {
  const TaskGraph g = graph_of(two_groups("0F0 0F1 0B0 0B1", "1F1 1B1 1F0 1B0"));
  ASSERT_EQ(g.size(), 12);
  EXPECT_EQ(g.num_actions(), 8);
  using K = TaskKind;
  const std::vector<TaskNode> expected = {
      {K::kForward, 0, 0, 0, 0, -1, 0, -1},           // 0: 0F0
      {K::kForward, 0, 0, 0, 1, -1, 1, -1},           // 1: 0F1
      {K::kBackward, 0, 0, 0, 0, -1, 2, -1},          // 2: 0B0
      {K::kBackward, 0, 0, 0, 1, -1, 3, -1},          // 3: 0B1
      {K::kForward, 0, 1, 1, 1, -1, 0, -1},           // 4: 1F1
      {K::kBackward, 0, 1, 1, 1, -1, 1, -1},          // 5: 1B1
      {K::kForward, 0, 1, 1, 0, -1, 2, -1},           // 6: 1F0
      {K::kBackward, 0, 1, 1, 0, -1, 3, -1},          // 7: 1B0
      {K::kActivationMessage, 0, 0, 0, 0, 1, -1, 0},  // 8: 0F0's output, first on 0 -> 1
      {K::kActivationMessage, 0, 0, 0, 1, 1, -1, 1},  // 9: 0F1's output
      {K::kGradientMessage, 0, 1, 1, 1, 0, -1, 0},    // 10: 1B1's, first on 1 -> 0
      {K::kGradientMessage, 0, 1, 1, 0, 0, -1, 1},    // 11: 1B0's
  };
  for (int32_t v = 0; v < g.size(); ++v) EXPECT_EQ(g.node(v), expected[v]) << "node " << v;

  const std::vector<std::vector<int32_t>> succ = {
      {8, 1},   // 0F0: its message, then the group's next action
      {9, 2},   // 0F1
      {3},      // 0B0
      {},       // 0B1
      {5},      // 1F1
      {10, 6},  // 1B1
      {7},      // 1F0
      {11},     // 1B0
      {9, 6},   // message 0 of 0 -> 1: the next message on the channel, then 1F0
      {4},      // message 1 of 0 -> 1 feeds 1F1
      {11, 3},  // message 0 of 1 -> 0: the next on the channel, then 0B1
      {2},      // message 1 of 1 -> 0 feeds 0B0
  };
  const std::vector<int32_t> indegree = {0, 1, 2, 2, 1, 1, 2, 1, 1, 2, 1, 2};
  for (int32_t v = 0; v < g.size(); ++v) {
    EXPECT_EQ(successors(g, v), succ[v]) << "node " << v;
    EXPECT_EQ(g.indegree(v), indegree[v]) << "node " << v;
  }
  EXPECT_EQ(g.num_edges(), 16u);
}

TEST(TaskGraph, LookupsAndInputSources) {
  const TaskGraph g = graph_of(two_groups("0F0 0F1 0B0 0B1", "1F1 1B1 1F0 1B0"));
  EXPECT_EQ(g.num_groups(0), 2);
  EXPECT_EQ(g.group_begin(0, 1), 4);
  EXPECT_EQ(g.group_size(0, 1), 4);
  EXPECT_EQ(g.find(0, ActionKind::kForward, 1, 0), 6);
  EXPECT_EQ(g.find(0, ActionKind::kBackward, 0, 1), 3);
  EXPECT_EQ(g.find(0, ActionKind::kBackwardInput, 0, 1), -1);  // fused here
  EXPECT_EQ(g.find(0, ActionKind::kRecompute, 0, 1), -1);
  EXPECT_EQ(g.input_backward(0, 1, 1), 5);
  EXPECT_EQ(g.message(0, TaskKind::kActivationMessage, 0, 1), 9);
  EXPECT_EQ(g.message(0, TaskKind::kGradientMessage, 1, 0), 11);
  EXPECT_EQ(g.message(0, TaskKind::kGradientMessage, 0, 0), -1);  // stage 0 sends none
  EXPECT_EQ(g.sent_messages(0), std::vector<int32_t>{8});
  EXPECT_EQ(g.sent_messages(5), std::vector<int32_t>{10});
  EXPECT_TRUE(g.sent_messages(3).empty());

  auto inputs = [&](int32_t v) { return g.inputs(v); };
  EXPECT_TRUE(inputs(0).empty());
  // 0B0 consumes its own forward (same group) and stage 1's gradient, which message 11 carries.
  EXPECT_EQ(inputs(2), (std::vector<TaskInput>{{0, -1}, {7, 11}}));
  EXPECT_EQ(inputs(6), (std::vector<TaskInput>{{0, 8}}));
  EXPECT_EQ(inputs(7), (std::vector<TaskInput>{{6, -1}}));  // the last stage starts from the loss
}

TEST(TaskGraph, SplitBackwardAndRecomputeStayOnTheirGroup) {
  Plan p = two_groups("0F0 0F1 0R0 0I0 0W0 0R1 0I1 0W1", "1F0 1I0 1W0 1F1 1I1 1W1");
  p.stages[0].recompute = RecomputePolicy::kFull;
  const TaskGraph g = graph_of(p);
  const int32_t r0 = g.find(0, ActionKind::kRecompute, 0, 0);
  const int32_t i0 = g.find(0, ActionKind::kBackwardInput, 0, 0);
  const int32_t w0 = g.find(0, ActionKind::kBackwardWeight, 0, 0);
  EXPECT_EQ(r0, 2);
  EXPECT_EQ(i0, 3);
  EXPECT_EQ(w0, 4);
  EXPECT_EQ(g.inputs(i0), (std::vector<TaskInput>{{0, -1},
                                                  {g.find(0, ActionKind::kBackwardInput, 1, 0),
                                                   g.message(0, TaskKind::kGradientMessage, 1, 0)},
                                                  {r0, -1}}));
  // W sends nothing: the gradient left after I.
  EXPECT_TRUE(g.sent_messages(w0).empty());
  EXPECT_EQ(g.sent_messages(g.find(0, ActionKind::kBackwardInput, 1, 1)),
            std::vector<int32_t>{g.message(0, TaskKind::kGradientMessage, 1, 1)});
}

// An input listed later on its own group is the one same-group edge: the cycle validation
// reports as a deadlock.
TEST(TaskGraph, AnInputListedLaterOnTheSameGroupGetsAnEdge) {
  const TaskGraph g = graph_of(two_groups("0F0 0F1 0B0 0B1", "1B0 1F0 1F1 1B1"));
  const int32_t b = g.find(0, ActionKind::kBackward, 1, 0);
  const int32_t f = g.find(0, ActionKind::kForward, 1, 0);
  ASSERT_LT(b, f);
  EXPECT_EQ(successors(g, f), (std::vector<int32_t>{b, f + 1}));
  EXPECT_EQ(g.indegree(b), 1);  // first in its group: only the late forward
}

// An executor's program, read from the graph: before each action the messages it waits on
// (receives), after it the message it sends. It is exactly lower_plan's.
std::vector<LoweredOp> program(const TaskGraph& g, int r, int group) {
  std::vector<LoweredOp> ops;
  for (int32_t v = g.group_begin(r, group); v < g.group_begin(r, group) + g.group_size(r, group);
       ++v) {
    for (const TaskInput& in : g.inputs(v)) {
      if (in.message < 0) continue;
      const TaskNode& m = g.node(in.message);
      const bool activation = m.kind == TaskKind::kActivationMessage;
      ops.push_back(CommOp{activation ? CommKind::kRecvActivation : CommKind::kRecvGradient,
                           m.stage, m.micro_batch, m.group, m.sequence});
    }
    const TaskNode& n = g.node(v);
    ops.push_back(Action{action_kind(n.kind), n.stage, n.micro_batch});
    const std::vector<int32_t> sent = g.sent_messages(v);
    if (sent.empty()) continue;
    MOTLEY_CHECK(sent.size() == 1u, "one message per output without shards");
    const TaskNode& m = g.node(sent[0]);
    const bool activation = m.kind == TaskKind::kActivationMessage;
    ops.push_back(CommOp{activation ? CommKind::kSendActivation : CommKind::kSendGradient, m.stage,
                         m.micro_batch, m.peer_group, m.sequence});
  }
  return ops;
}

TEST(TaskGraph, EachGroupsProgramIsTheLoweringOnRandomPlans) {
  std::mt19937 rng(20240611);
  TaskGraph reused;
  for (int trial = 0; trial < 200; ++trial) {
    int stages = 0;
    const Plan p = random_plan(rng, &stages);
    const LoweredPlan lowered = lower_plan(p);
    build_task_graph(p, lowered, reused);
    const TaskGraph fresh = graph_of(p);
    ASSERT_EQ(reused.size(), fresh.size());
    for (int32_t v = 0; v < fresh.size(); ++v) {
      ASSERT_EQ(reused.node(v), fresh.node(v));
      ASSERT_EQ(successors(reused, v), successors(fresh, v));
    }
    for (int group = 0; group < reused.num_groups(0); ++group) {
      EXPECT_EQ(program(reused, 0, group), lowered.replicas[0].groups[group]) << plan_to_text(p);
    }
  }
}

TEST(TaskGraph, ReplicasFollowEachOther) {
  Plan p = one_f_one_b_plan(small_model(2), single_device_nodes(4), 1);
  Replica second = p.replicas[0];
  second.groups[0].devices = {2};
  second.groups[1].devices = {3};
  p.replicas.push_back(second);
  const TaskGraph g = graph_of(p);
  // Actions of both replicas first, then the messages of both.
  EXPECT_EQ(g.num_actions(), 8);
  EXPECT_EQ(g.size(), 12);
  EXPECT_EQ(g.group_begin(1, 0), 4);
  EXPECT_EQ(g.find(1, ActionKind::kForward, 1, 0), 6);
  EXPECT_EQ(g.message(1, TaskKind::kActivationMessage, 0, 0), 10);
  EXPECT_EQ(g.node(10).replica, 1);
  EXPECT_EQ(successors(g, 10), (std::vector<int32_t>{6}));
}

// A user's own tasks join after the plan's; their edges come after the plan's in each list.
TEST(TaskGraph, AddedTasksAndEdgesAreLinkedAfterThePlans) {
  const Plan p = two_groups("0F0 0F1 0B0 0B1", "1F1 1B1 1F0 1B0");
  TaskGraph g;
  g.assign(p, lower_plan(p));
  const int32_t step = g.add_node(TaskNode{TaskKind::kExternal, 0, 0, -1, -1, -1, -1, -1});
  EXPECT_EQ(step, 12);
  g.add_edge(3, step);
  g.add_edge(0, step);
  g.link();
  EXPECT_EQ(successors(g, 0), (std::vector<int32_t>{8, 1, step}));
  EXPECT_EQ(successors(g, 3), (std::vector<int32_t>{step}));
  EXPECT_EQ(g.indegree(step), 2);
}

// Vocabulary shards: the stage before them sends its activation to each shard on another
// group, every shard sends its loss statistics to every other shard's group, and each shard's
// input gradient goes back to the stage before them.
TEST(TaskGraph, VocabularyShardsExchangeStatisticsAndSumGradients) {
  const Plan p = vocab_shard_plan();
  const LoweredPlan lowered = lower_plan(p);
  const TaskGraph g = graph_of(p);
  EXPECT_EQ(g.num_actions(), 24);
  int activations = 0, gradients = 0;
  for (int32_t v = g.num_actions(); v < g.size(); ++v) {
    (g.node(v).kind == TaskKind::kActivationMessage ? activations : gradients) += 1;
  }
  // Per micro-batch: 0F -> stage 1, 1F -> shard 2, the statistics 2F -> 3 and 3F -> 2;
  // 1I -> stage 0, 2I -> stage 1.
  EXPECT_EQ(activations, 8);
  EXPECT_EQ(gradients, 4);
  // I(2, 0) on group 0 waits for its own F and shard 3's statistics, which crossed.
  const int32_t i20 = g.find(0, ActionKind::kBackwardInput, 2, 0);
  const std::vector<TaskInput> in = g.inputs(i20);
  ASSERT_EQ(in.size(), 3u);
  EXPECT_EQ(in[0].producer, g.find(0, ActionKind::kForward, 2, 0));
  EXPECT_EQ(in[0].message, -1);
  EXPECT_EQ(in[1].producer, g.find(0, ActionKind::kForward, 2, 0));  // its own statistics
  EXPECT_EQ(in[1].message, -1);
  EXPECT_EQ(in[2].producer, g.find(0, ActionKind::kForward, 3, 0));
  EXPECT_EQ(g.node(in[2].message).kind, TaskKind::kActivationMessage);
  EXPECT_EQ(g.node(in[2].message).peer_group, 0);
  // I(1, 0) on group 1 sums both shards' gradients: shard 2's crossed, shard 3's did not.
  const std::vector<TaskInput> sum = g.inputs(g.find(0, ActionKind::kBackwardInput, 1, 0));
  ASSERT_EQ(sum.size(), 3u);
  EXPECT_EQ(sum[1].producer, g.find(0, ActionKind::kBackwardInput, 2, 0));
  EXPECT_EQ(g.node(sum[1].message).kind, TaskKind::kGradientMessage);
  EXPECT_EQ(sum[2].producer, g.find(0, ActionKind::kBackwardInput, 3, 0));
  EXPECT_EQ(sum[2].message, -1);
  // F(1, 0) sends to shard 2 only (shard 3 is on its own group).
  EXPECT_EQ(g.sent_messages(g.find(0, ActionKind::kForward, 1, 0)).size(), 1u);
  // Group 1's lowered list: receive 0F0, run 1F0, send it to shard 2, run 3F0, send the
  // statistics, and so on; every receive names its sender's channel number.
  const std::vector<LoweredOp>& ops = lowered.replicas[0].groups[1];
  ASSERT_GE(ops.size(), 5u);
  EXPECT_EQ(std::get<CommOp>(ops[0]), (CommOp{CommKind::kRecvActivation, 0, 0, 0, 0}));
  EXPECT_EQ(std::get<Action>(ops[1]), (Action{ActionKind::kForward, 1, 0}));
  EXPECT_EQ(std::get<CommOp>(ops[2]), (CommOp{CommKind::kSendActivation, 1, 0, 0, 0}));
  EXPECT_EQ(std::get<Action>(ops[3]), (Action{ActionKind::kForward, 3, 0}));
  EXPECT_EQ(std::get<CommOp>(ops[4]), (CommOp{CommKind::kSendActivation, 3, 0, 0, 1}));
}

}  // namespace
}  // namespace motley::testing
