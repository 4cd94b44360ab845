// A PyTorch pipelining schedule CSV (`simulate --plan P --torch-pp-csv F`), read against a
// fixed plan of two pipeline ranks holding four stages in a V, one of which lists its
// recompute as actions. An accepted CSV, written again from the orders it gave, reads back to
// the same orders.
#include "fuzz_support.h"
#include "fuzz_targets.h"
#include "motley/plan/torch_pp.h"

namespace motley::fuzz {
namespace {

// Two groups, stages 0 and 3 on the first, 1 and 2 on the second, four micro-batches; stage 1
// recomputes, with R actions of its own.
Plan v_plan() {
  Plan plan;
  plan.micro_batch_size = 1;
  plan.seq_len = 16;
  plan.global_batch = 4;
  plan.stages = {Stage{0, 1}, Stage{1, 2, RecomputePolicy::kFull}, Stage{2, 3}, Stage{3, 4}};
  Replica replica;
  replica.micro_batches = 4;
  replica.stage_group = {0, 1, 1, 0};
  replica.groups = {DeviceGroupSchedule{{0}, {}}, DeviceGroupSchedule{{1}, {}}};
  replica.groups[1].actions = {Action{ActionKind::kRecompute, 1, 0},
                               Action{ActionKind::kBackward, 1, 0}};
  plan.replicas = {replica};
  return plan;
}

std::string orders_text(const Plan& plan) {
  std::string out;
  for (const DeviceGroupSchedule& g : plan.replicas[0].groups) {
    for (const Action& a : g.actions) {
      out += std::to_string(static_cast<int>(a.kind)) + ":" + std::to_string(a.stage) + ":" +
             std::to_string(a.micro_batch) + " ";
    }
    out += "\n";
  }
  return out;
}

}  // namespace

int torch_pp_csv_target(const uint8_t* data, size_t size) {
  static const Plan kPlan = v_plan();
  Result<Plan> read = plan_with_torch_pp_order(kPlan, text(data, size), kSource);
  if (!read.is_ok()) {
    check_refusal(read.status());
    return 0;
  }
  for (bool lowered : {false, true}) {
    const std::string written = torch_pp_csv(*read, 0, lowered);
    Result<Plan> again = plan_with_torch_pp_order(kPlan, written, kSource);
    if (!again.is_ok()) fail("a written CSV must read back", again.status().message());
    if (orders_text(*again) != orders_text(*read)) {
      fail("a written CSV must read back to the same orders", written);
    }
  }
  return 0;
}

}  // namespace motley::fuzz
