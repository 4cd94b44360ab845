#include "motley/cost/software_stack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace motley {
namespace {

bool same_stack(const SoftwareStack& a, const SoftwareStack& b) {
  if (a.name != b.name || a.description != b.description || a.attention != b.attention ||
      a.fp8_linear != b.fp8_linear || a.pipeline_scatter_gather != b.pipeline_scatter_gather ||
      a.overlap_grad_reduce != b.overlap_grad_reduce ||
      a.overlap_param_gather != b.overlap_param_gather ||
      a.fused_cross_entropy != b.fused_cross_entropy ||
      a.node_deduplicated_dispatch != b.node_deduplicated_dispatch ||
      a.gradient_bucket_parameters != b.gradient_bucket_parameters ||
      a.gradient_bucket_parameters_per_replica != b.gradient_bucket_parameters_per_replica) {
    return false;
  }
  // The kernel overhead is written in microseconds: equal to the last bits, not exactly.
  for (const std::string& name : stack_parameter_names()) {
    const double x = stack_parameter_value(a, name), y = stack_parameter_value(b, name);
    if (std::abs(x - y) > 1e-12 * std::max(std::abs(x), std::abs(y))) return false;
  }
  return true;
}

TEST(SoftwareStackJson, EveryBuiltInStackRoundTrips) {
  for (const SoftwareStack& stack : software_stacks()) {
    SCOPED_TRACE(stack.name);
    const Json json = software_stack_to_json(stack);
    // Read against another base: every field is written, so the base fills nothing.
    const SoftwareStack& other = software_stacks()[stack.name == "megatron-core" ? 1 : 0];
    Result<SoftwareStack> back = software_stack_from_json(JsonField(json, "mem"), other);
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    EXPECT_TRUE(same_stack(back.value(), stack));
  }
}

TEST(SoftwareStackJson, AFittedStackRoundTripsAndMissingFieldsComeFromTheBase) {
  SoftwareStack fitted = software_stacks().front();
  fitted.name = "fitted";
  set_stack_parameter(fitted, "gemm_efficiency", 0.8125);
  set_stack_parameter(fitted, "kernel_overhead_us", 7.5);
  fitted.overlap_grad_reduce = false;
  fitted.node_deduplicated_dispatch = true;
  Result<SoftwareStack> back =
      software_stack_from_json(JsonField(software_stack_to_json(fitted), "mem"), SoftwareStack{});
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_TRUE(same_stack(back.value(), fitted));

  const SoftwareStack& base = software_stacks()[1];
  Result<SoftwareStack> partial =
      software_stack_from_json(JsonField(Json{{"p2p_efficiency", 0.5}}, "mem"), base);
  ASSERT_TRUE(partial.is_ok()) << partial.status().message();
  SoftwareStack expected = base;
  expected.p2p_efficiency = 0.5;
  EXPECT_TRUE(same_stack(partial.value(), expected));
}

TEST(SoftwareStackJson, ErrorsNameTheFieldAndTheRange) {
  const auto message = [](const Json& json) {
    Result<SoftwareStack> r =
        software_stack_from_json(JsonField(json, "p.json", "software_stack"), SoftwareStack{});
    EXPECT_FALSE(r.is_ok());
    return r.is_ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(message(Json{{"memory_efficiency", 1.5}})
                .find("p.json: field 'software_stack.memory_efficiency': expected a number from "
                      "0.2 to 1, got 1.5"),
            std::string::npos);
  EXPECT_NE(message(Json{{"attention", "magic"}}).find("software_stack.attention"),
            std::string::npos);
  EXPECT_NE(message(Json{{"no_such_knob", 1}}).find("no_such_knob"), std::string::npos);
  EXPECT_NE(message(Json::array()).find("expected a software stack object"), std::string::npos);
}

}  // namespace
}  // namespace motley
