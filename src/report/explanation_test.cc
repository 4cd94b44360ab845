#include "motley/report/explanation.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace motley {
namespace {

// The README's `motley plan` transcript (nemotron-h-8b on the default cluster), as numbers.
PlanExplanation readme_plan() {
  PlanExplanation e;
  e.layout = "4 x [A100-80GB x1 TP2 | H100-SXM x2 TP1]";
  e.replica_micro_batches = {32, 32, 32, 32};
  e.stage_layers = {15, 21, 18};
  e.bottleneck = milliseconds(91.53);
  e.ends_with_head = true;
  e.recompute = {{RecomputePolicy::kNone, 3}};
  e.schedule = "adaptive(eager-w)";
  e.micro_batch_size = 1;
  e.bubble_fraction = 0.041;
  e.dollars_per_million_tokens = 0.06;
  e.iteration_time = milliseconds(3066.39);
  e.tokens_per_s = 170979.2;
  e.lower_bound = Seconds(2.87);
  e.megatron = ExplainedBaseline{
      "TP 1 x PP 4 x DP 4, 1f1b, Megatron-LM's layer split, devices in cluster order, recompute "
      "none, 32 micro-batches of 1 per replica",
      milliseconds(212.01),
      1,
      0.494,
      milliseconds(7523.56),
      0.15};
  e.single_dimension = {{"partition-only", Seconds(7.52356 / 1.15)},
                        {"placement-only", Seconds(7.52356 / 2.24)},
                        {"schedule-only", Seconds(7.52356 / 1.10)}};
  return e;
}

TEST(ExplanationTest, RendersTheReadmeTranscript) {
  EXPECT_EQ(explanation_lines(readme_plan()),
            (std::vector<std::string>{
                "Placement: 4 x [A100-80GB x1 TP2 | H100-SXM x2 TP1]. megatron-1f1b: TP 1 x PP 4 x "
                "DP 4, 1f1b, Megatron-LM's layer split, devices in cluster order, recompute none, "
                "32 micro-batches of 1 per replica.",
                "Partition: 3 stages in the first replica with 15, 21, 18 layers; the busiest "
                "device group needs 91.53 ms per micro-batch (megatron-1f1b's split: 212.01 ms "
                "with micro-batches of 1); the stage with the LM head holds 17 other layer(s).",
                "Recompute: none (everything fits in memory).",
                "Schedule: adaptive(eager-w), micro-batch size 1, bubble 4.1% (megatron-1f1b: "
                "49.4%).",
                "Result: 3066.39 ms per iteration, 170979 tokens/s, 0.936 of the lower bound; "
                "2.45x megatron-1f1b (7523.56 ms).",
                "Gain over megatron-1f1b by one dimension alone: partition-only 1.15x, "
                "placement-only 2.24x, schedule-only 1.10x; all together 2.45x.",
            }));
}

TEST(ExplanationTest, UnevenReplicasIdleDevicesCostAndAWinningBaseline) {
  PlanExplanation e = readme_plan();
  e.replica_micro_batches = {40, 24};
  e.idle_devices = {{"A100-80GB", 2}, {"L40S", 1}};
  e.recompute = {{RecomputePolicy::kNone, 2}, {RecomputePolicy::kFull, 1}};
  e.cost_objective = true;
  e.dollars_per_million_tokens = 0.0625;
  e.baseline_plan = "metis";
  const std::vector<std::string> lines = explanation_lines(e);
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[0],
            "Placement: 4 x [A100-80GB x1 TP2 | H100-SXM x2 TP1]. Replicas run 40, 24 "
            "micro-batches: proportional to their speed, so that all finish together. "
            "megatron-1f1b: " +
                e.megatron->detail +
                ". Left idle: 2 A100-80GB, 1 L40S (the best plan found does not use them).");
  EXPECT_EQ(lines[2], "Recompute: none on 2 stage(s), full on 1 stage(s), where memory is short.");
  EXPECT_EQ(lines[4], "Cost: $0.062 per million tokens (megatron-1f1b: $0.150).");
  EXPECT_EQ(lines[5].rfind("Result: ", 0), 0u);
  EXPECT_EQ(lines[7],
            "This is the metis baseline's plan: no candidate of the full search beat it.");
}

// Micro-batches recomputed alone are recompute too, on stages whose policy is none.
TEST(ExplanationTest, MicroBatchesRecomputedAloneAreNamed) {
  PlanExplanation e = readme_plan();
  e.recomputed_micro_batches = 3;
  EXPECT_EQ(explanation_lines(e)[2],
            "Recompute: none on 3 stage(s); 3 micro-batch(es) recomputed alone on stages that "
            "keep their activations (the order's R actions), where memory is short.");
}

TEST(ExplanationTest, ShardedOptimizerStateIsALineOfItsOwn) {
  PlanExplanation e = readme_plan();
  const size_t without = explanation_lines(e).size();
  e.zero_stage = 1;
  e.zero_replicas = 4;
  const std::vector<std::string> lines = explanation_lines(e);
  ASSERT_EQ(lines.size(), without + 1);
  EXPECT_EQ(lines[3],
            "Optimizer: state sharded across the 4 replicas (ZeRO-1, Megatron's distributed "
            "optimizer): the gradients are reduce-scattered and the updated weights all-gathered.");
  EXPECT_EQ(lines[4].rfind("Schedule: ", 0), 0u);
  e.sequence_parallel = true;
  const std::vector<std::string> with_sp = explanation_lines(e);
  ASSERT_EQ(with_sp.size(), without + 2);
  EXPECT_EQ(with_sp[4].rfind("Sequence parallelism: on in the tensor-parallel groups", 0), 0u);
}

// A split head gets its own line with every shard's rows, and the partition line no longer
// speaks of a stage holding the head.
TEST(ExplanationTest, ASplitHeadIsALineOfItsOwn) {
  PlanExplanation e = readme_plan();
  const size_t without = explanation_lines(e).size();
  EXPECT_NE(explanation_lines(e)[1].find("the stage with the LM head holds"), std::string::npos);
  e.vocab_rows = {65536, 32768, 32768};
  const std::vector<std::string> lines = explanation_lines(e);
  ASSERT_EQ(lines.size(), without + 1);
  EXPECT_EQ(lines[1].find("the stage with the LM head"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[3],
            "Head: split by vocabulary rows over the 3 groups of each pipeline (vocabulary "
            "parallelism), 65536, 32768, 32768 rows, by each group's speed on it: every "
            "micro-batch's loss statistics cross between the shards and their input gradients "
            "are summed.");
  e.vocab_rows_balance_load = true;
  EXPECT_NE(explanation_lines(e)[3].find("65536, 32768, 32768 rows, to even out the groups' whole "
                                         "load (the shards take up what whole layers leave "
                                         "uneven): every"),
            std::string::npos)
      << explanation_lines(e)[3];
  e.embedding_rows = {100, 50, 50};
  EXPECT_NE(explanation_lines(e)[3].find(" The embedding likewise, 100, 50, 50 rows: its shards' "
                                         "partial embeddings are summed into the next stage"),
            std::string::npos)
      << explanation_lines(e)[3];
}

TEST(ExplanationTest, WithoutMegatronNothingIsComparedWithIt) {
  PlanExplanation e = readme_plan();
  e.megatron.reset();
  e.ends_with_head = false;
  EXPECT_EQ(explanation_lines(e),
            (std::vector<std::string>{
                "Placement: 4 x [A100-80GB x1 TP2 | H100-SXM x2 TP1].",
                "Partition: 3 stages in the first replica with 15, 21, 18 layers; the busiest "
                "device group needs 91.53 ms per micro-batch.",
                "Recompute: none (everything fits in memory).",
                "Schedule: adaptive(eager-w), micro-batch size 1, bubble 4.1%.",
                "Result: 3066.39 ms per iteration, 170979 tokens/s, 0.936 of the lower bound.",
            }));
  // One stage holds the head and everything else: no stage "with the LM head" to describe.
  e.ends_with_head = true;
  e.stage_layers = {54};
  EXPECT_EQ(explanation_lines(e)[1],
            "Partition: 1 stages in the first replica with 54 layers; the busiest device group "
            "needs 91.53 ms per micro-batch.");
}

}  // namespace
}  // namespace motley
