#include "autoscale/swap.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::autoscale {
namespace {

using ::testing::ElementsAre;

SwapCandidate C(int64_t id, int deployment, int rank, Micros last_used,
                bool idle = true, bool autoscaled = true,
                bool preemptible = true) {
  return {id, deployment, rank, autoscaled, preemptible, idle, last_used};
}

std::vector<int64_t> Ids(const std::vector<SwapCandidate>& v) {
  std::vector<int64_t> out;
  for (const SwapCandidate& c : v) out.push_back(c.id);
  return out;
}

TEST(SwapOrderTest, LowestClassFirstThenLeastRecentlyUsed) {
  // The starting replica: deployment 0, class rank 1 (standard).
  const auto order = SwapOrder({C(1, 1, 1, 50), C(2, 2, 2, 90), C(3, 3, 1, 10),
                                C(4, 4, 2, 30), C(5, 5, 3, 99)},
                               0, 1);
  EXPECT_THAT(Ids(order), ElementsAre(5, 4, 2, 3, 1));
}

TEST(SwapOrderTest, NeverBusyHigherClassFixedOrProtected) {
  const auto order =
      SwapOrder({C(1, 1, 0, 1),                              // more important
                 C(2, 2, 2, 1, /*idle=*/false),              // in flight
                 C(3, 3, 2, 1, true, /*autoscaled=*/false),  // fixed count
                 C(4, 4, 2, 1, true, true, /*preemptible=*/false),  // protected
                 C(5, 0, 2, 1),                                     // its own
                 C(6, 6, 1, 7)},  // equal class: ok
                0, 1);
  EXPECT_THAT(Ids(order), ElementsAre(6));
}

TEST(SwapOrderTest, RecentlyUsedStayWithMinIdle) {
  const std::vector<SwapCandidate> c = {C(1, 1, 1, 100), C(2, 2, 1, 40)};
  EXPECT_THAT(Ids(SwapOrder(c, 0, 1, /*now=*/110, /*min_idle=*/50)),
              ElementsAre(2));
  EXPECT_THAT(Ids(SwapOrder(c, 0, 1, 110, 0)), ElementsAre(2, 1));
}

TEST(SwapOrderTest, TiesGoByIdForDeterminism) {
  EXPECT_THAT(Ids(SwapOrder({C(9, 1, 1, 5), C(3, 2, 1, 5)}, 0, 1)),
              ElementsAre(3, 9));
}

}  // namespace
}  // namespace gpusched::autoscale
