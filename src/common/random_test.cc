#include "common/random.h"

#include <algorithm>
#include <numeric>

#include "gtest/gtest.h"

namespace gpusched {
namespace {

TEST(RngTest, SameSeedSameSequence) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs |= x != c.Next();
  }
  EXPECT_TRUE(differs);
}

TEST(RngTest, UniformStaysInRangeAndCoversIt) {
  Rng r(7);
  std::vector<int> hits(10, 0);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t v = r.Uniform(10);
    ASSERT_LT(v, 10u);
    ++hits[v];
  }
  for (int h : hits) EXPECT_GT(h, 800);  // ~1000 each; 800 is > 6 sigma away
  for (int i = 0; i < 1000; ++i) {
    const double d = r.UniformDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
}

TEST(RngTest, ShuffleIsAPermutation) {
  Rng r(1);
  std::vector<int> v(50);
  std::iota(v.begin(), v.end(), 0);
  std::vector<int> s = v;
  r.Shuffle(s);
  EXPECT_NE(s, v);
  std::sort(s.begin(), s.end());
  EXPECT_EQ(s, v);
}

}  // namespace
}  // namespace gpusched
