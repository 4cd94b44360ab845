#include "motley/core/json.h"

#include <fmt/format.h>
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

TEST(ParseJsonTest, NestingBeyondTheLimitIsRejectedBeforeAnythingRecurses) {
  // 100,000 levels used to overflow the stack where the tree was walked (here: the pass that
  // restores NaN); the position is that of the first bracket past the limit.
  const std::string deep = std::string(100000, '[') + "NaN" + std::string(100000, ']');
  auto r = parse_json(deep, "deep.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            "deep.json: malformed JSON at line 1, column 65: nested deeper than 64 levels");
  const std::string at_limit =
      std::string(kMaxNestingDepth, '[') + std::string(kMaxNestingDepth, ']');
  EXPECT_TRUE(parse_json(at_limit, "ok.json").is_ok());
  // Brackets inside strings are text.
  EXPECT_TRUE(parse_json("{\"s\": \"" + std::string(1000, '[') + "\"}", "ok.json").is_ok());
}

TEST(ParseJsonTest, DuplicateKeysAreRejectedWithTheirPath) {
  auto r = parse_json(R"({"a": {"b": [1, {"c": 1, "d": [], "c": 2}]}})", "m.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            "m.json: field 'a.b[1].c': duplicate key; a key may appear only once in an object");
  EXPECT_EQ(parse_json(R"({"x": 1, "x": 1})", "m.json").status().message(),
            "m.json: field 'x': duplicate key; a key may appear only once in an object");
  // The same key in different objects is fine.
  EXPECT_TRUE(parse_json(R"([{"x": 1}, {"x": 2}, {"y": {"x": 3}}])", "m.json").is_ok());
}

TEST(ParseJsonTest, NumbersBeyondADoubleAreAnErrorWithThePosition) {
  // nlohmann reports these with an out_of_range exception, which used to escape as an
  // "unexpected exception".
  auto r = parse_json("{\"a\": 1,\n \"b\": -1e999}", "p.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            "p.json: malformed JSON at line 2, column 7: the number -1e999 is beyond the range "
            "of a double (about 1.8e308)");
}

TEST(ParseJsonTest, SyntaxErrorPositionsCountTheUsersText) {
  // NaN is rewritten to a longer placeholder before parsing; the column is still the file's.
  auto r = parse_json(R"({"a": NaN, "b": Infinity, "c": })", "p.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(
      r.status().message().rfind("p.json: malformed JSON at line 1, column 33: syntax error", 0),
      0u)
      << r.status().message();
  EXPECT_EQ(parse_json("", "e.json")
                .status()
                .message()
                .rfind("e.json: malformed JSON at line 1, column 1: syntax error", 0),
            0u);
}

TEST(ParseYamlTest, AnchorsAndAliasesWork) {
  auto r = parse_yaml("base: &b {type: H100, count: 8}\nnodes: [{devices: *b}, {devices: *b}]\n",
                      "c.yaml");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value()["nodes"][1]["devices"]["count"].get<int64_t>(), 8);
}

TEST(ParseYamlTest, AnAliasInsideItsOwnAnchorIsRejected) {
  // 25 bytes that used to recurse until the stack ran out.
  auto r = parse_yaml("nodes: &n [*n]", "self.yaml");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            "self.yaml: field 'nodes[0]' (line 1): an alias refers to a node that contains it; "
            "YAML aliases must not be recursive");
  EXPECT_FALSE(parse_yaml("a: &a {b: [1, {c: *a}]}", "self.yaml").is_ok());
}

TEST(ParseYamlTest, AliasExpansionIsCapped) {
  // Nine levels of nine aliases each: 9^9 (387 million) values, from a few hundred bytes.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    bomb += fmt::format("a{0}: &a{0} [", i);
    for (int k = 0; k < 9; ++k) bomb += fmt::format("{}*a{}", k > 0 ? ", " : "", i - 1);
    bomb += "]\n";
  }
  auto r = parse_yaml(bomb, "bomb.yaml");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("bomb.yaml: field 'a"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("more than 1000000 values once its aliases are expanded"),
            std::string::npos)
      << r.status().message();
}

// The document's size is counted before it is expanded; the error names the value the expansion
// would have stopped at, here a path through five levels of aliases after other values.
TEST(ParseYamlTest, AnExpansionPastTheCapNamesTheValueThatPassesIt) {
  std::string doc =
      "pre: [1, 2, {q: 3, r: [4, 5]}]\n"
      "base: &b {k1: [a, b, c, d, e, f, g, h, i, j], k2: {z: 1}}\n"
      "l1: &l1 [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
      "l2: &l2 {m1: [*l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1], m2: *l1, m3: [*l1, *l1]}\n"
      "l3: &l3 [*l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2]\n"
      "l4: &l4 {x: [*l3, *l3, *l3], y: [*l3, *l3, *l3, *l3, *l3, *l3]}\n";
  // Up to l4, 172,671 values; l4 stands for 153,858. With seven copies of it in l5, the
  // 1,000,001st value in the document's order is the eighth letter of k1 there.
  auto r = parse_yaml(doc + "l5: [*l4, *l4, *l4, *l4, *l4, *l4, *l4]\ntail: [1, 2]\n", "b.yaml");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            "b.yaml: field 'l5[5].y[0][4].m1[3][7].k1[7]' (line 2): the document holds more than "
            "1000000 values once its aliases are expanded; every use of an alias counts its "
            "anchor's values again");
  // Sixty levels of doubling stand for 2^60 values: the count saturates instead of overflowing.
  std::string doubling = "d0: &d0 [x, x]\n";
  for (int i = 1; i < 60; ++i) doubling += fmt::format("d{0}: &d{0} [*d{1}, *d{1}]\n", i, i - 1);
  auto d = parse_yaml(doubling, "d.yaml");
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("more than 1000000 values"), std::string::npos)
      << d.status().message();
}

TEST(ParseYamlTest, NestingBeyondTheLimitIsRejected) {
  auto r = parse_yaml(std::string(65, '[') + std::string(65, ']'), "deep.yaml");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "deep.yaml: line 1: nested deeper than 64 levels");
  EXPECT_TRUE(parse_yaml(std::string(64, '[') + std::string(64, ']'), "ok.yaml").is_ok());
  // Far deeper: yaml-cpp's own guard stops it first.
  EXPECT_EQ(parse_yaml(std::string(100000, '[') + std::string(100000, ']'), "deep.yaml")
                .status()
                .message(),
            "deep.yaml: malformed YAML: nested deeper than 64 levels");
}

TEST(ParseYamlTest, DuplicateAndNonScalarKeysAreRejected) {
  auto r = parse_yaml("nodes:\n  - name: a\n    count: 2\n    name: b\n", "lab.yaml");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            "lab.yaml: field 'nodes[0].name' (line 4): duplicate key; a key may appear only once "
            "in a mapping");
  auto k = parse_yaml("a:\n  ? [1, 2]\n  : x\n", "lab.yaml");
  ASSERT_FALSE(k.is_ok());
  EXPECT_NE(k.status().message().find("lab.yaml: field 'a' (line 2): a mapping key must be"),
            std::string::npos)
      << k.status().message();
}

TEST(ParseYamlTest, TextThatIsNotUtf8IsRejected) {
  auto value = parse_yaml("name: \"a\"\nnode: box\xff\n", "c.yaml");
  ASSERT_FALSE(value.is_ok());
  EXPECT_EQ(value.status().message(),
            "c.yaml: field 'node' (line 2): not UTF-8 text; a YAML file must be UTF-8");
  auto key = parse_yaml("a:\n  \xc0\xaf: 1\n", "c.yaml");
  ASSERT_FALSE(key.is_ok());
  EXPECT_EQ(key.status().message(),
            "c.yaml: field 'a' (line 2): a mapping key that is not UTF-8 text; a YAML file must be "
            "UTF-8");
  EXPECT_TRUE(parse_yaml("name: caf\xc3\xa9\n", "c.yaml").is_ok());
}

TEST(JsonFieldStringsTest, StringsWithControlCharactersAreRejected) {
  const Json j = {{"plain", "caf\xc3\xa9 42"},
                  {"escape", "lab\x1b[31m"},
                  {"c1", "x\xc2\x9b"},
                  {"newline", "a\nb"}};
  JsonField root(j, "c.yaml");
  EXPECT_EQ(root.get_string("plain").value(), "caf\xc3\xa9 42");
  EXPECT_EQ(root.get_string("escape").status().message(),
            "c.yaml: field 'escape': expected printable text (no control characters), got "
            "\"lab\\u001b[31m\"");
  EXPECT_FALSE(root.get_string("c1").is_ok());
  EXPECT_FALSE(root.get_string("newline").is_ok());
}

TEST(ParseYamlTest, NonFiniteNumbersAreNamed) {
  Json j = parse_yaml("a: .nan\nb: -.inf\n", "c.yaml").value();
  JsonField root(j, "c.yaml");
  EXPECT_EQ(root.get_positive_double("a").status().message(),
            "c.yaml: field 'a': expected a finite positive number, got NaN");
  EXPECT_EQ(root.get_nonnegative_double("b").status().message(),
            "c.yaml: field 'b': expected a finite non-negative number, got -Infinity");
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

TEST(JsonFieldNumbersTest, NonFiniteNumbersAreRejectedAndNamed) {
  Json j = parse_json(R"({"nan": NaN, "inf": Infinity, "ninf": -Infinity})", "c.json").value();
  JsonField root(j, "c.json");
  EXPECT_EQ(root.get_double("nan").status().message(),
            "c.json: field 'nan': expected a finite number, got NaN");
  EXPECT_EQ(root.get_double("inf").status().message(),
            "c.json: field 'inf': expected a finite number, got Infinity");
  EXPECT_EQ(root.get_int("ninf").status().message(),
            "c.json: field 'ninf': expected an integer, got -Infinity");
  EXPECT_EQ(root.get_nonnegative_double("inf").status().message(),
            "c.json: field 'inf': expected a finite non-negative number, got Infinity");
  EXPECT_EQ(root.get_positive_int("nan").status().message(),
            "c.json: field 'nan': expected an integer, got NaN");
}

TEST(JsonFieldNumbersTest, RangesStateTheAllowedValues) {
  Json j = Json::parse(R"({"n": 8, "big": 5000, "neg": -3, "huge": 1e18, "max": 9223372036854775807,
                           "u64": 18446744073709551615, "half": 2.5})");
  JsonField root(j, "c.yaml");
  const IntRange counts{1, 4096};
  EXPECT_EQ(root.get_int_in("n", counts).value(), 8);
  EXPECT_EQ(root.get_int_in("big", counts).status().message(),
            "c.yaml: field 'big': expected an integer from 1 to 4096, got 5000");
  EXPECT_EQ(root.get_int_in("neg", counts).status().message(),
            "c.yaml: field 'neg': expected a positive integer, got -3");
  EXPECT_EQ(root.get_int_in("neg", IntRange{0, 9}).status().message(),
            "c.yaml: field 'neg': expected a non-negative integer, got -3");
  EXPECT_EQ(root.get_int_in("neg", IntRange{2, 9}).status().message(),
            "c.yaml: field 'neg': expected an integer from 2 to 9, got -3");
  for (const char* key : {"huge", "max", "u64"}) {
    EXPECT_NE(root.get_int_in(key, counts)
                  .status()
                  .message()
                  .find("expected an integer from 1 to 4096, got"),
              std::string::npos)
        << key;
  }
  EXPECT_EQ(root.get_int_in("half", counts).status().message(),
            "c.yaml: field 'half': expected an integer, got 2.5");
  EXPECT_EQ(root.get_int_in_or("absent", counts, 1).value(), 1);
  EXPECT_FALSE(root.get_int_in_or("big", counts, 1).is_ok());
}

TEST(FileTest, MissingFileIsNotFound) {
  auto r = read_text_file("/nonexistent/motley.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "/nonexistent/motley.json: no such file");
}

TEST(FileTest, StructuredFilesAreReadUpToALimit) {
  // A device that never ends used to be read until memory ran out.
  EXPECT_EQ(read_json_file("/dev/zero").status().message(),
            "/dev/zero: larger than 256 MiB, the most motley reads as a JSON or YAML file");
  EXPECT_EQ(read_yaml_file("/dev/zero").status().code(), StatusCode::kInvalidArgument);
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
