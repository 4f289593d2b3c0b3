#include "serving/split.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

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

TEST(WeightedSplitTest, NextNeverGivesALighterTargetMoreThanItsShare) {
  for (const std::vector<int>& weights : std::vector<std::vector<int>>{
           {95, 5}, {75, 25}, {50, 50}, {5, 95}, {60, 30, 10}, {34, 33, 33}}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      auto s = WeightedSplit::Create(weights);
      ASSERT_TRUE(s.ok());
      int total = 0;
      for (int w : weights) total += w;
      const int heaviest = static_cast<int>(
          std::max_element(weights.begin(), weights.end()) - weights.begin());
      std::vector<int64_t> count(weights.size(), 0);
      for (int64_t n = 1; n <= 5000; ++n) {
        ++count[s->Next(StickyHash(std::to_string(seed * 100000 + n)))];
        for (size_t i = 0; i < weights.size(); ++i) {
          if (static_cast<int>(i) == heaviest) continue;
          // At most its share, ever; behind it by a few requests at most.
          ASSERT_LE(count[i] * total, n * weights[i])
              << "target " << i << " after " << n;
          ASSERT_GT(count[i] * total, n * weights[i] - 3 * total)
              << "target " << i << " after " << n;
        }
      }
    }
  }
}

TEST(WeightedSplitTest, NextSkipsZeroWeightsAndVariesTheGaps) {
  auto s = WeightedSplit::Create({0, 95, 5});
  ASSERT_TRUE(s.ok());
  std::set<int64_t> gaps;
  int64_t last = 0;
  for (int64_t n = 1; n <= 2000; ++n) {
    const int i = s->Next(StickyHash(std::to_string(n)));
    ASSERT_NE(i, 0);
    if (i == 2) {
      gaps.insert(n - last);
      last = n;
    }
  }
  // A fixed period would give one gap (20); random thresholds many.
  EXPECT_GT(gaps.size(), 5u);
  EXPECT_EQ(s->weights(), (std::vector<int>{0, 95, 5}));
}

TEST(WeightedSplitTest, StickyHashIsStable) {
  EXPECT_EQ(StickyHash("tenant-a"), StickyHash("tenant-a"));
  EXPECT_NE(StickyHash("tenant-a"), StickyHash("tenant-b"));
  EXPECT_EQ(StickyHash(""), StickyHash(std::string()));
}

}  // namespace
}  // namespace gpusched::serving
