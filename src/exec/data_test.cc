#include "motley/exec/data.h"

#include <gtest/gtest.h>

#include "motley/exec/rank_layout.h"
#include "motley/plan/lower.h"
#include "motley/plan/task_graph.h"
#include "test_plans.h"

namespace motley {
namespace {

TEST(SyntheticCorpus, DeterministicExactLengthAndSentenceShaped) {
  const std::string a = synthetic_corpus(1000, 7);
  EXPECT_EQ(a.size(), 1000u);
  EXPECT_EQ(a, synthetic_corpus(1000, 7));
  EXPECT_NE(a, synthetic_corpus(1000, 8));
  EXPECT_TRUE(a[0] >= 'A' && a[0] <= 'Z');
  EXPECT_NE(a.find(". "), std::string::npos);
  // A prefix of a longer corpus: the generator does not depend on the requested length.
  EXPECT_EQ(synthetic_corpus(2000, 7).substr(0, 1000), a);
}

TEST(TokenStream, SamplesTileTheTextAndWrap) {
  auto stream = TokenStream::from_text("abcdefghij", "test");
  ASSERT_TRUE(stream.is_ok());
  EXPECT_EQ(stream->size(), 10);
  // Sample 1 of length 4 starts at 4: "efgh" + target "i".
  EXPECT_EQ(stream->sample(1, 4), (std::vector<int64_t>{'e', 'f', 'g', 'h', 'i'}));
  // Sample 2 starts at 8 and wraps: "ij" then "abc".
  EXPECT_EQ(stream->sample(2, 4), (std::vector<int64_t>{'i', 'j', 'a', 'b', 'c'}));
  // Sample 5 starts at 20 mod 10 = 0.
  EXPECT_EQ(stream->sample(5, 4), (std::vector<int64_t>{'a', 'b', 'c', 'd', 'e'}));
}

TEST(TokenStream, BytesAreUnsignedTokens) {
  auto stream = TokenStream::from_text(std::string("\xff\x01", 2), "test");
  ASSERT_TRUE(stream.is_ok());
  EXPECT_EQ(stream->sample(0, 1), (std::vector<int64_t>{255, 1}));
}

TEST(TokenStream, RejectsTooShortTextNamingTheSource) {
  auto stream = TokenStream::from_text("x", "corpus.txt");
  ASSERT_FALSE(stream.is_ok());
  EXPECT_EQ(stream.status().message(),
            "corpus.txt: a token stream needs at least 2 bytes of text, got 1");
}

TEST(TokenStream, MissingFileIsAnError) {
  auto stream = TokenStream::from_file("/nonexistent/corpus.txt");
  ASSERT_FALSE(stream.is_ok());
  EXPECT_NE(stream.status().message().find("/nonexistent/corpus.txt"), std::string::npos);
}

Plan two_replica_plan() {
  Plan plan;
  plan.stages = {Stage{0, 2, RecomputePolicy::kNone}, Stage{2, 4, RecomputePolicy::kNone}};
  Replica a;
  a.micro_batches = 3;
  a.stage_group = {0, 1};
  a.groups = {DeviceGroupSchedule{{0}, {}}, DeviceGroupSchedule{{1}, {}}};
  Replica b;
  b.micro_batches = 5;
  b.stage_group = {0, 0};
  b.groups = {DeviceGroupSchedule{{2}, {}}};
  plan.replicas = {a, b};
  return plan;
}

TEST(GlobalBatch, ReplicasTakeConsecutiveMicroBatches) {
  const Plan plan = two_replica_plan();
  EXPECT_EQ(total_micro_batches(plan), 8);
  EXPECT_EQ(global_micro_batch(plan, 0, 0, 0), 0);
  EXPECT_EQ(global_micro_batch(plan, 0, 0, 2), 2);
  EXPECT_EQ(global_micro_batch(plan, 0, 1, 0), 3);
  EXPECT_EQ(global_micro_batch(plan, 0, 1, 4), 7);
  EXPECT_EQ(global_micro_batch(plan, 2, 1, 4), 2 * 8 + 7);
}

TEST(RankLayout, OneRankPerGroupInReplicaOrder) {
  const RankLayout layout(two_replica_plan());
  EXPECT_EQ(layout.world_size(), 3);
  EXPECT_EQ(layout.rank_of(0, 1), 1);
  EXPECT_EQ(layout.rank_of(1, 0), 2);
  EXPECT_EQ(layout.place_of(2).replica, 1);
  EXPECT_EQ(layout.place_of(2).group, 0);
  EXPECT_EQ(layout.stages_of(0), (std::vector<int>{0}));
  EXPECT_EQ(layout.stages_of(2), (std::vector<int>{0, 1}));
  EXPECT_EQ(layout.stage_ranks(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(layout.stage_ranks(1), (std::vector<int>{1, 2}));
}

TEST(RankLayout, GradientSumsRunOverEveryHolderOfTheReadingLayers) {
  const RankLayout layout(two_replica_plan());
  EXPECT_EQ(layout.stages_of_layer(0), std::vector<int>{0});
  EXPECT_EQ(layout.stages_of_layer(3), std::vector<int>{1});
  EXPECT_TRUE(layout.stages_of_layer(4).empty());
  // A layer of stage 0: its holders in both replicas; single-device groups sum shards.
  RankLayout::GradientSumRanks sum = layout.gradient_sum_ranks(0, 0, {1}, true);
  EXPECT_EQ(sum.ranks, (std::vector<int>{0, 2}));
  EXPECT_FALSE(sum.full_size);
  // Stage 1 lives on rank 1 (replica 0) and rank 2 (replica 1, with stage 0).
  EXPECT_EQ(layout.gradient_sum_ranks(2, 1, {2}, true).ranks, (std::vector<int>{1, 2}));
  // A matrix read by layers 0 and 3 (an embedding and its tied head): every holder of either.
  EXPECT_EQ(layout.gradient_sum_ranks(1, 1, {0, 3}, true).ranks, (std::vector<int>{0, 1, 2}));
  // Not a plain shard: full-size sums, over the same ranks when every group has one device.
  sum = layout.gradient_sum_ranks(0, 0, {1}, false);
  EXPECT_EQ(sum.ranks, (std::vector<int>{0, 2}));
  EXPECT_TRUE(sum.full_size);
  // A layer no stage holds counts as the asking stage's.
  EXPECT_EQ(layout.gradient_sum_ranks(1, 1, {7}, true).ranks, (std::vector<int>{1, 2}));
}

TEST(RankLayout, GradientSumsOfShardsPairRanksOfOneIndexUnlessDegreesDiffer) {
  Plan plan = two_replica_plan();
  plan.replicas[0].groups[0].devices = {0, 1};  // replica 0's stage 0 on two devices
  plan.replicas[0].groups[1].devices = {2, 3};
  plan.replicas[1].groups[0].devices = {4, 5};
  const RankLayout layout(plan);  // ranks 0-1, 2-3 (replica 0), 4-5 (replica 1)
  // Stage 0: two groups of two, split alike: shard sums pair the ranks of one index.
  EXPECT_EQ(layout.gradient_sum_ranks(1, 0, {0}, true).ranks, (std::vector<int>{1, 5}));
  EXPECT_FALSE(layout.gradient_sum_ranks(1, 0, {0}, true).full_size);
  // A parameter replicated within the group sums full-size contributions of all holders.
  const RankLayout::GradientSumRanks replicated = layout.gradient_sum_ranks(1, 0, {0}, false);
  EXPECT_EQ(replicated.ranks, (std::vector<int>{0, 1, 4, 5}));
  EXPECT_TRUE(replicated.full_size);
  // Replica 1's group on one device: the replicas' shards no longer line up.
  plan.replicas[1].groups[0].devices = {4};
  const RankLayout uneven(plan);
  const RankLayout::GradientSumRanks mixed = uneven.gradient_sum_ranks(0, 0, {0}, true);
  EXPECT_EQ(mixed.ranks, (std::vector<int>{0, 1, 4}));
  EXPECT_TRUE(mixed.full_size);
}

TEST(MessageTag, PacksPayloadSequenceAndStep) {
  EXPECT_EQ(message_tag(0, TaskKind::kActivationMessage, 0), 0);
  EXPECT_EQ(message_tag(0, TaskKind::kActivationMessage, 3), 6);
  EXPECT_EQ(message_tag(0, TaskKind::kGradientMessage, 3), 7);
  EXPECT_EQ(message_tag(1, TaskKind::kGradientMessage, 0), (int64_t{1} << 23) | 1);
  // The step wraps at 256, so a tag always fits in 31 bits.
  EXPECT_EQ(message_tag(257, TaskKind::kActivationMessage, 0), int64_t{1} << 23);
  EXPECT_LT(message_tag(255, TaskKind::kGradientMessage, kMaxChannelSequence - 1),
            int64_t{1} << 31);
}

TEST(MessageTag, ChannelLengthIsTheLongestChannel) {
  const ModelSpec model = testing::preset("tiny-llama");
  auto length = [&](ScheduleKind kind, int stages, int virtual_stages, int64_t micro_batches) {
    const Plan plan =
        testing::uniform_plan(model, {kind, stages, virtual_stages, micro_batches, 1});
    TaskGraph graph;
    build_task_graph(plan, lower_plan(plan), graph);
    return channel_length(graph);
  };
  // A link carries one activation each way per micro-batch and stage boundary on it.
  EXPECT_EQ(length(ScheduleKind::k1f1b, 2, 1, 5), 5);
  EXPECT_EQ(length(ScheduleKind::kInterleaved, 2, 2, 4), 8);
  EXPECT_EQ(length(ScheduleKind::k1f1b, 1, 1, 4), 0);  // one stage sends nothing
}

}  // namespace
}  // namespace motley
