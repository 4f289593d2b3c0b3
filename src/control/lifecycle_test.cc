#include "control/lifecycle.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "control/lifecycle_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::control {
namespace {

constexpr Micros kMs = kMicrosPerMilli;
constexpr Micros kS = kMicrosPerSecond;

// "launch chat-0" for each action, in order.
std::vector<std::string> Actions(const LifecycleOutput& out) {
  std::vector<std::string> v;
  for (const LifecycleAction& a : out.actions) {
    v.push_back(absl::StrCat(ActionName(a.kind), " ", a.replica));
  }
  return v;
}

std::vector<std::string> Kinds(const LifecycleOutput& out) {
  std::vector<std::string> v;
  for (const LifecycleEvent& e : out.events) {
    v.push_back(absl::StrCat(e.kind, " ", e.replica));
  }
  return v;
}

// "chat-0:ready chat-1:starting".
std::string States(const ReplicaSet& set) {
  std::vector<std::string> v;
  for (const Replica& r : set.replicas()) {
    v.push_back(absl::StrCat(r.name, ":", ReplicaStateName(r.state),
                             r.version == set.version() ? "" : "(old)"));
  }
  return absl::StrJoin(v, " ");
}

LifecycleOptions Options() {
  LifecycleOptions o;
  o.drain_grace = 30 * kS;
  o.starting_probe = 10 * kMs;
  o.health_period = 5 * kS;
  o.startup_timeout = 60 * kS;
  o.failure_threshold = 3;
  return o;
}

// One step of a scripted scenario: a driver report or a pass at `at`, and
// what the pass must emit and leave.
struct Step {
  enum Kind {
    kReconcile,
    kLaunched,
    kUnplaced,
    kLaunchFailed,
    kProbeOk,
    kProbeFail,
    kExited,
    kInFlight,
    kDesired,
    kVersion,
    kDrain,
  } kind;
  Micros at = 0;
  std::string replica;  // or the version
  int64_t n = 0;        // kInFlight, kDesired
  std::vector<std::string> want_actions = {};
  std::vector<std::string> want_events = {};
  std::string want_states = "";  // checked when not empty
};

struct Case {
  std::string label;
  int desired = 1;
  std::vector<Step> steps;
};

void RunCase(const Case& c) {
  SCOPED_TRACE(c.label);
  ReplicaSet set("chat", Options());
  set.SetVersion("v1");
  set.SetDesired(c.desired);
  for (size_t i = 0; i < c.steps.size(); ++i) {
    const Step& s = c.steps[i];
    SCOPED_TRACE(absl::StrCat("step ", i));
    LifecycleOutput out;
    switch (s.kind) {
      case Step::kReconcile:
        set.Reconcile(s.at, &out);
        break;
      case Step::kLaunched:
        set.Launched(s.replica, s.at);
        break;
      case Step::kUnplaced:
        EXPECT_EQ(set.Unplaced(s.replica, "no room", s.at + kS), s.n == 1);
        break;
      case Step::kLaunchFailed:
        set.LaunchFailed(s.replica, "bad argv", s.at, &out);
        break;
      case Step::kProbeOk:
      case Step::kProbeFail:
        set.ProbeResult(s.replica, s.kind == Step::kProbeOk, s.at, &out);
        break;
      case Step::kExited:
        set.Exited(s.replica, "exit code 1", "", s.at, &out);
        break;
      case Step::kInFlight:
        set.SetInFlight(s.replica, s.n, s.at);
        break;
      case Step::kDesired:
        set.SetDesired(static_cast<int>(s.n));
        break;
      case Step::kVersion:
        set.SetVersion(s.replica);
        break;
      case Step::kDrain:
        set.Drain(s.replica, "swapped out", s.at, &out);
        break;
    }
    EXPECT_EQ(Actions(out), s.want_actions);
    EXPECT_EQ(Kinds(out), s.want_events);
    if (!s.want_states.empty()) {
      EXPECT_EQ(States(set), s.want_states);
    }
  }
}

TEST(ReplicaSetTest, Transitions) {
  using S = Step;
  const std::vector<Case> cases = {
      {"start, probe until ready",
       2,
       {{S::kReconcile,
         0,
         "",
         0,
         {"launch chat-0", "launch chat-1"},
         {},
         "chat-0:pending chat-1:pending"},
        {S::kReconcile, 1 * kMs, "", 0, {}},  // launches are out
        {S::kLaunched, 2 * kMs, "chat-0"},
        {S::kLaunched, 2 * kMs, "chat-1"},
        {S::kReconcile,
         5 * kMs,
         "",
         0,
         {},
         {},
         "chat-0:starting chat-1:starting"},
        {S::kReconcile, 12 * kMs, "", 0, {"probe chat-0", "probe chat-1"}},
        {S::kProbeFail, 13 * kMs, "chat-0"},
        {S::kProbeOk,
         13 * kMs,
         "chat-1",
         0,
         {},
         {"replica.ready chat-1"},
         "chat-0:starting chat-1:ready"},
        {S::kReconcile, 22 * kMs, "", 0, {}},
        {S::kReconcile, 23 * kMs, "", 0, {"probe chat-0"}},
        {S::kProbeOk, 24 * kMs, "chat-0", 0, {}, {"replica.ready chat-0"}},
        {S::kReconcile, 5 * kS, "", 0, {}},
        {S::kReconcile, 5 * kS + 13 * kMs, "", 0, {"probe chat-1"}}}},
      {"exits restart after a growing backoff",
       1,
       {{S::kReconcile, 0, "", 0, {"launch chat-0"}},
        {S::kLaunched, 0, "chat-0"},
        {S::kExited,
         1 * kS,
         "chat-0",
         0,
         {},
         {"replica.exited chat-0"},
         "chat-0:backoff"},
        {S::kReconcile, 1 * kS + 999 * kMs, "", 0, {}},
        {S::kReconcile, 2 * kS, "", 0, {"launch chat-0"}},
        {S::kLaunched, 2 * kS, "chat-0"},
        {S::kExited, 3 * kS, "chat-0", 0, {}, {"replica.exited chat-0"}},
        {S::kReconcile, 4 * kS + 999 * kMs, "", 0, {}},
        {S::kReconcile, 5 * kS, "", 0, {"launch chat-0"}}}},
      {"a failed launch backs off too",
       1,
       {{S::kReconcile, 0, "", 0, {"launch chat-0"}},
        {S::kLaunchFailed,
         0,
         "chat-0",
         0,
         {},
         {"replica.failed chat-0"},
         "chat-0:backoff"},
        {S::kReconcile, 999 * kMs, "", 0, {}},
        {S::kReconcile, 1 * kS, "", 0, {"launch chat-0"}}}},
      {"no room: pending, retried, the reason recorded once",
       1,
       {{S::kReconcile, 0, "", 0, {"launch chat-0"}},
        {S::kUnplaced, 0, "chat-0", 1},
        {S::kReconcile, 999 * kMs, "", 0, {}, {}, "chat-0:pending"},
        {S::kReconcile, 1 * kS, "", 0, {"launch chat-0"}},
        {S::kUnplaced, 1 * kS, "chat-0", 0}}},
      {"a startup timeout kills, the exit restarts",
       1,
       {{S::kReconcile, 0, "", 0, {"launch chat-0"}},
        {S::kLaunched, 0, "chat-0"},
        {S::kReconcile, 10 * kMs, "", 0, {"probe chat-0"}},
        {S::kProbeFail, 11 * kMs, "chat-0"},
        {S::kReconcile,
         60 * kS + 1,
         "",
         0,
         {"kill chat-0"},
         {"replica.unhealthy chat-0"},
         "chat-0:unhealthy"},
        {S::kExited,
         61 * kS,
         "chat-0",
         0,
         {},
         {"replica.exited chat-0"},
         "chat-0:backoff"}}},
      {"three failed health checks kill a ready replica",
       1,
       {{S::kReconcile, 0, "", 0, {"launch chat-0"}},
        {S::kLaunched, 0, "chat-0"},
        {S::kReconcile, 10 * kMs, "", 0, {"probe chat-0"}},
        {S::kProbeOk, 10 * kMs, "chat-0", 0, {}, {"replica.ready chat-0"}},
        {S::kReconcile, 5 * kS + 10 * kMs, "", 0, {"probe chat-0"}},
        {S::kProbeFail, 5 * kS + 10 * kMs, "chat-0"},
        {S::kReconcile, 6 * kS + 10 * kMs, "", 0, {"probe chat-0"}},
        {S::kProbeOk, 6 * kS + 10 * kMs, "chat-0"},  // resets the count
        {S::kReconcile, 11 * kS + 10 * kMs, "", 0, {"probe chat-0"}},
        {S::kProbeFail, 11 * kS + 10 * kMs, "chat-0"},
        {S::kReconcile, 12 * kS + 10 * kMs, "", 0, {"probe chat-0"}},
        {S::kProbeFail, 12 * kS + 10 * kMs, "chat-0"},
        {S::kReconcile, 13 * kS + 10 * kMs, "", 0, {"probe chat-0"}},
        {S::kProbeFail,
         13 * kS + 10 * kMs,
         "chat-0",
         0,
         {"kill chat-0"},
         {"replica.unhealthy chat-0"},
         "chat-0:unhealthy"}}},
      {"drain waits for in-flight requests, then stops and forgets",
       1,
       {{S::kReconcile, 0, "", 0, {"launch chat-0"}},
        {S::kLaunched, 0, "chat-0"},
        {S::kInFlight, 1 * kS, "chat-0", 2},
        {S::kDesired, 0, "", 0},
        {S::kReconcile,
         2 * kS,
         "",
         0,
         {},
         {"replica.draining chat-0"},
         "chat-0:draining"},
        {S::kReconcile, 3 * kS, "", 0, {}},
        {S::kInFlight, 4 * kS, "chat-0", 0},
        {S::kReconcile, 4 * kS, "", 0, {"stop chat-0"}},
        {S::kReconcile, 5 * kS, "", 0, {}, {}, "chat-0:draining"},
        {S::kExited, 6 * kS, "chat-0", 0, {}, {"replica.stopped chat-0"}},
        {S::kReconcile, 6 * kS, "", 0, {"forget chat-0"}, {}, ""}}},
      {"drain grace ends a drain",
       1,
       {{S::kReconcile, 0, "", 0, {"launch chat-0"}},
        {S::kLaunched, 0, "chat-0"},
        {S::kInFlight, 0, "chat-0", 5},
        {S::kDrain, 1 * kS, "chat-0", 0, {}, {"replica.draining chat-0"}},
        {S::kReconcile, 30 * kS, "", 0, {"launch chat-1"}},
        {S::kReconcile, 31 * kS, "", 0, {"stop chat-0"}}}},
      {"a pending replica scaled away is forgotten at once",
       1,
       {{S::kReconcile, 0, "", 0, {"launch chat-0"}},
        {S::kUnplaced, 0, "chat-0", 1},
        {S::kDesired, 0, "", 0},
        {S::kReconcile,
         1 * kS,
         "",
         0,
         {"forget chat-0"},
         {"replica.draining chat-0"}}}},
      {"scale down: not ready first, then the least busy",
       3,
       {{S::kReconcile,
         0,
         "",
         0,
         {"launch chat-0", "launch chat-1", "launch chat-2"}},
        {S::kLaunched, 0, "chat-0"},
        {S::kLaunched, 0, "chat-1"},
        {S::kLaunched, 0, "chat-2"},
        {S::kReconcile,
         10 * kMs,
         "",
         0,
         {"probe chat-0", "probe chat-1", "probe chat-2"}},
        {S::kProbeOk, 10 * kMs, "chat-0", 0, {}, {"replica.ready chat-0"}},
        {S::kProbeOk, 10 * kMs, "chat-2", 0, {}, {"replica.ready chat-2"}},
        {S::kInFlight, 1 * kS, "chat-0", 1},
        {S::kInFlight, 1 * kS, "chat-2", 4},
        {S::kDesired, 2, "", 2},
        {S::kReconcile,
         1 * kS,
         "",
         0,
         {"stop chat-1"},
         {"replica.draining chat-1"}},
        {S::kDesired, 1, "", 1},
        {S::kReconcile,
         2 * kS,
         "",
         0,
         {},
         {"replica.draining chat-0"},
         "chat-0:draining chat-1:draining chat-2:ready"}}},
      {"desired -1 keeps every replica",
       2,
       {{S::kReconcile, 0, "", 0, {"launch chat-0", "launch chat-1"}},
        {S::kDesired, 0, "", -1},
        {S::kReconcile,
         1 * kS,
         "",
         0,
         {},
         {},
         "chat-0:pending chat-1:pending"}}},
  };
  for (const Case& c : cases) RunCase(c);
}

TEST(ReplicaSetTest, RollingReplacement) {
  ReplicaSet set("chat", Options());
  set.SetVersion("v1");
  set.SetDesired(2);
  MakeReady(set, 0);
  ASSERT_EQ(States(set), "chat-0:ready chat-1:ready");
  set.SetVersion("v2");
  LifecycleOutput out;
  set.Reconcile(1 * kS, &out);
  // The old ones serve until the new ones are ready.
  EXPECT_EQ(Actions(out),
            (std::vector<std::string>{"launch chat-2", "launch chat-3"}));
  EXPECT_EQ(
      States(set),
      "chat-0:ready(old) chat-1:ready(old) chat-2:pending chat-3:pending");
  EXPECT_EQ(set.ready(), 0);
  EXPECT_EQ(set.starting(), 2);
  set.Launched("chat-2", 1 * kS);
  set.Launched("chat-3", 1 * kS);
  out.Clear();
  set.Reconcile(1 * kS + 10 * kMs, &out);
  set.ProbeResult("chat-2", true, 1 * kS + 10 * kMs, &out);
  out.Clear();
  set.Reconcile(1 * kS + 20 * kMs, &out);
  EXPECT_TRUE(out.events.empty());  // one of two ready: the old ones stay
  set.ProbeResult("chat-3", true, 1 * kS + 20 * kMs, &out);
  out.Clear();
  set.Reconcile(1 * kS + 30 * kMs, &out);
  EXPECT_EQ(Kinds(out), (std::vector<std::string>{"replica.draining chat-0",
                                                  "replica.draining chat-1"}));
  EXPECT_EQ(Actions(out),
            (std::vector<std::string>{"stop chat-0", "stop chat-1"}));
  EXPECT_EQ(set.ready(), 2);
  EXPECT_EQ(set.starting(), 0);
}

TEST(ReplicaSetTest, MoveStartsAReplacementBeforeItDrains) {
  ReplicaSet set("chat", Options());
  set.SetVersion("v1");
  set.SetDesired(2);
  MakeReady(set, 0);
  EXPECT_TRUE(set.Move("chat-1", "node n2 is being emptied"));
  EXPECT_FALSE(set.Move("chat-9", "unknown"));
  LifecycleOutput out;
  set.Reconcile(1 * kS, &out);
  EXPECT_EQ(Actions(out), (std::vector<std::string>{"launch chat-2"}));
  EXPECT_TRUE(out.events.empty());  // chat-1 serves until chat-2 is ready
  set.Launched("chat-2", 1 * kS);
  out.Clear();
  set.Reconcile(1 * kS + 10 * kMs, &out);
  set.ProbeResult("chat-2", true, 1 * kS + 10 * kMs, &out);
  out.Clear();
  set.Reconcile(1 * kS + 20 * kMs, &out);
  EXPECT_EQ(Kinds(out), (std::vector<std::string>{"replica.draining chat-1"}));
  EXPECT_THAT(out.events[0].message,
              ::testing::HasSubstr("moved: node n2 is being emptied"));
  EXPECT_EQ(Actions(out), (std::vector<std::string>{"stop chat-1"}));
  EXPECT_EQ(set.ready(), 2);
}

TEST(ReplicaSetTest, RollingReplacementDrainsOldOnesThatServeNothing) {
  ReplicaSet set("chat", Options());
  set.SetVersion("v1");
  set.SetDesired(1);
  LifecycleOutput out;
  set.Reconcile(0, &out);
  set.Unplaced("chat-0", "no room", 1 * kS);  // never placed
  set.SetVersion("v2");
  out.Clear();
  set.Reconcile(1 * kS, &out);
  EXPECT_EQ(Kinds(out), (std::vector<std::string>{"replica.draining chat-0"}));
  EXPECT_EQ(Actions(out),
            (std::vector<std::string>{"launch chat-1", "forget chat-0"}));
}

TEST(ReplicaSetTest, LaunchedWhileDrainingStopsAtOnce) {
  ReplicaSet set("chat", Options());
  set.SetVersion("v1");
  set.SetDesired(1);
  LifecycleOutput out;
  set.Reconcile(0, &out);
  set.Drain("chat-0", "preempted", 0, &out);
  out.Clear();
  set.Reconcile(1, &out);  // the launch is still out: not forgotten
  EXPECT_EQ(Actions(out), (std::vector<std::string>{"launch chat-1"}));
  set.Launched("chat-0", 2);
  out.Clear();
  set.Reconcile(3, &out);
  EXPECT_EQ(Actions(out), (std::vector<std::string>{"stop chat-0"}));
}

TEST(ReplicaSetTest, NextDeadline) {
  ReplicaSet set("chat", Options());
  set.SetVersion("v1");
  EXPECT_EQ(set.NextDeadline(), kNever);
  set.SetDesired(1);
  LifecycleOutput out;
  set.Reconcile(0, &out);
  EXPECT_EQ(set.NextDeadline(), kNever);  // the launch is out
  set.Unplaced("chat-0", "no room", 7 * kS);
  EXPECT_EQ(set.NextDeadline(), 7 * kS);
  out.Clear();
  set.Reconcile(7 * kS, &out);
  set.Launched("chat-0", 7 * kS);
  EXPECT_EQ(set.NextDeadline(), 7 * kS + 10 * kMs);
  out.Clear();
  set.Reconcile(7 * kS + 10 * kMs, &out);      // probing
  EXPECT_EQ(set.NextDeadline(), 67 * kS + 1);  // the startup timeout
  set.ProbeResult("chat-0", true, 8 * kS, &out);
  EXPECT_EQ(set.NextDeadline(), 13 * kS);  // the health check
  set.SetInFlight("chat-0", 3, 9 * kS);
  set.Drain("chat-0", "test", 9 * kS, &out);
  EXPECT_EQ(set.NextDeadline(), 39 * kS);  // the drain grace
}

TEST(ReplicaSetTest, AutoscalerCountsFollowTheCurrentVersion) {
  ReplicaSet set("chat", Options());
  set.SetVersion("v1");
  set.SetDesired(3);
  MakeReady(set, 0);
  EXPECT_EQ(set.ready(), 3);
  set.SetDesired(5);
  LifecycleOutput out;
  set.Reconcile(1 * kS, &out);
  EXPECT_EQ(set.ready(), 3);
  EXPECT_EQ(set.starting(), 2);  // pending ones count as starting
  set.SetDesired(1);
  set.Reconcile(2 * kS, &out);
  EXPECT_EQ(set.ready(), 1);
  EXPECT_EQ(set.starting(), 0);  // draining ones count as neither
}

}  // namespace
}  // namespace gpusched::control
