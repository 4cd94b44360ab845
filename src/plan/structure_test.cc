#include "motley/plan/structure.h"

#include <gtest/gtest.h>

#include "test_plans.h"

// In the test helpers' namespace, so they need no using-declarations.
namespace motley::testing {
namespace {

// As the simulator checks: no model at hand, the cost model's devices.
PlanBounds without_model(int devices) {
  PlanBounds bounds;
  bounds.num_devices = devices;
  bounds.cluster = "the cost model's cluster";
  return bounds;
}

Plan two_stages(int micro_batches) {
  return one_f_one_b_plan(small_model(2), single_device_nodes(2), micro_batches);
}

TEST(Structure, AcceptsOneFOneBWithAndWithoutTheModel) {
  const Plan p = one_f_one_b_plan(small_model(4), single_device_nodes(4), 3, /*split=*/true);
  PlanBounds bounds = without_model(4);
  EXPECT_TRUE(check_plan_structure(p, bounds).is_ok());
  bounds.num_layers = 4;
  EXPECT_TRUE(check_plan_structure(p, bounds).is_ok());
  bounds.num_layers = 5;
  bounds.model = "model 'small'";
  EXPECT_EQ(check_plan_structure(p, bounds).message(),
            "field 'stages[3].layer_end': the last stage ends at layer 4 but model 'small' has 5 "
            "layers; the stages must cover them all");
}

TEST(Structure, WithoutTheModelStagesMustStillBeContiguousFromLayerZero) {
  Plan p = two_stages(1);
  p.stages[0] = Stage{1, 2};
  p.stages[1] = Stage{2, 40};
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'stages[0].layer_begin': stage 0 (layers [1, 2)) starts at layer 1 but the "
            "first stage must start at layer 0");
  p.stages[0] = Stage{0, 2};
  EXPECT_TRUE(check_plan_structure(p, without_model(2)).is_ok());  // 40 layers: unknown here
  p.stages.clear();
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'stages': the plan has no stages");
}

TEST(Structure, ReplicaShape) {
  Plan p = two_stages(1);
  p.replicas.clear();
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'replicas': the plan has no replicas");

  p = two_stages(1);
  p.replicas[0].micro_batches = 0;
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'replicas[0].micro_batches': replica 0 has 0 micro-batches; expected at "
            "least one");

  p = two_stages(1);
  p.replicas[0].stage_group[1] = 2;
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'replicas[0].stage_group[1]': replica 0 places stage 1 on device group 2 but "
            "it has groups 0-1");

  p = two_stages(1);
  p.replicas[0].groups[1].devices.clear();
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'replicas[0].groups[1].devices': device group 1 has no devices");

  p = two_stages(1);
  p.replicas[0].stage_group = {0, 0};
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'replicas[0].groups[1]': device group 1 (device 1) runs no stage; remove it "
            "or place a stage on it");

  p = two_stages(1);
  p.replicas[0].groups[1].devices = {-1};
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'replicas[0].groups[1].devices[0]': device group 1 (device -1), which runs "
            "stage 1, uses device -1, but the cost model's cluster has devices 0-1");
}

// The check's table has a byte per (stage, micro-batch): a count that the listed actions cannot
// cover is refused before it is sized, also when the product of the two would overflow.
TEST(Structure, MicroBatchesMustFitTheListedActionsOnEveryStage) {
  Plan p = two_stages(2);
  p.replicas[0].micro_batches = 5;  // 10 (stage, micro-batch) pairs, 8 actions
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'replicas[0].micro_batches': replica 0 runs 5 micro-batches but its groups "
            "list only 8 actions; every micro-batch needs a forward and a backward on each stage");
  p.replicas[0].micro_batches = INT64_MAX;
  EXPECT_NE(check_plan_structure(p, without_model(2)).message().find("runs 9223372036854775807"),
            std::string::npos);
}

TEST(Structure, WithSeveralReplicasMessagesNameTheReplica) {
  Plan p = two_stages(2);
  Replica second = p.replicas[0];
  second.micro_batches = 3;
  second.groups[0] = DeviceGroupSchedule{{2}, actions("0F0 0F1 0F3 0B0 0B1 0B2")};
  second.groups[1] = DeviceGroupSchedule{{3}, actions("1F0 1B0 1F1 1B1 1F2 1B2")};
  p.replicas.push_back(second);
  EXPECT_EQ(check_plan_structure(p, without_model(4)).message(),
            "field 'replicas[1].groups[0].actions[2].micro_batch': 0F3 on replica 1 device group "
            "0 (device 2): micro-batch 3 does not exist; replica 1 has micro-batches 0-2");
  p.replicas[1].groups[0].actions = actions("0F0 0F1 0B0 0B1 0B2");
  EXPECT_EQ(check_plan_structure(p, without_model(4)).message(),
            "field 'replicas[1].groups[0].actions': stage 0, micro-batch 2 has no forward: "
            "replica 1 device group 0 (device 2) must list 0F2");
  p.replicas[1].groups[0].actions = actions("0F0 0F1 0F2 0B0 0B1 0B2");
  EXPECT_TRUE(check_plan_structure(p, without_model(4)).is_ok());
}

// A replica that repeats the one before it in orders is not checked again; the one after a
// run of repeats is.
TEST(Structure, AReplicaAfterRepeatsOfAnotherIsStillChecked) {
  Plan p = two_stages(2);
  Replica copy = p.replicas[0];
  copy.groups[0].devices = {2};
  copy.groups[1].devices = {3};
  p.replicas.push_back(copy);
  Replica faulty = p.replicas[0];
  faulty.groups[0].devices = {4};
  faulty.groups[1].devices = {5};
  faulty.groups[1].actions = actions("1F0 1B0 1F1 1B1 1B1");
  p.replicas.push_back(faulty);
  EXPECT_EQ(check_plan_structure(p, without_model(6)).message(),
            "field 'replicas[2].groups[1].actions[4]': replica 2 device group 1 (device 5) lists "
            "1B1 (stage 1, micro-batch 1) twice (actions 3 and 4); each runs exactly once");
  p.replicas[2].groups[1].actions = p.replicas[0].groups[1].actions;
  EXPECT_TRUE(check_plan_structure(p, without_model(6)).is_ok());
}

TEST(Structure, AtMostOneRecompute) {
  Plan p = two_stages(1);
  p.stages[0].recompute = RecomputePolicy::kFull;
  p.replicas[0].groups[0].actions = actions("0F0 0R0 0R0 0B0");
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'replicas[0].groups[0].actions[2]': device group 0 (device 0) lists 0R0 "
            "(stage 0, micro-batch 0) twice (actions 1 and 2); each runs exactly once");
}

TEST(Structure, PerLayerRecomputeNamesItsStageLayersInOrder) {
  Plan p = two_stages(1);
  p.stages[0] = Stage{0, 2};
  p.stages[1] = Stage{2, 3};
  p.stages[0].recompute_layers = {0, 1};
  p.replicas[0].groups[0].actions = actions("0F0 0R0 0B0");
  EXPECT_TRUE(check_plan_structure(p, without_model(2)).is_ok());
  p.stages[0].recompute_layers = {1, 2};
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'stages[0].recompute_layers[1]': layer 2 is not one of stage 0 (layers [0, "
            "2))'s layers");
  p.stages[0].recompute_layers = {1, 0};
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'stages[0].recompute_layers[1]': layer 0 after layer 1; list each layer once, "
            "in ascending order");
  p.stages[0].recompute_layers = {1};
  p.stages[0].recompute = RecomputePolicy::kFull;
  EXPECT_EQ(check_plan_structure(p, without_model(2)).message(),
            "field 'stages[0].recompute_layers': stage 0 (layers [0, 2)) recomputes all its "
            "layers (recompute \"full\"); list recompute_layers only with \"none\" or "
            "\"selective\"");
  // Without recompute on the stage, an R action recomputes that one micro-batch.
  p.stages[0].recompute = RecomputePolicy::kNone;
  p.stages[0].recompute_layers.clear();
  EXPECT_TRUE(check_plan_structure(p, without_model(2)).is_ok());
}

// One checker over plans of different sizes gives what a fresh check gives.
TEST(Structure, ReusedCheckerGivesTheSameAnswers) {
  StructureChecker checker;
  for (int m : {8, 1, 3}) {
    Plan p = two_stages(m);
    EXPECT_TRUE(checker.check(p, without_model(2)).is_ok());
    p.replicas[0].groups[1].actions.pop_back();
    EXPECT_EQ(checker.check(p, without_model(2)).message(),
              check_plan_structure(p, without_model(2)).message());
    EXPECT_FALSE(checker.check(p, without_model(2)).is_ok());
  }
}

}  // namespace
}  // namespace motley::testing
