#include "serving/dispatcher.h"

#include <set>
#include <string>
#include <vector>

#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::serving {
namespace {

DeploymentSpec Spec(const std::string& name,
                    QueueOrder order = QueueOrder::kFair) {
  DeploymentSpec s;
  s.name = name;
  s.queue.classes = {{"critical", order, kNever}, {"standard", order, kNever}};
  return s;
}

Request Req(RequestId id, TenantId t, ModelId m, ClassId c = 1) {
  Request r;
  r.id = id;
  r.tenant = t;
  r.model = m;
  r.priority = c;
  r.input_tokens = 100;
  r.max_output_tokens = 50;
  return r;
}

class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(d_.AddDeployment(Spec("chat")).ok());
    ASSERT_TRUE(d_.AddTenant({"a", 1, {}}).ok());
    ASSERT_TRUE(d_.AddTenant({"b", 1, {}}).ok());
  }
  std::vector<Assignment> Dispatch(Micros now) {
    std::vector<Assignment> out;
    d_.Dispatch(now, &out);
    return out;
  }
  Dispatcher d_{1};
};

TEST_F(DispatcherTest, HoldsUntilReplicaThenFillsCaps) {
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(d_.Submit(Req(i, 0, 0), 0).admitted());
  EXPECT_TRUE(Dispatch(0).empty());  // no replica yet: held
  d_.AddReplica(0, 10, 2);
  d_.AddReplica(0, 11, 1);
  const auto out = Dispatch(1);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(d_.outstanding(0), 3);
  EXPECT_EQ(d_.queue(0).size(), 2);
  // One finishes: exactly one more goes, to the replica that freed.
  d_.OnFinished(out[0].request, out[0].replica, 10, 2);
  const auto more = Dispatch(2);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].replica, out[0].replica);
  EXPECT_EQ(d_.queue(0).size(), 1);
}

TEST_F(DispatcherTest, ClassesAndFairnessDecideWhoGoesNext) {
  d_.AddReplica(0, 1, 1);
  // Fill the only slot, then queue: a's standard x3, b's standard x1, a's
  // critical x1.
  ASSERT_TRUE(d_.Submit(Req(0, 0, 0), 0).admitted());
  auto first = Dispatch(0);
  ASSERT_EQ(first.size(), 1u);
  for (int i = 1; i <= 3; ++i)
    ASSERT_TRUE(d_.Submit(Req(i, 0, 0), 0).admitted());
  ASSERT_TRUE(d_.Submit(Req(4, 1, 0), 0).admitted());
  ASSERT_TRUE(d_.Submit(Req(5, 0, 0, /*critical*/ 0), 0).admitted());
  std::vector<RequestId> order;
  Assignment cur = first[0];
  for (int i = 0; i < 5; ++i) {
    d_.OnFinished(cur.request, cur.replica, 50, i + 1);
    auto next = Dispatch(i + 1);
    ASSERT_EQ(next.size(), 1u);
    cur = next[0];
    order.push_back(cur.request.id);
  }
  // Critical first. b joined while a was backlogged, so it starts at a's
  // counter (no credit for its idle past) and, back from idle, goes first
  // among equals; then a's in order.
  EXPECT_EQ(order, (std::vector<RequestId>{5, 4, 1, 2, 3}));
}

// A prompt counts as pending prefill on its replica until its first token,
// or until it leaves when no first token was noted (a response not
// streamed, a failure): the live gateway sees no tokens of those.
TEST_F(DispatcherTest, PendingPrefillEndsAtFirstTokenOrAtTheEnd) {
  d_.AddReplica(0, 7, 4);
  for (RequestId id : {1, 2, 3})
    ASSERT_TRUE(d_.Submit(Req(id, 0, 0), 0).admitted());
  std::vector<Assignment> a = Dispatch(0);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(d_.pending_prefill(0, 7), 300);
  d_.OnFirstToken(a[0].request, 7, 1);
  EXPECT_EQ(d_.pending_prefill(0, 7), 200);
  d_.OnFinished(a[0].request, 7, 10, 2);  // prefilled: nothing more
  EXPECT_EQ(d_.pending_prefill(0, 7), 200);
  d_.OnFinished(a[1].request, 7, 10, 3, /*prefilled=*/false);
  EXPECT_EQ(d_.pending_prefill(0, 7), 100);
  d_.OnFinished(a[2].request, 7, -1, 4, /*prefilled=*/false);
  EXPECT_EQ(d_.pending_prefill(0, 7), 0);
}

TEST_F(DispatcherTest, QueueBoundRejectsWithReason) {
  DeploymentSpec s = Spec("bounded");
  s.max_queue_size = 2;
  auto m = d_.AddDeployment(s);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(d_.Submit(Req(0, 0, *m), 0).admitted());
  EXPECT_TRUE(d_.Submit(Req(1, 0, *m), 0).admitted());
  EXPECT_EQ(d_.Submit(Req(2, 0, *m), 0).reason, RejectReason::kModelQueueFull);
}

TEST_F(DispatcherTest, DeadlineFeasibilityUsesMeasuredRate) {
  DeploymentSpec s = Spec("slo");
  LatencyModel lm;
  lm.p1 = 1e-3;  // 100 input tokens: 0.1 s prefill
  s.latency = lm;
  auto m = d_.AddDeployment(s);
  ASSERT_TRUE(m.ok());
  d_.AddReplica(*m, 1, 1);
  // Serve one request per second for 12 s so the rate is known (1/s).
  Micros now = 0;
  RequestId id = 0;
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(d_.Submit(Req(id++, 0, *m), now).admitted());
    auto out = Dispatch(now);
    ASSERT_EQ(out.size(), 1u);
    now += kMicrosPerSecond;
    d_.OnFinished(out[0].request, out[0].replica, 50, now);
  }
  // Occupy the replica and queue 4 of tenant 0: its next request waits ~5 s
  // (another tenant's would go after about one of them).
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(d_.Submit(Req(id++, 0, *m), now).admitted());
  }
  Dispatch(now);
  Request tight = Req(id++, 0, *m);
  tight.deadline = now + 2 * kMicrosPerSecond;
  const Verdict v = d_.Submit(tight, now);
  EXPECT_EQ(v.reason, RejectReason::kDeadlineInfeasible);
  EXPECT_GT(v.retry_after, 0);
  Request other = Req(id++, 1, *m);
  other.deadline = now + 3 * kMicrosPerSecond;
  EXPECT_TRUE(d_.Submit(other, now).admitted());
  Request loose = Req(id++, 0, *m);
  loose.deadline = now + 60 * kMicrosPerSecond;
  EXPECT_TRUE(d_.Submit(loose, now).admitted());
}

TEST_F(DispatcherTest, TimeoutsRefundAndReport) {
  DeploymentSpec s = Spec("timeouts");
  s.queue.classes[1].timeout = 10;
  auto m = d_.AddDeployment(s);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(d_.Submit(Req(0, 0, *m), 0).admitted());
  EXPECT_EQ(d_.NextTimeout(), 10);
  std::vector<Request> expired;
  d_.Expire(10, &expired);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(d_.admission().tenant_queued(0), 0);
  EXPECT_EQ(d_.NextTimeout(), kNever);
}

TEST_F(DispatcherTest, RemovedReplicaGetsNothingMore) {
  d_.AddReplica(0, 1, 4);
  d_.AddReplica(0, 2, 4);
  d_.RemoveReplica(0, 1);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(d_.Submit(Req(i, 0, 0), 0).admitted());
  for (const Assignment& a : Dispatch(0)) EXPECT_EQ(a.replica, 2u);
}

TEST_F(DispatcherTest, KvBudgetHoldsRequestsInTheQueue) {
  // Budget 1000 tokens; each request may grow to 150 (100 in + 50 out).
  d_.AddReplica(0, 1, 100, 1000);
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(d_.Submit(Req(i, 0, 0), 0).admitted());
  auto out = Dispatch(0);
  EXPECT_EQ(out.size(), 6u);  // 6 x 150 = 900 <= 1000 < 7 x 150
  d_.OnFinished(out[0].request, out[0].replica, 50, 1);
  EXPECT_EQ(Dispatch(1).size(), 1u);
  // A request larger than the whole budget still runs on an empty replica.
  DeploymentSpec s = Spec("big");
  auto m = d_.AddDeployment(s);
  ASSERT_TRUE(m.ok());
  d_.AddReplica(*m, 2, 4, 100);
  Request big = Req(100, 0, *m);
  big.input_tokens = 5000;
  ASSERT_TRUE(d_.Submit(big, 2).admitted());
  ASSERT_TRUE(d_.Submit(Req(101, 0, *m), 2).admitted());
  EXPECT_EQ(Dispatch(2).size(), 1u);  // the second waits: no room left
}

TEST_F(DispatcherTest, FairShareHeadroomLetsALightTenantStartAtOnce) {
  DeploymentSpec s = Spec("shared");
  s.fair_share_headroom = 0.25;  // 2 of 8 slots on the replica
  auto m = d_.AddDeployment(s);
  ASSERT_TRUE(m.ok());
  d_.AddReplica(*m, 1, 8);
  // Alone, the flooding tenant may use every slot (work-conserving).
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(d_.Submit(Req(i, 0, *m), 0).admitted());
  }
  auto out = Dispatch(0);
  EXPECT_EQ(out.size(), 8u);
  // Two finish; with a second tenant active the flood may refill only up to
  // 6 of 8: the light tenant's request goes at once.
  d_.OnFinished(out[0].request, out[0].replica, 50, 1);
  d_.OnFinished(out[1].request, out[1].replica, 50, 1);
  ASSERT_TRUE(d_.Submit(Req(100, 1, *m), 1).admitted());
  auto next = Dispatch(1);
  // The light request goes; the flood (6 of 8 slots, above its share of 4)
  // may not take the last free slot, which stays for light tenants.
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].request.id, 100u);
  ASSERT_TRUE(d_.Submit(Req(101, 1, *m), 2).admitted());
  auto light = Dispatch(2);
  ASSERT_EQ(light.size(), 1u);
  EXPECT_EQ(light[0].request.id, 101u);
  // Once the light tenant is idle, the flood still leaves the headroom free
  // for its return: 6 of 8.
  d_.OnFinished(next[0].request, next[0].replica, 50, 3);
  d_.OnFinished(light[0].request, light[0].replica, 50, 3);
  EXPECT_EQ(Dispatch(3).size(), 0u);
  ASSERT_TRUE(d_.Submit(Req(102, 1, *m), 4).admitted());
  auto back = Dispatch(4);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].request.id, 102u);
}

TEST_F(DispatcherTest, DeclaredTenantsGetHeadroomFromTheStart) {
  DeploymentSpec s = Spec("declared");
  s.fair_share_headroom = 0.25;
  auto m = d_.AddDeployment(s);
  ASSERT_TRUE(m.ok());
  d_.AddReplica(*m, 1, 8);
  d_.DeclareTenant(*m, 1);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(d_.Submit(Req(i, 0, *m), 0).admitted());
  }
  EXPECT_EQ(Dispatch(0).size(), 6u);
  ASSERT_TRUE(d_.Submit(Req(100, 1, *m), 1).admitted());
  auto light = Dispatch(1);
  ASSERT_EQ(light.size(), 1u);
  EXPECT_EQ(light[0].request.id, 100u);
}

TEST_F(DispatcherTest, SingleTenantDeploymentKeepsNothingBack) {
  d_.AddReplica(0, 1, 8);
  for (int i = 0; i < 20; ++i)
    ASSERT_TRUE(d_.Submit(Req(i, 0, 0), 0).admitted());
  EXPECT_EQ(Dispatch(0).size(), 8u);
}

TEST_F(DispatcherTest, BadSpecsAreRejected) {
  DeploymentSpec s = Spec("x");
  s.router.policy = "nope";
  EXPECT_FALSE(d_.AddDeployment(s).ok());
  EXPECT_FALSE(d_.AddTenant({"w", 0, {}}).ok());
}

// Seeded random workload: every admitted request is dispatched exactly once
// or expires, caps are never exceeded, and outstanding returns to zero.
TEST(DispatcherRandomTest, ConservationAndCaps) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    Dispatcher d(seed);
    const int models = 3;
    for (int m = 0; m < models; ++m) {
      DeploymentSpec s = Spec("m" + std::to_string(m));
      s.router.policy = RouterNames()[rng.Uniform(3)];
      s.queue.classes[1].timeout = 50'000;
      ASSERT_TRUE(d.AddDeployment(s).ok());
      for (int r = 0; r < 3; ++r)
        d.AddReplica(m, m * 10 + r, 1 + rng.Uniform(4));
    }
    for (int t = 0; t < 5; ++t)
      ASSERT_TRUE(d.AddTenant({"t", 1.0 + t, {}}).ok());
    std::set<RequestId> queued, running_ids, done;
    std::vector<Assignment> running;
    Micros now = 0;
    RequestId next = 0;
    for (int step = 0; step < 3000; ++step) {
      now += rng.Uniform(2000);
      const int op = static_cast<int>(rng.Uniform(10));
      if (op < 5) {
        Request r =
            Req(next++, rng.Uniform(5), rng.Uniform(models), rng.Uniform(2));
        if (d.Submit(r, now).admitted()) queued.insert(r.id);
      } else if (op < 8 && !running.empty()) {
        const size_t k = rng.Uniform(running.size());
        d.OnFinished(running[k].request, running[k].replica, 10, now);
        ASSERT_TRUE(done.insert(running[k].request.id).second);
        running_ids.erase(running[k].request.id);
        running.erase(running.begin() + k);
      }
      std::vector<Request> expired;
      d.Expire(now, &expired);
      for (const Request& r : expired) ASSERT_EQ(queued.erase(r.id), 1u);
      std::vector<Assignment> out;
      d.Dispatch(now, &out);
      for (const Assignment& a : out) {
        ASSERT_EQ(queued.erase(a.request.id), 1u);
        ASSERT_TRUE(running_ids.insert(a.request.id).second);
        running.push_back(a);
      }
      int64_t total = 0;
      for (int m = 0; m < models; ++m) total += d.outstanding(m);
      ASSERT_EQ(total, static_cast<int64_t>(running.size()));
    }
  }
}

}  // namespace
}  // namespace gpusched::serving
