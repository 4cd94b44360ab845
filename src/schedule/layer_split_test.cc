#include "motley/schedule/layer_split.h"

#include <gtest/gtest.h>

#include <vector>

namespace motley {
namespace {

TEST(LayerSplitTest, UniformRemainderGoesToTheFirstStages) {
  EXPECT_EQ(uniform_bounds(10, 4), (std::vector<int>{0, 3, 6, 8, 10}));
  EXPECT_EQ(uniform_bounds(6, 6), (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(uniform_bounds(7, 1), (std::vector<int>{0, 7}));
}

}  // namespace
}  // namespace motley
