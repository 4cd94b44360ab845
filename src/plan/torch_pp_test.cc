// PyTorch pipelining's schedule CSV (torch_pp.h): a plan's orders written and read back, with
// and without the messages, recompute put back, and the errors of a hand-written CSV.
#include "motley/plan/torch_pp.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "motley/plan/plan_json.h"

namespace motley {
namespace {

Plan example(const std::string& name) {
  Result<PlanFile> file =
      load_plan_file(std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/" + name);
  MOTLEY_CHECK(file.is_ok(), file.status().message());
  return file->plan;
}

// Replica `replica`'s orders as the plan file writes them, a line per group.
std::string orders(const Plan& plan, int replica = 0) {
  std::string out;
  for (const DeviceGroupSchedule& g : plan.replicas[replica].groups) {
    for (const Action& a : g.actions) out += action_to_string(a) + " ";
    out += "\n";
  }
  return out;
}

TEST(TorchPp, EveryExamplePlanReadsBackWithAndWithoutMessages) {
  for (const char* name : {"1f1b-4stage.json", "interleaved-nemotron-h-8b-h100-a100.json",
                           "zb-v-tiny-hybrid-default.json"}) {
    SCOPED_TRACE(name);
    const Plan plan = example(name);
    for (int replica = 0; replica < static_cast<int>(plan.replicas.size()); ++replica) {
      for (bool lowered : {false, true}) {
        const std::string csv = torch_pp_csv(plan, replica, lowered);
        Result<Plan> back = plan_with_torch_pp_order(plan, csv, "s.csv");
        ASSERT_TRUE(back.is_ok()) << back.status().message();
        // Every replica now runs this replica's order.
        for (int r = 0; r < static_cast<int>(plan.replicas.size()); ++r) {
          EXPECT_EQ(orders(*back, r), orders(plan, replica));
        }
      }
    }
    // A replica that runs another order than replica 0 is named among what a CSV leaves out.
    bool differs = false;
    for (int r = 1; r < static_cast<int>(plan.replicas.size()); ++r) {
      differs = differs || orders(plan, r) != orders(plan, 0);
    }
    const std::vector<std::string> limits = torch_pp_limits(plan, 0);
    EXPECT_EQ(differs, !limits.empty() && limits[0].rfind("replica ", 0) == 0);
  }
}

TEST(TorchPp, CellsAreWrittenAsPyTorchWritesThem) {
  const Plan plan = example("1f1b-4stage.json");
  // Rank 0 runs stage 0 (its output goes to rank 1), rank 3 the last stage.
  const std::string csv = torch_pp_csv(plan, 0, false);
  EXPECT_EQ(csv.substr(0, csv.find('\n')).substr(0, 12), "0F0,0F1,0F2,");
  const std::string lowered = torch_pp_csv(plan, 0, true);
  const std::string rank0 = lowered.substr(0, lowered.find('\n'));
  EXPECT_EQ(rank0.substr(0, 16), "0F0,0SEND_F0,0F1");
  EXPECT_NE(rank0.find("0RECV_B0,0B0"), std::string::npos) << rank0;
  EXPECT_EQ(rank0.find("SEND_B"), std::string::npos) << rank0;  // stage 0 sends no gradient
  const std::string rank1 = lowered.substr(lowered.find('\n') + 1);
  EXPECT_EQ(rank1.substr(0, 17), "1RECV_F0,1F0,1SEN");
  EXPECT_EQ(torch_pp_stage_ranks(plan, 0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(torch_pp_limits(plan, 0).empty());
}

TEST(TorchPp, RecomputeIsLeftOutAndPutBack) {
  Plan plan = example("1f1b-4stage.json");
  plan.stages[1].recompute = RecomputePolicy::kFull;
  std::vector<Action>& order = plan.replicas[0].groups[1].actions;
  std::vector<Action> with_r;
  for (const Action& a : order) {
    if (a.kind == ActionKind::kBackward)
      with_r.push_back({ActionKind::kRecompute, 1, a.micro_batch});
    with_r.push_back(a);
  }
  order = with_r;
  const std::string csv = torch_pp_csv(plan, 0, true);
  EXPECT_EQ(csv.find('R' + std::string("0")), std::string::npos);
  Result<Plan> back = plan_with_torch_pp_order(plan, csv, "s.csv");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(orders(*back), orders(plan));
  const std::vector<std::string> limits = torch_pp_limits(plan, 0);
  ASSERT_EQ(limits.size(), 1u);
  EXPECT_EQ(limits[0].substr(0, 18), "stage 1 recompute:");
}

TEST(TorchPp, AHandWrittenCsvIsReadAndItsMistakesNamed) {
  const Plan plan = example("1f1b-4stage.json");
  // PyTorch's sharding actions, padding and an OVERLAP_F_B cell are accepted.
  std::string csv = torch_pp_csv(plan, 0, false);
  const size_t first_comma = csv.find(',');
  csv = "0UNSHARD," + csv.substr(0, first_comma) + ",," + csv.substr(first_comma + 1);
  Result<Plan> back = plan_with_torch_pp_order(plan, csv, "s.csv");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(orders(*back), orders(plan));
  const std::string two = "(0F0;0F1)OVERLAP_F_B\n\n";
  Result<Plan> overlap = plan_with_torch_pp_order(plan, two, "o.csv");
  EXPECT_EQ(overlap.status().message(),
            "o.csv: 2 rows (pipeline ranks), but replica 0 of the plan has 4 device groups");

  struct Bad {
    std::string cell;
    std::string why;
  };
  for (const Bad& bad : {Bad{"0X3", ""}, Bad{"F3", ""},
                         Bad{"9F0",
                             "stage 9, but the plan has 4 "
                             "stages; "},
                         Bad{"0SEND_F", ""}, Bad{"0F99999999999", ""}, Bad{"(0F1)", ""}}) {
    Result<Plan> r = plan_with_torch_pp_order(plan, "0F0,1F0\n" + bad.cell + "\n\n\n", "h.csv");
    EXPECT_EQ(r.status().message(),
              "h.csv: row 2 (rank 1), column 1: " + bad.why +
                  "expected an action such as 0F3, 1I3, 1W3, 2B0 or 1SEND_F3 (<stage><F, I, W, B, "
                  "SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD or REDUCE_GRAD><micro-batch>, "
                  "or (a;b)OVERLAP_F_B), got \"" +
                  bad.cell + "\"")
        << bad.cell;
  }
}

}  // namespace
}  // namespace motley
