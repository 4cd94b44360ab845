// The options `motley plan` and `motley compare` share, from the command line to TuneOptions.
#include "tune_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace motley::cli {
namespace {

// Parses `args` (without the program name) into `opt`; the parser's message when it refuses
// them, else "".
std::string parse(std::vector<std::string> args, TuneCliOptions* opt) {
  CLI::App app;
  add_tune_options(&app, opt);
  args.insert(args.begin(), "motley-plan");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

// The options as parsed from `args` and prepared. REQUIRES: the parser accepts them.
Result<TuneSetup> parsed(const std::vector<std::string>& args) {
  TuneCliOptions opt;
  const std::string refused = parse(args, &opt);
  EXPECT_EQ(refused, "");
  return prepare_tune(opt);
}

std::string refusal(const std::vector<std::string>& args) {
  TuneCliOptions opt;
  return parse(args, &opt);
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
  EXPECT_EQ(refusal({"--max-plans", "-1"}),
            "--max-plans: expected an integer from 1 to 9223372036854775807, got -1");
  EXPECT_EQ(refusal({"--max-plans", "0"}),
            "--max-plans: expected an integer from 1 to 9223372036854775807, got 0");
}

// A value left out takes its default; a zero given is refused, not taken for the default.
TEST(TuneOptionsTest, UnsetValuesTakeTheDefaultsAndZerosAreRefused) {
  Result<TuneSetup> setup = parsed({"--model", "tiny-llama"});
  ASSERT_TRUE(setup.is_ok()) << setup.status().message();
  EXPECT_EQ(setup->options.global_batch, 8 * 16);  // the default cluster's 16 devices
  EXPECT_EQ(setup->options.seq_len, 0);            // the model's
  EXPECT_EQ(setup->options.micro_batch_size, 0);   // the tuner's choice
  EXPECT_EQ(refusal({"--global-batch", "0"}),
            "--global-batch: expected an integer from 1 to 65536, got 0");
  EXPECT_EQ(refusal({"--seq-len", "-64"}),
            "--seq-len: expected an integer from 1 to 16777216, got -64");
  EXPECT_EQ(refusal({"--micro-batch-size", "1.5"}),
            "--micro-batch-size: expected an integer from 1 to 65536, got 1.5");
  EXPECT_EQ(refusal({"--threads", "0"}), "--threads: expected an integer from 1 to 1024, got 0");
}

TEST(TuneOptionsTest, SeedsAndBudgetsOutOfRangeAreRefused) {
  EXPECT_EQ(refusal({"--seed", "-1"}),
            "--seed: expected an integer from 0 to 18446744073709551615, got -1");
  EXPECT_EQ(refusal({"--seed", "18446744073709551616"}),
            "--seed: expected an integer from 0 to 18446744073709551615, got "
            "18446744073709551616");
  Result<TuneSetup> setup = parsed({"--model", "tiny-llama", "--seed", "18446744073709551615"});
  ASSERT_TRUE(setup.is_ok()) << setup.status().message();
  EXPECT_EQ(setup->options.seed, 18446744073709551615ULL);
  for (const char* budget : {"0", "-2", "inf", "nan", "1e400", "1e300", "fast"}) {
    EXPECT_EQ(
        refusal({"--time-budget", budget}),
        std::string("--time-budget: expected a number above 0 and at most 1000000, got ") + budget);
  }
  // Dollars, hours and tokens far beyond any job: costs and times derived from them would print
  // as numbers of hundreds of digits, or overflow.
  EXPECT_EQ(refusal({"--budget", "1e300"}),
            "--budget: expected a number above 0 and at most 1000000000, got 1e300");
  EXPECT_EQ(refusal({"--deadline", "2e6", "--train-tokens", "1e12"}),
            "--deadline: expected a number above 0 and at most 1000000, got 2e6");
  EXPECT_EQ(refusal({"--deadline", "10", "--train-tokens", "1e19"}),
            "--train-tokens: expected a number above 0 and at most 1e+18, got 1e19");
}

}  // namespace
}  // namespace motley::cli
