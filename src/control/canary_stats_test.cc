#include "control/canary_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace gpusched::control {
namespace {

// U by its definition: pairs with canary > stable, plus half the ties.
double BruteU(const std::vector<double>& c, const std::vector<double>& s) {
  double u = 0;
  for (double x : c) {
    for (double y : s) u += x > y ? 1 : x == y ? 0.5 : 0;
  }
  return u;
}

// The exact one-sided permutation p-value: the share of the ways to split
// the pooled values into groups of |c| and |s| whose U is >= the observed.
double ExactP(const std::vector<double>& c, const std::vector<double>& s) {
  std::vector<double> all = c;
  all.insert(all.end(), s.begin(), s.end());
  const double observed = BruteU(c, s);
  std::vector<bool> pick(all.size(), false);
  std::fill(pick.begin(), pick.begin() + c.size(), true);
  int64_t total = 0, extreme = 0;
  do {
    std::vector<double> a, b;
    for (size_t i = 0; i < all.size(); ++i) (pick[i] ? a : b).push_back(all[i]);
    ++total;
    if (BruteU(a, b) >= observed - 1e-9) ++extreme;
  } while (std::prev_permutation(pick.begin(), pick.end()));
  return static_cast<double>(extreme) / static_cast<double>(total);
}

TEST(MannWhitneyTest, UByHand) {
  // canary {3, 5, 7} vs stable {1, 4, 5}: 3>1; 5>1,4, =5; 7>1,4,5
  // -> 1 + 2.5 + 3 = 6.5 of 9 pairs.
  const RankTest t = MannWhitneyGreater({3, 5, 7}, {1, 4, 5});
  EXPECT_DOUBLE_EQ(t.u, 6.5);
  EXPECT_EQ(t.n_canary, 3);
  EXPECT_EQ(t.n_stable, 3);
}

TEST(MannWhitneyTest, NormalApproximationAgreesWithTheExactTest) {
  struct Case {
    const char* name;
    std::vector<double> canary, stable;
  };
  const std::vector<Case> cases = {
      {"clearly greater",
       {11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
      {"interleaved",
       {1, 3, 5, 7, 9, 11, 13, 15, 17, 19},
       {2, 4, 6, 8, 10, 12, 14, 16, 18, 20}},
      {"shifted with overlap",
       {6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
      {"ties", {1, 2, 2, 3, 3, 3, 4, 4, 5, 5}, {1, 1, 2, 2, 2, 3, 3, 4, 4, 5}},
      {"smaller",
       {1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
       {4, 5, 6, 7, 8, 9, 10, 11, 12, 13}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const RankTest t = MannWhitneyGreater(c.canary, c.stable);
    EXPECT_DOUBLE_EQ(t.u, BruteU(c.canary, c.stable));
    const double exact = ExactP(c.canary, c.stable);
    EXPECT_NEAR(t.p_value, exact, 0.03) << "exact " << exact;
  }
  // Complete separation, 10 a side: exact p = 1 / C(20, 10) = 5.4e-6.
  EXPECT_LT(MannWhitneyGreater(cases[0].canary, cases[0].stable).p_value, 1e-4);
}

TEST(MannWhitneyTest, AllEqualAndEmpty) {
  const std::vector<double> same(20, 0.005);
  const RankTest t = MannWhitneyGreater(same, same);
  EXPECT_DOUBLE_EQ(t.u, 200);  // every pair a tie
  EXPECT_EQ(t.p_value, 1);
  EXPECT_EQ(MannWhitneyGreater({}, same).p_value, 1);
  EXPECT_EQ(MannWhitneyGreater(same, {}).p_value, 1);
}

TEST(MannWhitneyTest, MinRankSamples) {
  EXPECT_EQ(MinRankSamples(0.01), kMinRankSamples);
  EXPECT_EQ(MinRankSamples(0.05), kMinRankSamples);
  // Stricter confidences need more when the separation cannot reach them.
  EXPECT_GT(MinRankSamples(1e-9), kMinRankSamples);
}

TEST(FisherTest, ExactValues) {
  struct Case {
    int64_t ce, cn, se, sn;
    double p;
  };
  const std::vector<Case> cases = {
      // 0 errors: never evidence of more errors.
      {0, 10, 0, 50, 1},
      {0, 10, 5, 50, 1},
      // 1 of 1 vs 0 of 1: P[X >= 1] with X ~ Hypergeom(N=2, K=1, n=1) = 1/2.
      {1, 1, 0, 1, 0.5},
      // 3 of 3 vs 0 of 3: 1 / C(6, 3) = 0.05.
      {3, 3, 0, 3, 0.05},
      // 2 of 4 vs 0 of 4: K=2, N=8, n=4: P[X=2] = C(4,2)/C(8,2) = 6/28.
      {2, 4, 0, 4, 6.0 / 28},
      // 1 of 10 vs 1 of 10: P[X >= 1] = 1 - C(18,10)/C(20,10) = 1 - 90/380.
      {1, 10, 1, 10, 1 - 90.0 / 380},
  };
  for (const Case& c : cases) {
    EXPECT_NEAR(FisherGreater(c.ce, c.cn, c.se, c.sn), c.p, 1e-9)
        << c.ce << "/" << c.cn << " vs " << c.se << "/" << c.sn;
  }
  // 2% against 1% over 10,000 requests each is significant; over 200 not.
  EXPECT_LT(FisherGreater(200, 10000, 100, 10000), 1e-6);
  EXPECT_GT(FisherGreater(4, 200, 2, 200), 0.2);
}

TEST(BinomialTest, ExactValues) {
  // P[X >= 1], n = 10, p = 0.05: 1 - 0.95^10.
  EXPECT_NEAR(BinomialGreater(1, 10, 0.05), 1 - std::pow(0.95, 10), 1e-12);
  // P[X >= 10], n = 10: 0.05^10.
  EXPECT_NEAR(BinomialGreater(10, 10, 0.05), std::pow(0.05, 10), 1e-20);
  EXPECT_EQ(BinomialGreater(0, 10, 0.05), 1);
  EXPECT_EQ(BinomialGreater(11, 10, 0.05), 0);
  EXPECT_EQ(BinomialGreater(1, 10, 0), 0);  // a cap of 0: any error
  EXPECT_EQ(BinomialGreater(3, 10, 1), 1);
  // 2 of 10 against a 5% cap is no evidence at 99%; 20 of 100 is.
  EXPECT_GT(BinomialGreater(2, 10, 0.05), 0.05);
  EXPECT_LT(BinomialGreater(20, 100, 0.05), 1e-5);
}

}  // namespace
}  // namespace gpusched::control
