#include "serving/model_queue.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::serving {
namespace {

ModelQueueConfig Config(std::vector<QueueOrder> orders) {
  ModelQueueConfig c;
  for (size_t i = 0; i < orders.size(); ++i) {
    c.classes.push_back({"c" + std::to_string(i), orders[i], kNever});
  }
  return c;
}

Request Req(RequestId id, TenantId tenant, ClassId cls,
            Micros deadline = kNever, int32_t in = 100, int32_t out = 100) {
  Request r;
  r.id = id;
  r.tenant = tenant;
  r.priority = cls;
  r.deadline = deadline;
  r.input_tokens = in;
  r.max_output_tokens = out;
  return r;
}

std::vector<RequestId> Drain(ModelQueue& q, Micros now = 0) {
  std::vector<RequestId> ids;
  Request r;
  while (q.Pop(now, &r)) ids.push_back(r.id);
  return ids;
}

struct OrderCase {
  std::string name;
  ModelQueueConfig config;
  std::vector<Request> pushes;  // pushed at t = index
  Micros pop_at;
  std::vector<RequestId> want;
};

class OrderTest : public ::testing::TestWithParam<OrderCase> {};

TEST_P(OrderTest, PopsInExpectedOrder) {
  const OrderCase& c = GetParam();
  ModelQueue q(c.config);
  for (size_t i = 0; i < c.pushes.size(); ++i) q.Push(c.pushes[i], i);
  EXPECT_EQ(Drain(q, c.pop_at), c.want);
  EXPECT_TRUE(q.empty());
}

ModelQueueConfig Aged() {
  ModelQueueConfig c = Config({QueueOrder::kFcfs, QueueOrder::kFcfs});
  c.aging = 10;
  return c;
}

ModelQueueConfig DemoteLate() {
  ModelQueueConfig c = Config({QueueOrder::kEdf});
  c.demote_late = true;
  c.late_margin = 0;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Rules, OrderTest,
    ::testing::Values(
        OrderCase{"ClassBeforeArrival",
                  Config({QueueOrder::kFcfs, QueueOrder::kFcfs}),
                  {Req(1, 0, 1), Req(2, 0, 0), Req(3, 0, 1), Req(4, 0, 0)},
                  0,
                  {2, 4, 1, 3}},
        OrderCase{"FcfsIgnoresDeadlines",
                  Config({QueueOrder::kFcfs}),
                  {Req(1, 0, 0, 50), Req(2, 0, 0, 10)},
                  0,
                  {1, 2}},
        OrderCase{"EdfThenArrivalNoDeadlineLast",
                  Config({QueueOrder::kEdf}),
                  {Req(1, 0, 0), Req(2, 1, 0, 50), Req(3, 2, 0, 10),
                   Req(4, 0, 0, 50)},
                  0,
                  {3, 2, 4, 1}},
        OrderCase{"EdfDemotesLateRequests",
                  DemoteLate(),
                  {Req(1, 0, 0, 5), Req(2, 0, 0, 100), Req(3, 0, 0, 200),
                   Req(4, 0, 0, 6)},
                  50,
                  {2, 3, 1, 4}},
        OrderCase{"EdfWithoutDemotionServesLateFirst",
                  Config({QueueOrder::kEdf}),
                  {Req(1, 0, 0, 5), Req(2, 0, 0, 100), Req(3, 0, 0, 200)},
                  50,
                  {1, 2, 3}},
        OrderCase{"FairAlternatesEqualTenants",
                  Config({QueueOrder::kFair}),
                  {Req(1, 0, 0), Req(2, 0, 0), Req(3, 0, 0), Req(4, 1, 0),
                   Req(5, 1, 0), Req(6, 1, 0)},
                  0,
                  {1, 4, 2, 5, 3, 6}},
        OrderCase{"FairWithinTenantIsEdf",
                  Config({QueueOrder::kFair}),
                  {Req(1, 0, 0), Req(2, 0, 0, 30), Req(3, 0, 0, 20)},
                  0,
                  {3, 2, 1}},
        OrderCase{
            "FairCountsTokensNotRequests",
            // Tenant 0 sends one 900-token request, tenant 1 three
            // 300-token ones: one big request buys as much as three.
            Config({QueueOrder::kFair}),
            {Req(1, 0, 0, kNever, 300, 300), Req(2, 0, 0, kNever, 300, 300),
             Req(3, 1, 0, kNever, 100, 100), Req(4, 1, 0, kNever, 100, 100),
             Req(5, 1, 0, kNever, 100, 100), Req(6, 1, 0, kNever, 100, 100)},
            0,
            {1, 3, 4, 5, 2, 6}},
        OrderCase{"AgingPromotesStarvedRequest",
                  // At t=25 the class-1 request (pushed at t=0) has waited
                  // two aging periods: it outranks class 0.
                  Aged(),
                  {Req(1, 0, 1), Req(2, 0, 0), Req(3, 0, 0)},
                  25,
                  {1, 2, 3}},
        OrderCase{"AgingNotYetDue",
                  Aged(),
                  {Req(1, 0, 1), Req(2, 0, 0), Req(3, 0, 0)},
                  9,
                  {2, 3, 1}}),
    [](const auto& info) { return info.param.name; });

TEST(ModelQueueTest, WeightsSplitServiceProportionally) {
  ModelQueue q(Config({QueueOrder::kFair}));
  q.SetTenantWeight(0, 3.0);
  for (int i = 0; i < 400; ++i) {
    q.Push(Req(i, i % 2, 0), 0);
  }
  std::map<TenantId, int> served;
  Request r;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(q.Pop(0, &r));
    ++served[r.tenant];
  }
  EXPECT_EQ(served[0], 150);
  EXPECT_EQ(served[1], 50);
}

TEST(ModelQueueTest, ReturningTenantBanksNoCredit) {
  ModelQueue q(Config({QueueOrder::kFair}));
  Request r;
  // Tenant 0 alone is served 50 requests.
  for (int i = 0; i < 60; ++i) q.Push(Req(i, 0, 0), 0);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(q.Pop(0, &r));
  // Tenant 1 arrives: it is lifted to tenant 0's counter, so the two
  // alternate instead of tenant 1 taking 50 in a row.
  for (int i = 100; i < 110; ++i) q.Push(Req(i, 1, 0), 1);
  std::vector<TenantId> order;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(q.Pop(1, &r));
    order.push_back(r.tenant);
  }
  EXPECT_EQ(std::count(order.begin(), order.end(), 1), 5);
  EXPECT_DOUBLE_EQ(q.counter(0, 1) - q.counter(0, 0), 0);
}

TEST(ModelQueueTest, IdleTenantShareIsLent) {
  // Work-conserving: with one tenant backlogged, it is served back to back.
  ModelQueue q(Config({QueueOrder::kFair}));
  for (int i = 0; i < 5; ++i) q.Push(Req(i, 7, 0), 0);
  EXPECT_EQ(Drain(q).size(), 5u);
}

TEST(ModelQueueTest, CorrectOutputMovesCounter) {
  ModelQueue q(Config({QueueOrder::kFair}));
  q.Push(Req(1, 0, 0, kNever, 10, 100), 0);
  Request r;
  ASSERT_TRUE(q.Pop(0, &r));
  EXPECT_DOUBLE_EQ(q.counter(0, 0), 10 + 2 * 100);
  q.CorrectOutput(0, 0, -60);  // only 40 tokens came out
  EXPECT_DOUBLE_EQ(q.counter(0, 0), 10 + 2 * 40);
}

TEST(ModelQueueTest, TimeoutsPerClass) {
  ModelQueueConfig c = Config({QueueOrder::kFair, QueueOrder::kFcfs});
  c.classes[0].timeout = 100;
  c.classes[1].timeout = 10;
  ModelQueue q(c);
  q.Push(Req(1, 0, 0), 0);
  q.Push(Req(2, 1, 1), 0);
  q.Push(Req(3, 1, 1), 5);
  EXPECT_EQ(q.NextTimeout(), 10);
  std::vector<Request> expired;
  q.ExpireTimedOut(9, &expired);
  EXPECT_TRUE(expired.empty());
  q.ExpireTimedOut(10, &expired);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].id, 2u);
  EXPECT_EQ(q.NextTimeout(), 15);
  q.ExpireTimedOut(100, &expired);
  ASSERT_EQ(expired.size(), 3u);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.NextTimeout(), kNever);
  // Expired requests are not charged.
  EXPECT_DOUBLE_EQ(q.counter(0, 0), 0);
}

TEST(ModelQueueTest, Sizes) {
  ModelQueue q(Config({QueueOrder::kFair, QueueOrder::kEdf}));
  q.Push(Req(1, 0, 0), 0);
  q.Push(Req(2, 0, 1), 0);
  q.Push(Req(3, 1, 1), 0);
  EXPECT_EQ(q.size(), 3);
  EXPECT_EQ(q.tenant_size(0), 2);
  EXPECT_EQ(q.class_size(1), 2);
  // Class 0 (fair): tenant 0 has one queued and no one else is backlogged.
  EXPECT_EQ(q.AheadOf(0, q.tenant_size(0)), 1);
  EXPECT_EQ(q.AheadOf(0, q.tenant_size(1)), 1);
  // Class 1 (edf): everything in classes 0 and 1.
  EXPECT_EQ(q.AheadOf(1, q.tenant_size(0)), 3);
}

TEST(ModelQueueTest, FairAheadCountsTurnsNotTheWholeQueue) {
  ModelQueue q(Config({QueueOrder::kFair}));
  for (int i = 0; i < 50; ++i) q.Push(Req(i, 0, 0), 0);  // a flood
  q.Push(Req(100, 1, 0), 0);
  q.Push(Req(101, 2, 0), 0);
  // A new request of light tenant 3 waits for about one turn of each of the
  // three backlogged tenants, not for the flood.
  EXPECT_EQ(q.AheadOf(0, q.tenant_size(3)), 3);
  // Tenant 1 already has one queued: two turns of the two others, plus its
  // own.
  EXPECT_EQ(q.AheadOf(0, q.tenant_size(1)), 5);
  // The flooding tenant waits behind its own 50.
  EXPECT_EQ(q.AheadOf(0, q.tenant_size(0)), 52);
}

TEST(ModelQueueTest, ValidateRejectsBadConfig) {
  ModelQueueConfig c;
  EXPECT_FALSE(ValidateModelQueueConfig(c).ok());
  c = Config({QueueOrder::kFair});
  c.classes[0].timeout = 0;
  EXPECT_FALSE(ValidateModelQueueConfig(c).ok());
  c = Config({QueueOrder::kFair});
  c.input_weight = 0;
  c.output_weight = 0;
  EXPECT_FALSE(ValidateModelQueueConfig(c).ok());
  QueueOrder o;
  EXPECT_THAT(ParseQueueOrder("lifo", &o).message(),
              ::testing::HasSubstr("fair, edf or fcfs"));
}

// Randomized invariants, seeded: every pushed request leaves exactly once
// (popped or expired), classes are strict without aging, and while tenants
// stay backlogged their virtual counters never drift apart by more than the
// largest single request's weighted cost (VTC's fairness bound).
TEST(ModelQueueTest, RandomizedFairnessInvariants) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    ModelQueueConfig c =
        Config({QueueOrder::kFair, QueueOrder::kFair, QueueOrder::kEdf});
    c.classes[2].timeout = 500;
    ModelQueue q(c);
    const int tenants = 2 + static_cast<int>(rng.Uniform(6));
    std::vector<double> weight(tenants);
    for (int t = 0; t < tenants; ++t) {
      weight[t] = 0.5 + rng.Uniform(4);
      q.SetTenantWeight(t, weight[t]);
    }
    const double max_cost = 1.0 * 1000 + 2.0 * 500;
    std::set<RequestId> inside;
    std::set<RequestId> done;
    RequestId next = 0;
    Micros now = 0;
    for (int step = 0; step < 5000; ++step) {
      now += static_cast<Micros>(rng.Uniform(5));
      if (rng.Uniform(100) < 55) {
        Request r =
            Req(next++, static_cast<TenantId>(rng.Uniform(tenants)),
                static_cast<ClassId>(rng.Uniform(3)),
                rng.Uniform(2) ? now + static_cast<Micros>(rng.Uniform(400))
                               : kNever,
                1 + static_cast<int32_t>(rng.Uniform(1000)),
                static_cast<int32_t>(rng.Uniform(501)));
        q.Push(r, now);
        inside.insert(r.id);
      } else {
        Request r;
        const int64_t best_class_size[3] = {q.class_size(0), q.class_size(1),
                                            q.class_size(2)};
        const Request* peek = q.Peek(now);
        const RequestId peeked = peek ? peek->id : ~RequestId{0};
        if (!q.Pop(now, &r)) {
          ASSERT_EQ(peek, nullptr);
          ASSERT_EQ(q.size(), 0);
          continue;
        }
        ASSERT_EQ(r.id, peeked);  // Peek shows what Pop takes
        for (int k = 0; k < r.priority; ++k) ASSERT_EQ(best_class_size[k], 0);
        ASSERT_EQ(inside.erase(r.id), 1u);
        ASSERT_TRUE(done.insert(r.id).second);
        if (r.priority < 2) {
          // Counters of tenants still backlogged in the class stay within
          // one maximal request of each other.
          double lo = 1e300, hi = -1e300;
          for (int t = 0; t < tenants; ++t) {
            if (q.tenant_class_size(r.priority, t) == 0) continue;
            lo = std::min(lo, q.counter(r.priority, t));
            hi = std::max(hi, q.counter(r.priority, t));
          }
          if (hi >= lo) {
            ASSERT_LE(hi - lo, 2 * max_cost / 0.5 + 1e-6);
          }
        }
      }
      if (step % 97 == 0) {
        std::vector<Request> expired;
        q.ExpireTimedOut(now, &expired);
        for (const Request& r : expired) {
          ASSERT_EQ(r.priority, 2);
          ASSERT_EQ(inside.erase(r.id), 1u);
          ASSERT_TRUE(done.insert(r.id).second);
        }
      }
      ASSERT_EQ(q.size(), static_cast<int64_t>(inside.size()));
    }
    for (RequestId id : Drain(q, now)) {
      ASSERT_EQ(inside.erase(id), 1u);
    }

    EXPECT_TRUE(inside.empty());
  }
}

}  // namespace
}  // namespace gpusched::serving
