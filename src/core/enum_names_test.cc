#include "motley/core/enum_names.h"

#include <gtest/gtest.h>

#include "motley/core/dtype.h"

namespace motley {
namespace {

enum class Fruit { kApple, kBloodOrange, kPear };

constexpr const char* kFruitNames[] = {"apple", "blood-orange"};  // kPear left out on purpose

TEST(EnumNames, EachValueHasItsNameAndOnePastTheTableGetsTheFallback) {
  EXPECT_STREQ(name_in(kFruitNames, Fruit::kApple), "apple");
  EXPECT_STREQ(name_in(kFruitNames, Fruit::kBloodOrange), "blood-orange");
  EXPECT_STREQ(name_in(kFruitNames, Fruit::kPear), "?");
  EXPECT_STREQ(name_in(kFruitNames, Fruit::kPear, "pear?"), "pear?");
}

TEST(EnumNames, ParseIgnoresCaseAndCountsDashUnderscoreAndSpaceAsOne) {
  EXPECT_EQ(parse_name_in<Fruit>(kFruitNames, "APPLE"), Fruit::kApple);
  EXPECT_EQ(parse_name_in<Fruit>(kFruitNames, "blood_orange"), Fruit::kBloodOrange);
  EXPECT_EQ(parse_name_in<Fruit>(kFruitNames, "Blood Orange"), Fruit::kBloodOrange);
  EXPECT_EQ(parse_name_in<Fruit>(kFruitNames, "bloodorange"), std::nullopt);
  EXPECT_EQ(parse_name_in<Fruit>(kFruitNames, "apple "), std::nullopt);
  EXPECT_EQ(parse_name_in<Fruit>(kFruitNames, "pear"), std::nullopt);
  EXPECT_EQ(parse_name_in<Fruit>(kFruitNames, ""), std::nullopt);
}

TEST(EnumNames, TheListIsTheTableInOrder) {
  EXPECT_EQ(names_in(kFruitNames), (std::vector<std::string>{"apple", "blood-orange"}));
}

TEST(EnumNames, DtypesKeepTheirAliases) {
  EXPECT_EQ(parse_dtype("BFloat16"), DType::kBFloat16);
  EXPECT_EQ(parse_dtype("half"), DType::kFloat16);
  EXPECT_EQ(parse_dtype("float32"), DType::kFloat32);
  EXPECT_EQ(parse_dtype("FP16"), DType::kFloat16);
  EXPECT_STREQ(dtype_name(DType::kFloat16), "fp16");
  EXPECT_EQ(parse_dtype("fp64"), std::nullopt);
}

}  // namespace
}  // namespace motley
