#include "motley/plan/plan_json.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "motley/model/model_json.h"
#include "motley/plan/spec_hash.h"
#include "test_plans.h"

// In the test helpers' namespace, so they need no using-declarations.
namespace motley::testing {
namespace {

// A plan that uses every field and every action kind (not a runnable schedule: the schema
// does not care).
Plan full_plan() {
  Plan p;
  p.model = SpecRef{"tiny-llama", "0123456789abcdef"};
  p.cluster = SpecRef{"mixed", "fedcba9876543210"};
  p.micro_batch_size = 2;
  p.seq_len = 1024;
  p.global_batch = 14;
  p.stages = {Stage{0, 3, RecomputePolicy::kNone}, Stage{3, 5, RecomputePolicy::kSelective},
              Stage{5, 6, RecomputePolicy::kFull}};
  Replica a;
  a.micro_batches = 4;
  a.stage_group = {0, 1, 0};
  a.groups = {DeviceGroupSchedule{{0, 1}, actions("0F0 2F0 2R0 2I0 2W0 0B0")},
              DeviceGroupSchedule{{2}, actions("1F0 1B0 1F12 1I12 1W12")}};
  Replica b;
  b.micro_batches = 3;
  b.stage_group = {0, 0, 0};
  b.groups = {DeviceGroupSchedule{{5, 6, 7}, actions("0F1 1F1 2F1 2B1 1B1 0B1")}};
  p.replicas = {a, b};
  p.schedule = "adaptive";
  p.zero_stage = 1;
  p.predicted = PredictedMetrics{Seconds(1.2345678901234567), 98765.4321, 0.125, "analytic"};
  return p;
}

TEST(ActionText, LettersFollowPyTorchPipelining) {
  EXPECT_EQ(action_letter(ActionKind::kForward), 'F');
  EXPECT_EQ(action_letter(ActionKind::kBackwardInput), 'I');
  EXPECT_EQ(action_letter(ActionKind::kBackwardWeight), 'W');
  EXPECT_EQ(action_letter(ActionKind::kBackward), 'B');
  EXPECT_EQ(action_letter(ActionKind::kRecompute), 'R');
  EXPECT_STREQ(action_kind_name(ActionKind::kBackwardInput), "backward_input");
  EXPECT_STREQ(action_kind_name(ActionKind::kBackward), "backward");
}

TEST(ActionText, RoundTrips) {
  EXPECT_EQ(action_to_string(Action{ActionKind::kForward, 0, 3}), "0F3");
  EXPECT_EQ(action_to_string(Action{ActionKind::kBackwardInput, 12, 345}), "12I345");
  for (const char* text : {"0F3", "1I3", "1W3", "2B0", "0R3", "15B1023"}) {
    Result<Action> a = parse_action(text);
    ASSERT_TRUE(a.is_ok()) << text;
    EXPECT_EQ(action_to_string(a.value()), text);
  }
  Result<Action> a = parse_action("7W11");
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a.value(), (Action{ActionKind::kBackwardWeight, 7, 11}));
}

TEST(ActionText, RejectsMalformed) {
  for (const char* text :
       {"", "F3", "0F", "0f3", "0X3", "0F3x", "-1F3", "0F-3", " 0F3", "0FF3", "99999999999F0"}) {
    Result<Action> a = parse_action(text);
    ASSERT_FALSE(a.is_ok()) << text;
    EXPECT_NE(a.status().message().find("expected an action like \"0F3\""), std::string::npos)
        << a.status().message();
  }
}

TEST(PlanJson, RoundTrips) {
  const Plan p = full_plan();
  Result<Plan> back = plan_from_json(plan_to_json(p), "mem");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), p);
}

// Replicas that repeat the one before them (actions, micro-batches and stage map) name the
// first of their run instead of listing its actions again; they read back as written.
TEST(PlanJson, RepeatedReplicasNameTheFirstOfTheirRunAndReadBackTheSame) {
  Plan p = full_plan();
  Replica copy = p.replicas[0];
  copy.groups[0].devices = {8, 9};
  copy.groups[1].devices = {10};
  Replica other = p.replicas[0];  // the same actions but not the same micro-batches
  other.micro_batches = 5;
  other.groups[0].devices = {11, 12};
  other.groups[1].devices = {13};
  p.replicas = {p.replicas[0], copy, copy, p.replicas[1], other};
  p.replicas[2].groups[0].devices = {14, 15};
  p.replicas[2].groups[1].devices = {16};
  const Json j = plan_to_json(p);
  EXPECT_FALSE(j["replicas"][0].contains("same_actions_as"));
  EXPECT_EQ(j["replicas"][1]["same_actions_as"], 0);
  EXPECT_EQ(j["replicas"][2]["same_actions_as"], 0);
  EXPECT_EQ(j["replicas"][2]["groups"][1], (Json{{"devices", {16}}}));
  EXPECT_FALSE(j["replicas"][3].contains("same_actions_as"));
  EXPECT_FALSE(j["replicas"][4].contains("same_actions_as"));
  Result<Plan> back = plan_from_json(j, "mem");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), p);
  // A hand-written file may name any earlier replica with as many groups.
  Json edited = j;
  edited["replicas"][4]["same_actions_as"] = 2;
  for (Json& g : edited["replicas"][4]["groups"]) g.erase("actions");
  back = plan_from_json(edited, "mem");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->replicas[4], other);
}

TEST(PlanJson, KeepsTheRecordedSoftwareStackAsGiven) {
  Plan p = full_plan();
  p.software_stack = Json{{"name", "fitted"}, {"gemm_efficiency", 0.9}};
  const Json j = plan_to_json(p);
  EXPECT_EQ(j.at("software_stack"), *p.software_stack);
  Result<Plan> back = plan_from_json(j, "mem");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), p);
  EXPECT_FALSE(plan_to_json(full_plan()).contains("software_stack"));

  Json bad = j;
  bad["software_stack"] = "megatron-core";
  Result<Plan> rejected = plan_from_json(bad, "p.json");
  ASSERT_FALSE(rejected.is_ok());
  EXPECT_NE(rejected.status().message().find("p.json: field 'software_stack': expected a software "
                                             "stack object, got \"megatron-core\""),
            std::string::npos)
      << rejected.status().message();
}

TEST(PlanJson, RoundTripsWithoutPrediction) {
  Plan p = full_plan();
  p.predicted.reset();
  Json j = plan_to_json(p);
  EXPECT_FALSE(j.contains("predicted"));
  Result<Plan> back = plan_from_json(j, "mem");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), p);
}

// A prediction without the optimizer step says so; one with it (every older file) does not.
TEST(PlanJson, RoundTripsAPredictionWithoutTheOptimizerStep) {
  Plan p = full_plan();
  EXPECT_FALSE(plan_to_json(p).at("predicted").contains("optimizer_step"));
  p.predicted->optimizer_step = false;
  const Json j = plan_to_json(p);
  EXPECT_EQ(j.at("predicted").at("optimizer_step"), false);
  Result<Plan> back = plan_from_json(j, "mem");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), p);
  Json bad = j;
  bad["predicted"]["optimizer_step"] = "no";
  Result<Plan> refused = plan_from_json(bad, "plan.json");
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().message(),
            "plan.json: field 'predicted.optimizer_step': expected true or false, got \"no\"");
}

// motley.plan/2 files list each group's actions as an array of strings; a hand-written
// string may separate them by any white space. All read as the plan written.
TEST(PlanJson, ReadsActionsAsAnArrayOrAsOneStringSeparatedByAnyWhiteSpace) {
  const Plan p = full_plan();
  Json as_arrays = plan_to_json(p);
  Json spaced = as_arrays;
  as_arrays["format"] = "motley.plan/2";
  for (size_t r = 0; r < p.replicas.size(); ++r) {
    for (size_t g = 0; g < p.replicas[r].groups.size(); ++g) {
      Json list = Json::array();
      std::string text = "\n ";
      for (const Action& a : p.replicas[r].groups[g].actions) {
        list.push_back(action_to_string(a));
        text += action_to_string(a) + (list.size() % 2 == 0 ? "\t" : "  ");
      }
      as_arrays["replicas"][r]["groups"][g]["actions"] = std::move(list);
      spaced["replicas"][r]["groups"][g]["actions"] = text;
    }
  }
  for (const Json& j : {as_arrays, spaced}) {
    Result<Plan> back = plan_from_json(j, "mem");
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    EXPECT_EQ(back.value(), p);
  }
  // A group with no actions is an empty string (or array).
  Plan empty = p;
  empty.replicas[0].groups[0].actions.clear();
  EXPECT_EQ(plan_to_json(empty)["replicas"][0]["groups"][0]["actions"], "");
  Result<Plan> back = plan_from_json(plan_to_json(empty), "mem");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), empty);
}

TEST(PlanJson, WritesDocumentedFields) {
  const Json j = plan_to_json(full_plan());
  EXPECT_EQ(j.at("format"), "motley.plan/4");
  EXPECT_EQ(j.at("units"), (Json{{"time", "s"}, {"memory", "bytes"}}));
  EXPECT_EQ(j.at("stages")[1], (Json{{"layers", {3, 5}}, {"recompute", "selective"}}));
  EXPECT_EQ(j.at("replicas")[0].at("stage_group"), (Json{0, 1, 0}));
  EXPECT_EQ(j.at("replicas")[0].at("groups")[1].at("actions"), "1F0 1B0 1F12 1I12 1W12");
  EXPECT_EQ(j.at("predicted").at("iteration_time_s"), 1.2345678901234567);
  EXPECT_EQ(j.at("predicted").at("cost_model"), "analytic");
}

TEST(PlanJson, TextPutsFormatFirstAndActionsOnOneLine) {
  const std::string text = plan_to_text(full_plan());
  EXPECT_EQ(text.rfind("{\n  \"format\": \"motley.plan/4\",\n  \"units\": {", 0), 0u) << text;
  EXPECT_NE(text.find("\"actions\": \"0F1 1F1 2F1 2B1 1B1 0B1\""), std::string::npos) << text;
  Result<Json> parsed = parse_json(text, "text");
  ASSERT_TRUE(parsed.is_ok());
  EXPECT_EQ(parsed.value(), plan_to_json(full_plan()));
}

// Plain strings are copied into the text as they are; any other is escaped as JSON requires
// (quotes and backslashes; UTF-8 stays UTF-8), and a group's actions longer than a line move
// its object onto lines of their own.
TEST(PlanJson, TextEscapesWhatJsonNeedsAndReadsBackTheSame) {
  Plan p = full_plan();
  p.schedule = "a \"quoted\" back\\slash";
  p.model.name = "caf\xc3\xa9";
  for (int m = 0; m < 40; ++m)
    p.replicas[0].groups[0].actions.push_back(Action{ActionKind::kForward, 0, m});
  const std::string text = plan_to_text(p);
  EXPECT_NE(text.find("\"schedule\": \"a \\\"quoted\\\" back\\\\slash\""), std::string::npos)
      << text;
  EXPECT_NE(text.find("\"name\": \"caf\xc3\xa9\""), std::string::npos) << text;
  EXPECT_NE(text.find(",\n          \"actions\": \""), std::string::npos) << text;
  Result<Json> parsed = parse_json(text, "text");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(parsed.value(), plan_to_json(p));
  Result<Plan> back = plan_from_json(parsed.value(), "text");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), p);
}

class PlanFileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("motley_plan_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(PlanFileIo, SaveThenLoadIsIdentity) {
  const std::string path = (dir_ / "plan.json").string();
  ASSERT_TRUE(save_plan(full_plan(), path).is_ok());
  Result<Plan> back = load_plan(path);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), full_plan());
  // Saving again replaces the file.
  Plan other = full_plan();
  other.schedule = "1f1b";
  ASSERT_TRUE(save_plan(other, path).is_ok());
  EXPECT_EQ(load_plan(path).value().schedule, "1f1b");
}

TEST_F(PlanFileIo, MissingFileIsNotFound) {
  Result<Plan> p = load_plan((dir_ / "absent.json").string());
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
}

TEST(PlanFixtures, LoadsTheValidFixture) {
  const std::string path = std::string(MOTLEY_TEST_DATA_DIR) + "/plan/two-stage.json";
  Result<Plan> p = load_plan(path);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->model.name, "small");
  EXPECT_EQ(p->stages.size(), 2u);
  EXPECT_EQ(p->stages[1].recompute, RecomputePolicy::kFull);
  EXPECT_EQ(p->replicas[0].groups[1].actions, actions("1F0 1I0 1W0 1F1 1I1 1W1"));
  EXPECT_FALSE(p->predicted.has_value());
  EXPECT_EQ(p->zero_stage, 0);
}

struct BadFixture {
  const char* file;
  const char* message;  // after "<path>: "
};

class PlanFixtureErrors : public ::testing::TestWithParam<BadFixture> {};

TEST_P(PlanFixtureErrors, NameFileAndField) {
  const std::string path = std::string(MOTLEY_TEST_DATA_DIR) + "/plan/" + GetParam().file;
  Result<Plan> p = load_plan(path);
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(), path + ": " + GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, PlanFixtureErrors,
    ::testing::Values(
        BadFixture{"bad-action.json",
                   "field 'replicas[0].groups[1].actions[7]': expected an action like \"0F3\", "
                   "got \"0X3\" (<stage><F, I, W, B or R><micro-batch>: forward, "
                   "input-gradient backward, weight-gradient backward, full backward, "
                   "recompute)"},
        BadFixture{"wrong-format.json",
                   "field 'format': expected \"motley.plan/4\" (or \"motley.plan/3\", "
                   "\"motley.plan/2\" or \"motley.plan/1\"), got \"motley.plan/9\""},
        BadFixture{"unknown-key.json",
                   "field 'replicas[0].groups[0].device': unknown field; allowed fields here: "
                   "devices or actions"}));

// Edits a valid plan's JSON and returns the error message of reading it back.
std::string error_after(const std::function<void(Json&)>& edit) {
  Json j = plan_to_json(full_plan());
  edit(j);
  Result<Plan> p = plan_from_json(j, "plan.json");
  if (p.is_ok()) return "(accepted)";
  return p.status().message();
}

TEST(PlanJsonErrors, SameActionsAsNamesAnEarlierReplicaWithAsManyGroupsAndListsNoActions) {
  auto same_as = [](int64_t k) {
    return [k](Json& j) {
      j["replicas"][1]["same_actions_as"] = k;
      for (Json& g : j["replicas"][1]["groups"]) g.erase("actions");
    };
  };
  EXPECT_EQ(error_after(same_as(1)),
            "plan.json: field 'replicas[1].same_actions_as': expected an earlier replica's "
            "index (0 to 0), got 1");
  EXPECT_EQ(error_after(same_as(-1)),
            "plan.json: field 'replicas[1].same_actions_as': expected a non-negative integer, "
            "got -1");
  EXPECT_EQ(error_after(same_as(0)),
            "plan.json: field 'replicas[1].same_actions_as': replica 0 has 2 device groups and "
            "this one 1; the groups take its actions one by one");
  EXPECT_EQ(error_after([](Json& j) {
              j["replicas"][1]["same_actions_as"] = 0;
              j["replicas"][1]["groups"].push_back(Json{{"devices", {9}}, {"actions", "0F0"}});
            }),
            "plan.json: field 'replicas[1].groups[0].actions': a group of a replica with "
            "'same_actions_as' lists its devices only");
}

// A small file cannot claim more actions than a large one could list: replicas naming another's
// actions count them against the same limit.
TEST(PlanJsonErrors, NamedActionsCountAgainstTheLimitOfActionsRead) {
  Plan p = full_plan();
  Replica copy = p.replicas[0];
  copy.groups[0].devices = {8, 9};
  copy.groups[1].devices = {10};
  p.replicas = {p.replicas[0], copy, copy};
  p.replicas[2].groups[0].devices = {11, 12};
  p.replicas[2].groups[1].devices = {13};
  const Json j = plan_to_json(p);
  ASSERT_EQ(j["replicas"][2]["same_actions_as"], 0);
  const int64_t each = 11;  // replica 0's actions: 6 + 5
  EXPECT_TRUE(plan_file_from_json(j, "plan.json", 3 * each).is_ok());
  EXPECT_EQ(plan_file_from_json(j, "plan.json", 3 * each - 1).status().message(),
            "plan.json: field 'replicas[2].same_actions_as': the replicas would hold 33 actions "
            "in all with this one's; at most 32 are read");
}

TEST(PlanJsonErrors, NameTheField) {
  EXPECT_EQ(error_after([](Json& j) { j.erase("format"); }),
            "plan.json: field 'format': is missing");
  EXPECT_EQ(error_after([](Json& j) { j["replicas"][1]["micro_batches"] = 0; }),
            "plan.json: field 'replicas[1].micro_batches': expected a positive integer, got 0");
  EXPECT_EQ(error_after([](Json& j) {
              j["stages"][2]["layers"] = Json{5, 6, 7};
            }),
            "plan.json: field 'stages[2].layers': expected [first layer, end layer) as two "
            "integers, got 3 values");
  EXPECT_EQ(error_after([](Json& j) { j["stages"][0]["layers"][1] = -2; }),
            "plan.json: field 'stages[0].layers[1]': expected a non-negative integer index, got "
            "-2");
  EXPECT_EQ(error_after([](Json& j) { j["stages"][1]["recompute"] = "some"; }),
            "plan.json: field 'stages[1].recompute': expected none, selective or full, got "
            "\"some\"");
  EXPECT_EQ(error_after([](Json& j) { j["replicas"][0]["groups"][0]["devices"][1] = "x"; }),
            "plan.json: field 'replicas[0].groups[0].devices[1]': expected an integer, got "
            "\"x\"");
  EXPECT_EQ(error_after([](Json& j) {
              j["replicas"][0]["groups"][0]["actions"] = Json{"0F0", "0B0", 3};
            }),
            "plan.json: field 'replicas[0].groups[0].actions[2]': expected a string, got 3");
  // In the one-string form an action is named by its index, as in an array.
  EXPECT_EQ(error_after([](Json& j) { j["replicas"][0]["groups"][0]["actions"] = "0F0 0B0  0X3"; }),
            "plan.json: field 'replicas[0].groups[0].actions[2]': expected an action like \"0F3\", "
            "got \"0X3\" (<stage><F, I, W, B or R><micro-batch>: forward, input-gradient "
            "backward, weight-gradient backward, full backward, recompute)");
  // A long word is cut short in the message.
  EXPECT_EQ(error_after([](Json& j) {
              j["replicas"][0]["groups"][0]["actions"] = "0F0 " + std::string(100000, '9');
            }),
            "plan.json: field 'replicas[0].groups[0].actions[1]': expected an action like \"0F3\", "
            "got \"" +
                std::string(36, '9') +
                "... (<stage><F, I, W, B or R><micro-batch>: "
                "forward, input-gradient backward, weight-gradient backward, full backward, "
                "recompute)");
  EXPECT_EQ(error_after([](Json& j) { j["replicas"][0]["groups"][0]["actions"] = 7; }),
            "plan.json: field 'replicas[0].groups[0].actions': expected the group's actions as "
            "one string (\"0F0 0F1 0B0\") or an array of action strings, got 7");
  EXPECT_EQ(error_after([](Json& j) { j["units"]["time"] = "ms"; }),
            "plan.json: field 'units.time': expected \"s\" (seconds), got \"ms\"");
  EXPECT_EQ(error_after([](Json& j) { j["predicted"]["bubble_fraction"] = 1.5; }),
            "plan.json: field 'predicted.bubble_fraction': expected a fraction between 0 and 1, "
            "got 1.5");
  EXPECT_EQ(error_after([](Json& j) { j["model"]["version"] = 2; }),
            "plan.json: field 'model.version': unknown field; allowed fields here: name or "
            "hash");
  EXPECT_EQ(error_after([](Json& j) {
              j.erase("zero_stage");
              j["zero1"] = "yes";
            }),
            "plan.json: field 'zero1': expected true or false, got \"yes\"");
  EXPECT_EQ(error_after([](Json& j) { j["zero_stage"] = 4; }),
            "plan.json: field 'zero_stage': expected an integer from 0 to 3, got 4");
  EXPECT_EQ(error_after([](Json& j) { j["zero1"] = true; }),
            "plan.json: field 'zero1': give 'zero_stage' or the older 'zero1', not both");
  EXPECT_EQ(error_after([](Json& j) { j = Json::array(); }),
            "plan.json: expected a plan (a JSON object with \"format\": \"motley.plan/4\"), got "
            "an array");
}

TEST(PlanJsonErrors, SizesOfAStepAreCapped) {
  EXPECT_EQ(error_after([](Json& j) { j["micro_batch_size"] = (int64_t{1} << 62) + 1; }),
            "plan.json: field 'micro_batch_size': expected an integer from 1 to 65536, got "
            "4611686018427387905");
  EXPECT_EQ(error_after([](Json& j) { j["seq_len"] = 1e9; }),
            "plan.json: field 'seq_len': expected an integer from 1 to 1048576, got 1000000000.0");
  EXPECT_EQ(error_after([](Json& j) { j["global_batch"] = INT64_MAX; }),
            "plan.json: field 'global_batch': expected an integer from 1 to 1073741824, got "
            "9223372036854775807");
  EXPECT_EQ(error_after([](Json& j) { j["replicas"][0]["micro_batches"] = 1e18; }),
            "plan.json: field 'replicas[0].micro_batches': expected an integer from 1 to "
            "1073741824, got 1e+18");
  EXPECT_EQ(error_after([](Json& j) { j["predicted"]["iteration_time_s"] = NAN; }),
            "plan.json: field 'predicted.iteration_time_s': expected a finite non-negative "
            "number, got NaN");
}

TEST(PlanJsonErrors, DuplicateKeysAreRejectedWithThePath) {
  std::string text = plan_to_text(full_plan());
  // Repeat the second replica's micro-batch count, a key whose last value would otherwise win.
  const size_t at = text.find("\"micro_batches\": 3");
  ASSERT_NE(at, std::string::npos) << text;
  text.insert(at, "\"micro_batches\": 5, ");
  Result<Json> j = parse_json(text, "plan.json");
  ASSERT_FALSE(j.is_ok());
  EXPECT_EQ(j.status().message(),
            "plan.json: field 'replicas[1].micro_batches': duplicate key; a key may appear only "
            "once in an object");
}

TEST(PlanJsonErrors, UnknownTopLevelKeyIsRejected) {
  const std::string msg = error_after([](Json& j) { j["schedul"] = "1f1b"; });
  EXPECT_EQ(msg.rfind("plan.json: field 'schedul': unknown field", 0), 0u) << msg;
}

TEST(PlanJson, OptionalFieldsTakeDefaults) {
  Json j = plan_to_json(full_plan());
  j.erase("units");
  j.erase("schedule");
  j.erase("zero_stage");
  j["stages"][0].erase("recompute");
  Result<Plan> p = plan_from_json(j, "plan.json");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->schedule, "");
  EXPECT_EQ(p->zero_stage, 0);
  EXPECT_EQ(p->stages[0].recompute, RecomputePolicy::kNone);
}

// Plans written before ZeRO-2 and -3 say `zero1`; every stage round-trips as `zero_stage`.
TEST(PlanJson, ReadsTheOlderZeroOneAndRoundTripsEveryStage) {
  Json j = plan_to_json(full_plan());
  j.erase("zero_stage");
  j["zero1"] = true;
  Result<Plan> p = plan_from_json(j, "plan.json");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->zero_stage, 1);
  j["zero1"] = false;
  p = plan_from_json(j, "plan.json");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->zero_stage, 0);
  for (int stage = 0; stage <= 3; ++stage) {
    Plan plan = full_plan();
    plan.zero_stage = stage;
    const Json written = plan_to_json(plan);
    EXPECT_EQ(written["zero_stage"], stage);
    EXPECT_FALSE(written.contains("zero1"));
    Result<Plan> back = plan_from_json(written, "plan.json");
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    EXPECT_EQ(back.value(), plan);
  }
}

TEST(PlanJson, RoundTripsContextParallelism) {
  Plan plan = full_plan();
  EXPECT_FALSE(plan_to_json(plan).contains("context_parallel"));  // 1 is not written
  plan.context_parallel = 2;
  const Json written = plan_to_json(plan);
  EXPECT_EQ(written["context_parallel"], 2);
  Result<Plan> back = plan_from_json(written, "plan.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), plan);
  Json bad = written;
  bad["context_parallel"] = 0;
  const std::string message = plan_from_json(bad, "plan.json").status().message();
  EXPECT_EQ(message.rfind("plan.json: field 'context_parallel'", 0), 0u) << message;
}

TEST(PlanJson, RoundTripsPerLayerRecompute) {
  Plan plan = full_plan();
  plan.stages[0].recompute_layers = {plan.stages[0].layer_begin};
  const Json written = plan_to_json(plan);
  EXPECT_EQ(written["stages"][0]["recompute_layers"], Json::array({plan.stages[0].layer_begin}));
  EXPECT_FALSE(written["stages"][1].contains("recompute_layers"));
  Result<Plan> back = plan_from_json(written, "plan.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), plan);
  Json bad = written;
  bad["stages"][0]["recompute_layers"] = Json::array({-1});
  EXPECT_EQ(plan_from_json(bad, "plan.json").status().message(),
            "plan.json: field 'stages[0].recompute_layers[0]': expected a non-negative integer "
            "index, got -1");
}

// ---- Plans that carry their model and cluster (format 2).

struct Specs {
  ModelSpec model = small_model(3, "carried");
  ClusterSpec cluster = single_device_nodes(3);
  Plan plan = one_f_one_b_plan(model, cluster, 4);
};

TEST(SelfContainedPlan, EmbedsModelAndClusterAndReadsThemBack) {
  const Specs s;
  const Json j = plan_to_json(s.plan, s.model, s.cluster);
  EXPECT_EQ(j.at("model_spec"), model_to_json(s.model));
  EXPECT_EQ(j.at("cluster_spec"), cluster_canonical_json(s.cluster));
  Result<PlanFile> back = plan_file_from_json(j, "plan.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->plan, s.plan);
  ASSERT_TRUE(back->model && back->cluster);
  EXPECT_EQ(model_to_json(*back->model), model_to_json(s.model));
  EXPECT_EQ(*back->cluster, s.cluster);
  EXPECT_EQ(model_ref(*back->model), s.plan.model);
  EXPECT_EQ(cluster_ref(*back->cluster), s.plan.cluster);
}

TEST(SelfContainedPlan, TextKeepsTheScheduleAboveTheSpecs) {
  const Specs s;
  const std::string text = plan_to_text(s.plan, s.model, s.cluster);
  const size_t replicas = text.find("\"replicas\"");
  const size_t model = text.find("\"model_spec\"");
  const size_t cluster = text.find("\"cluster_spec\"");
  ASSERT_NE(model, std::string::npos);
  EXPECT_LT(replicas, model);
  EXPECT_LT(model, cluster);
  Result<Json> parsed = parse_json(text, "text");
  ASSERT_TRUE(parsed.is_ok());
  EXPECT_EQ(parsed.value(), plan_to_json(s.plan, s.model, s.cluster));
}

TEST(SelfContainedPlan, AnEditedEmbeddedSpecIsNamedWithBothHashes) {
  const Specs s;
  Json j = plan_to_json(s.plan, s.model, s.cluster);
  j["model_spec"]["layers"][1]["ffn"]["ffn_size"] = 512;
  Result<PlanFile> p = plan_file_from_json(j, "plan.json");
  ASSERT_FALSE(p.is_ok());
  const std::string& msg = p.status().message();
  EXPECT_EQ(msg.rfind("plan.json: field 'model_spec': the embedded model is 'carried' (hash ", 0),
            0u)
      << msg;
  EXPECT_NE(msg.find("but field 'model' says 'carried' (hash " + s.plan.model.hash + ")"),
            std::string::npos)
      << msg;

  j = plan_to_json(s.plan, s.model, s.cluster);
  j["cluster_spec"]["nodes"][0]["price_per_hour"] = 1.5;
  p = plan_file_from_json(j, "plan.json");
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("field 'cluster_spec': the embedded cluster is"),
            std::string::npos)
      << p.status().message();
}

TEST(SelfContainedPlan, AMalformedEmbeddedSpecNamesItsField) {
  const Specs s;
  Json j = plan_to_json(s.plan, s.model, s.cluster);
  j["model_spec"]["layers"][2]["attention"]["num_heads"] = "four";
  Result<PlanFile> p = plan_file_from_json(j, "plan.json");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(
      p.status().message().rfind(
          "plan.json: field 'model_spec.layers[2].attention.num_heads': expected an integer", 0),
      0u)
      << p.status().message();
}

TEST(SelfContainedPlan, FormatOneFilesStillReadButTakeNoSpecs) {
  const Specs s;
  Json j = plan_to_json(s.plan);
  j["format"] = "motley.plan/1";
  Result<PlanFile> p = plan_file_from_json(j, "old.json");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->plan, s.plan);
  EXPECT_FALSE(p->model.has_value());
  EXPECT_FALSE(p->cluster.has_value());
  j["model_spec"] = model_to_json(s.model);
  p = plan_file_from_json(j, "old.json");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().message().rfind("old.json: field 'model_spec': unknown field", 0), 0u)
      << p.status().message();
}

class PlanInputsTest : public PlanFileIo {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    EXPECT_TRUE(write_file_atomically(path, text).is_ok());
    return path;
  }
  Specs s_;
};

TEST_F(PlanInputsTest, TheFileAloneIsEnough) {
  const std::string path = write("plan.json", plan_to_text(s_.plan, s_.model, s_.cluster));
  Result<PlanInputs> in = load_plan_inputs(path);
  ASSERT_TRUE(in.is_ok()) << in.status().message();
  EXPECT_EQ(in->plan, s_.plan);
  EXPECT_EQ(model_ref(in->model), s_.plan.model);
  EXPECT_EQ(in->cluster, s_.cluster);
}

TEST_F(PlanInputsTest, AnOverrideMustHaveThePlansHash) {
  const std::string path = write("plan.json", plan_to_text(s_.plan, s_.model, s_.cluster));
  // The same model from a file of its own is accepted.
  const std::string same = write("same.json", model_to_json(s_.model).dump());
  Result<PlanInputs> in = load_plan_inputs(path, PlanSpecOverrides{same, ""});
  ASSERT_TRUE(in.is_ok()) << in.status().message();
  // Another one is refused, naming both hashes and what to do.
  const std::string other = write("other.json", model_to_json(small_model(3, "other")).dump());
  in = load_plan_inputs(path, PlanSpecOverrides{other, ""});
  ASSERT_FALSE(in.is_ok());
  EXPECT_EQ(in.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(in.status().message(),
            path + ": field 'model': the plan was made for model 'carried' (hash " +
                s_.plan.model.hash + ") but --model " + other + " is 'other' (hash " +
                model_ref(small_model(3, "other")).hash +
                "); leave out --model to use the model the plan carries, or make a new plan "
                "for this model");
}

TEST_F(PlanInputsTest, AFileWithoutSpecsFindsThemByName) {
  // A plan without its specs (format 1, or written without them) finds presets by name.
  Result<ModelSpec> preset = load_model("tiny-llama");
  Result<ClusterSpec> cluster = load_cluster("h100x8");
  ASSERT_TRUE(preset.is_ok() && cluster.is_ok());
  Plan plan = s_.plan;
  plan.model = model_ref(preset.value());
  plan.cluster = cluster_ref(cluster.value());
  const std::string path = write("old.json", plan_to_text(plan));
  Result<PlanInputs> in = load_plan_inputs(path);
  ASSERT_TRUE(in.is_ok()) << in.status().message();
  EXPECT_EQ(in->model.name, "tiny-llama");
  EXPECT_EQ(in->cluster, cluster.value());

  // One made for a model file that is not here says so and names --model.
  const std::string orphan = write("orphan.json", plan_to_text(s_.plan));
  in = load_plan_inputs(orphan);
  ASSERT_FALSE(in.is_ok());
  EXPECT_EQ(in.status().code(), StatusCode::kNotFound);
  const std::string& msg = in.status().message();
  EXPECT_EQ(msg.rfind(orphan + ": field 'model': the plan names model 'carried' but does not "
                               "carry it (an older plan file), and it cannot be found: ",
                      0),
            0u)
      << msg;
  EXPECT_NE(msg.find("pass --model with the model the plan was made for"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace motley::testing
