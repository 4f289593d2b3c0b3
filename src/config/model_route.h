// `kind: ModelRoute`: a public model name that routes to several
// deployments (its versions) by weight, optionally with a canary rollout
// that moves the weight step by step and promotes or rolls back on what
// the gateway measures (control/rollout.h). docs/versions.md explains it.
// Every field, with its default:
//
//   apiVersion: gpusched.io/v1
//   kind: ModelRoute
//   metadata:
//     name: chat                     # the public model name clients send;
//                                    #   not also a deployment's name
//   spec:
//     targets:                       # required, 1..kMaxRouteTargets
//       - deployment: chat-v1        #   required: a Deployment
//         version: "1"               #   KServe /versions/{v} and the
//                                    #   `version` metric label; default:
//                                    #   the deployment's name
//         weight: 100                #   0..100; the weights add up to 100.
//                                    #   Without a rollout: required when
//                                    #   there are several targets (one
//                                    #   target: 100). With a rollout: left
//                                    #   out, the rollout sets them
//     sticky: none                   # none | session | tenant: one session
//                                    #   (X-Gpusched-Session, else the
//                                    #   OpenAI `user` field) or one tenant
//                                    #   stays on one version while the
//                                    #   weights stand; a weight change
//                                    #   moves only the keys it must
//     shadow:                        # optional: copies of requests
//       deployment: chat-v3          #   required: a Deployment, not a target
//       percent: 10                  #   1..100: the share of the route's
//                                    #   requests copied there; the copies'
//                                    #   answers are discarded, their
//                                    #   latencies measured (its metrics)
//     rollout:                       # optional: a canary rollout
//       canary: chat-v2              #   required: a target's deployment;
//                                    #   the other target is the stable
//       steps:                       #   1..kMaxRolloutSteps, weights rising
//         - weight: 5                #   1..100: the canary's share
//           pauseS: 60               #   at least this long at the step
//                                    #   (0..86400); the step ends when its
//                                    #   analysis passes after it
//           manual: false            #   true: wait for `rollout promote`
//                                    #   default steps: 5, 25, 50 (60 s each);
//                                    #   after the last, the canary gets 100
//       analysis:                    #   docs/versions.md, "The analysis"
//         windowS: 60                #   the comparison looks at the last
//                                    #   windowS of the step (1..3600)
//         minRequests: 20            #   per version in the window before a
//                                    #   verdict (1..1000000); the latency
//                                    #   tests also need what the confidence
//                                    #   needs (at least 10 a version)
//         confidence: 0.99           #   of every test (0.5..0.9999): a check
//                                    #   fails only on a p-value below
//                                    #   1 - confidence
//         percentile: 95             #   of TTFT and end-to-end latency
//         maxTtftRatio: 1.25         #   canary / stable percentile TTFT: the
//         maxE2eRatio: 1.25          #   effect size a significantly slower
//                                    #   canary must exceed (0..1000; 0:
//                                    #   not checked)
//         slackMs: 10                #   a percentile difference up to this
//                                    #   never fails (0..60000)
//         maxTtftMs: 0               #   absolute caps on the canary's
//         maxE2eMs: 0                #   percentiles; 0: not checked
//         maxErrorRate: 0.05         #   canary error share (0..1): fails
//                                    #   when significantly above it
//         maxErrorRatio: 1.5         #   canary / stable error rate, when
//                                    #   significantly above the stable's
//                                    #   (0..1000; 0: not checked)
//         minSloAttainment: 0        #   share of canary requests within the
//                                    #   canary deployment's spec.slo.ttftMs
//                                    #   (0..1; 0: not checked): fails when
//                                    #   significantly below it
//       scaleDownStable: true        #   after promotion the stable's
//                                    #   replicas stop (it keeps its spec; a
//                                    #   new rollout or deleting the route
//                                    #   starts them again)
// Bounds: kMaxRouteTargets targets, kMaxRolloutSteps steps; a route may
// not name itself or another route (no cycles: targets are deployments).
// Thread-compatible value types.
#ifndef GPUSCHED_CONFIG_MODEL_ROUTE_H_
#define GPUSCHED_CONFIG_MODEL_ROUTE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace gpusched::config {

inline constexpr int kMaxRouteTargets = 8;
inline constexpr int kMaxRolloutSteps = 16;

struct RouteTargetSpec {
  std::string deployment;
  std::string version;  // "" until defaulted: the deployment's name
  int weight = -1;      // -1: not given
  bool operator==(const RouteTargetSpec&) const = default;
};

struct RolloutStepSpec {
  int weight = 0;
  double pause_s = 60;
  bool manual = false;
  bool operator==(const RolloutStepSpec&) const = default;
};

struct AnalysisSpec {
  double window_s = 60;
  int64_t min_requests = 20;
  double confidence = 0.99;
  double percentile = 95;
  double max_ttft_ratio = 1.25;
  double max_e2e_ratio = 1.25;
  double max_ttft_ms = 0;
  double max_e2e_ms = 0;
  double slack_ms = 10;
  double max_error_rate = 0.05;
  double max_error_ratio = 1.5;
  double min_slo_attainment = 0;
  bool operator==(const AnalysisSpec&) const = default;
};

struct RolloutSpec {
  std::string canary;
  // A third target that runs the stable's version, sized as the canary
  // ("": none). It gets the canary's share (up to 50%) while the rollout
  // runs, and the analysis compares the canary with it instead of the
  // stable, so both are measured at the same load (Kayenta's baseline).
  std::string baseline;
  std::vector<RolloutStepSpec> steps;  // empty until defaulted
  AnalysisSpec analysis;
  bool scale_down_stable = true;
  bool operator==(const RolloutSpec&) const = default;
};

struct ShadowSpec {
  std::string deployment;
  int percent = 0;
  bool operator==(const ShadowSpec&) const = default;
};

struct ModelRouteSpec {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<RouteTargetSpec> targets;
  std::string sticky = "none";  // none | session | tenant
  std::optional<RolloutSpec> rollout;
  std::optional<ShadowSpec> shadow;
  bool operator==(const ModelRouteSpec&) const = default;

  // The rollout's stable deployment ("" without a rollout or when no
  // target other than the canary and the baseline exists).
  std::string Stable() const;
  // The targets' weights, in target order, while a rollout gives its canary
  // `canary_weight`: the baseline (if any) min(canary, 100 - canary), the
  // stable the rest. Without a rollout: the targets' own weights.
  std::vector<int> RolloutWeights(int canary_weight) const;
};

// The default rollout steps (5, 25, 50 % for 60 s each).
std::vector<RolloutStepSpec> DefaultRolloutSteps();

// Fills defaults (versions, one target's weight, the rollout's steps) and
// appends one message per problem ("spec.targets[1].weight: ...") to
// `problems`: weights that do not add up to 100, a version or deployment
// named twice, a rollout whose canary is not a target or that has no
// stable, steps whose weights do not rise. Deployments and other routes are
// checked by the runtime, which knows them (runtime/controller.h).
void CheckModelRoute(ModelRouteSpec* r, std::vector<std::string>* problems);

// The spec part of the canonical JSON (config::ToJson).
nlohmann::json ModelRouteSpecJson(const ModelRouteSpec& r);

}  // namespace gpusched::config

#endif  // GPUSCHED_CONFIG_MODEL_ROUTE_H_
