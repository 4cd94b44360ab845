#include "motley/plan/lower.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include "motley/plan/plan_json.h"
#include "motley/plan/validate.h"
#include "test_plans.h"

// In the test helpers' namespace, so they need no using-declarations.
namespace motley::testing {
namespace {

// "0F3" for actions; "SA(0,3)>1#0" for a send of stage 0's activation of micro-batch 3 to
// group 1 as message 0 of that channel, "RG(2,0)<2#1" for a receive of stage 2's gradient.
std::string op_text(const LoweredOp& op) {
  if (const Action* a = std::get_if<Action>(&op)) return action_to_string(*a);
  const CommOp& c = std::get<CommOp>(op);
  const bool send = c.kind == CommKind::kSendActivation || c.kind == CommKind::kSendGradient;
  const bool activation =
      c.kind == CommKind::kSendActivation || c.kind == CommKind::kRecvActivation;
  std::ostringstream out;
  out << (send ? 'S' : 'R') << (activation ? 'A' : 'G') << '(' << c.stage << ',' << c.micro_batch
      << ')' << (send ? '>' : '<') << c.peer_group << '#' << c.sequence;
  return out.str();
}

std::string group_text(const std::vector<LoweredOp>& ops) {
  std::string out;
  for (const LoweredOp& op : ops) {
    if (!out.empty()) out += ' ';
    out += op_text(op);
  }
  return out;
}

std::vector<std::string> lowered_text(const Plan& plan) {
  const LoweredPlan lowered = lower_plan(plan);
  EXPECT_EQ(lowered.replicas.size(), 1u);
  std::vector<std::string> out;
  for (const auto& ops : lowered.replicas[0].groups) out.push_back(group_text(ops));
  return out;
}

Plan plan_with(int stages, int micro_batches, std::vector<int> stage_group,
               std::vector<std::string> orders) {
  Plan p = one_f_one_b_plan(small_model(stages), single_device_nodes(stages), micro_batches);
  p.replicas[0].stage_group = std::move(stage_group);
  p.replicas[0].groups.resize(orders.size());
  for (size_t g = 0; g < orders.size(); ++g) p.replicas[0].groups[g].actions = actions(orders[g]);
  return p;
}

TEST(CommKindName, Names) {
  EXPECT_STREQ(comm_kind_name(CommKind::kSendActivation), "send_activation");
  EXPECT_STREQ(comm_kind_name(CommKind::kRecvGradient), "recv_gradient");
}

TEST(Lower, OneFOneBFourStagesTwoMicroBatches) {
  const Plan p = one_f_one_b_plan(small_model(4), single_device_nodes(4), 2);
  EXPECT_EQ(lowered_text(p), (std::vector<std::string>{
                                 "0F0 SA(0,0)>1#0 0F1 SA(0,1)>1#1 RG(1,0)<1#0 0B0 RG(1,1)<1#1 0B1",
                                 "RA(0,0)<0#0 1F0 SA(1,0)>2#0 RA(0,1)<0#1 1F1 SA(1,1)>2#1 "
                                 "RG(2,0)<2#0 1B0 SG(1,0)>0#0 RG(2,1)<2#1 1B1 SG(1,1)>0#1",
                                 "RA(1,0)<1#0 2F0 SA(2,0)>3#0 RA(1,1)<1#1 2F1 SA(2,1)>3#1 "
                                 "RG(3,0)<3#0 2B0 SG(2,0)>1#0 RG(3,1)<3#1 2B1 SG(2,1)>1#1",
                                 "RA(2,0)<2#0 3F0 3B0 SG(3,0)>2#0 RA(2,1)<2#1 3F1 3B1 SG(3,1)>2#1",
                             }));
}

TEST(Lower, OneFOneBFourStagesThreeMicroBatches) {
  const Plan p = one_f_one_b_plan(small_model(4), single_device_nodes(4), 3);
  EXPECT_EQ(lowered_text(p), (std::vector<std::string>{
                                 "0F0 SA(0,0)>1#0 0F1 SA(0,1)>1#1 0F2 SA(0,2)>1#2 "
                                 "RG(1,0)<1#0 0B0 RG(1,1)<1#1 0B1 RG(1,2)<1#2 0B2",
                                 "RA(0,0)<0#0 1F0 SA(1,0)>2#0 RA(0,1)<0#1 1F1 SA(1,1)>2#1 "
                                 "RA(0,2)<0#2 1F2 SA(1,2)>2#2 RG(2,0)<2#0 1B0 SG(1,0)>0#0 "
                                 "RG(2,1)<2#1 1B1 SG(1,1)>0#1 RG(2,2)<2#2 1B2 SG(1,2)>0#2",
                                 "RA(1,0)<1#0 2F0 SA(2,0)>3#0 RA(1,1)<1#1 2F1 SA(2,1)>3#1 "
                                 "RG(3,0)<3#0 2B0 SG(2,0)>1#0 RA(1,2)<1#2 2F2 SA(2,2)>3#2 "
                                 "RG(3,1)<3#1 2B1 SG(2,1)>1#1 RG(3,2)<3#2 2B2 SG(2,2)>1#2",
                                 "RA(2,0)<2#0 3F0 3B0 SG(3,0)>2#0 RA(2,1)<2#1 3F1 3B1 SG(3,1)>2#1 "
                                 "RA(2,2)<2#2 3F2 3B2 SG(3,2)>2#2",
                             }));
}

TEST(Lower, OneFOneBFourStagesFourMicroBatchesSplitBackward) {
  // The gradient leaves after I; W sends nothing.
  const Plan p = one_f_one_b_plan(small_model(4), single_device_nodes(4), 4, /*split=*/true);
  EXPECT_EQ(lowered_text(p),
            (std::vector<std::string>{
                "0F0 SA(0,0)>1#0 0F1 SA(0,1)>1#1 0F2 SA(0,2)>1#2 0F3 SA(0,3)>1#3 "
                "RG(1,0)<1#0 0I0 0W0 RG(1,1)<1#1 0I1 0W1 RG(1,2)<1#2 0I2 0W2 "
                "RG(1,3)<1#3 0I3 0W3",
                "RA(0,0)<0#0 1F0 SA(1,0)>2#0 RA(0,1)<0#1 1F1 SA(1,1)>2#1 "
                "RA(0,2)<0#2 1F2 SA(1,2)>2#2 RG(2,0)<2#0 1I0 SG(1,0)>0#0 1W0 "
                "RA(0,3)<0#3 1F3 SA(1,3)>2#3 RG(2,1)<2#1 1I1 SG(1,1)>0#1 1W1 "
                "RG(2,2)<2#2 1I2 SG(1,2)>0#2 1W2 RG(2,3)<2#3 1I3 SG(1,3)>0#3 1W3",
                "RA(1,0)<1#0 2F0 SA(2,0)>3#0 RA(1,1)<1#1 2F1 SA(2,1)>3#1 "
                "RG(3,0)<3#0 2I0 SG(2,0)>1#0 2W0 RA(1,2)<1#2 2F2 SA(2,2)>3#2 "
                "RG(3,1)<3#1 2I1 SG(2,1)>1#1 2W1 RA(1,3)<1#3 2F3 SA(2,3)>3#3 "
                "RG(3,2)<3#2 2I2 SG(2,2)>1#2 2W2 RG(3,3)<3#3 2I3 SG(2,3)>1#3 2W3",
                "RA(2,0)<2#0 3F0 3I0 SG(3,0)>2#0 3W0 RA(2,1)<2#1 3F1 3I1 SG(3,1)>2#1 3W1 "
                "RA(2,2)<2#2 3F2 3I2 SG(3,2)>2#2 3W2 RA(2,3)<2#3 3F3 3I3 SG(3,3)>2#3 3W3",
            }));
}

TEST(Lower, VShapeNeedsNoMessageBetweenStagesOnOneGroup) {
  // Group 0 runs stages 0 and 3, group 1 stages 1 and 2: 1 -> 2 stays on group 1.
  const Plan p = plan_with(4, 1, {0, 1, 1, 0}, {"0F0 3F0 3B0 0B0", "1F0 2F0 2B0 1B0"});
  ASSERT_TRUE(validate_plan(p, small_model(4), single_device_nodes(4), {}).is_ok());
  EXPECT_EQ(lowered_text(p), (std::vector<std::string>{
                                 "0F0 SA(0,0)>1#0 RA(2,0)<1#0 3F0 3B0 SG(3,0)>1#0 RG(1,0)<1#0 0B0",
                                 "RA(0,0)<0#0 1F0 2F0 SA(2,0)>0#0 RG(3,0)<0#0 2B0 1B0 SG(1,0)>0#0",
                             }));
}

TEST(Lower, InterleavedChannelsCarrySeveralStagesInSenderOrder) {
  // Stages 0 and 2 on group 0, 1 and 3 on group 1: channel 0 -> 1 carries stage 0's and
  // stage 2's activations, numbered together.
  const Plan p = plan_with(4, 2, {0, 1, 0, 1},
                           {"0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1", "1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1"});
  ASSERT_TRUE(validate_plan(p, small_model(4), single_device_nodes(4), {}).is_ok());
  EXPECT_EQ(
      lowered_text(p),
      (std::vector<std::string>{
          "0F0 SA(0,0)>1#0 0F1 SA(0,1)>1#1 RA(1,0)<1#0 2F0 SA(2,0)>1#2 RA(1,1)<1#1 2F1 "
          "SA(2,1)>1#3 RG(3,0)<1#0 2B0 SG(2,0)>1#0 RG(3,1)<1#1 2B1 SG(2,1)>1#1 RG(1,0)<1#2 0B0 "
          "RG(1,1)<1#3 0B1",
          "RA(0,0)<0#0 1F0 SA(1,0)>0#0 RA(0,1)<0#1 1F1 SA(1,1)>0#1 RA(2,0)<0#2 3F0 3B0 "
          "SG(3,0)>0#0 RA(2,1)<0#3 3F1 3B1 SG(3,1)>0#1 RG(2,0)<0#0 1B0 SG(1,0)>0#2 "
          "RG(2,1)<0#1 1B1 SG(1,1)>0#3",
      }));
}

TEST(Lower, ReceiverOutOfChannelOrderGetsTheSendersNumbers) {
  // Group 1 consumes micro-batch 1 first; the sender sent micro-batch 0 first.
  const Plan p = plan_with(2, 2, {0, 1}, {"0F0 0F1 0B0 0B1", "1F1 1B1 1F0 1B0"});
  ASSERT_TRUE(validate_plan(p, small_model(2), single_device_nodes(2), {}).is_ok());
  EXPECT_EQ(lowered_text(p), (std::vector<std::string>{
                                 "0F0 SA(0,0)>1#0 0F1 SA(0,1)>1#1 RG(1,0)<1#1 0B0 RG(1,1)<1#0 0B1",
                                 "RA(0,1)<0#1 1F1 1B1 SG(1,1)>0#0 RA(0,0)<0#0 1F0 1B0 SG(1,0)>0#1",
                             }));
}

TEST(Lower, EveryReplicaIsLowered) {
  Plan p = one_f_one_b_plan(small_model(2), single_device_nodes(4), 1);
  Replica second = p.replicas[0];
  second.groups[0].devices = {2};
  second.groups[1].devices = {3};
  p.replicas.push_back(second);
  const LoweredPlan lowered = lower_plan(p);
  ASSERT_EQ(lowered.replicas.size(), 2u);
  EXPECT_EQ(group_text(lowered.replicas[1].groups[0]), "0F0 SA(0,0)>1#0 RG(1,0)<1#0 0B0");
  EXPECT_EQ(group_text(lowered.replicas[1].groups[1]), "RA(0,0)<0#0 1F0 1B0 SG(1,0)>0#0");
}

TEST(Lower, SendsAndReceivesPairUpOnRandomPlans) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 200; ++trial) {
    int stages = 0;
    const Plan p = random_plan(rng, &stages);
    Status valid = validate_plan(p, small_model(stages), single_device_nodes(stages), {});
    ASSERT_TRUE(valid.is_ok()) << valid.message() << "\n" << plan_to_text(p);
    const LoweredPlan lowered = lower_plan(p);
    // (from group, to group, is gradient, stage, micro-batch) -> sequence, per side.
    using Key = std::tuple<int, int, bool, int, int>;
    std::map<Key, int64_t> sent, received;
    std::map<std::tuple<int, int, bool>, int64_t> next_on_channel;
    const auto& groups = lowered.replicas[0].groups;
    for (size_t g = 0; g < groups.size(); ++g) {
      const int gi = static_cast<int>(g);
      for (const LoweredOp& op : groups[g]) {
        const CommOp* c = std::get_if<CommOp>(&op);
        if (c == nullptr) continue;
        ASSERT_NE(c->peer_group, gi);
        const bool gradient =
            c->kind == CommKind::kSendGradient || c->kind == CommKind::kRecvGradient;
        if (c->kind == CommKind::kSendActivation || c->kind == CommKind::kSendGradient) {
          // Numbered 0, 1, 2, ... in the sender's order.
          EXPECT_EQ(c->sequence, (next_on_channel[{gi, c->peer_group, gradient}]++));
          EXPECT_TRUE(
              sent.emplace(Key{gi, c->peer_group, gradient, c->stage, c->micro_batch}, c->sequence)
                  .second);
        } else {
          EXPECT_TRUE(
              received
                  .emplace(Key{c->peer_group, gi, gradient, c->stage, c->micro_batch}, c->sequence)
                  .second);
        }
      }
    }
    EXPECT_EQ(sent, received) << plan_to_text(p);
    // One message per dependency that crosses groups: forward and backward edges s <-> s+1.
    const std::vector<int>& sg = p.replicas[0].stage_group;
    size_t crossing = 0;
    for (int s = 0; s + 1 < stages; ++s) crossing += sg[s] != sg[s + 1] ? 2 : 0;
    EXPECT_EQ(sent.size(), crossing * p.replicas[0].micro_batches);
  }
}

// One Lowering over plans of different shapes gives what a fresh lower_plan gives.
TEST(Lower, ReusedLoweringGivesTheSameOps) {
  std::mt19937 rng(7);
  Lowering lowering;
  for (int trial = 0; trial < 50; ++trial) {
    int stages = 0;
    const Plan p = random_plan(rng, &stages);
    const LoweredPlan& reused = lowering.lower(p);
    const LoweredPlan fresh = lower_plan(p);
    ASSERT_EQ(reused.replicas.size(), 1u);
    EXPECT_EQ(reused.replicas[0].groups, fresh.replicas[0].groups) << plan_to_text(p);
  }
}

}  // namespace
}  // namespace motley::testing
