#include "control/rollout.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::control {
namespace {

using ::testing::HasSubstr;

constexpr Micros kS = kMicrosPerSecond;

std::vector<VersionSample> Samples(int n, double ttft, int errors = 0) {
  std::vector<VersionSample> v;
  for (int i = 0; i < n; ++i) v.push_back({ttft, ttft * 4, i >= errors});
  return v;
}

config::RolloutSpec Spec() {
  config::RolloutSpec s;
  s.canary = "v2";
  s.steps = {{10, 30, false}, {50, 30, false}};
  s.analysis.window_s = 20;
  s.analysis.min_requests = 10;
  return s;
}

TEST(AnalysisTest, Summarize) {
  std::vector<VersionSample> v;
  for (int i = 1; i <= 100; ++i) v.push_back({i / 1000.0, i / 100.0, i > 5});
  const VersionFigures f = Summarize(v, 95, 0.050);
  EXPECT_EQ(f.requests, 100);
  EXPECT_EQ(f.errors, 5);
  EXPECT_DOUBLE_EQ(f.error_rate, 0.05);
  // 95 ok samples 6..100 ms: nearest rank ceil(0.95 * 95) = 91 -> 96 ms.
  EXPECT_DOUBLE_EQ(f.ttft_s, 0.096);
  // Within 50 ms: 6..50 = 45 of 100 requests.
  EXPECT_DOUBLE_EQ(f.slo_attainment, 0.45);
  EXPECT_EQ(Summarize({}, 95, 0).requests, 0);
  EXPECT_EQ(Summarize({}, 95, 0).slo_attainment, -1);
}

TEST(AnalysisTest, Verdicts) {
  config::AnalysisSpec spec;
  spec.min_requests = 10;
  const VersionFigures stable = Summarize(Samples(50, 0.1), 95, 0);
  EXPECT_EQ(Analyze(spec, stable, Summarize(Samples(9, 0.1), 95, 0)).verdict,
            Verdict::kInconclusive);
  EXPECT_EQ(Analyze(spec, stable, Summarize(Samples(20, 0.12), 95, 0)).verdict,
            Verdict::kPass);
  const Analysis slow =
      Analyze(spec, stable, Summarize(Samples(20, 0.3), 95, 0));
  EXPECT_EQ(slow.verdict, Verdict::kFail);
  EXPECT_THAT(slow.why,
              HasSubstr("p95 TTFT 300 ms = 3.00x the stable's 100 ms"));
  const Analysis errors =
      Analyze(spec, stable, Summarize(Samples(20, 0.1, 2), 95, 0));
  EXPECT_EQ(errors.verdict, Verdict::kFail);
  EXPECT_THAT(errors.why, HasSubstr("error rate 10.0% > 5.0%"));
  // Ratios need the stable's data; absolute checks do not.
  EXPECT_EQ(Analyze(spec, Summarize(Samples(3, 0.1), 95, 0),
                    Summarize(Samples(20, 0.1), 95, 0))
                .verdict,
            Verdict::kInconclusive);
  spec.max_ttft_ratio = spec.max_e2e_ratio = 0;
  spec.max_ttft_ms = 200;
  EXPECT_EQ(Analyze(spec, {}, Summarize(Samples(20, 0.1), 95, 0)).verdict,
            Verdict::kPass);
  EXPECT_EQ(Analyze(spec, {}, Summarize(Samples(20, 0.3), 95, 0)).verdict,
            Verdict::kFail);
  spec.max_ttft_ms = 0;
  spec.min_slo_attainment = 0.9;
  const Analysis slo = Analyze(spec, {}, Summarize(Samples(20, 0.3), 95, 0.2));
  EXPECT_EQ(slo.verdict, Verdict::kFail);
  EXPECT_THAT(slo.why, HasSubstr("SLO attainment 0.0% < 90.0%"));
}

TEST(RolloutTest, PromotesStepByStepWhenHealthy) {
  Rollout r(Spec(), 0);
  EXPECT_EQ(r.canary_weight(), 10);
  EXPECT_EQ(r.NextDeadline(), 30 * kS);
  const VersionFigures good = Summarize(Samples(20, 0.1), 95, 0);
  // Before the pause ends nothing moves, even with a passing analysis.
  EXPECT_TRUE(r.Step(10 * kS, good, good).empty());
  EXPECT_EQ(r.WindowStart(25 * kS), 5 * kS);
  auto c = r.Step(30 * kS, good, good);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, "rollout.step");
  EXPECT_EQ(c[0].canary_weight, 50);
  EXPECT_EQ(r.WindowStart(35 * kS), 30 * kS);  // the new step's samples only
  c = r.Step(60 * kS, good, good);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, "rollout.promoted");
  EXPECT_EQ(r.phase(), RolloutPhase::kPromoted);
  EXPECT_EQ(r.canary_weight(), 100);
  EXPECT_TRUE(r.Step(90 * kS, good, good).empty());
}

TEST(RolloutTest, RollsBackAtOnceOnABadCanary) {
  Rollout r(Spec(), 0);
  const VersionFigures good = Summarize(Samples(40, 0.1), 95, 0);
  const VersionFigures slow = Summarize(Samples(12, 0.5), 95, 0);
  auto c = r.Step(5 * kS, good, slow);  // mid-pause
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, "rollout.rolled_back");
  EXPECT_EQ(c[0].canary_weight, 0);
  EXPECT_THAT(c[0].message, HasSubstr("5.00x"));
  EXPECT_EQ(r.phase(), RolloutPhase::kRolledBack);
  EXPECT_THAT(r.reason(), HasSubstr("TTFT"));
  EXPECT_EQ(c[0].details["analysis"]["canary"]["requests"], 12);
  // Retry starts over.
  auto again = r.Retry(10 * kS);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(r.canary_weight(), 10);
  EXPECT_EQ(r.NextDeadline(), 40 * kS);
}

TEST(RolloutTest, InconclusiveHoldsTheStepAndSaysSoOnce) {
  Rollout r(Spec(), 0);
  const VersionFigures few = Summarize(Samples(3, 0.1), 95, 0);
  auto c = r.Step(31 * kS, few, few);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, "rollout.analysis");
  EXPECT_TRUE(r.Step(32 * kS, few, few).empty());
  EXPECT_EQ(r.canary_weight(), 10);
}

TEST(RolloutTest, ManualActions) {
  config::RolloutSpec spec = Spec();
  spec.steps[0].manual = true;
  Rollout r(spec, 0);
  EXPECT_EQ(r.NextDeadline(), kNever);
  const VersionFigures good = Summarize(Samples(20, 0.1), 95, 0);
  EXPECT_TRUE(r.Step(100 * kS, good, good).empty());  // waits for promote
  ASSERT_TRUE(r.Pause(100 * kS).ok());
  EXPECT_FALSE(r.Pause(100 * kS).ok());
  // A failing analysis rolls back even while paused.
  Rollout paused(Spec(), 0);
  ASSERT_TRUE(paused.Pause(1 * kS).ok());
  EXPECT_EQ(paused.Step(2 * kS, good, Summarize(Samples(20, 1), 95, 0))[0].kind,
            "rollout.rolled_back");
  ASSERT_TRUE(r.Resume(101 * kS).ok());
  auto p = r.Promote(102 * kS, false);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->canary_weight, 50);
  p = r.Promote(103 * kS, true);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, "rollout.promoted");
  EXPECT_FALSE(r.Promote(104 * kS, false).ok());
  EXPECT_FALSE(r.Abort(104 * kS, "").ok());
  Rollout a(Spec(), 0);
  auto ab = a.Abort(1 * kS, "");
  ASSERT_TRUE(ab.ok());
  EXPECT_EQ(ab->canary_weight, 0);
  EXPECT_EQ(a.phase(), RolloutPhase::kAborted);
}

TEST(RolloutTest, StateRoundTrips) {
  Rollout r(Spec(), 0);
  const VersionFigures good = Summarize(Samples(20, 0.1), 95, 0);
  r.Step(30 * kS, good, good);
  auto back = Rollout::Restore(Spec(), r.State(), 500 * kS);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step(), 1);
  EXPECT_EQ(back->canary_weight(), 50);
  EXPECT_EQ(back->NextDeadline(), 530 * kS);  // the step restarts
  EXPECT_FALSE(Rollout::Restore(Spec(), {{"phase", "x"}, {"step", 0}}, 0).ok());
  EXPECT_FALSE(
      Rollout::Restore(Spec(), {{"phase", "paused"}, {"step", 7}}, 0).ok());
  EXPECT_FALSE(Rollout::Restore(Spec(), nlohmann::json::array(), 0).ok());
}

}  // namespace
}  // namespace gpusched::control
