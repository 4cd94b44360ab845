// The action interpreter alone — no gradient sums, no optimizer — over a two-stage 1F1B plan:
// it must leave the sequential reference's first-step loss and gradients, bit for bit, tell its
// callers of every compute action in list order, and post the sends lower_plan lists, where it
// lists them. Ranks run as threads over the in-process transport.
#include "action_interpreter.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "motley/plan/lower.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/task_graph.h"
#include "test_util.h"

namespace motley::internal {
namespace {

// What each of the two ranks of a two-stage plan saw over one step.
struct TwoRanks {
  std::vector<double> loss = std::vector<double>(2);
  std::vector<std::map<std::string, at::Tensor>> gradients =
      std::vector<std::map<std::string, at::Tensor>>(2);
  std::vector<std::vector<int>> started{2}, finished{2};
  std::vector<std::vector<std::string>> computed{2}, traced{2};
  std::vector<int64_t> recomputed = std::vector<int64_t>(2);
};

TwoRanks run_two_ranks(const Plan& plan, const ModelSpec& model, const TokenStream& tokens,
                       const TaskGraph& graph) {
  const RankLayout layout(plan);
  InProcessNetwork network(2);
  TwoRanks out;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto transport = network.endpoint(rank);
      ParameterStore store;
      const Stage& stage = plan.stages[rank];
      auto module = make_transformer_stage(model, stage.layer_begin, stage.layer_end,
                                           StageModuleOptions{11, plan.seq_len, {}}, store);
      ASSERT_TRUE(module.is_ok()) << module.status().message();
      std::vector<at::Tensor> params;
      for (const StageParameter& p : (*module)->parameters()) params.push_back(p.tensor);
      auto after_action = [&, rank](int r, int64_t step, const Action& a, Seconds elapsed) {
        EXPECT_EQ(r, rank);
        EXPECT_EQ(step, 0);
        EXPECT_GE(elapsed.value(), 0);
        out.computed[rank].push_back(action_to_string(a));
      };
      ActionInterpreter interpreter(plan, model, tokens, layout, rank, graph,
                                    {{rank, module->get()}}, {{rank, params}}, after_action,
                                    *transport);
      EXPECT_EQ(interpreter.actions(), plan.replicas[0].groups[rank].actions);
      const ActionCallbacks callbacks{[&, rank](int i) { out.started[rank].push_back(i); },
                                      [&, rank](int i) { out.finished[rank].push_back(i); }};
      StepTrace trace(true);
      trace.begin();
      ASSERT_TRUE(interpreter.run_step(0, Precision::kFp32, callbacks, trace).is_ok());
      out.loss[rank] = interpreter.loss_sum();
      out.recomputed[rank] = interpreter.recomputed_forwards();
      for (const NamedTensor& p : store.parameters()) out.gradients[rank][p.name] = p.tensor.grad();
      for (const TraceEvent& e : trace.take()) out.traced[rank].push_back(e.name);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(ActionInterpreter, TwoStagesLeaveTheReferencesLossAndGradientsBitForBit) {
  testing::single_threaded();
  const ModelSpec model = testing::preset("tiny-llama");
  const Plan plan = testing::uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  const LoweredPlan lowered = lower_plan(plan);
  TaskGraph graph;
  build_task_graph(plan, lowered, graph);
  const TwoRanks ran = run_two_ranks(plan, model, *tokens, graph);
  const auto& [loss, gradients, started, finished, computed, traced, recomputed] = ran;
  EXPECT_EQ(recomputed, (std::vector<int64_t>{0, 0}));

  const testing::WorldResult reference =
      testing::run_reference(plan, model, *tokens, 1, GradientOrder::kSequential);
  EXPECT_EQ(loss[0], 0.0);  // no loss off the last stage
  EXPECT_EQ(loss[1], reference.losses[0]);
  size_t compared = 0;
  for (int rank = 0; rank < 2; ++rank) {
    for (const auto& [name, grad] : gradients[rank]) {
      ASSERT_TRUE(grad.defined()) << name;
      EXPECT_TRUE(at::equal(grad, reference.parameters.at(name).grad())) << name;
      ++compared;
    }
    // Every action of the list, started and finished in order, and told after it ran; the
    // trace's actions, the sends where the lowering puts them and the wait for them.
    std::vector<int> all;
    std::vector<std::string> actions, expected_trace;
    for (const Action& a : plan.replicas[0].groups[rank].actions) {
      all.push_back(static_cast<int>(all.size()));
      actions.push_back(action_to_string(a));
    }
    EXPECT_EQ(started[rank], all);
    EXPECT_EQ(finished[rank], all);
    EXPECT_EQ(computed[rank], actions);
    for (const LoweredOp& op : lowered.replicas[0].groups[rank]) {
      if (const auto* a = std::get_if<Action>(&op)) {
        expected_trace.push_back(action_to_string(*a));
      } else if (const CommOp& c = std::get<CommOp>(op);
                 c.kind == CommKind::kSendActivation || c.kind == CommKind::kSendGradient) {
        expected_trace.push_back(std::string(comm_kind_name(c.kind)) + " " +
                                 std::to_string(c.stage) + "/" + std::to_string(c.micro_batch));
      }
    }
    expected_trace.push_back("finish_sends");
    EXPECT_EQ(traced[rank], expected_trace);
  }
  EXPECT_EQ(compared, reference.parameters.size());
}

// An R on a stage that keeps its activations: that micro-batch's F ran without a graph and its
// R ran the forward again (once, for micro-batch 1 of stage 0 only), and the step's loss and
// gradients are still the reference's, bit for bit.
TEST(ActionInterpreter, RecomputingOneMicroBatchRunsItsForwardAgainAndChangesNoNumber) {
  testing::single_threaded();
  const ModelSpec model = testing::preset("tiny-llama");
  Plan plan = testing::uniform_plan(model, {ScheduleKind::k1f1b, 2, 1, 4, 1});
  std::vector<Action>& order = plan.replicas[0].groups[0].actions;
  order.insert(std::find(order.begin(), order.end(), Action{ActionKind::kBackward, 0, 1}),
               Action{ActionKind::kRecompute, 0, 1});
  auto tokens = TokenStream::from_text(synthetic_corpus(4096, 3), "corpus");
  ASSERT_TRUE(tokens.is_ok());
  TaskGraph graph;
  build_task_graph(plan, lower_plan(plan), graph);
  const TwoRanks ran = run_two_ranks(plan, model, *tokens, graph);
  EXPECT_EQ(ran.recomputed, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ran.computed[0].size(), order.size());
  const testing::WorldResult reference =
      testing::run_reference(plan, model, *tokens, 1, GradientOrder::kSequential);
  EXPECT_EQ(ran.loss[1], reference.losses[0]);
  for (int rank = 0; rank < 2; ++rank) {
    for (const auto& [name, grad] : ran.gradients[rank]) {
      EXPECT_TRUE(at::equal(grad, reference.parameters.at(name).grad())) << name;
    }
  }
}

}  // namespace
}  // namespace motley::internal
