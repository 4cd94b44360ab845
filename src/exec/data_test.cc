#include "motley/exec/data.h"

#include <gtest/gtest.h>

#include "motley/exec/rank_layout.h"

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

TEST(MessageTag, PacksPayloadSequenceAndStep) {
  EXPECT_EQ(message_tag(0, CommKind::kSendActivation, 0), 0);
  EXPECT_EQ(message_tag(0, CommKind::kRecvActivation, 3), 6);
  EXPECT_EQ(message_tag(0, CommKind::kSendGradient, 3), 7);
  EXPECT_EQ(message_tag(1, CommKind::kRecvGradient, 0), (int64_t{1} << 23) | 1);
  // The step wraps at 256, so a tag always fits in 31 bits.
  EXPECT_EQ(message_tag(257, CommKind::kSendActivation, 0), int64_t{1} << 23);
  EXPECT_LT(message_tag(255, CommKind::kSendGradient, kMaxChannelSequence - 1), int64_t{1} << 31);
}

TEST(MessageTag, ChannelLengthIsTheLongestChannel) {
  LoweredPlan lowered;
  lowered.replicas.resize(1);
  lowered.replicas[0].groups = {{Action{}, CommOp{CommKind::kSendActivation, 0, 0, 1, 0},
                                 CommOp{CommKind::kSendActivation, 0, 1, 1, 1}},
                                {CommOp{CommKind::kRecvActivation, 0, 1, 0, 1}}};
  EXPECT_EQ(channel_length(lowered), 2);
  EXPECT_EQ(channel_length(LoweredPlan{}), 0);
}

}  // namespace
}  // namespace motley
