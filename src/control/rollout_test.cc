#include "control/rollout.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::control {
namespace {

using ::testing::HasSubstr;

constexpr Micros kS = kMicrosPerSecond;

// n requests around `ttft` (spread over +-45% so that ranks differ), the
// first `errors` of them failed; end-to-end is 4x TTFT.
VersionWindow Samples(int n, double ttft, int errors = 0, double slo = 0) {
  VersionWindow w(slo);
  for (int i = 0; i < n; ++i) {
    const double t = ttft * (0.55 + 0.1 * (i % 10));
    w.Add({t, t * 4, i >= errors});
  }
  return w;
}

// n draws of an exponential-ish latency with mean `ttft` from `rng`.
VersionWindow Noisy(int n, double ttft, Rng& rng) {
  VersionWindow w;
  for (int i = 0; i < n; ++i) {
    const double t = -ttft * std::log(1 - rng.UniformDouble());
    w.Add({t, t * 4, true});
  }
  return w;
}

config::RolloutSpec Spec() {
  config::RolloutSpec s;
  s.canary = "v2";
  s.steps = {{10, 30, false}, {50, 30, false}};
  s.analysis.window_s = 20;
  s.analysis.min_requests = 10;
  return s;
}

const Check* Find(const Analysis& a, const std::string& name) {
  for (const Check& c : a.checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

TEST(AnalysisTest, Summarize) {
  VersionWindow w(0.050);
  for (int i = 1; i <= 100; ++i) w.Add({i / 1000.0, i / 100.0, i > 5});
  const VersionFigures f = Summarize(w, 95);
  EXPECT_EQ(f.requests, 100);
  EXPECT_EQ(f.errors, 5);
  EXPECT_DOUBLE_EQ(f.error_rate, 0.05);
  EXPECT_EQ(f.latency_samples, 95);
  // 95 ok samples 6..100 ms: nearest rank ceil(0.95 * 95) = 91 -> 96 ms.
  EXPECT_DOUBLE_EQ(f.ttft_s, 0.096);
  EXPECT_DOUBLE_EQ(f.ttft_median_s, 0.053);  // rank 48 of 6..100
  // Within 50 ms: 6..50 = 45 of 100 requests.
  EXPECT_DOUBLE_EQ(f.slo_attainment, 0.45);
  EXPECT_EQ(Summarize(VersionWindow(), 95).requests, 0);
  EXPECT_EQ(Summarize(VersionWindow(), 95).slo_attainment, -1);
}

TEST(AnalysisTest, TheReservoirIsBoundedAndCountsStayExact) {
  VersionWindow w;
  const int n = 10 * static_cast<int>(kMaxWindowSamples);
  for (int i = 0; i < n; ++i) w.Add({i * 1e-6, i * 1e-6, i % 100 != 0});
  EXPECT_EQ(w.requests, n);
  EXPECT_EQ(w.errors, (n + 99) / 100);  // i = 0, 100, 200, ...
  EXPECT_EQ(w.ttft_s.size(), kMaxWindowSamples);
  EXPECT_EQ(w.e2e_s.size(), kMaxWindowSamples);
  // A uniform sample of 0..n: its median is near n/2 (not the first 2048).
  const double median = Summarize(w, 50).ttft_median_s / 1e-6;
  EXPECT_GT(median, 0.4 * n);
  EXPECT_LT(median, 0.6 * n);
}

TEST(AnalysisTest, Verdicts) {
  config::AnalysisSpec spec;
  spec.min_requests = 10;
  struct Case {
    const char* name;
    VersionWindow stable, canary;
    Verdict want;
    const char* why;  // a part of the verdict's why
  };
  const std::vector<Case> cases = {
      {"too few canary requests", Samples(50, 0.1), Samples(9, 0.1),
       Verdict::kInconclusive, "waiting for 10 canary requests"},
      {"too few stable samples for the rank test", Samples(3, 0.1),
       Samples(20, 0.1), Verdict::kInconclusive,
       "waiting for 10 samples a version (canary 20, stable 3)"},
      {"identical", Samples(50, 0.1), Samples(50, 0.1), Verdict::kPass,
       "Mann-Whitney"},
      {"a little slower: below the effect size", Samples(50, 0.1),
       Samples(20, 0.12), Verdict::kPass, "1.20x (max 1.25x"},
      {"clearly slower", Samples(50, 0.1), Samples(20, 0.3), Verdict::kFail,
       "p95 TTFT 435 ms vs 145 ms = 3.00x (max 1.25x, slack 10 ms), medians "
       "285 ms vs 95 ms"},
      {"0 errors of 10 is not better, just no evidence", Samples(50, 0.1, 5),
       Samples(10, 0.1), Verdict::kPass, "Fisher p = 1"},
      {"2 errors of 20 against a 5% cap: no evidence", Samples(50, 0.1),
       Samples(20, 0.1, 2), Verdict::kPass, "against the cap 5.00%"},
      {"12 errors of 40: above the 5% cap and the stable's 0", Samples(50, 0.1),
       Samples(40, 0.1, 12), Verdict::kFail, "error rate 30.00% (12 of 40)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Analysis a = Analyze(spec, c.stable, c.canary);
    EXPECT_EQ(a.verdict, c.want) << a.why;
    EXPECT_THAT(a.why, HasSubstr(c.why));
  }
}

TEST(AnalysisTest, NoiseOfAFewMillisecondsNeverFails) {
  // The case that rolled back an identical canary: maxTtftRatio 3 and
  // minRequests 10, the stable at ~1 ms, the canary at ~5 ms. 5x, and
  // significant, but the 5.8 ms difference is within the 10 ms slack.
  config::AnalysisSpec spec;
  spec.min_requests = 10;
  spec.max_ttft_ratio = 3;
  spec.max_e2e_ratio = 0;
  const Analysis a = Analyze(spec, Samples(10, 0.001), Samples(10, 0.005));
  EXPECT_EQ(a.verdict, Verdict::kPass) << a.why;
  const Check* ttft = Find(a, "ttft");
  ASSERT_NE(ttft, nullptr);
  EXPECT_LT(ttft->p_value, 0.01);
  EXPECT_DOUBLE_EQ(ttft->effect, 5);
  EXPECT_THAT(ttft->why, HasSubstr("slack 10 ms"));
  // Without the slack the same samples fail: the slack is what passes them.
  spec.slack_ms = 0;
  EXPECT_EQ(Analyze(spec, Samples(10, 0.001), Samples(10, 0.005)).verdict,
            Verdict::kFail);
  // A stable at 0 ms: no 1 ms floor, the slack decides.
  spec.slack_ms = 10;
  EXPECT_EQ(Analyze(spec, Samples(10, 0), Samples(10, 0.004)).verdict,
            Verdict::kPass);
}

TEST(AnalysisTest, ErrorsAgainstTheStableNeedSignificanceAndTheRatio) {
  config::AnalysisSpec spec;
  spec.min_requests = 10;
  spec.max_error_rate = 1;  // only the comparison with the stable
  auto errors = [](int n, int e) { return Samples(n, 0.1, e); };
  // 2% vs 1% over 500 each: a ratio of 2 but p ~ 0.1: not evidence.
  Analysis a = Analyze(spec, errors(500, 5), errors(500, 10));
  EXPECT_EQ(a.verdict, Verdict::kPass) << a.why;
  ASSERT_NE(Find(a, "errors"), nullptr);
  EXPECT_GT(Find(a, "errors")->p_value, 0.01);
  // 2% vs 1% over 10,000 each: significant and above 1.5x.
  a = Analyze(spec, errors(10000, 100), errors(10000, 200));
  EXPECT_EQ(a.verdict, Verdict::kFail) << a.why;
  EXPECT_DOUBLE_EQ(Find(a, "errors")->effect, 2);
  // Significant but below the ratio: 1.2% vs 1% over 200,000.
  a = Analyze(spec, errors(200000, 2000), errors(200000, 2400));
  EXPECT_LT(Find(a, "errors")->p_value, 0.01);
  EXPECT_EQ(a.verdict, Verdict::kPass) << a.why;
  // Fewer errors than the stable never fail.
  a = Analyze(spec, errors(1000, 100), errors(1000, 0));
  EXPECT_EQ(a.verdict, Verdict::kPass) << a.why;
  EXPECT_EQ(Find(a, "errors")->p_value, 1);
}

TEST(AnalysisTest, IdenticalDistributionsRarelyFail) {
  // 1,000 windows of 30 canary and 200 stable draws from one distribution:
  // the rank test at 99% with the default 1.25x effect size fails well under
  // 1%.
  config::AnalysisSpec spec;
  spec.min_requests = 10;
  spec.slack_ms = 0;  // the test and the effect size alone
  const uint64_t seed = 7;
  Rng rng(seed);
  int failed = 0;
  for (int i = 0; i < 1000; ++i) {
    const VersionWindow stable = Noisy(200, 0.1, rng);
    const VersionWindow canary = Noisy(30, 0.1, rng);
    failed += Analyze(spec, stable, canary).verdict == Verdict::kFail;
  }
  EXPECT_LE(failed, 5) << "seed " << seed;
  // The same windows with a canary 3x slower fail nearly always.
  failed = 0;
  for (int i = 0; i < 1000; ++i) {
    const VersionWindow stable = Noisy(200, 0.1, rng);
    const VersionWindow canary = Noisy(30, 0.3, rng);
    failed += Analyze(spec, stable, canary).verdict == Verdict::kFail;
  }
  EXPECT_GE(failed, 900) << "seed " << seed;
}

TEST(AnalysisTest, LooksSpendTheConfidence) {
  EXPECT_DOUBLE_EQ(LookAlpha(0.01, 1), 0.01 / 6);
  EXPECT_DOUBLE_EQ(LookAlpha(0.01, 2), 0.01 * 5 / 42);
  EXPECT_DOUBLE_EQ(LookAlpha(0.01, 12), 0.01 * 5 / 272);
  double sum = 0;
  for (int k = 1; k <= 1000; ++k) sum += LookAlpha(0.01, k);
  EXPECT_LT(sum, 0.01);
  EXPECT_GT(sum, 0.0099);  // the tail past look 1000: 5 / 1005 of it
}

TEST(AnalysisTest, ErrorsAreJudgedOverTheRolloutsCounts) {
  config::AnalysisSpec spec;
  spec.min_requests = 10;
  spec.max_error_rate = 1;  // only the comparison with the stable
  // The window alone: 2% vs 1% over 300 canary requests is no evidence.
  const VersionWindow stable = Samples(300, 0.1, 3);
  const VersionWindow canary = Samples(300, 0.1, 6);
  ErrorLooks looks;
  looks.look = 1;
  Analysis a = Analyze(spec, stable, canary, looks);
  EXPECT_EQ(a.verdict, Verdict::kPass) << a.why;
  // With 9,700 earlier requests a version at the same rates, it is.
  looks.before = {9700, 97, 9700, 194};
  a = Analyze(spec, stable, canary, looks);
  EXPECT_EQ(a.verdict, Verdict::kFail) << a.why;
  const Check* e = Find(a, "errors");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->n_canary, 10000);
  EXPECT_EQ(e->n_stable, 10000);
  EXPECT_DOUBLE_EQ(e->effect, 2);
  EXPECT_EQ(e->look, 1);
  EXPECT_DOUBLE_EQ(e->alpha, LookAlpha(1 - spec.confidence, 1));
  EXPECT_THAT(e->why, HasSubstr("200 of 10000"));
  // A later look needs a smaller p-value: look 100 spends 0.01 / 2184.
  looks.before = {4700, 47, 4700, 94};
  looks.look = 1;
  EXPECT_EQ(Analyze(spec, stable, canary, looks).verdict, Verdict::kFail);
  looks.look = 100;
  a = Analyze(spec, stable, canary, looks);
  EXPECT_EQ(a.verdict, Verdict::kPass) << a.why;
  EXPECT_THAT(Find(a, "errors")->why, HasSubstr("at look 100"));
  // Not a look: the held checks stand, with their numbers.
  ErrorLooks hold;
  Check held =
      *Find(Analyze(spec, Samples(10000, 0.1, 100), Samples(10000, 0.1, 200)),
            "errors");
  hold.held = {held};
  a = Analyze(spec, stable, Samples(300, 0.1), hold);
  EXPECT_EQ(a.verdict, Verdict::kFail) << a.why;
  EXPECT_EQ(Find(a, "errors")->n_canary, 10000);
  // Errors fail even before the window has its minRequests: they judge
  // their own counts.
  looks.look = 1;
  looks.before = {9995, 100, 9995, 200};
  a = Analyze(spec, Samples(5, 0.1), Samples(5, 0.1), looks);
  EXPECT_EQ(a.verdict, Verdict::kFail) << a.why;
}

TEST(AnalysisTest, TheJsonCarriesTheNumbers) {
  config::AnalysisSpec spec;
  spec.min_requests = 10;
  const Analysis a = Analyze(spec, Samples(50, 0.1), Samples(20, 0.3));
  const nlohmann::json j = a.Json();
  EXPECT_EQ(j["verdict"], "fail");
  EXPECT_EQ(j["confidence"], 0.99);
  EXPECT_EQ(j["minSamples"], 10);
  const nlohmann::json* ttft = nullptr;
  for (const nlohmann::json& c : j["checks"]) {
    if (c["name"] == "ttft") ttft = &c;
  }
  ASSERT_NE(ttft, nullptr);
  EXPECT_EQ((*ttft)["test"], "mann-whitney-u");
  EXPECT_EQ((*ttft)["verdict"], "fail");
  EXPECT_EQ((*ttft)["canarySamples"], 20);
  EXPECT_EQ((*ttft)["stableSamples"], 50);
  EXPECT_EQ((*ttft)["threshold"], 1.25);
  EXPECT_EQ((*ttft)["slackMs"], 10);
  EXPECT_LT((*ttft)["pValue"].get<double>(), 0.01);
  EXPECT_DOUBLE_EQ((*ttft)["canaryMedian"].get<double>(), 0.3 * 0.95);
  EXPECT_DOUBLE_EQ((*ttft)["effect"].get<double>(), 3);
}

TEST(RolloutTest, PromotesStepByStepWhenHealthy) {
  Rollout r(Spec(), 0);
  EXPECT_EQ(r.canary_weight(), 10);
  EXPECT_EQ(r.NextDeadline(), 30 * kS);
  const VersionWindow good = Samples(20, 0.1);
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
  const VersionWindow good = Samples(40, 0.1);
  const VersionWindow slow = Samples(12, 0.5);
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

// A window of n requests with `errors` failed, spread over them.
VersionWindow WithErrors(int n, int errors) {
  VersionWindow w;
  for (int i = 0; i < n; ++i) {
    w.Add({0.1, 0.4, (i * errors) / n == ((i + 1) * errors) / n});
  }
  return w;
}

TEST(RolloutTest, ErrorsAddUpOverTheSteps) {
  // 2% against 1%: no step's window is evidence, their sum is.
  config::RolloutSpec spec = Spec();
  spec.analysis.max_ttft_ratio = spec.analysis.max_e2e_ratio = 0;
  spec.steps = {{5, 30, false}, {25, 30, false}, {50, 30, false}};
  Rollout r(spec, 0);
  auto c = r.Step(30 * kS, WithErrors(950, 10), WithErrors(50, 1));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, "rollout.step");
  c = r.Step(60 * kS, WithErrors(3000, 30), WithErrors(1000, 20));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, "rollout.step");
  EXPECT_EQ(r.errors_so_far().canary_requests, 1050);
  EXPECT_EQ(r.errors_so_far().stable_errors, 40);
  // Each evaluation sees its step's window so far; only the last counts.
  EXPECT_TRUE(
      r.Step(70 * kS, WithErrors(1000, 10), WithErrors(1000, 20)).empty());
  c = r.Step(80 * kS, WithErrors(1500, 15), WithErrors(1500, 30));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].kind, "rollout.rolled_back") << c[0].message;
  EXPECT_THAT(c[0].message, HasSubstr("51 of 2550"));
  EXPECT_THAT(c[0].message, HasSubstr("at look 3"));
  EXPECT_EQ(r.errors_so_far().canary_requests, 2550);
  // The window alone (30 of 1500 vs 15 of 1500) is not evidence.
  EXPECT_EQ(Analyze(spec.analysis, WithErrors(1500, 15), WithErrors(1500, 30))
                .verdict,
            Verdict::kPass);
  // Retry starts the count over.
  ASSERT_TRUE(r.Retry(90 * kS).ok());
  EXPECT_EQ(r.errors_so_far().canary_requests, 0);
  EXPECT_EQ(r.error_looks(), 0);
}

TEST(RolloutTest, LooksComeAsTheCanaryDoubles) {
  config::RolloutSpec spec = Spec();
  spec.steps = {{10, 1000, false}, {50, 30, false}};
  Rollout r(spec, 0);
  // minRequests 10: looks at 10, then 20 or more, 40 or more...
  const std::vector<std::pair<int, int>> want = {
      {5, 0}, {10, 1}, {15, 1}, {19, 1}, {25, 2}, {49, 2}, {50, 3}, {100, 4}};
  int t = 0;
  for (const auto& [n, looks] : want) {
    r.Step(++t * kS, Samples(100, 0.1), Samples(n, 0.1));
    EXPECT_EQ(r.error_looks(), looks) << n << " canary requests";
  }
  // The checks name their look; the held ones keep theirs.
  r.Step(++t * kS, Samples(100, 0.1), Samples(150, 0.1));
  const Check* e = Find(r.last_analysis(), "errors");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->look, 4);
  EXPECT_EQ(e->n_canary, 100);
}

TEST(RolloutTest, AnIdenticalCanaryIsRarelyRolledBackOnErrors) {
  // 200 rollouts of a canary failing 1% like its stable (40 requests/s),
  // judged every 1 s over three steps (180 evaluations each): the looks
  // keep the rollbacks within 1 - confidence (at most 2 of 200 expected,
  // up to 6 allowed for the draw), where judging the window every 5 s at
  // the full 0.01 rolls back more often.
  config::RolloutSpec spec = Spec();
  spec.analysis.max_ttft_ratio = spec.analysis.max_e2e_ratio = 0;
  spec.steps = {{5, 60, false}, {25, 60, false}, {50, 60, false}};
  const uint64_t seed = 11;
  Rng rng(seed);
  int back = 0, naive = 0;
  for (int run = 0; run < 200; ++run) {
    Rollout r(spec, 0);
    VersionWindow s, c;
    bool naive_failed = false;
    for (int t = 1; t <= 180 && !r.done(); ++t) {
      const int weight = r.canary_weight();
      for (int i = 0; i < 40; ++i) {
        const bool to_canary = rng.UniformDouble() * 100 < weight;
        // Counts only (the latency checks are off): no samples to sort.
        VersionWindow& w = to_canary ? c : s;
        ++w.requests;
        w.errors += rng.UniformDouble() < 0.01;
      }
      const int step = r.step();
      r.Step(t * kS, s, c);
      if (t % 5 == 0) {
        naive_failed |= Analyze(spec.analysis, s, c).verdict == Verdict::kFail;
      }
      if (r.step() != step) s = c = VersionWindow();  // the next window
    }
    back += r.phase() == RolloutPhase::kRolledBack;
    naive += naive_failed;
  }
  EXPECT_LE(back, 6) << "seed " << seed;
  EXPECT_GT(naive, back) << "seed " << seed;
}

TEST(RolloutTest, InconclusiveHoldsTheStepAndSaysSoOnce) {
  Rollout r(Spec(), 0);
  const VersionWindow few = Samples(3, 0.1);
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
  const VersionWindow good = Samples(20, 0.1);
  EXPECT_TRUE(r.Step(100 * kS, good, good).empty());  // waits for promote
  ASSERT_TRUE(r.Pause(100 * kS).ok());
  EXPECT_FALSE(r.Pause(100 * kS).ok());
  // A failing analysis rolls back even while paused.
  Rollout paused(Spec(), 0);
  ASSERT_TRUE(paused.Pause(1 * kS).ok());
  EXPECT_EQ(paused.Step(2 * kS, good, Samples(20, 1))[0].kind,
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
  const VersionWindow good = Samples(20, 0.1);
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
  // The errors judged so far and the looks travel with the state.
  Rollout e(Spec(), 0);
  e.Step(30 * kS, WithErrors(200, 2), WithErrors(40, 1));
  e.Step(40 * kS, WithErrors(50, 1), WithErrors(30, 0));
  back = Rollout::Restore(Spec(), e.State(), 500 * kS);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->errors_so_far().canary_requests, 70);
  EXPECT_EQ(back->errors_so_far().canary_errors, 1);
  EXPECT_EQ(back->errors_so_far().stable_requests, 250);
  EXPECT_EQ(back->error_looks(), e.error_looks());
  nlohmann::json bad = e.State();
  bad["errorsSoFar"]["canaryErrors"] = 100;
  EXPECT_FALSE(Rollout::Restore(Spec(), bad, 0).ok());
  bad = e.State();
  bad["errorsSoFar"]["looks"] = -1;
  EXPECT_THAT(std::string(Rollout::Restore(Spec(), bad, 0).status().message()),
              HasSubstr("errorsSoFar.looks"));
}

}  // namespace
}  // namespace gpusched::control
