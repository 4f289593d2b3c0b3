#include "serving/split.h"

#include <string>

#include "gtest/gtest.h"

namespace gpusched::serving {
namespace {

TEST(WeightedSplitTest, PicksInProportion) {
  auto s = WeightedSplit::Create({90, 10});
  ASSERT_TRUE(s.ok());
  int second = 0;
  constexpr int kKeys = 100000;
  for (int i = 0; i < kKeys; ++i) {
    second += s->Pick(StickyHash(std::to_string(i)));
  }
  // 10% of 100,000 hashed keys: binomial sd ~95; 5 sd either side.
  EXPECT_NEAR(second, kKeys / 10, 500);
}

TEST(WeightedSplitTest, ZeroWeightIsNeverPicked) {
  auto s = WeightedSplit::Create({0, 100, 0});
  ASSERT_TRUE(s.ok());
  for (uint64_t k = 0; k < 1000; ++k) EXPECT_EQ(s->Pick(k), 1);
  EXPECT_FALSE(WeightedSplit::Create({0, 0}).ok());
  EXPECT_FALSE(WeightedSplit::Create({50, -1}).ok());
  EXPECT_FALSE(WeightedSplit::Create({}).ok());
}

TEST(WeightedSplitTest, RaisingTheLastWeightMovesKeysOneWay) {
  auto before = WeightedSplit::Create({95, 5});
  auto after = WeightedSplit::Create({75, 25});
  ASSERT_TRUE(before.ok() && after.ok());
  for (int i = 0; i < 10000; ++i) {
    const uint64_t k = StickyHash("session-" + std::to_string(i));
    // A key on the canary at 5% is still on it at 25%.
    if (before->Pick(k) == 1) EXPECT_EQ(after->Pick(k), 1);
  }
}

TEST(WeightedSplitTest, StickyHashIsStable) {
  EXPECT_EQ(StickyHash("tenant-a"), StickyHash("tenant-a"));
  EXPECT_NE(StickyHash("tenant-a"), StickyHash("tenant-b"));
  EXPECT_EQ(StickyHash(""), StickyHash(std::string()));
}

}  // namespace
}  // namespace gpusched::serving
