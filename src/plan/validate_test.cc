#include "motley/plan/validate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "motley/plan/spec_hash.h"
#include "test_plans.h"

// In the test helpers' namespace, so they need no using-declarations.
namespace motley::testing {
namespace {

using ::testing::HasSubstr;

ValidateOptions defaults() { return ValidateOptions{}; }

// A two-stage plan on devices 0 and 1 with the given orders (two micro-batches).
Plan two_stage(const std::string& group0, const std::string& group1) {
  Plan p = one_f_one_b_plan(small_model(2), single_device_nodes(2), 2);
  p.replicas[0].groups[0].actions = actions(group0);
  p.replicas[0].groups[1].actions = actions(group1);
  return p;
}

Status check_two_stage(const Plan& p) {
  return validate_plan(p, small_model(2), single_device_nodes(2), defaults());
}

TEST(Validate, AcceptsOneFOneB) {
  for (int m : {1, 2, 3, 4, 8}) {
    for (bool split : {false, true}) {
      const Plan p = one_f_one_b_plan(small_model(4), single_device_nodes(4), m, split);
      Status s = validate_plan(p, small_model(4), single_device_nodes(4), defaults());
      EXPECT_TRUE(s.is_ok()) << "m=" << m << " split=" << split << ": " << s.message();
    }
  }
}

TEST(Validate, AcceptsRecomputeBeforeBackward) {
  Plan p = two_stage("0F0 0F1 0R0 0B0 0R1 0B1", "1F0 1B0 1F1 1B1");
  p.stages[0].recompute = RecomputePolicy::kFull;
  EXPECT_TRUE(check_two_stage(p).is_ok()) << check_two_stage(p).message();
}

TEST(Validate, AcceptsDataParallelReplicasWithUnevenMicroBatches) {
  // Replica 0: two stages on devices 0 and 1 (node a); replica 1: one group of devices 4-7
  // (tensor parallel on node b) running both stages.
  const ModelSpec model = small_model(2);
  const ClusterSpec cluster = two_node_cluster();
  Plan p;
  p.model = model_ref(model);
  p.cluster = cluster_ref(cluster);
  p.micro_batch_size = 1;
  p.seq_len = 128;
  p.global_batch = 5;
  p.stages = {Stage{0, 1}, Stage{1, 2}};
  p.replicas = {
      Replica{2,
              {0, 1},
              {DeviceGroupSchedule{{0}, actions("0F0 0F1 0B0 0B1")},
               DeviceGroupSchedule{{1}, actions("1F0 1B0 1F1 1B1")}}},
      Replica{3,
              {0, 0},
              {DeviceGroupSchedule{{4, 5, 6, 7},
                                   actions("0F0 1F0 1B0 0B0 0F1 1F1 1B1 0B1 0F2 1F2 1B2 0B2")}}}};
  Status s = validate_plan(p, model, cluster, defaults());
  EXPECT_TRUE(s.is_ok()) << s.message();
  // ZeRO-1 shards only the optimizer state: uneven counts still run.
  p.zero_stage = 1;
  s = validate_plan(p, model, cluster, defaults());
  EXPECT_TRUE(s.is_ok()) << s.message();
  // ZeRO-2 and -3 reduce every micro-batch in lockstep across the replicas.
  for (int stage : {2, 3}) {
    p.zero_stage = stage;
    EXPECT_EQ(validate_plan(p, model, cluster, defaults()).message(),
              "zero_stage " + std::to_string(stage) +
                  " reduces every micro-batch's gradients across the replicas in lockstep, so "
                  "every replica must run as many micro-batches: replica 0 runs 2, replica 1 "
                  "runs 3");
  }
  p.zero_stage = 4;
  EXPECT_EQ(validate_plan(p, model, cluster, defaults()).message(),
            "zero_stage must be 0, 1, 2 or 3, got 4");
  // Expert parallelism needs MoE layers, a degree dividing the replicas, equal counts.
  p.zero_stage = 0;
  p.expert_parallel = 3;
  EXPECT_EQ(validate_plan(p, model, cluster, defaults()).message(),
            "expert_parallel 3 must divide the replica count (2): its groups are consecutive "
            "replicas");
  p.expert_parallel = 2;
  EXPECT_EQ(validate_plan(p, model, cluster, defaults()).message(),
            "expert_parallel is 2 but model 'small' has no mixture-of-experts layer");
}

// Two replicas of one two-stage pipeline on devices 0-1 and 2-3, as one context group.
TEST(Validate, ContextParallelGroupsShareTheirMicroBatches) {
  const ModelSpec model = small_model(2);
  const ClusterSpec cluster = single_device_nodes(4);
  Plan p = one_f_one_b_plan(model, cluster, 2);
  Replica second = p.replicas[0];
  second.groups[0].devices = {2};
  second.groups[1].devices = {3};
  p.replicas.push_back(second);
  p.micro_batch_size = 1;
  p.global_batch = 4;
  Status s = validate_plan(p, model, cluster, defaults());
  ASSERT_TRUE(s.is_ok()) << s.message();
  // As one context group the two run the same sequences: the batch counts them once.
  p.context_parallel = 2;
  EXPECT_EQ(validate_plan(p, model, cluster, defaults()).message(),
            "global_batch is 4 but the context-parallel groups of 2 replicas run (2) "
            "micro-batches of 1 = 2 sequences");
  p.global_batch = 2;
  s = validate_plan(p, model, cluster, defaults());
  EXPECT_TRUE(s.is_ok()) << s.message();
  p.context_parallel = 3;
  EXPECT_EQ(validate_plan(p, model, cluster, defaults()).message(),
            "context_parallel 3 must divide the replica count (2): its groups are consecutive "
            "replicas");
  p.context_parallel = 2;
  p.seq_len = 126;
  EXPECT_EQ(validate_plan(p, model, cluster, defaults()).message(),
            "context_parallel 2 splits every sequence into 4 equal chunks, so seq_len must be a "
            "multiple of 4, got 126");
  p.seq_len = 128;
  Replica three = one_f_one_b_plan(model, cluster, 3).replicas[0];
  three.groups[0].devices = {2};
  three.groups[1].devices = {3};
  p.replicas[1] = three;
  EXPECT_EQ(validate_plan(p, model, cluster, defaults()).message(),
            "context_parallel 2: replicas 0 and 1 split the same sequences, so they must run as "
            "many micro-batches: 2 and 3");
  p.replicas[1] = second;
  p.expert_parallel = 2;
  EXPECT_EQ(validate_plan(p, model, cluster, defaults()).message(),
            "context_parallel 2 and expert_parallel 2 both group the replicas; motley prices one "
            "of them at a time");
  p.expert_parallel = 1;
  ModelSpec hybrid = model;
  hybrid.layers[1].kind = LayerKind::kMamba;
  ValidateOptions other_model;
  other_model.check_spec_hashes = false;
  EXPECT_THAT(validate_plan(p, hybrid, cluster, other_model).message(),
              HasSubstr("context_parallel 2 needs attention as every layer's sequence mixing: "
                        "layer 1 ('"));
}

TEST(Validate, DetectsDeadlockBetweenTwoGroups) {
  // Group 0 wants the gradient of micro-batch 0 before it sends micro-batch 1; group 1 wants
  // micro-batch 1 first.
  Status s = check_two_stage(two_stage("0F0 0B0 0F1 0B1", "1F1 1B1 1F0 1B0"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "deadlock: device group 0 (device 0) waits at 0B0 (stage 0, micro-batch 0), which "
            "needs 1B0 from device group 1 (device 1), itself blocked at 1F1 (stage 1, "
            "micro-batch 1), which needs 0F1 from device group 0 (device 0), which is where the "
            "cycle started");
}

TEST(Validate, DetectsBackwardBeforeItsForwardOnOneGroup) {
  Status s = check_two_stage(two_stage("0F0 0F1 0B0 0B1", "1B0 1F0 1F1 1B1"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "deadlock: device group 1 (device 1) waits at 1B0 (stage 1, micro-batch 0), which "
            "needs 1F0 (stage 1, micro-batch 0), listed later in the same group's order");
}

TEST(Validate, DeadlockReportStartsWhereTheCycleIs) {
  // Group 0 waits on group 1, which is caught in a cycle with group 2: the report shows the
  // cycle, not the group merely waiting on it.
  const ModelSpec model = small_model(3);
  const ClusterSpec cluster = single_device_nodes(3);
  Plan p = one_f_one_b_plan(model, cluster, 2);
  p.replicas[0].groups[0].actions = actions("0F0 0F1 0B0 0B1");
  p.replicas[0].groups[1].actions = actions("1F0 1B0 1F1 1B1");
  p.replicas[0].groups[2].actions = actions("2F1 2B1 2F0 2B0");
  Status s = validate_plan(p, model, cluster, defaults());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "deadlock: device group 1 (device 1) waits at 1B0 (stage 1, micro-batch 0), which "
            "needs 2B0 from device group 2 (device 2), itself blocked at 2F1 (stage 2, "
            "micro-batch 1), which needs 1F1 from device group 1 (device 1), which is where the "
            "cycle started");
}

TEST(Validate, DetectsDeadlockAcrossThreeInterleavedGroups) {
  // Six stages on three groups (stages g and g + 3 on group g).
  const ModelSpec model = small_model(6);
  const ClusterSpec cluster = single_device_nodes(3);
  Plan p = one_f_one_b_plan(model, cluster, 2);
  p.replicas[0].stage_group = {0, 1, 2, 0, 1, 2};
  p.replicas[0].groups.resize(3);
  p.replicas[0].groups[0].actions = actions("0F0 3F0 0F1 3F1 3B1 3B0 0B1 0B0");
  p.replicas[0].groups[1].actions = actions("1F1 1F0 4F0 4F1 4B0 4B1 1B0 1B1");
  p.replicas[0].groups[2].actions = actions("2F1 2F0 5F0 5B0 5F1 5B1 2B0 2B1");
  Status s = validate_plan(p, model, cluster, defaults());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "deadlock: device group 0 (device 0) waits at 3F0 (stage 3, micro-batch 0), which "
            "needs 2F0 from device group 2 (device 2), itself blocked at 2F1 (stage 2, "
            "micro-batch 1), which needs 1F1 from device group 1 (device 1), itself blocked at "
            "1F1 (stage 1, micro-batch 1), which needs 0F1 from device group 0 (device 0), which "
            "is where the cycle started");
}

TEST(Validate, DetectsRecomputeAfterBackward) {
  Plan p = two_stage("0F0 0F1 0B0 0R0 0R1 0B1", "1F0 1B0 1F1 1B1");
  p.stages[0].recompute = RecomputePolicy::kSelective;
  Status s = check_two_stage(p);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "deadlock: device group 0 (device 0) waits at 0B0 (stage 0, micro-batch 0), which "
            "needs 0R0 (stage 0, micro-batch 0), listed later in the same group's order");
}

// On a stage that keeps its activations an R recomputes that one micro-batch; it must still
// come after the F and before the backward.
TEST(Validate, AcceptsRecomputeOfOneMicroBatchWithoutPolicy) {
  EXPECT_TRUE(check_two_stage(two_stage("0F0 0F1 0R0 0B0 0B1", "1F0 1B0 1F1 1B1")).is_ok());
  const Status s = check_two_stage(two_stage("0F0 0F1 0B0 0R0 0B1", "1F0 1B0 1F1 1B1"));
  EXPECT_EQ(s.message(),
            "deadlock: device group 0 (device 0) waits at 0B0 (stage 0, micro-batch 0), which "
            "needs 0R0 (stage 0, micro-batch 0), listed later in the same group's order");
}

TEST(Validate, RejectsMissingWeightGradient) {
  Status s = check_two_stage(two_stage("0F0 0F1 0B0 0B1", "1F0 1I0 1W0 1F1 1I1"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "field 'replicas[0].groups[1].actions': stage 1, micro-batch 1 has an input-gradient "
            "backward (1I1) but no weight-gradient backward: device group 1 (device 1) must list "
            "1W1");
}

TEST(Validate, RejectsMissingForwardAndBackward) {
  Status no_f = check_two_stage(two_stage("0F0 0B0 0B1", "1F0 1B0 1F1 1B1"));
  EXPECT_EQ(no_f.message(),
            "field 'replicas[0].groups[0].actions': stage 0, micro-batch 1 has no forward: "
            "device group 0 (device 0) must list 0F1");
  Status no_b = check_two_stage(two_stage("0F0 0F1 0B0 0B1", "1F0 1B0 1F1"));
  EXPECT_EQ(no_b.message(),
            "field 'replicas[0].groups[1].actions': stage 1, micro-batch 1 has no backward: "
            "device group 1 (device 1) must list 1B1, or 1I1 and 1W1");
  Status w_only = check_two_stage(two_stage("0F0 0F1 0B0 0W1", "1F0 1B0 1F1 1B1"));
  EXPECT_EQ(w_only.message(),
            "field 'replicas[0].groups[0].actions': stage 0, micro-batch 1 has a weight-gradient "
            "backward (0W1) but no input-gradient backward: device group 0 (device 0) must list "
            "0I1 before it");
  Status both = check_two_stage(two_stage("0F0 0F1 0B0 0I1 0W1 0B1", "1F0 1B0 1F1 1B1"));
  EXPECT_EQ(both.message(),
            "field 'replicas[0].groups[0].actions': stage 0, micro-batch 1 has both a full "
            "backward (0B1) and a split one (0I1) in device group 0 (device 0); list either 0B1 "
            "or 0I1 and 0W1");
}

TEST(Validate, RejectsDuplicateForward) {
  Status s = check_two_stage(two_stage("0F0 0F1 0B0 0F1 0B1", "1F0 1B0 1F1 1B1"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "field 'replicas[0].groups[0].actions[3]': device group 0 (device 0) lists 0F1 "
            "(stage 0, micro-batch 1) twice (actions 1 and 3); each runs exactly once");
}

TEST(Validate, RejectsActionsOnTheWrongGroupOrOutOfRange) {
  Status wrong = check_two_stage(two_stage("0F0 0F1 0B0 0B1 1F0", "1B0 1F1 1B1"));
  EXPECT_EQ(wrong.message(),
            "field 'replicas[0].groups[0].actions[4].stage': 1F0 on device group 0 (device 0): "
            "stage 1 runs on device group 1 (device 1), so its actions belong in that group's "
            "list");
  Status mb = check_two_stage(two_stage("0F0 0F1 0F2 0B0 0B1", "1F0 1B0 1F1 1B1"));
  EXPECT_EQ(mb.message(),
            "field 'replicas[0].groups[0].actions[2].micro_batch': 0F2 on device group 0 (device "
            "0): micro-batch 2 does not exist; the replica has micro-batches 0-1");
  Status stage = check_two_stage(two_stage("0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1 2F0"));
  EXPECT_EQ(stage.message(),
            "field 'replicas[0].groups[1].actions[4].stage': 2F0 on device group 1 (device 1): "
            "stage 2 does not exist; the plan has stages 0-1");
}

TEST(Validate, RejectsTensorParallelGroupAcrossNodes) {
  const ModelSpec model = small_model(2);
  const ClusterSpec cluster = two_node_cluster();
  Plan p = one_f_one_b_plan(model, cluster, 2);
  p.replicas[0].groups[0].devices = {1, 2};
  p.replicas[0].groups[1].devices = {3, 4};
  Status s = validate_plan(p, model, cluster, defaults());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "device group 1 (devices 3,4), which runs stage 1, spans nodes: device 3 is on node "
            "'a' and device 4 on node 'b'; a tensor-parallel group must stay inside one node");
}

TEST(Validate, RejectsTensorParallelGroupOfMixedTypes) {
  const ModelSpec model = small_model(2);
  ClusterSpec cluster = two_node_cluster();
  cluster.nodes[0].devices = {NodeDevices{"H100-SXM", 2}, NodeDevices{"MI300X", 2}};
  Plan p = one_f_one_b_plan(model, cluster, 2);
  p.replicas[0].groups[0].devices = {0};
  p.replicas[0].groups[1].devices = {1, 2};
  Status s = validate_plan(p, model, cluster, defaults());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "device group 1 (devices 1,2), which runs stage 1, mixes device types: device 1 is "
            "H100-SXM, device 2 is MI300X; a tensor-parallel group needs one device type");
}

TEST(Validate, RejectsDeviceUsedTwice) {
  const ModelSpec model = small_model(3);
  const ClusterSpec cluster = single_device_nodes(3);
  Plan p = one_f_one_b_plan(model, cluster, 2);
  p.replicas[0].groups[2].devices = {1};
  Status s = validate_plan(p, model, cluster, defaults());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "device 1 (A100-80GB) is used twice: in device group 1 (device 1), which runs stage "
            "1, and in device group 2 (device 1), which runs stage 2; a device belongs to at "
            "most one group");
}

TEST(Validate, RejectsDeviceUsedByTwoReplicas) {
  const ModelSpec model = small_model(2);
  const ClusterSpec cluster = single_device_nodes(4);
  Plan p = one_f_one_b_plan(model, cluster, 2);
  Replica second = p.replicas[0];
  second.groups[0].devices = {2};
  second.groups[1].devices = {1};
  p.replicas.push_back(second);
  p.global_batch *= 2;
  Status s = validate_plan(p, model, cluster, defaults());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "device 1 (A100-80GB) is used twice: in replica 0 device group 1 (device 1), which "
            "runs stage 1, and in replica 1 device group 1 (device 1), which runs stage 1; a "
            "device belongs to at most one group");
}

TEST(Validate, RejectsDeviceOutOfRange) {
  Plan p = two_stage("0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1");
  p.replicas[0].groups[1].devices = {2};
  Status s = check_two_stage(p);
  EXPECT_EQ(s.message(),
            "field 'replicas[0].groups[1].devices[0]': device group 1 (device 2), which runs "
            "stage 1, uses device 2, but cluster 'nodes-2' has devices 0-1");
}

TEST(Validate, RejectsMoreMicroBatchesThanActions) {
  Plan p = two_stage("0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1");
  p.replicas[0].micro_batches = 1000000000000;
  p.global_batch = 2000000000000;
  EXPECT_EQ(check_two_stage(p).message(),
            "field 'replicas[0].micro_batches': replica 0 runs 1000000000000 micro-batches but "
            "its groups list only 8 actions; every micro-batch needs a forward and a backward on "
            "each stage");
}

TEST(Validate, RejectsGlobalBatchMismatch) {
  Plan p = two_stage("0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1");
  p.global_batch = 6;
  Status s = check_two_stage(p);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(),
            "global_batch is 6 but the replicas run (2) micro-batches of 2 = 4 sequences");
}

TEST(Validate, GlobalBatchIsCheckedWithoutOverflow) {
  // (2^62 + 1) x 2 wraps around to 2 in int64_t, which global_batch 2 used to match.
  Plan p = two_stage("0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1");
  p.micro_batch_size = (int64_t{1} << 62) + 1;
  p.global_batch = 2;
  EXPECT_EQ(check_two_stage(p).message(),
            "global_batch is 2 but the replicas run (2) micro-batches of 4611686018427387905 = "
            "more than 2^63 - 1 sequences");
}

TEST(Validate, RejectsHashMismatch) {
  const Plan p = two_stage("0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1");
  ModelSpec changed = small_model(2);
  changed.layers[1].ffn->ffn_size = 128;
  Status s = validate_plan(p, changed, single_device_nodes(2), defaults());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.message(), "the plan was made for model 'small' (hash " + p.model.hash +
                             ") but the model given is 'small' (hash " + model_ref(changed).hash +
                             "); make a new plan for this model, or pass the model it was made "
                             "for");
  ClusterSpec other = single_device_nodes(2);
  other.nodes[1].devices[0].type = "H100-SXM";
  Status c = validate_plan(p, small_model(2), other, defaults());
  ASSERT_FALSE(c.is_ok());
  EXPECT_THAT(c.message(), HasSubstr("the plan was made for cluster 'nodes-2' (hash "));
  // Without the hash check the same cluster shape is fine.
  ValidateOptions no_hash;
  no_hash.check_spec_hashes = false;
  EXPECT_TRUE(validate_plan(p, changed, other, no_hash).is_ok());
}

TEST(Validate, RejectsBadPartitions) {
  const ModelSpec model = small_model(4);
  const ClusterSpec cluster = single_device_nodes(4);
  ValidateOptions opts;
  opts.check_spec_hashes = false;
  Plan gap = one_f_one_b_plan(model, cluster, 2);
  gap.stages[2].layer_begin = 3;
  EXPECT_EQ(validate_plan(gap, model, cluster, opts).message(),
            "field 'stages[2].layer_begin': stage 2 (layers [3, 3)) starts at layer 3 but stage "
            "1 ends at layer 2; stages must cover the model's layers contiguously, in order");
  Plan empty = one_f_one_b_plan(model, cluster, 2);
  empty.stages[1].layer_end = 1;
  empty.stages[2].layer_begin = 1;
  EXPECT_EQ(validate_plan(empty, model, cluster, opts).message(),
            "field 'stages[1]': stage 1 (layers [1, 1)) is empty; a stage needs at least one "
            "layer");
  const Plan short_plan = one_f_one_b_plan(small_model(3), single_device_nodes(3), 2);
  EXPECT_EQ(validate_plan(short_plan, model, cluster, opts).message(),
            "field 'stages[2].layer_end': the last stage ends at layer 3 but model 'small' has 4 "
            "layers; the stages must cover them all");
  EXPECT_EQ(
      validate_plan(one_f_one_b_plan(model, cluster, 2), small_model(3), cluster, opts).message(),
      "field 'stages[3].layer_end': stage 3 (layers [3, 4)) ends past the last layer: model "
      "'small' has 3 layers");
  Plan wrong_map = one_f_one_b_plan(model, cluster, 2);
  wrong_map.replicas[0].stage_group.pop_back();
  EXPECT_EQ(validate_plan(wrong_map, model, cluster, opts).message(),
            "field 'replicas[0].stage_group': replica 0 maps 3 stages to device groups "
            "(stage_group) but the plan has 4 stages");
}

TEST(Validate, MemoryOverCapacityNamesDeviceAndAction) {
  // 1F1B on 4 stages with 4 micro-batches holds 4, 3, 2, 1 micro-batches at its peak.
  const ModelSpec model = small_model(4);
  const ClusterSpec cluster = single_device_nodes(4);
  const Plan p = one_f_one_b_plan(model, cluster, 4);
  ValidateOptions opts;
  opts.stage_memory.assign(4, StageFootprint{Bytes(40 * kGiB), Bytes(12 * kGiB), Bytes(0)});
  Status s = validate_plan(p, model, cluster, opts);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInfeasible);
  EXPECT_EQ(s.message(),
            "device 0 (A100-80GB) needs 88 GiB at action 0F3 (stage 0, micro-batch 3) but has 80 "
            "GiB: device group 0 (device 0), which runs stage 0, then holds the activations of 4 "
            "micro-batches on top of 40 GiB of fixed memory");
  // 40 + 3 * 13.4 = 80.2 GiB on stage 1 only.
  opts.stage_memory[0].activation_per_micro_batch = Bytes(10 * kGiB);
  opts.stage_memory[1].activation_per_micro_batch = Bytes(13.4 * kGiB);
  Status s1 = validate_plan(p, model, cluster, opts);
  EXPECT_EQ(s1.message(),
            "device 1 (A100-80GB) needs 80.2 GiB at action 1F2 (stage 1, micro-batch 2) but has 80 "
            "GiB: device group 1 (device 1), which runs stage 1, then holds the activations of 3 "
            "micro-batches on top of 40 GiB of fixed memory");
  opts.stage_memory[1].activation_per_micro_batch = Bytes(13.3 * kGiB);
  EXPECT_TRUE(validate_plan(p, model, cluster, opts).is_ok());
}

TEST(Validate, MemoryNearCapacityShowsMoreDigits) {
  const ModelSpec model = small_model(2);
  const ClusterSpec cluster = single_device_nodes(2);
  const Plan p = one_f_one_b_plan(model, cluster, 1);
  ValidateOptions opts;
  opts.stage_memory = {StageFootprint{Bytes(80.004 * kGiB), Bytes(0), Bytes(0)},
                       StageFootprint{Bytes(1 * kGiB), Bytes(1 * kGiB), Bytes(0)}};
  EXPECT_EQ(validate_plan(p, model, cluster, opts).message(),
            "device 0 (A100-80GB) needs 80.004 GiB but has 80 GiB: device group 0 (device 0), "
            "which runs stage 0, holds the weights, gradients and optimizer state of its stages");
}

TEST(Validate, MemoryFootprintsMustCoverEveryStage) {
  const Plan p = one_f_one_b_plan(small_model(2), single_device_nodes(2), 1);
  ValidateOptions opts;
  opts.stage_memory = {StageFootprint{Bytes(1), Bytes(1), Bytes(0)}};
  EXPECT_EQ(validate_plan(p, small_model(2), single_device_nodes(2), opts).message(),
            "memory footprints are given for 1 stages but the plan has 2");
}

TEST(Validate, DeadlockInASecondReplicaNamesTheReplica) {
  const ModelSpec model = small_model(2);
  const ClusterSpec cluster = single_device_nodes(4);
  Plan p = one_f_one_b_plan(model, cluster, 2);
  Replica second = p.replicas[0];
  second.groups[0] = DeviceGroupSchedule{{2}, actions("0F0 0B0 0F1 0B1")};
  second.groups[1] = DeviceGroupSchedule{{3}, actions("1F1 1B1 1F0 1B0")};
  p.replicas.push_back(second);
  p.global_batch *= 2;
  EXPECT_EQ(validate_plan(p, model, cluster, defaults()).message(),
            "deadlock: replica 1 device group 0 (device 2) waits at 0B0 (stage 0, micro-batch 0), "
            "which needs 1B0 from replica 1 device group 1 (device 3), itself blocked at 1F1 "
            "(stage 1, micro-batch 1), which needs 0F1 from replica 1 device group 0 (device 2), "
            "which is where the cycle started");
}

// Replicas with the same orders share one deadlock check; a deadlock in a later replica is
// still named by the plan's own replica index.
TEST(Validate, DeadlockAfterIdenticalReplicasNamesItsReplica) {
  const ModelSpec model = small_model(2);
  const ClusterSpec cluster = single_device_nodes(6);
  Plan p = one_f_one_b_plan(model, cluster, 2);
  Replica copy = p.replicas[0];
  copy.groups[0].devices = {2};
  copy.groups[1].devices = {3};
  p.replicas.push_back(copy);
  Replica broken = p.replicas[0];
  broken.groups[0] = DeviceGroupSchedule{{4}, actions("0F0 0B0 0F1 0B1")};
  broken.groups[1] = DeviceGroupSchedule{{5}, actions("1F1 1B1 1F0 1B0")};
  p.replicas.push_back(broken);
  p.global_batch *= 3;
  EXPECT_EQ(validate_plan(p, model, cluster, defaults()).message(),
            "deadlock: replica 2 device group 0 (device 4) waits at 0B0 (stage 0, micro-batch 0), "
            "which needs 1B0 from replica 2 device group 1 (device 5), itself blocked at 1F1 "
            "(stage 1, micro-batch 1), which needs 0F1 from replica 2 device group 0 (device 4), "
            "which is where the cycle started");
  p.replicas.pop_back();
  p.global_batch = p.global_batch / 3 * 2;
  EXPECT_TRUE(validate_plan(p, model, cluster, defaults()).is_ok());
}

TEST(Validate, SplitBackwardFreesAtWeightGradient) {
  // With I and W split, activations live until W: 1F1B split peaks like fused 1F1B.
  const ModelSpec model = small_model(4);
  const ClusterSpec cluster = single_device_nodes(4);
  const Plan p = one_f_one_b_plan(model, cluster, 4, /*split=*/true);
  const auto peaks = peak_in_flight(p);
  ASSERT_EQ(peaks.size(), 1u);
  ASSERT_EQ(peaks[0].size(), 4u);
  EXPECT_EQ(peaks[0][0], (std::vector<int64_t>{4, 0, 0, 0}));
  EXPECT_EQ(peaks[0][1], (std::vector<int64_t>{0, 3, 0, 0}));
  EXPECT_EQ(peaks[0][2], (std::vector<int64_t>{0, 0, 2, 0}));
  EXPECT_EQ(peaks[0][3], (std::vector<int64_t>{0, 0, 0, 1}));
}

TEST(PeakInFlight, OneFOneBHoldsMinOfRemainingStagesAndMicroBatches) {
  // REFERENCE: 1F1B rank r holds min(p - r, m) micro-batches.
  const ModelSpec model = small_model(4);
  const ClusterSpec cluster = single_device_nodes(4);
  for (int m : {1, 2, 3, 6}) {
    const auto peaks = peak_in_flight(one_f_one_b_plan(model, cluster, m));
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(peaks[0][r][r], std::min(4 - r, m)) << "m=" << m << " rank " << r;
    }
  }
}

TEST(PeakInFlight, CountsEachStageOfAnInterleavedGroup) {
  Plan p;
  p.stages = {Stage{0, 1}, Stage{1, 2}, Stage{2, 3}};
  p.replicas = {Replica{2,
                        {0, 0, 1},
                        {DeviceGroupSchedule{{0}, actions("0F0 0F1 1F0 1F1 1B0 0B0 1B1 0B1")},
                         DeviceGroupSchedule{{1}, actions("2F0 2B0 2F1 2B1")}}}};
  const auto peaks = peak_in_flight(p);
  EXPECT_EQ(peaks[0][0], (std::vector<int64_t>{2, 2, 0}));
  EXPECT_EQ(peaks[0][1], (std::vector<int64_t>{0, 0, 1}));
}

Status check_shards(const Plan& p) {
  return validate_plan(p, model_with_head(2), single_device_nodes(2), defaults());
}

TEST(Validate, AcceptsVocabularyShards) {
  const Plan p = vocab_shard_plan();
  EXPECT_TRUE(check_shards(p).is_ok()) << check_shards(p).message();
  EXPECT_EQ(vocab_shard_count(p.stages), 2);
  EXPECT_DOUBLE_EQ(vocab_share(p.stages, 2), 0.5);
  EXPECT_DOUBLE_EQ(vocab_share(p.stages, 1), 1.0);
}

TEST(Validate, RefusesMalformedVocabularyShards) {
  {
    Plan p = vocab_shard_plan();
    p.stages[3].vocab_begin = 40;  // a gap after row 32
    EXPECT_THAT(check_shards(p).message(),
                HasSubstr("'stages[3].vocab_rows': stage 3 (layers [3, 4)) starts at vocabulary "
                          "row 40 but shard 2 ends at row 32"));
  }
  {
    Plan p = vocab_shard_plan();
    p.stages[3].vocab_end = 60;  // short of the vocabulary
    EXPECT_THAT(check_shards(p).message(),
                HasSubstr("the last shard ends at row 60 but head 'head' has a vocabulary of 64"));
  }
  {
    Plan p = vocab_shard_plan();
    p.replicas[0].stage_group = {0, 1, 1, 1};
    EXPECT_THAT(check_shards(p).message(),
                HasSubstr("places vocabulary shards 2 and 3 both on device group 1"));
  }
  {
    Plan p = vocab_shard_plan();
    p.stages[2].recompute = RecomputePolicy::kFull;
    EXPECT_THAT(check_shards(p).message(), HasSubstr("shards keep their activations"));
  }
  {
    Plan p = vocab_shard_plan();  // nor is one of their micro-batches recomputed
    std::vector<Action>& order = p.replicas[0].groups[0].actions;
    order.insert(std::find(order.begin(), order.end(), Action{ActionKind::kBackwardInput, 2, 0}),
                 Action{ActionKind::kRecompute, 2, 0});
    EXPECT_THAT(check_shards(p).message(),
                HasSubstr("recompute of stage 2, micro-batch 0, but stage 2 is a vocabulary "
                          "shard, which keeps its activations"));
  }
  {
    Plan p = vocab_shard_plan();  // one shard: rows [0, 64) of the only shard
    p.stages.pop_back();
    p.stages[2].vocab_end = 64;
    p.replicas[0].stage_group.pop_back();
    EXPECT_THAT(check_shards(p).message(), HasSubstr("split into one vocabulary shard"));
  }
  {
    // Shards of a decoder block, not of the head.
    const ModelSpec model = small_model(3);
    Plan p = vocab_shard_plan();
    p.model = model_ref(model);
    p.stages = {Stage{0, 2}, Stage{2, 3, RecomputePolicy::kNone, 0, 32},
                Stage{2, 3, RecomputePolicy::kNone, 32, 64}};
    p.replicas[0].stage_group = {0, 0, 1};
    p.replicas[0].groups[0].actions = actions("0F0 0F1 1F0 1F1 1I0 1W0 1I1 1W1 0I0 0W0 0I1 0W1");
    p.replicas[0].groups[1].actions = actions("2F0 2F1 2I0 2W0 2I1 2W1");
    EXPECT_THAT(validate_plan(p, model, single_device_nodes(2), defaults()).message(),
                HasSubstr("only a head (output layer and loss"));
  }
}

// The shards exchange their loss statistics before their backward: an order where each group
// waits for the other's statistics behind work that needs its own is a deadlock.
TEST(Validate, FindsADeadlockThroughTheLossStatistics) {
  Plan p = vocab_shard_plan();
  p.replicas[0].groups[0].actions = actions("0F0 2F0 2I0 2W0 0F1 2F1 2I1 2W1 0I0 0W0 0I1 0W1");
  p.replicas[0].groups[1].actions = actions("1F0 1F1 3F0 3F1 3I0 3W0 1I0 1W0 3I1 3W1 1I1 1W1");
  const Status s = check_shards(p);
  EXPECT_FALSE(s.is_ok());
  EXPECT_THAT(s.message(), HasSubstr("deadlock"));
}

// The embedding split as well: its shards first, side by side, the stage after them summing
// them; a gap in their rows and a head run straight after them are refused.
TEST(Validate, AcceptsEmbeddingShardsAndNamesTheirFaults) {
  const ModelSpec model = model_with_head(2);
  Plan p = vocab_shard_plan();
  p.stages = {Stage{0, 1, RecomputePolicy::kNone, 0, 32},
              Stage{0, 1, RecomputePolicy::kNone, 32, 64},
              Stage{1, 2},
              Stage{2, 3},
              Stage{3, 4, RecomputePolicy::kNone, 0, 32},
              Stage{3, 4, RecomputePolicy::kNone, 32, 64}};
  p.replicas[0].stage_group = {0, 1, 0, 1, 0, 1};
  p.replicas[0].groups[0].actions =
      actions("0F0 2F0 0F1 2F1 4F0 4I0 4W0 4F1 4I1 4W1 2I0 2W0 0I0 0W0 2I1 2W1 0I1 0W1");
  p.replicas[0].groups[1].actions =
      actions("1F0 1F1 3F0 5F0 3F1 5F1 5I0 5W0 3I0 3W0 5I1 5W1 3I1 3W1 1I0 1W0 1I1 1W1");
  const Status ok = check_shards(p);
  EXPECT_TRUE(ok.is_ok()) << ok.message();
  EXPECT_EQ(embedding_shard_count(p.stages), 2);
  EXPECT_EQ(vocab_shard_count(p.stages), 2);
  EXPECT_DOUBLE_EQ(vocab_share(p.stages, 1), 0.5);
  // Without the shards: the embedding back on stage 0 of the stages renumbered.
  const Plan whole = without_vocab_shards(p);
  ASSERT_EQ(whole.stages.size(), 2u);
  EXPECT_EQ(whole.stages[0], (Stage{0, 2}));
  EXPECT_EQ(whole.stages[1], (Stage{2, 4}));
  EXPECT_EQ(whole.replicas[0].groups[0].actions, actions("0F0 0F1 0I0 0W0 0I1 0W1"));
  {
    Plan bad = p;
    bad.stages[1].vocab_end = 60;
    EXPECT_THAT(check_shards(bad).message(),
                HasSubstr("the last shard ends at row 60 but embedding 'embed' has a vocabulary "
                          "of 64"));
  }
  {
    Plan bad = p;
    bad.stages[1].vocab_begin = 30;
    EXPECT_THAT(check_shards(bad).message(),
                HasSubstr("starts at vocabulary row 30 but shard 0 ends at row 32"));
  }
}

}  // namespace
}  // namespace motley::testing
