#include "config/model_route.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "config/manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::config {
namespace {

using ::testing::HasSubstr;

constexpr char kHead[] =
    "apiVersion: gpusched.io/v1\nkind: ModelRoute\nmetadata: {name: chat}\n"
    "spec:\n";

TEST(ModelRouteTest, ParsesEveryFieldAndRoundTrips) {
  const std::string text = std::string(kHead) + R"(  sticky: session
  targets:
    - {deployment: chat-v1, version: "1"}
    - {deployment: chat-v2, version: "2"}
  shadow: {deployment: chat-v3, percent: 10}
  rollout:
    canary: chat-v2
    steps:
      - {weight: 10, pauseS: 30}
      - {weight: 50, pauseS: 0, manual: true}
    analysis: {windowS: 20, minRequests: 5, percentile: 90, maxTtftRatio: 2,
               maxE2eRatio: 0, maxTtftMs: 500, maxE2eMs: 4000,
               maxErrorRate: 0.1, minSloAttainment: 0.9, confidence: 0.95,
               slackMs: 25, maxErrorRatio: 3}
    scaleDownStable: false
)";
  auto got = ParseManifests(text, "r.yaml");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  const Manifest& m = got->front();
  ASSERT_EQ(m.kind, Manifest::Kind::kModelRoute);
  EXPECT_EQ(m.name(), "chat");
  const ModelRouteSpec& r = m.route;
  EXPECT_EQ(r.sticky, "session");
  ASSERT_EQ(r.targets.size(), 2u);
  EXPECT_EQ(r.targets[1].version, "2");
  EXPECT_EQ(r.targets[1].weight, -1);
  ASSERT_TRUE(r.rollout);
  EXPECT_EQ(r.Stable(), "chat-v1");
  ASSERT_EQ(r.rollout->steps.size(), 2u);
  EXPECT_EQ(r.rollout->steps[0].weight, 10);
  EXPECT_EQ(r.rollout->steps[0].pause_s, 30);
  EXPECT_TRUE(r.rollout->steps[1].manual);
  EXPECT_EQ(r.rollout->analysis.min_requests, 5);
  EXPECT_EQ(r.rollout->analysis.max_ttft_ms, 500);
  EXPECT_EQ(r.rollout->analysis.min_slo_attainment, 0.9);
  EXPECT_EQ(r.rollout->analysis.confidence, 0.95);
  EXPECT_EQ(r.rollout->analysis.slack_ms, 25);
  EXPECT_EQ(r.rollout->analysis.max_error_ratio, 3);
  EXPECT_FALSE(r.rollout->scale_down_stable);
  ASSERT_TRUE(r.shadow);
  EXPECT_EQ(r.shadow->deployment, "chat-v3");
  EXPECT_EQ(r.shadow->percent, 10);
  auto back = ManifestFromJson(ToJson(m), "json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, m);
}

TEST(ModelRouteTest, Defaults) {
  auto got = ParseManifests(
      std::string(kHead) + "  targets: [{deployment: chat-v1}]\n", "r.yaml");
  ASSERT_TRUE(got.ok()) << got.status();
  const ModelRouteSpec& r = got->front().route;
  EXPECT_EQ(r.sticky, "none");
  EXPECT_EQ(r.targets[0].version, "chat-v1");
  EXPECT_EQ(r.targets[0].weight, 100);
  EXPECT_FALSE(r.rollout);

  auto ro = ParseManifests(std::string(kHead) +
                               "  targets: [{deployment: a}, {deployment: b}]\n"
                               "  rollout: {canary: b}\n",
                           "r.yaml");
  ASSERT_TRUE(ro.ok()) << ro.status();
  const RolloutSpec& s = *ro->front().route.rollout;
  EXPECT_EQ(s.steps, DefaultRolloutSteps());
  EXPECT_EQ(s.analysis, AnalysisSpec{});
  EXPECT_EQ(s.analysis.confidence, 0.99);
  EXPECT_EQ(s.analysis.slack_ms, 10);
  EXPECT_EQ(s.analysis.max_error_ratio, 1.5);
  EXPECT_TRUE(s.scale_down_stable);
}

TEST(ModelRouteTest, RejectsBadRoutes) {
  struct Case {
    std::string spec;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"  targets: []\n", "spec.targets: must be a list of 1..8 targets"},
      {"  sticky: user\n  targets: [{deployment: a}]\n",
       "spec.sticky: must be none, session or tenant, got 'user'"},
      {"  targets: [{deployment: a, weight: 60}, {deployment: b, weight: "
       "30}]\n",
       "spec.targets: the weights must add up to 100, got 90"},
      {"  targets: [{deployment: a, weight: 60}, {deployment: b}]\n",
       "spec.targets[1].weight: required with several targets"},
      {"  targets: [{deployment: a, weight: 101}]\n",
       "spec.targets[0].weight: must be an integer in 0..100"},
      {"  targets: [{deployment: chat}]\n",
       "spec.targets[0].deployment: the route cannot target its own name"},
      {"  targets: [{deployment: a, weight: 50}, {deployment: a, weight: "
       "50}]\n",
       "spec.targets[1].deployment: 'a' is targeted twice"},
      {"  targets: [{deployment: a, version: x, weight: 50}, {deployment: b, "
       "version: x, weight: 50}]\n",
       "spec.targets[1].version: 'x' is used twice"},
      {"  targets: [{deployment: a}, {deployment: b}]\n"
       "  rollout: {canary: c}\n",
       "spec.rollout.canary: 'c' is not one of spec.targets"},
      {"  targets: [{deployment: a}]\n  rollout: {canary: a}\n",
       "spec.rollout: a rollout needs exactly two targets, the stable and the "
       "canary (or three with spec.rollout.baseline); got 1 (no stable "
       "version)"},
      {"  targets: [{deployment: a}, {deployment: b}, {deployment: c}]\n"
       "  rollout: {canary: b}\n",
       "spec.rollout: a rollout needs exactly two targets, the stable and the "
       "canary (or three with spec.rollout.baseline); got 3"},
      {"  targets: [{deployment: a}, {deployment: b}]\n"
       "  rollout: {canary: b, baseline: c}\n",
       "spec.rollout.baseline: 'c' is not one of spec.targets"},
      {"  targets: [{deployment: a}, {deployment: b}]\n"
       "  rollout: {canary: b, baseline: b}\n",
       "spec.rollout.baseline: 'b' is the canary"},
      {"  targets: [{deployment: a}, {deployment: b}]\n"
       "  rollout: {canary: b, baseline: a}\n",
       "spec.rollout: a rollout with a baseline needs exactly three targets, "
       "the stable, the canary and the baseline; got 2"},
      {"  targets: [{deployment: a, weight: 100}, {deployment: b}]\n"
       "  rollout: {canary: b}\n",
       "spec.targets[0].weight: set by spec.rollout; leave it out"},
      {"  targets: [{deployment: a}, {deployment: b}]\n"
       "  rollout: {canary: b, steps: [{weight: 50}, {weight: 20}]}\n",
       "spec.rollout.steps[1].weight: must rise (20 after 50)"},
      {"  targets: [{deployment: a}, {deployment: b}]\n"
       "  rollout: {canary: b, analysis: {maxErrorRate: 2}}\n",
       "spec.rollout.analysis.maxErrorRate: must be in 0..1, got 2"},
      {"  targets: [{deployment: a}, {deployment: b}]\n"
       "  rollout: {canary: b, analysis: {confidence: 1}}\n",
       "spec.rollout.analysis.confidence: must be in 0.5..0.9999, got 1"},
      {"  targets: [{deployment: a}, {deployment: b}]\n"
       "  rollout: {canary: b, analysis: {confidence: 0.2}}\n",
       "spec.rollout.analysis.confidence: must be a number >= 0.5"},
      {"  targets: [{deployment: a}, {deployment: b}]\n"
       "  rollout: {canary: b, analysis: {slackMs: -1}}\n",
       "spec.rollout.analysis.slackMs: must be a number >= 0"},
      {"  targets: [{deployment: a}, {deployment: b}]\n"
       "  rollout: {canary: b, analysis: {maxErrorRatio: 5000}}\n",
       "spec.rollout.analysis.maxErrorRatio: must be in 0..1000, got 5000"},
      {"  targets: [{deployment: a}, {deployment: b}]\n"
       "  rollout: {canary: b, steps: [{pauseS: 5}]}\n",
       "spec.rollout.steps[0].weight: required"},
      {"  targets: [{deployment: a}]\n  shadow: {deployment: a, percent: 5}\n",
       "spec.shadow.deployment: 'a' is a target"},
      {"  targets: [{deployment: a}]\n  shadow: {deployment: b, percent: 0}\n",
       "spec.shadow.percent: must be an integer in 1..100"},
      {"  targets: [{deployment: a, colour: red}]\n",
       "unknown field 'colour' in spec.targets[0]"},
  };
  for (const Case& c : cases) {
    auto got = ParseManifests(std::string(kHead) + c.spec, "r.yaml");
    ASSERT_FALSE(got.ok()) << c.spec;
    EXPECT_THAT(got.status().message(), HasSubstr(c.error)) << c.spec;
  }
  std::string many = std::string(kHead) + "  targets:\n";
  for (int i = 0; i < kMaxRouteTargets + 1; ++i) {
    many += "    - {deployment: d" + std::to_string(i) + "}\n";
  }
  auto got = ParseManifests(many, "r.yaml");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(),
              HasSubstr("spec.targets: at most 8 targets, got 9"));
}

// With a baseline, the canary and the baseline get the same share up to 50%,
// the stable the rest; without, the stable gets all the canary does not.
TEST(ModelRouteTest, RolloutWeightsGiveTheBaselineTheCanarysShare) {
  auto got =
      ParseManifests(std::string(kHead) +
                         "  targets: [{deployment: base}, {deployment: v1}, "
                         "{deployment: v2}]\n"
                         "  rollout: {canary: v2, baseline: base}\n",
                     "r.yaml");
  ASSERT_TRUE(got.ok()) << got.status();
  const ModelRouteSpec& r = got->front().route;
  EXPECT_EQ(r.Stable(), "v1");
  EXPECT_EQ(r.rollout->baseline, "base");
  EXPECT_EQ(r.RolloutWeights(0), (std::vector<int>{0, 100, 0}));
  EXPECT_EQ(r.RolloutWeights(5), (std::vector<int>{5, 90, 5}));
  EXPECT_EQ(r.RolloutWeights(50), (std::vector<int>{50, 0, 50}));
  EXPECT_EQ(r.RolloutWeights(75), (std::vector<int>{25, 0, 75}));
  EXPECT_EQ(r.RolloutWeights(100), (std::vector<int>{0, 0, 100}));
  EXPECT_EQ(ModelRouteSpecJson(r)["rollout"]["baseline"], "base");

  auto plain = ParseManifests(std::string(kHead) +
                                  "  targets: [{deployment: v1}, "
                                  "{deployment: v2}]\n"
                                  "  rollout: {canary: v2}\n",
                              "r.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->front().route.RolloutWeights(5), (std::vector<int>{95, 5}));
  // No baseline: the canonical JSON has no key for it (stored routes keep
  // their generation).
  EXPECT_FALSE(
      ModelRouteSpecJson(plain->front().route)["rollout"].contains("baseline"));
}

// A cross-field problem points at the list item it is about, not at the
// list's parent.
TEST(ModelRouteTest, ProblemsOfAListItemNameItsLine) {
  const std::string text = std::string(kHead) + R"(  targets:
    - {deployment: chat-v1}
    - {deployment: chat-v2}
  rollout:
    canary: chat-v2
    steps:
      - {weight: 50}
      - {weight: 20}
)";
  auto got = ParseManifests(text, "r.yaml");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(),
              HasSubstr("r.yaml:12: spec.rollout.steps[1].weight: must rise "
                        "(20 after 50)"));
}

TEST(ModelRouteTest, TheShippedExampleParses) {
  std::ifstream f(GPUSCHED_SOURCE_DIR "/examples/versions.yaml");
  std::stringstream text;
  text << f.rdbuf();
  auto got = ParseManifests(text.str(), "examples/versions.yaml");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 4u);
  EXPECT_EQ((*got)[2].kind, Manifest::Kind::kModelRoute);
  EXPECT_EQ((*got)[2].route.Stable(), "chat-v1");
  // The tenant that may use the route lists its public name.
  ASSERT_EQ((*got)[3].kind, Manifest::Kind::kTenant);
  EXPECT_THAT((*got)[3].tenant.models, ::testing::Contains("assistant"));
}

}  // namespace
}  // namespace gpusched::config
