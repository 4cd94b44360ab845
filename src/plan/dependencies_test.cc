#include "motley/plan/dependencies.h"

#include <gtest/gtest.h>

#include <vector>

namespace motley {
namespace {

std::vector<Dependency> deps_of(ActionKind kind, int stage, int stages) {
  const Dependencies d = data_dependencies(Action{kind, stage, 7}, stages);
  return std::vector<Dependency>(d.begin(), d.end());
}

TEST(Dependencies, ForwardConsumesThePreviousStagesActivation) {
  EXPECT_TRUE(deps_of(ActionKind::kForward, 0, 4).empty());
  const std::vector<Dependency> d = deps_of(ActionKind::kForward, 2, 4);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], (Dependency{Producer::kForward, 1, 7, false, true}));
}

TEST(Dependencies, BackwardConsumesItsForwardTheNextGradientAndAnyRecompute) {
  for (ActionKind kind : {ActionKind::kBackwardInput, ActionKind::kBackward}) {
    const std::vector<Dependency> mid = deps_of(kind, 1, 4);
    ASSERT_EQ(mid.size(), 3u);
    EXPECT_EQ(mid[0], (Dependency{Producer::kForward, 1, 7, false, false}));
    EXPECT_EQ(mid[1], (Dependency{Producer::kInputBackward, 2, 7, false, true}));
    EXPECT_EQ(mid[2], (Dependency{Producer::kRecompute, 1, 7, true, false}));
    // The last stage's backward starts from the loss.
    const std::vector<Dependency> last = deps_of(kind, 3, 4);
    ASSERT_EQ(last.size(), 2u);
    EXPECT_EQ(last[1].producer, Producer::kRecompute);
  }
}

TEST(Dependencies, WeightGradientAndRecomputeStayOnTheirStage) {
  const std::vector<Dependency> w = deps_of(ActionKind::kBackwardWeight, 0, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], (Dependency{Producer::kBackwardInput, 0, 7, false, false}));
  const std::vector<Dependency> r = deps_of(ActionKind::kRecompute, 2, 3);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], (Dependency{Producer::kForward, 2, 7, false, false}));
}

// downstream_consumer is exactly the inverse of the crossing inputs: for every action A and
// every action C, C lists A as a crossing input iff A's consumer is C.
TEST(Dependencies, DownstreamConsumerInvertsTheCrossingInputs) {
  const int stages = 5;
  const std::vector<ActionKind> kinds = {ActionKind::kForward, ActionKind::kBackwardInput,
                                         ActionKind::kBackwardWeight, ActionKind::kBackward,
                                         ActionKind::kRecompute};
  auto produces = [](Producer p, ActionKind k) {
    return p == Producer::kForward ? k == ActionKind::kForward : is_input_backward(k);
  };
  for (ActionKind pk : kinds) {
    for (int ps = 0; ps < stages; ++ps) {
      const std::optional<Dependency> consumer = downstream_consumer(Action{pk, ps, 3}, stages);
      int matches = 0;
      for (ActionKind ck : kinds) {
        for (int cs = 0; cs < stages; ++cs) {
          for (const Dependency& d : data_dependencies(Action{ck, cs, 3}, stages)) {
            if (!d.crosses_stages || d.stage != ps || !produces(d.producer, pk)) continue;
            ++matches;
            ASSERT_TRUE(consumer.has_value());
            EXPECT_EQ(consumer->stage, cs);
            EXPECT_EQ(consumer->micro_batch, 3);
            EXPECT_TRUE(produces(consumer->producer, ck));
          }
        }
      }
      // F and I / B each have one consumer kind of theirs, counted for both fused and split.
      EXPECT_EQ(consumer.has_value(), matches > 0) << action_letter(pk) << " stage " << ps;
    }
  }
}

// With vocabulary shards the rule is still exactly inverted: an action's crossing input names
// a producing stage among [stage, stage + count) iff the producer's consumers include it.
TEST(Dependencies, VocabularyShardsRunSideBySide) {
  for (const PipelineShape shape :
       {PipelineShape{4, 2}, PipelineShape{6, 3}, PipelineShape{3, 2}, PipelineShape{6, 2, 2},
        PipelineShape{5, 0, 2}, PipelineShape{8, 3, 3}}) {
    const std::vector<ActionKind> kinds = {ActionKind::kForward, ActionKind::kBackwardInput,
                                           ActionKind::kBackwardWeight, ActionKind::kBackward};
    auto produces = [](Producer p, ActionKind k) {
      return p == Producer::kForward ? k == ActionKind::kForward : is_input_backward(k);
    };
    for (ActionKind pk : kinds) {
      for (int ps = 0; ps < shape.stages; ++ps) {
        const std::optional<Dependency> consumer = downstream_consumer(Action{pk, ps, 3}, shape);
        int matches = 0;
        for (ActionKind ck : kinds) {
          for (int cs = 0; cs < shape.stages; ++cs) {
            for (const Dependency& d : data_dependencies(Action{ck, cs, 3}, shape)) {
              if (!d.crosses_stages || ps < d.stage || ps >= d.stage + d.count ||
                  !produces(d.producer, pk) || (ps == cs && d.count == 1)) {
                continue;
              }
              ++matches;
              ASSERT_TRUE(consumer.has_value()) << action_letter(pk) << ps;
              EXPECT_GE(cs, consumer->stage);
              EXPECT_LT(cs, consumer->stage + consumer->count);
              EXPECT_TRUE(produces(consumer->producer, ck));
            }
          }
        }
        EXPECT_EQ(consumer.has_value(), matches > 0) << action_letter(pk) << " stage " << ps;
      }
    }
    // The shards all follow the stage before them, and it waits for all of them.
    const int b = shape.first_shard();
    for (int s = b; s < shape.stages; ++s) {
      EXPECT_EQ(data_dependencies(Action{ActionKind::kForward, s, 0}, shape)[0],
                (Dependency{Producer::kForward, b - 1, 0, false, true, 1}));
      EXPECT_EQ(data_dependencies(Action{ActionKind::kBackwardInput, s, 0}, shape)[1],
                (Dependency{Producer::kForward, b, 0, false, true, shape.vocab_shards}));
    }
    if (shape.vocab_shards > 0) {
      EXPECT_EQ(data_dependencies(Action{ActionKind::kBackward, b - 1, 0}, shape)[1],
                (Dependency{Producer::kInputBackward, b, 0, false, true, shape.vocab_shards}));
    }
    // The embedding's shards need nothing to start; the stage after them sums them all, and
    // each shard's backward waits for that stage's input gradient.
    const int e = shape.embedding_shards;
    for (int s = 0; s < e; ++s) {
      EXPECT_EQ(data_dependencies(Action{ActionKind::kForward, s, 0}, shape).size(), 0);
      EXPECT_EQ(data_dependencies(Action{ActionKind::kBackwardInput, s, 0}, shape)[1],
                (Dependency{Producer::kInputBackward, e, 0, false, true, 1}));
    }
    if (e > 0) {
      EXPECT_EQ(data_dependencies(Action{ActionKind::kForward, e, 0}, shape)[0],
                (Dependency{Producer::kForward, 0, 0, false, true, e}));
    }
  }
}

TEST(Dependencies, MemoryRule) {
  EXPECT_TRUE(allocates_activations(ActionKind::kForward));
  EXPECT_TRUE(frees_activations(ActionKind::kBackwardWeight));
  EXPECT_TRUE(frees_activations(ActionKind::kBackward));
  EXPECT_FALSE(frees_activations(ActionKind::kBackwardInput));
  EXPECT_FALSE(frees_activations(ActionKind::kRecompute));
}

}  // namespace
}  // namespace motley
