#include "motley/core/json.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace motley {
namespace {

TEST(ParseJsonTest, AcceptsPythonSpecialNumbersOutsideStrings) {
  auto r = parse_json(R"({"a": [0.0, Infinity, -Infinity, NaN], "s": "Infinity NaN"})", "c.json");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const Json& j = r.value();
  EXPECT_EQ(j["a"][0].get<double>(), 0.0);
  EXPECT_TRUE(std::isinf(j["a"][1].get<double>()));
  EXPECT_GT(j["a"][1].get<double>(), 0);
  EXPECT_LT(j["a"][2].get<double>(), 0);
  EXPECT_TRUE(std::isnan(j["a"][3].get<double>()));
  EXPECT_EQ(j["s"].get<std::string>(), "Infinity NaN");
}

TEST(ParseJsonTest, MalformedJsonNamesTheSource) {
  auto r = parse_json("{\"a\": 1,,}", "config.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("config.json: malformed JSON"), std::string::npos)
      << r.status().message();
}

TEST(ParseYamlTest, ScalarsBecomeTypedJson) {
  auto r = parse_yaml("a: 8\nb: 2.5\nc: true\nd: ~\ne: nvlink\nf: '8'\ng: [1, 2]\n", "c.yaml");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const Json& j = r.value();
  EXPECT_TRUE(j["a"].is_number_integer());
  EXPECT_EQ(j["a"].get<int64_t>(), 8);
  EXPECT_DOUBLE_EQ(j["b"].get<double>(), 2.5);
  EXPECT_EQ(j["c"].get<bool>(), true);
  EXPECT_TRUE(j["d"].is_null());
  EXPECT_EQ(j["e"].get<std::string>(), "nvlink");
  EXPECT_TRUE(j["f"].is_string());
  EXPECT_EQ(j["g"].size(), 2u);
}

TEST(ParseYamlTest, MalformedYamlNamesSourceAndLine) {
  auto r = parse_yaml("a: [1, 2\nb: 3\n", "lab.yaml");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("lab.yaml: malformed YAML at line"), std::string::npos)
      << r.status().message();
}

class JsonFieldTest : public ::testing::Test {
 protected:
  Json doc_ = Json::parse(R"({"n": 8, "f": 8.0, "half": 8.5, "neg": -3, "s": "x", "b": true,
                              "z": null, "list": [{"k": 1}, {"k": "two"}]})");
  JsonField root_{doc_, "file.json"};
};

TEST_F(JsonFieldTest, IntegersAcceptIntegralFloatsOnly) {
  EXPECT_EQ(root_.get_int("n").value(), 8);
  EXPECT_EQ(root_.get_int("f").value(), 8);
  auto r = root_.get_int("half");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "file.json: field 'half': expected an integer, got 8.5");
  EXPECT_EQ(root_.get_int("s").status().message(),
            "file.json: field 's': expected an integer, got \"x\"");
}

TEST_F(JsonFieldTest, RangeChecksNameTheField) {
  EXPECT_EQ(root_.get_positive_int("neg").status().message(),
            "file.json: field 'neg': expected a positive integer, got -3");
  EXPECT_EQ(root_.get_nonnegative_double("neg").status().message(),
            "file.json: field 'neg': expected a finite non-negative number, got -3");
  EXPECT_EQ(root_.get_positive_double("n").value(), 8.0);
}

TEST_F(JsonFieldTest, MissingAndNullAreMissingOptionalsFallBack) {
  EXPECT_EQ(root_.get_int("absent").status().message(), "file.json: field 'absent': is missing");
  EXPECT_EQ(root_.get_int("z").status().message(), "file.json: field 'z': is missing");
  EXPECT_EQ(root_.get_int_or("absent", 7).value(), 7);
  EXPECT_EQ(root_.get_int_or("z", 7).value(), 7);
  EXPECT_FALSE(root_.get_int_or("s", 7).is_ok());
  EXPECT_EQ(root_.get_string_or("s", "d").value(), "x");
  EXPECT_EQ(root_.get_bool_or("b", false).value(), true);
  EXPECT_FALSE(root_.has("z"));
  EXPECT_TRUE(root_.has("n"));
}

TEST_F(JsonFieldTest, ArrayItemsCarryTheirIndexInThePath) {
  auto items = root_.get("list").value().items();
  ASSERT_TRUE(items.is_ok());
  ASSERT_EQ(items.value().size(), 2u);
  EXPECT_EQ(items.value()[0].get_int("k").value(), 1);
  EXPECT_EQ(items.value()[1].get_int("k").status().message(),
            "file.json: field 'list[1].k': expected an integer, got \"two\"");
}

TEST_F(JsonFieldTest, UnknownKeysAreRejectedWithTheAllowedList) {
  Json j = Json::parse(R"({"name": "a", "cuont": 2})");
  JsonField f(j, "c.yaml", "nodes[0]");
  Status s = f.check_keys({"name", "count"});
  EXPECT_EQ(s.message(),
            "c.yaml: field 'nodes[0].cuont': unknown field; allowed fields here: name or count");
  EXPECT_TRUE(f.check_keys({"name", "cuont"}).is_ok());
}

TEST(FileTest, MissingFileIsNotFound) {
  auto r = read_text_file("/nonexistent/motley.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "/nonexistent/motley.json: no such file");
}

TEST(FileTest, AtomicWriteReplacesWholeFileAndLeavesNoTemporary) {
  auto dir =
      std::filesystem::temp_directory_path() / ("motley_json_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "out.json").string();
  ASSERT_TRUE(write_file_atomically(path, "first").is_ok());
  ASSERT_TRUE(write_file_atomically(path, "second, longer").is_ok());
  EXPECT_EQ(read_text_file(path).value(), "second, longer");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  EXPECT_EQ(write_file_atomically((dir / "missing" / "x").string(), "y").code(),
            StatusCode::kIoError);
  std::filesystem::remove_all(dir);
}

TEST(JoinTest, ListsAlternatives) {
  EXPECT_EQ(join_alternatives({"a"}), "a");
  EXPECT_EQ(join_alternatives({"a", "b"}), "a or b");
  EXPECT_EQ(join_alternatives({"a", "b", "c"}), "a, b or c");
}

}  // namespace
}  // namespace motley
