// The options `motley plan` and `motley compare` share, from the command line to TuneOptions.
#include "tune_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace motley::cli {
namespace {

// The options as parsed from `args` (without the program name) and prepared.
Result<TuneSetup> parsed(std::vector<std::string> args) {
  CLI::App app;
  TuneCliOptions opt;
  add_tune_options(&app, &opt);
  args.insert(args.begin(), "motley-plan");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return prepare_tune(opt);
}

TEST(TuneOptionsTest, MaxPlansIsTheEvaluationBudget) {
  Result<TuneSetup> setup = parsed({"--model", "tiny-llama", "--max-plans", "40"});
  ASSERT_TRUE(setup.is_ok()) << setup.status().message();
  EXPECT_EQ(setup->options.max_evaluations, 40);
  EXPECT_EQ(setup->options.time_budget, Seconds(8));
  // By default there is none, and the wall-clock budget alone applies.
  setup = parsed({"--model", "tiny-llama", "--time-budget", "2.5"});
  ASSERT_TRUE(setup.is_ok()) << setup.status().message();
  EXPECT_EQ(setup->options.max_evaluations, 0);
  EXPECT_EQ(setup->options.time_budget, Seconds(2.5));
  setup = parsed({"--model", "tiny-llama", "--max-plans", "-1"});
  ASSERT_FALSE(setup.is_ok());
  EXPECT_EQ(setup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(setup.status().message(),
            "--max-plans: expected a positive number of plans (0: no limit)");
}

}  // namespace
}  // namespace motley::cli
