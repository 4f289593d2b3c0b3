#include "control/scaling.h"

#include <string>
#include <vector>

#include "control/lifecycle_testing.h"
#include "gtest/gtest.h"

namespace gpusched::control {
namespace {

constexpr Micros kMs = kMicrosPerMilli;
constexpr Micros kS = kMicrosPerSecond;

autoscale::AutoscalingConfig ZeroToN(int max) {
  autoscale::AutoscalingConfig c;
  c.min_replicas = 0;
  c.max_replicas = max;
  c.target_ongoing_requests = 1;
  c.look_back_period_s = 1;
  c.upscale_delay_s = 0;
  c.downscale_delay_s = 5;
  c.idle_timeout_s = 10;
  c.max_concurrent_starts = 2;
  return c;
}

ScalingLoad Load(int64_t in_flight, int64_t queued) {
  ScalingLoad l;
  l.in_flight = in_flight;
  l.queued = queued;
  return l;
}

TEST(ScalingTest, HeldRequestsStartOneReplicaAtOnce) {
  Scaling s;
  ASSERT_TRUE(s.Set("chat", ZeroToN(3), 0, 0).ok());
  ReplicaSet set("chat");
  set.SetDesired(s.target("chat"));
  EXPECT_EQ(s.target("chat"), 0);
  // Three requests arrive together while nothing runs: each is held, the
  // first arrival is the one the cold start counts from.
  EXPECT_TRUE(s.Held("chat", 5 * kS));
  EXPECT_TRUE(s.Held("chat", 5 * kS + 1 * kMs));
  EXPECT_TRUE(s.Held("chat", 5 * kS + 2 * kMs));
  s.Observe("chat", 5 * kS + 2 * kMs, Load(0, 3), set);
  std::vector<ScaleStep> steps;
  s.Evaluate(5 * kS + 2 * kMs, &steps);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].deployment, "chat");
  EXPECT_EQ(steps[0].from, 0);
  EXPECT_EQ(steps[0].to, 1);  // one replica, not three
  EXPECT_EQ(steps[0].reason, autoscale::Reason::kHeldRequests);
  EXPECT_EQ(steps[0].demand_arrival, 5 * kS);
  EXPECT_EQ(steps[0].event.kind, "deployment.autoscaled");
  EXPECT_EQ(steps[0].event.details["from"], 0);
  EXPECT_EQ(steps[0].event.details["to"], 1);
  EXPECT_EQ(steps[0].event.details["reason"], "held_requests");
  EXPECT_EQ(steps[0].event.details["signals"]["queued"], 3);
  EXPECT_NE(steps[0].event.message.find(
                "deployment chat autoscaled from 0 to 1 replicas "
                "(held_requests"),
            std::string::npos)
      << steps[0].event.message;
  // The step applied to the core launches one replica.
  set.SetDesired(steps[0].to);
  LifecycleOutput out;
  set.Reconcile(5 * kS + 2 * kMs, &out);
  ASSERT_EQ(out.actions.size(), 1u);
  EXPECT_EQ(out.actions[0].kind, LifecycleAction::Kind::kLaunch);
  // Held again while it starts: target 1, nothing to evaluate at once.
  EXPECT_FALSE(s.Held("chat", 6 * kS));
}

TEST(ScalingTest, DemandPerReplicaIsTheLookBackMeanOverTheTarget) {
  Scaling s;
  autoscale::AutoscalingConfig c = ZeroToN(10);
  c.target_ongoing_requests = 4;
  c.look_back_period_s = 10;
  c.max_concurrent_starts = 8;
  ASSERT_TRUE(s.Set("chat", c, 1, 0).ok());
  EXPECT_EQ(s.DemandPerReplica("chat"), -1) << "never observed";
  EXPECT_EQ(s.DemandPerReplica("other"), -1) << "not autoscaled";
  ReplicaSet set("chat");
  set.SetDesired(1);
  // 2 then 4 ongoing: mean 3 on the one replica.
  s.Observe("chat", 1 * kS, Load(2, 0), set);
  s.Observe("chat", 2 * kS, Load(3, 1), set);
  EXPECT_DOUBLE_EQ(s.DemandPerReplica("chat"), 3.0);
  // 12, 12, 12 with the first two gone from the window (10 s): mean 12,
  // the target becomes 3 replicas: 4 per replica.
  s.Observe("chat", 12 * kS, Load(12, 0), set);
  s.Observe("chat", 12 * kS + 1, Load(12, 0), set);
  std::vector<ScaleStep> steps;
  s.Evaluate(12 * kS + 1, &steps);
  ASSERT_EQ(s.target("chat"), 3);
  EXPECT_DOUBLE_EQ(s.DemandPerReplica("chat"), 4.0);
}

TEST(ScalingTest, StartingReplicasOfTheSetCapTheIncrease) {
  Scaling s;
  ASSERT_TRUE(s.Set("chat", ZeroToN(10), 2, 0).ok());
  ReplicaSet set("chat");
  set.SetDesired(2);
  LifecycleOutput out;
  set.Reconcile(0, &out);  // two launched: both count as starting
  for (const LifecycleAction& a : out.actions) {
    if (a.kind == LifecycleAction::Kind::kLaunch) set.Launched(a.replica, 0);
  }
  ASSERT_EQ(set.starting(), 2);
  out.Clear();
  s.Observe("chat", 1 * kS, Load(2, 8), set);
  std::vector<ScaleStep> steps;
  s.Evaluate(1 * kS, &steps);
  EXPECT_TRUE(steps.empty()) << "max_concurrent_starts 2 already starting";
  set.Reconcile(1 * kS, &out);
  for (const LifecycleAction& a : out.actions) {
    if (a.kind == LifecycleAction::Kind::kProbe) {
      set.ProbeResult(a.replica, true, 1 * kS, &out);
    }
  }
  ASSERT_EQ(set.ready(), 2);
  s.Observe("chat", 2 * kS, Load(2, 8), set);
  s.Evaluate(2 * kS, &steps);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].from, 2);
  EXPECT_EQ(steps[0].to, 4);  // two more starting, not eight
  EXPECT_EQ(steps[0].demand_arrival, 0);
}

TEST(ScalingTest, IdleToZeroThenTheNextHeldRequestCountsAnew) {
  Scaling s;
  ASSERT_TRUE(s.Set("chat", ZeroToN(3), 0, 0).ok());
  ReplicaSet set("chat");
  EXPECT_TRUE(s.Held("chat", 1 * kS));
  s.Observe("chat", 1 * kS, Load(0, 1), set);
  std::vector<ScaleStep> steps;
  s.Evaluate(1 * kS, &steps);
  ASSERT_EQ(steps.size(), 1u);
  set.SetDesired(steps[0].to);
  MakeReady(set, 1 * kS);
  // Served, then idle: after idle_timeout_s the count goes to zero.
  s.Observe("chat", 2 * kS, Load(0, 0), set);
  steps.clear();
  s.Evaluate(2 * kS, &steps);
  EXPECT_TRUE(steps.empty());
  const Micros due = s.NextDeadline();
  ASSERT_NE(due, kNever);
  EXPECT_LE(due, 12 * kS);
  s.Observe("chat", 13 * kS, Load(0, 0), set);
  s.Evaluate(13 * kS, &steps);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].to, 0);
  EXPECT_EQ(steps[0].reason, autoscale::Reason::kIdleTimeout);
  set.SetDesired(0);
  // The next scale from zero counts from its own first held request.
  EXPECT_TRUE(s.Held("chat", 20 * kS));
  s.Observe("chat", 20 * kS, Load(0, 1), set);
  steps.clear();
  s.Evaluate(20 * kS, &steps);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].demand_arrival, 20 * kS);
}

// After a restart the driver resumes each autoscaled deployment at the
// count last decided before it (its event log says which), within the
// bounds of the knobs now applied.
TEST(ScalingTest, CountsAfterARestart) {
  struct Case {
    const char* name;
    int min, max, initial, last_decided;
    int want;
  } cases[] = {
      {"resumes the decided count", 0, 4, 0, 3, 3},
      {"resumes zero", 0, 4, 1, 0, 0},
      {"clamped to a lower max", 0, 2, 0, 3, 2},
      {"clamped to a higher min", 2, 4, 2, 1, 2},
      {"negative (bad log entry) is min", 1, 4, 1, -5, 1},
  };
  for (const Case& c : cases) {
    Scaling s;
    autoscale::AutoscalingConfig cfg = ZeroToN(c.max);
    cfg.min_replicas = c.min;
    ASSERT_TRUE(s.Set("chat", cfg, c.initial, 0).ok()) << c.name;
    s.Resume("chat", c.last_decided);
    EXPECT_EQ(s.target("chat"), c.want) << c.name;
    // The resumed count is the decided one: no step undoes it while the
    // load matches it.
    ReplicaSet set("chat");
    set.SetDesired(s.target("chat"));
    MakeReady(set, 0);
    s.Observe("chat", 100 * kMs, Load(c.want, 0), set);
    std::vector<ScaleStep> steps;
    s.Evaluate(100 * kMs, &steps);
    EXPECT_TRUE(steps.empty()) << c.name << ": " << steps[0].event.message;
  }
  Scaling s;
  s.Resume("missing", 3);  // not autoscaled: nothing to resume
  EXPECT_EQ(s.target("missing"), -1);
}

TEST(ScalingTest, SwapOutLowersTheCountWithoutADecision) {
  Scaling s;
  ASSERT_TRUE(s.Set("chat", ZeroToN(3), 2, 0).ok());
  EXPECT_EQ(s.SwappedOut("chat"), 1);
  EXPECT_EQ(s.SwappedOut("chat"), 0);
  EXPECT_EQ(s.SwappedOut("chat"), 0);  // never below zero
  EXPECT_EQ(s.SwappedOut("fixed"), -1);
  ReplicaSet set("chat");
  s.Observe("chat", 1 * kS, Load(0, 0), set);
  std::vector<ScaleStep> steps;
  s.Evaluate(1 * kS, &steps);
  EXPECT_TRUE(steps.empty());
}

TEST(ScalingTest, SetAndRemoveKeepTheOthersTargets) {
  Scaling s;
  ASSERT_TRUE(s.Set("a", ZeroToN(4), 3, 0).ok());
  ASSERT_TRUE(s.Set("b", ZeroToN(4), 2, 0).ok());
  ASSERT_TRUE(s.Set("c", ZeroToN(4), 1, 0).ok());
  s.Remove("b", 1 * kS);
  EXPECT_FALSE(s.has("b"));
  EXPECT_EQ(s.target("b"), -1);
  EXPECT_EQ(s.target("a"), 3);
  EXPECT_EQ(s.target("c"), 1);
  EXPECT_EQ(s.size(), 2);
  // New knobs keep the target; the bounds rule clamps it at the next
  // evaluation, as a step that says so.
  ASSERT_TRUE(s.Set("a", ZeroToN(2), 0, 1 * kS).ok());
  EXPECT_EQ(s.target("a"), 3);
  ReplicaSet set("a");
  s.Observe("a", 2 * kS, Load(3, 0), set);
  std::vector<ScaleStep> steps;
  s.Evaluate(2 * kS, &steps);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].deployment, "a");
  EXPECT_EQ(steps[0].to, 2);
  EXPECT_EQ(steps[0].reason, autoscale::Reason::kMaxReplicas);
  // Bad knobs name the knob and change nothing.
  autoscale::AutoscalingConfig bad = ZeroToN(2);
  bad.max_replicas = -1;
  const absl::Status st = s.Set("a", bad, 0, 3 * kS);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("max_replicas"), std::string::npos)
      << st.message();
  EXPECT_EQ(s.target("a"), 2);
  EXPECT_FALSE(s.WantsTtft("a"));
  autoscale::AutoscalingConfig slo = ZeroToN(2);
  slo.policy = autoscale::Policy::kSlo;
  slo.slo_ttft_s = 0.5;
  ASSERT_TRUE(s.Set("c", slo, 0, 3 * kS).ok());
  EXPECT_TRUE(s.WantsTtft("c"));
}

}  // namespace
}  // namespace gpusched::control
