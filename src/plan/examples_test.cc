// The plan files under examples/plans/ stay valid for the presets they name. Their content
// hashes follow the model and cluster formats, so a change there shows up here first; run
// with MOTLEY_UPDATE_EXAMPLES=1 to rewrite the files from the builders below.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "motley/cluster/cluster.h"
#include "motley/model/presets.h"
#include "motley/plan/plan_json.h"
#include "motley/plan/spec_hash.h"
#include "motley/plan/validate.h"
#include "test_plans.h"

namespace motley {
namespace {

std::string example_path(const std::string& name) {
  return std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/" + name;
}

// tiny-llama (embedding, four decoder blocks, head) in four stages on four H100s of h100x8,
// 1F1B over eight micro-batches of one sequence.
Plan one_f_one_b_4stage(const ModelSpec& model, const ClusterSpec& cluster) {
  Plan plan;
  plan.model = model_ref(model);
  plan.cluster = cluster_ref(cluster);
  plan.micro_batch_size = 1;
  plan.seq_len = 64;
  plan.global_batch = 8;
  plan.schedule = "1f1b";
  plan.stages = {Stage{0, 2}, Stage{2, 3}, Stage{3, 4}, Stage{4, 6}};
  Replica replica;
  replica.micro_batches = 8;
  for (int s = 0; s < 4; ++s) {
    replica.stage_group.push_back(s);
    replica.groups.push_back(
        DeviceGroupSchedule{{s}, ::motley::testing::one_f_one_b_order(4, s, 8, /*split=*/false)});
  }
  plan.replicas = {replica};
  return plan;
}

TEST(Examples, OneFOneBFourStage) {
  Result<ModelSpec> model = model_preset("tiny-llama");
  Result<ClusterSpec> cluster = cluster_preset("h100x8");
  ASSERT_TRUE(model.is_ok() && cluster.is_ok());
  const std::string path = example_path("1f1b-4stage.json");
  const Plan expected = one_f_one_b_4stage(model.value(), cluster.value());
  const char* update = std::getenv("MOTLEY_UPDATE_EXAMPLES");
  if (update != nullptr && std::string(update) == "1") {
    ASSERT_TRUE(save_plan(expected, model.value(), cluster.value(), path).is_ok());
  }
  // The file carries its presets: nothing else is needed to check it.
  Result<PlanInputs> in = load_plan_inputs(path);
  ASSERT_TRUE(in.is_ok()) << in.status().message()
                          << "\n(if the model or cluster format changed, rerun with "
                             "MOTLEY_UPDATE_EXAMPLES=1)";
  Status valid = validate_plan(in->plan, in->model, in->cluster, {});
  EXPECT_TRUE(valid.is_ok()) << valid.message();
  EXPECT_EQ(in->plan, expected);
  EXPECT_EQ(in->cluster, cluster.value());
  EXPECT_EQ(model_ref(in->model), model_ref(model.value()));
}

}  // namespace
}  // namespace motley
