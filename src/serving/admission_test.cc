#include "serving/admission.h"

#include <string>

#include "gtest/gtest.h"

namespace gpusched::serving {
namespace {

Request Req(TenantId tenant, int32_t in, int32_t out,
            Micros deadline = kNever) {
  Request r;
  r.tenant = tenant;
  r.input_tokens = in;
  r.max_output_tokens = out;
  r.deadline = deadline;
  return r;
}

TEST(TokenBucketTest, RefillsAndReportsWait) {
  TokenBucket b(10.0, 20.0);  // 10/s, burst 20
  EXPECT_TRUE(b.TryTake(20, 0));
  EXPECT_FALSE(b.TryTake(1, 0));
  EXPECT_EQ(b.TimeUntil(5, 0), kMicrosPerSecond / 2);
  EXPECT_TRUE(b.TryTake(5, kMicrosPerSecond / 2));
  b.Give(100, kMicrosPerSecond / 2);
  EXPECT_DOUBLE_EQ(b.level(kMicrosPerSecond / 2), 20);
  b.Force(30, kMicrosPerSecond / 2);
  EXPECT_DOUBLE_EQ(b.level(kMicrosPerSecond / 2), -10);
  // A request larger than the burst passes only when the bucket is full.
  EXPECT_FALSE(b.TryTake(50, kMicrosPerSecond));
  EXPECT_TRUE(b.TryTake(50, 10 * kMicrosPerSecond));
}

struct Case {
  std::string name;
  TenantLimits limits;
  int prior_admits;  // identical requests admitted first at t=0
  Request request;
  QueueOutlook outlook;
  RejectReason want;
  Micros want_retry_after;
};

class AdmitTest : public ::testing::TestWithParam<Case> {};

TEST_P(AdmitTest, Verdict) {
  const Case& c = GetParam();
  Admission a;
  a.SetTenantLimits(0, c.limits, 0);
  for (int i = 0; i < c.prior_admits; ++i) {
    ASSERT_TRUE(a.Admit(c.request, QueueOutlook{}, 0).admitted());
  }
  const Verdict v = a.Admit(c.request, c.outlook, 0);
  EXPECT_EQ(v.reason, c.want) << RejectReasonName(v.reason);
  EXPECT_EQ(v.retry_after, c.want_retry_after);
}

TenantLimits Rpm(double rpm) {
  TenantLimits l;
  l.requests_per_minute = rpm;
  return l;
}
TenantLimits Tpm(double tpm) {
  TenantLimits l;
  l.tokens_per_minute = tpm;
  return l;
}
TenantLimits MaxQueued(int64_t n) {
  TenantLimits l;
  l.max_queued = n;
  return l;
}

INSTANTIATE_TEST_SUITE_P(
    Rules, AdmitTest,
    ::testing::Values(Case{"UnlimitedAdmits",
                           {},
                           100,
                           Req(0, 10, 10),
                           {},
                           RejectReason::kNone,
                           0},
                      // 60 rpm: a burst of 60, then one more per second.
                      Case{"RequestsPerMinute",
                           Rpm(60),
                           60,
                           Req(0, 10, 10),
                           {},
                           RejectReason::kRateLimitedRequests,
                           kMicrosPerSecond},
                      Case{"RequestsPerMinuteUnderLimit",
                           Rpm(60),
                           59,
                           Req(0, 10, 10),
                           {},
                           RejectReason::kNone,
                           0},
                      // 6000 tpm = 100 tokens/s; 3 x 2000 tokens used, the 4th
                      // needs 2000 more of which 0 are left.
                      Case{"TokensPerMinute",
                           Tpm(6000),
                           3,
                           Req(0, 1000, 1000),
                           {},
                           RejectReason::kRateLimitedTokens,
                           20 * kMicrosPerSecond},
                      Case{"ModelQueueFull",
                           {},
                           0,
                           Req(0, 10, 10),
                           QueueOutlook{10, 10, kNever, 7},
                           RejectReason::kModelQueueFull,
                           7},
                      Case{"ModelQueueRoom",
                           {},
                           0,
                           Req(0, 10, 10),
                           QueueOutlook{9, 10, kNever, 7},
                           RejectReason::kNone,
                           0},
                      Case{"TenantQueueFull", MaxQueued(2), 2, Req(0, 10, 10),
                           QueueOutlook{0, 0, kNever, 3},
                           RejectReason::kTenantQueueFull, 3},
                      Case{"DeadlineInfeasible",
                           {},
                           0,
                           Req(0, 10, 10, 100),
                           QueueOutlook{0, 0, 101, 5},
                           RejectReason::kDeadlineInfeasible,
                           5},
                      Case{"DeadlineFeasible",
                           {},
                           0,
                           Req(0, 10, 10, 100),
                           QueueOutlook{0, 0, 100, 5},
                           RejectReason::kNone,
                           0},
                      Case{"UnknownPredictionAdmits",
                           {},
                           0,
                           Req(0, 10, 10, 100),
                           QueueOutlook{0, 0, kNever, 5},
                           RejectReason::kNone,
                           0}),
    [](const auto& info) { return info.param.name; });

TEST(AdmissionTest, RejectionGivesTokensBack) {
  Admission a;
  a.SetTenantLimits(0, Tpm(6000), 0);
  const Request r = Req(0, 1000, 1000);
  const QueueOutlook full{10, 10, kNever, 0};
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(a.Admit(r, full, 0).reason, RejectReason::kModelQueueFull);
  }
  // None of the rejected requests consumed the tenant's allowance.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(a.Admit(r, {}, 0).admitted());
  EXPECT_EQ(a.tenant_queued(0), 3);
}

TEST(AdmissionTest, CompletionCorrectsTokenEstimate) {
  Admission a;
  a.SetTenantLimits(0, Tpm(6000), 0);
  const Request r = Req(0, 1000, 1000);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a.Admit(r, {}, 0).admitted());
  EXPECT_FALSE(a.Admit(r, {}, 0).admitted());
  // Each produced 10 tokens, not 1000: 2970 tokens come back.
  for (int i = 0; i < 3; ++i) a.OnCompleted(r, 10, 0);
  EXPECT_TRUE(a.Admit(r, {}, 0).admitted());
}

TEST(AdmissionTest, NotServedRefundsAndDequeueFreesTenantSlot) {
  Admission a;
  TenantLimits l = Rpm(1);
  l.max_queued = 1;
  a.SetTenantLimits(0, l, 0);
  const Request r = Req(0, 1, 1);
  ASSERT_TRUE(a.Admit(r, {}, 0).admitted());
  EXPECT_EQ(a.Admit(r, {}, 0).reason, RejectReason::kRateLimitedRequests);
  a.OnDequeued(r);
  a.OnNotServed(r, 0);
  EXPECT_TRUE(a.Admit(r, {}, 0).admitted());
}

TEST(AdmissionTest, ConcurrencyCountsUntilFinished) {
  Admission a;
  TenantLimits l;
  l.max_concurrency = 2;
  a.SetTenantLimits(0, l, 0);
  const Request r = Req(0, 1, 1);
  ASSERT_TRUE(a.Admit(r, {}, 0).admitted());
  ASSERT_TRUE(a.Admit(r, {}, 0).admitted());
  // Dispatched (dequeued) requests still count until they finish.
  a.OnDequeued(r);
  a.OnDequeued(r);
  EXPECT_EQ(a.Admit(r, {}, 0).reason, RejectReason::kTenantConcurrency);
  a.OnCompleted(r, 1, 0);
  EXPECT_TRUE(a.Admit(r, {}, 0).admitted());
  EXPECT_EQ(a.Admit(r, {}, 0).reason, RejectReason::kTenantConcurrency);
  a.OnNotServed(r, 0);
  EXPECT_EQ(a.tenant_active(0), 1);
  EXPECT_TRUE(a.Admit(r, {}, 0).admitted());
}

TEST(AdmissionTest, ChangedLimitsKeepWhatTheBucketHolds) {
  Admission a;
  a.SetTenantLimits(0, Rpm(60), 0);  // 60 at once, then 1 per second
  const Request r = Req(0, 1, 1);
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(a.Admit(r, {}, 0).admitted());
  EXPECT_FALSE(a.Admit(r, {}, 0).admitted());
  // A new limit does not refill the bucket (a user's edit, or this
  // gateway's share moving): nothing more until it refills.
  a.SetTenantLimits(0, Rpm(120), 0);
  EXPECT_FALSE(a.Admit(r, {}, 0).admitted());
  // ... at the new rate: 2 per second.
  EXPECT_TRUE(a.Admit(r, {}, kMicrosPerSecond / 2 + 1).admitted());
}

TEST(AdmissionTest, ShareScalesRatesAndSlots) {
  Admission a;
  TenantLimits l = Rpm(600);
  l.max_concurrency = 10;
  l.max_queued = 4;
  a.SetTenantLimits(0, l, 0);
  // A quarter of the rate and depth, 3 of the 10 slots, 1 of the 4 queued.
  a.SetTenantShare(0, {.rate = 0.25, .max_concurrency = 3, .max_queued = 1}, 0);
  const Request r = Req(0, 1, 1);
  ASSERT_TRUE(a.Admit(r, {}, 0).admitted());
  EXPECT_EQ(a.Admit(r, {}, 0).reason, RejectReason::kTenantQueueFull);
  a.OnDequeued(r);
  ASSERT_TRUE(a.Admit(r, {}, 0).admitted());
  a.OnDequeued(r);
  ASSERT_TRUE(a.Admit(r, {}, 0).admitted());
  a.OnDequeued(r);
  EXPECT_EQ(a.Admit(r, {}, 0).reason, RejectReason::kTenantConcurrency);
  for (int i = 0; i < 3; ++i) a.OnCompleted(r, 1, 0);
  // The depth is a quarter of 600: 150 in all at time 0 (3 taken).
  int admitted = 0;
  for (int i = 0; i < 1000; ++i) {
    if (a.Admit(r, {}, 0).admitted()) {
      ++admitted;
      a.OnDequeued(r);
      a.OnCompleted(r, 1, 0);
    }
  }
  EXPECT_EQ(admitted, 147);
  // No slot here: every request is refused for concurrency.
  a.SetTenantShare(0, {.rate = 0.25, .max_concurrency = 0, .max_queued = -1},
                   0);
  EXPECT_EQ(a.Admit(r, {}, 60 * kMicrosPerSecond).reason,
            RejectReason::kTenantConcurrency);
  // The whole limit again: the bucket keeps its level, the rate is 10/s.
  a.SetTenantShare(0, {}, 60 * kMicrosPerSecond);
  EXPECT_TRUE(a.Admit(r, {}, 60 * kMicrosPerSecond).admitted());
}

TEST(AdmissionTest, ValidateLimits) {
  TenantLimits l;
  EXPECT_TRUE(ValidateTenantLimits(l).ok());
  l.requests_per_minute = -1;
  EXPECT_FALSE(ValidateTenantLimits(l).ok());
  l = TenantLimits{};
  l.burst_minutes = 0;
  EXPECT_FALSE(ValidateTenantLimits(l).ok());
}

TEST(AdmissionTest, ReasonNamesAreDistinct) {
  for (int i = 0; i < kNumRejectReasons; ++i) {
    for (int j = i + 1; j < kNumRejectReasons; ++j) {
      EXPECT_STRNE(RejectReasonName(static_cast<RejectReason>(i)),
                   RejectReasonName(static_cast<RejectReason>(j)));
    }
  }
}

}  // namespace
}  // namespace gpusched::serving
