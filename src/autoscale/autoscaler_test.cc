#include "autoscale/autoscaler.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpusched::autoscale {
namespace {

// One step of a scripted case: observe at t, then Evaluate(t); `to` is the
// expected decision's target (-1: no decision).
struct Step {
  double t;
  int64_t in_flight;
  int64_t queued;
  int ready;
  int starting;
  std::vector<double> ttft = {};
  int to = -1;
  Reason reason = Reason::kTargetOngoing;
};

struct Case {
  std::string name;
  AutoscalingConfig config;
  int initial;
  std::vector<Step> steps;
};

Observation Obs(int64_t in_flight, int64_t queued, int ready) {
  Observation o;
  o.in_flight = in_flight;
  o.queued = queued;
  o.ready = ready;
  return o;
}

AutoscalingConfig Cfg(int min, int max) {
  AutoscalingConfig c;
  c.min_replicas = min;
  c.max_replicas = max;
  c.look_back_period_s = 1;  // mean = the last observation
  return c;
}

AutoscalingConfig Starts(AutoscalingConfig c, int n) {
  c.max_concurrent_starts = n;
  return c;
}

AutoscalingConfig Slo(AutoscalingConfig c) {
  c.policy = Policy::kSlo;
  c.slo_ttft_s = 1;
  return c;
}

std::vector<Case> Cases() {
  using R = Reason;
  return {
      {"held_requests_start_one_replica_then_policy",
       Cfg(0, 10),
       0,
       {{0, 0, 5, 0, 0, {}, 1, R::kHeldRequests},
        {1, 0, 5, 0, 1},  // concurrent first requests: still one
        {20, 0, 5, 0, 1},
        {31, 0, 5, 0, 1, {}, 3, R::kTargetOngoing}}},
      {"upscale_waits_for_delay",
       Cfg(1, 10),
       1,
       {{0, 10, 0, 1, 0}, {10, 10, 0, 1, 0}, {30, 10, 0, 1, 0, {}, 5}}},
      {"upscale_run_broken_restarts_delay",
       Cfg(1, 10),
       1,
       {{0, 10, 0, 1, 0},
        {20, 1, 0, 1, 0},
        {25, 10, 0, 1, 0},
        {50, 10, 0, 1, 0},
        {55, 10, 0, 1, 0, {}, 5}}},
      {"upscale_applies_smallest_desired_of_run",
       Cfg(1, 10),
       1,
       {{0, 20, 0, 1, 0}, {10, 6, 0, 1, 0}, {30, 20, 0, 1, 0, {}, 3}}},
      {"upscale_clamped_to_max",
       Cfg(1, 3),
       1,
       {{0, 100, 0, 1, 0}, {30, 100, 0, 1, 0, {}, 3}}},
      {"downscale_waits_for_delay",
       Cfg(1, 10),
       4,
       {{0, 0, 0, 4, 0}, {599, 0, 0, 4, 0}, {600, 0, 0, 4, 0, {}, 1}}},
      {"downscale_applies_largest_desired_of_run",
       Cfg(1, 10),
       4,
       {{0, 2, 0, 4, 0}, {100, 6, 0, 4, 0}, {600, 2, 0, 4, 0, {}, 3}}},
      {"queued_counts_as_ongoing",
       Cfg(1, 10),
       1,
       {{0, 2, 6, 1, 0}, {30, 2, 6, 1, 0, {}, 4}}},
      {"start_cap_limits_step_and_rest_follows_without_delay",
       Starts(Cfg(1, 10), 2),
       1,
       {{0, 20, 0, 1, 0},
        {30, 20, 0, 1, 0, {}, 3},
        {31, 20, 0, 1, 2},
        {40, 20, 0, 3, 0, {}, 5},
        {41, 20, 0, 4, 1, {}, 6}}},
      {"idle_timeout_scales_to_zero",
       Cfg(0, 4),
       1,
       {{0, 0, 0, 1, 0},
        {299, 0, 0, 1, 0},
        {300, 0, 0, 1, 0, {}, 0, R::kIdleTimeout}}},
      {"load_restarts_idle_timer",
       Cfg(0, 4),
       1,
       {{0, 0, 0, 1, 0},
        {100, 1, 0, 1, 0},
        {200, 0, 0, 1, 0},
        {499, 0, 0, 1, 0},
        {500, 0, 0, 1, 0, {}, 0, R::kIdleTimeout}}},
      {"policy_alone_never_reaches_zero",
       [] {
         AutoscalingConfig c = Cfg(0, 4);
         c.idle_timeout_s = 1e6;
         return c;
       }(),
       2,
       {{0, 0, 0, 2, 0}, {600, 0, 0, 2, 0, {}, 1}, {2000, 0, 0, 1, 0}}},
      {"below_min_rises_at_once",
       Cfg(2, 4),
       0,
       {{0, 0, 0, 0, 0, {}, 2, R::kMinReplicas}}},
      {"above_max_falls_at_once",
       Cfg(1, 3),
       5,
       {{0, 0, 0, 5, 0, {}, 3, R::kMaxReplicas}}},
      {"slo_violation_scales_up_after_delay",
       Slo(Cfg(1, 10)),
       2,
       {{0, 4, 0, 2, 0, {3, 3, 3}}, {30, 4, 0, 2, 0, {3}, 4, R::kSloViolated}}},
      {"slo_p90_ignores_one_outlier",
       Slo(Cfg(1, 10)),
       2,
       {{0, 4, 0, 2, 0, {0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 9}},
        {30, 4, 0, 2, 0}}},
      {"slo_headroom_scales_down_one",
       Slo(Cfg(1, 10)),
       3,
       {{0, 1, 0, 3, 0, {0.1}}, {600, 1, 0, 3, 0, {0.1}, 2, R::kSloHeadroom}}},
      {"slo_no_samples_holds",
       Slo(Cfg(1, 10)),
       3,
       {{0, 1, 0, 3, 0}, {700, 1, 0, 3, 0}}},
  };
}

TEST(AutoscalerTest, Rules) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    Autoscaler a;
    absl::StatusOr<int> id = a.AddDeployment("m", c.config, c.initial, 0);
    ASSERT_TRUE(id.ok()) << id.status();
    for (const Step& s : c.steps) {
      SCOPED_TRACE(testing::Message() << "t=" << s.t);
      Observation o;
      o.in_flight = s.in_flight;
      o.queued = s.queued;
      o.ready = s.ready;
      o.starting = s.starting;
      o.ttft_samples_s = s.ttft;
      const Micros now = FromSeconds(s.t);
      a.Observe(*id, now, o);
      std::vector<Decision> out;
      a.Evaluate(now, &out);
      if (s.to < 0) {
        EXPECT_TRUE(out.empty()) << out[0].from << "->" << out[0].to << " "
                                 << ReasonName(out[0].reason);
        continue;
      }
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].deployment, "m");
      EXPECT_EQ(out[0].to, s.to) << out[0].signals.ToString();
      EXPECT_EQ(out[0].reason, s.reason) << ReasonName(out[0].reason);
      EXPECT_EQ(a.target(*id), s.to);
    }
  }
}

TEST(AutoscalerTest, DecisionCarriesSignals) {
  Autoscaler a;
  const int id = *a.AddDeployment("chat", Cfg(1, 10), 1, 0);
  a.Observe(id, 0, Obs(6, 2, 1));
  std::vector<Decision> out;
  a.Evaluate(0, &out);
  EXPECT_EQ(a.NextDeadline(), FromSeconds(30));
  a.Observe(id, FromSeconds(30), Obs(6, 2, 1));
  a.Evaluate(FromSeconds(30), &out);
  ASSERT_EQ(out.size(), 1u);
  const Signals& s = out[0].signals;
  EXPECT_EQ(out[0].from, 1);
  EXPECT_EQ(out[0].to, 4);
  EXPECT_DOUBLE_EQ(s.ongoing_mean, 8);
  EXPECT_EQ(s.in_flight, 6);
  EXPECT_EQ(s.queued, 2);
  EXPECT_EQ(s.desired, 4);
  EXPECT_DOUBLE_EQ(s.run_s, 30);
  EXPECT_EQ(s.ToString(),
            "desired=4 in_flight=6 queued=2 ready=1 starting=0 "
            "ongoing_mean=8 run_s=30");
}

TEST(AutoscalerTest, HeldRequestIsImmediateDeadline) {
  Autoscaler a;
  const int id = *a.AddDeployment("m", Cfg(0, 2), 0, 0);
  EXPECT_EQ(a.NextDeadline(), kNever);
  a.Observe(id, 7, Obs(0, 1, 0));
  EXPECT_EQ(a.NextDeadline(), 7);
  std::vector<Decision> out;
  a.Evaluate(7, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].reason, Reason::kHeldRequests);
  EXPECT_GT(a.NextDeadline(), 7);
}

TEST(AutoscalerTest, SetTargetTakesAnEvictionWithoutDecision) {
  Autoscaler a;
  AutoscalingConfig c = Cfg(0, 3);
  c.upscale_delay_s = 10;
  const int id = *a.AddDeployment("m", c, 1, 0);
  std::vector<Decision> out;
  // An upscale run starts (4 ongoing, target 2 per replica).
  a.Observe(id, kMicrosPerSecond, Obs(4, 0, 1));
  a.Evaluate(kMicrosPerSecond, &out);
  EXPECT_TRUE(out.empty());
  // The owner evicts the replica: target 0, the run is gone.
  a.SetTarget(id, 0);
  EXPECT_EQ(a.target(id), 0);
  a.Observe(id, 2 * kMicrosPerSecond, Obs(0, 0, 0));
  a.Evaluate(2 * kMicrosPerSecond, &out);
  EXPECT_TRUE(out.empty());
  // A held request brings it back at once (rule 2), not the old run.
  a.Observe(id, 3 * kMicrosPerSecond, Obs(0, 1, 0));
  a.Evaluate(3 * kMicrosPerSecond, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].from, 0);
  EXPECT_EQ(out[0].to, 1);
  EXPECT_EQ(out[0].reason, Reason::kHeldRequests);
}

TEST(AutoscalerTest, RejectsBadConfig) {
  Autoscaler a;
  AutoscalingConfig c = Cfg(3, 2);
  EXPECT_FALSE(a.AddDeployment("m", c, 0, 0).ok());
  c = Cfg(0, 2);
  c.max_concurrent_starts = 0;
  EXPECT_FALSE(a.AddDeployment("m", c, 0, 0).ok());
  c = Slo(Cfg(0, 2));
  c.slo_ttft_s = 0;
  EXPECT_FALSE(a.AddDeployment("m", c, 0, 0).ok());
  ASSERT_TRUE(a.AddDeployment("m", Cfg(0, 2), 0, 0).ok());
  EXPECT_FALSE(a.AddDeployment("m", Cfg(0, 2), 0, 0).ok());
  Policy p;
  EXPECT_TRUE(ParsePolicy("slo", &p));
  EXPECT_EQ(p, Policy::kSlo);
  EXPECT_FALSE(ParsePolicy("cpu", &p));
}

// Drives the autoscaler with random load against a trivial model of the
// owner (replicas start, become ready after a random delay, stop starting
// ones first) and checks the invariants on every decision.
TEST(AutoscalerTest, RandomizedInvariants) {
  int64_t decisions = 0, held = 0, idle = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed=" << seed);
    std::mt19937_64 rng(seed);
    auto uni = [&](int lo, int hi) {
      return std::uniform_int_distribution<int>(lo, hi)(rng);
    };
    AutoscalingConfig c;
    c.min_replicas = uni(0, 2);
    c.max_replicas = c.min_replicas + uni(1, 6);
    c.policy = uni(0, 1) ? Policy::kSlo : Policy::kTargetOngoing;
    c.slo_ttft_s = 1;
    c.target_ongoing_requests = uni(1, 4);
    c.look_back_period_s = uni(1, 30);
    c.upscale_delay_s = uni(0, 30);
    c.downscale_delay_s = uni(0, 120);
    c.max_concurrent_starts = uni(1, 3);
    c.idle_timeout_s = uni(0, 200);
    Autoscaler a;
    const int initial = uni(c.min_replicas, c.max_replicas);
    const int id = *a.AddDeployment("m", c, initial, 0);
    std::deque<Micros> starting;  // ready times, in start order
    int ready = initial;
    Micros now = 0, last_up = -1, last_down = -1;
    for (int i = 0; i < 400; ++i) {
      Micros next = now + FromSeconds(uni(1, 20));
      next = std::min(next, std::max(now + 1, a.NextDeadline()));
      now = next;
      while (!starting.empty() && starting.front() <= now) {
        starting.pop_front();
        ++ready;
      }
      Observation o;
      const int phase = (i / 50) % 3;  // bursts, then quiet
      o.queued = phase == 2 ? 0 : uni(0, 10);
      o.in_flight = ready > 0 && phase != 2 ? uni(0, 8 * ready) : 0;
      if (ready == 0 && phase != 2) o.queued += uni(0, 3);
      o.ready = ready;
      o.starting = static_cast<int>(starting.size());
      if (o.in_flight > 0) {
        o.ttft_samples_s = {uni(0, 30) / 10.0};
      }
      a.Observe(id, now, o);
      std::vector<Decision> out;
      a.Evaluate(now, &out);
      ASSERT_LE(out.size(), 1u);
      for (const Decision& d : out) {
        ++decisions;
        held += d.reason == Reason::kHeldRequests;
        idle += d.reason == Reason::kIdleTimeout;
        SCOPED_TRACE(testing::Message()
                     << "t=" << ToSeconds(now) << " " << d.from << "->" << d.to
                     << " " << ReasonName(d.reason));
        ASSERT_EQ(d.from, ready + static_cast<int>(starting.size()));
        EXPECT_GE(d.to, c.min_replicas);
        EXPECT_LE(d.to, c.max_replicas);
        if (d.to > d.from) {
          for (int k = d.from; k < d.to; ++k) {
            starting.push_back(now + FromSeconds(uni(1, 60)));
          }
          EXPECT_LE(static_cast<int>(starting.size()), c.max_concurrent_starts);
          if (d.reason != Reason::kHeldRequests && last_down >= 0) {
            EXPECT_GE(now - last_down, FromSeconds(c.upscale_delay_s));
          }
          if (d.reason == Reason::kHeldRequests) {
            EXPECT_EQ(d.from, 0);
            EXPECT_EQ(d.to, 1);
          }
          last_up = now;
        } else {
          int stop = d.from - d.to;
          while (stop > 0 && !starting.empty()) {
            starting.pop_back();
            --stop;
          }
          ready -= stop;
          if (d.reason == Reason::kIdleTimeout) {
            EXPECT_EQ(d.to, 0);
          } else if (last_up >= 0) {
            EXPECT_GE(now - last_up, FromSeconds(c.downscale_delay_s));
          }
          last_down = now;
        }
      }
      // No busy loop: nothing is due at the instant just evaluated.
      EXPECT_GT(a.NextDeadline(), now);
    }
  }
  // The walk exercises the rules, not only the quiet path.
  EXPECT_GT(decisions, 1000);
  EXPECT_GT(held, 50);
  EXPECT_GT(idle, 50);
}

}  // namespace
}  // namespace gpusched::autoscale
