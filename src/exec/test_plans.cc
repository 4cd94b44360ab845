#include "test_plans.h"

#include <gtest/gtest.h>

#include "motley/cost/fixed_cost_model.h"
#include "motley/model/presets.h"
#include "motley/plan/validate.h"
#include "motley/schedule/uniform_plan.h"

namespace motley::testing {

ModelSpec preset(const char* name) {
  auto model = model_preset(name);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  return *model;
}

ClusterSpec cluster_of(int devices) {
  const LinkSpec intra{LinkKind::kNvlink, BytesPerSecond(1e11), Seconds(0)};
  const LinkSpec inter{LinkKind::kInfiniband, BytesPerSecond(1e10), Seconds(0)};
  return make_fixed_cluster({"H100-SXM"}, devices, intra, inter);
}

Plan uniform_plan(const ModelSpec& model, const UniformCase& c, int64_t micro_batch_size,
                  int64_t seq_len) {
  const ClusterSpec cluster = cluster_of(c.stages * c.data_parallel * c.tensor_parallel);
  FixedCostSpec spec;
  for (size_t i = 0; i < model.layers.size(); ++i) {
    FixedLayer layer;
    layer.times = {Seconds(1), Seconds(1), Seconds(1), Seconds(1)};
    layer.boundary = Bytes(1e6);
    spec.layers.push_back(layer);
  }
  const FixedCostModel cost(cluster, spec);
  UniformPlanOptions options;
  options.kind = c.kind;
  options.stages = c.stages;
  options.virtual_stages = c.virtual_stages;
  options.micro_batches = c.micro_batches;
  options.data_parallel = c.data_parallel;
  options.tensor_parallel = c.tensor_parallel;
  options.micro_batch_size = micro_batch_size;
  options.seq_len = seq_len;
  options.recompute = c.recompute;
  options.vocab_parallel = c.vocab_parallel;
  auto plan = make_uniform_plan(options, model, cluster, cost);
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  Status valid = validate_plan(*plan, model, cluster, ValidateOptions{});
  EXPECT_TRUE(valid.is_ok()) << valid.message();
  return *plan;
}

}  // namespace motley::testing
