#include "config/model_route.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "config/spec_reader.h"

namespace gpusched::config {

std::string ModelRouteSpec::Stable() const {
  if (!rollout) return "";
  for (const RouteTargetSpec& t : targets) {
    if (t.deployment != rollout->canary && t.deployment != rollout->baseline)
      return t.deployment;
  }
  return "";
}

std::vector<int> ModelRouteSpec::RolloutWeights(int canary_weight) const {
  std::vector<int> w;
  const int baseline = rollout && !rollout->baseline.empty()
                           ? std::min(canary_weight, 100 - canary_weight)
                           : 0;
  for (const RouteTargetSpec& t : targets) {
    if (!rollout) {
      w.push_back(t.weight);
    } else if (t.deployment == rollout->canary) {
      w.push_back(canary_weight);
    } else if (t.deployment == rollout->baseline) {
      w.push_back(baseline);
    } else {
      w.push_back(100 - canary_weight - baseline);
    }
  }
  return w;
}

std::vector<RolloutStepSpec> DefaultRolloutSteps() {
  return {{5, 60, false}, {25, 60, false}, {50, 60, false}};
}

namespace {

std::string At(const std::string& path, size_t i) {
  return absl::StrCat(path, "[", i, "]");
}

}  // namespace

// A number in lo..hi at `n`.
bool SpecReader::Bounded(const YAML::Node& n, const std::string& path,
                         double lo, double hi, double* out) {
  double v = 0;
  if (!Number(n, path, lo, false, &v)) return false;
  if (v > hi) {
    Fail(n, path, absl::StrCat("must be in ", lo, "..", hi, ", got ", v));
    return false;
  }
  *out = v;
  return true;
}

void SpecReader::ReadModelRoute(const YAML::Node& spec, const YAML::Node& at,
                                ModelRouteSpec* r,
                                const std::vector<absl::string_view>& extra) {
  const std::string path = "spec";
  if (!spec) {
    Fail(at, "spec.targets", "required: the deployments the name routes to");
    return;
  }
  if (!Map(spec, path)) return;
  std::vector<absl::string_view> keys = {"targets", "sticky", "rollout",
                                         "shadow"};
  keys.insert(keys.end(), extra.begin(), extra.end());
  CheckKeys(spec, path, keys);
  if (const YAML::Node n = spec["sticky"]) String(n, "spec.sticky", &r->sticky);
  if (const YAML::Node t = spec["targets"]; !t) {
    Fail(spec, "spec.targets", "required: the deployments the name routes to");
  } else if (!t.IsSequence() || t.size() == 0) {
    Fail(t, "spec.targets",
         absl::StrCat("must be a list of 1..", kMaxRouteTargets,
                      " targets, got ", YamlType(t)));
  } else if (t.size() > static_cast<size_t>(kMaxRouteTargets)) {
    Fail(
        t, "spec.targets",
        absl::StrCat("at most ", kMaxRouteTargets, " targets, got ", t.size()));
  } else {
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string p = At("spec.targets", i);
      if (!Map(t[i], p)) continue;
      CheckKeys(t[i], p, {"deployment", "version", "weight"});
      RouteTargetSpec target;
      if (const YAML::Node n = t[i]["deployment"]; !n) {
        Fail(t[i], p + ".deployment", "required: a Deployment's name");
      } else {
        ReadName(t[i], "deployment", p + ".deployment", &target.deployment);
      }
      if (const YAML::Node n = t[i]["version"]) {
        String(n, p + ".version", &target.version);
      }
      if (const YAML::Node n = t[i]["weight"]) {
        Int(n, p + ".weight", 0, 100, &target.weight);
      }
      r->targets.push_back(std::move(target));
    }
  }
  if (const YAML::Node sh = spec["shadow"]; sh && Map(sh, "spec.shadow")) {
    CheckKeys(sh, "spec.shadow", {"deployment", "percent"});
    ShadowSpec shadow;
    if (!sh["deployment"]) {
      Fail(sh, "spec.shadow.deployment", "required: a Deployment's name");
    } else {
      ReadName(sh, "deployment", "spec.shadow.deployment", &shadow.deployment);
    }
    if (const YAML::Node n = sh["percent"]; !n) {
      Fail(sh, "spec.shadow.percent", "required: 1..100");
    } else {
      Int(n, "spec.shadow.percent", 1, 100, &shadow.percent);
    }
    r->shadow = std::move(shadow);
  }
  const YAML::Node ro = spec["rollout"];
  if (!ro) return;
  const std::string rp = "spec.rollout";
  if (!Map(ro, rp)) return;
  CheckKeys(ro, rp,
            {"canary", "baseline", "steps", "analysis", "scaleDownStable"});
  RolloutSpec rollout;
  if (const YAML::Node n = ro["canary"]; !n) {
    Fail(ro, rp + ".canary", "required: the target deployment to roll out");
  } else {
    ReadName(ro, "canary", rp + ".canary", &rollout.canary);
  }
  if (ro["baseline"]) {
    ReadName(ro, "baseline", rp + ".baseline", &rollout.baseline);
  }
  if (const YAML::Node n = ro["scaleDownStable"]) {
    Bool(n, rp + ".scaleDownStable", &rollout.scale_down_stable);
  }
  if (const YAML::Node s = ro["steps"]) {
    const std::string sp = rp + ".steps";
    if (!s.IsSequence() || s.size() == 0 ||
        s.size() > static_cast<size_t>(kMaxRolloutSteps)) {
      Fail(
          s, sp,
          absl::StrCat(
              "must be a list of 1..", kMaxRolloutSteps, " steps, got ",
              s.IsSequence() ? absl::StrCat(s.size(), " items") : YamlType(s)));
    } else {
      for (size_t i = 0; i < s.size(); ++i) {
        const std::string p = At(sp, i);
        if (!Map(s[i], p)) continue;
        CheckKeys(s[i], p, {"weight", "pauseS", "manual"});
        RolloutStepSpec step;
        if (const YAML::Node n = s[i]["weight"]; !n) {
          Fail(s[i], p + ".weight", "required: the canary's share, 1..100");
        } else {
          Int(n, p + ".weight", 1, 100, &step.weight);
        }
        if (const YAML::Node n = s[i]["pauseS"]) {
          Bounded(n, p + ".pauseS", 0, 86400, &step.pause_s);
        }
        if (const YAML::Node n = s[i]["manual"]) {
          Bool(n, p + ".manual", &step.manual);
        }
        rollout.steps.push_back(step);
      }
    }
  }
  if (const YAML::Node a = ro["analysis"]) {
    const std::string ap = rp + ".analysis";
    if (Map(a, ap)) {
      AnalysisSpec& an = rollout.analysis;
      CheckKeys(
          a, ap,
          {"windowS", "minRequests", "confidence", "percentile", "maxTtftRatio",
           "maxE2eRatio", "slackMs", "maxTtftMs", "maxE2eMs", "maxErrorRate",
           "maxErrorRatio", "minSloAttainment"});
      auto num = [&](const char* key, double lo, double hi, double* out) {
        if (const YAML::Node n = a[key])
          Bounded(n, ap + "." + key, lo, hi, out);
      };
      num("windowS", 1, 3600, &an.window_s);
      if (const YAML::Node n = a["minRequests"]) {
        Int(n, ap + ".minRequests", 1, 1000000, &an.min_requests);
      }
      num("confidence", 0.5, 0.9999, &an.confidence);
      num("percentile", 1, 100, &an.percentile);
      num("maxTtftRatio", 0, 1000, &an.max_ttft_ratio);
      num("maxE2eRatio", 0, 1000, &an.max_e2e_ratio);
      num("slackMs", 0, 60000, &an.slack_ms);
      num("maxTtftMs", 0, 86400000, &an.max_ttft_ms);
      num("maxE2eMs", 0, 86400000, &an.max_e2e_ms);
      num("maxErrorRate", 0, 1, &an.max_error_rate);
      num("maxErrorRatio", 0, 1000, &an.max_error_ratio);
      num("minSloAttainment", 0, 1, &an.min_slo_attainment);
    }
  }
  r->rollout = std::move(rollout);
}

void CheckModelRoute(ModelRouteSpec* r, std::vector<std::string>* problems) {
  if (r->sticky != "none" && r->sticky != "session" && r->sticky != "tenant") {
    problems->push_back(absl::StrCat(
        "spec.sticky: must be none, session or tenant, got '", r->sticky, "'"));
  }
  std::set<std::string> deployments, versions;
  int sum = 0, given = 0;
  for (size_t i = 0; i < r->targets.size(); ++i) {
    RouteTargetSpec& t = r->targets[i];
    const std::string p = At("spec.targets", i);
    if (t.version.empty()) t.version = t.deployment;
    if (t.deployment == r->name && !t.deployment.empty()) {
      problems->push_back(
          absl::StrCat(p, ".deployment: the route cannot target its own name"));
    }
    if (!t.deployment.empty() && !deployments.insert(t.deployment).second) {
      problems->push_back(absl::StrCat(p, ".deployment: '", t.deployment,
                                       "' is targeted twice"));
    }
    if (!t.version.empty() && !versions.insert(t.version).second) {
      problems->push_back(
          absl::StrCat(p, ".version: '", t.version, "' is used twice"));
    }
    if (t.version.size() > 63 || !ValidObjectName(t.version)) {
      if (!t.version.empty()) {
        problems->push_back(absl::StrCat(
            p, ".version: must be 1..63 of [a-z0-9.-], got '", t.version, "'"));
      }
    }
    if (t.weight >= 0) {
      sum += t.weight;
      ++given;
    }
  }
  if (r->shadow && deployments.contains(r->shadow->deployment)) {
    problems->push_back(
        absl::StrCat("spec.shadow.deployment: '", r->shadow->deployment,
                     "' is a target; a shadow gets copies, not a share"));
  }
  if (!r->rollout) {
    if (r->targets.size() == 1 && given == 0) {
      r->targets[0].weight = 100;
    } else if (!r->targets.empty() &&
               given < static_cast<int>(r->targets.size())) {
      for (size_t i = 0; i < r->targets.size(); ++i) {
        if (r->targets[i].weight < 0) {
          problems->push_back(absl::StrCat(
              At("spec.targets", i),
              ".weight: required with several targets (the weights add up "
              "to 100)"));
        }
      }
    } else if (!r->targets.empty() && sum != 100) {
      problems->push_back(absl::StrCat(
          "spec.targets: the weights must add up to 100, got ", sum));
    }
    return;
  }
  RolloutSpec& ro = *r->rollout;
  if (given > 0) {
    for (size_t i = 0; i < r->targets.size(); ++i) {
      if (r->targets[i].weight >= 0) {
        problems->push_back(
            absl::StrCat(At("spec.targets", i),
                         ".weight: set by spec.rollout; leave it out"));
      }
    }
  }
  if (!ro.canary.empty() && !deployments.contains(ro.canary)) {
    problems->push_back(absl::StrCat("spec.rollout.canary: '", ro.canary,
                                     "' is not one of spec.targets"));
  } else if (!ro.baseline.empty() && !deployments.contains(ro.baseline)) {
    problems->push_back(absl::StrCat("spec.rollout.baseline: '", ro.baseline,
                                     "' is not one of spec.targets"));
  } else if (!ro.baseline.empty() && ro.baseline == ro.canary) {
    problems->push_back(absl::StrCat("spec.rollout.baseline: '", ro.baseline,
                                     "' is the canary; the baseline runs the "
                                     "stable's version"));
  } else if (!ro.canary.empty() && ro.baseline.empty() &&
             r->targets.size() != 2) {
    problems->push_back(absl::StrCat(
        "spec.rollout: a rollout needs exactly two targets, the stable and "
        "the canary (or three with spec.rollout.baseline); got ",
        r->targets.size(),
        r->targets.size() == 1 ? " (no stable version)" : ""));
  } else if (!ro.canary.empty() && !ro.baseline.empty() &&
             r->targets.size() != 3) {
    problems->push_back(absl::StrCat(
        "spec.rollout: a rollout with a baseline needs exactly three targets, "
        "the stable, the canary and the baseline; got ",
        r->targets.size()));
  }
  if (ro.steps.empty()) ro.steps = DefaultRolloutSteps();
  for (size_t i = 1; i < ro.steps.size(); ++i) {
    if (ro.steps[i].weight <= ro.steps[i - 1].weight) {
      problems->push_back(absl::StrCat(
          At("spec.rollout.steps", i), ".weight: must rise (",
          ro.steps[i].weight, " after ", ro.steps[i - 1].weight, ")"));
    }
  }
}

nlohmann::json ModelRouteSpecJson(const ModelRouteSpec& r) {
  using nlohmann::json;
  json targets = json::array();
  for (const RouteTargetSpec& t : r.targets) {
    json j = {{"deployment", t.deployment}, {"version", t.version}};
    if (t.weight >= 0) j["weight"] = t.weight;
    targets.push_back(std::move(j));
  }
  json out = {{"targets", std::move(targets)}, {"sticky", r.sticky}};
  if (r.shadow) {
    out["shadow"] = {{"deployment", r.shadow->deployment},
                     {"percent", r.shadow->percent}};
  }
  if (r.rollout) {
    const RolloutSpec& ro = *r.rollout;
    json steps = json::array();
    for (const RolloutStepSpec& s : ro.steps) {
      steps.push_back(
          {{"weight", s.weight}, {"pauseS", s.pause_s}, {"manual", s.manual}});
    }
    const AnalysisSpec& a = ro.analysis;
    out["rollout"] = {
        {"canary", ro.canary},
        {"steps", std::move(steps)},
        {"analysis",
         {{"windowS", a.window_s},
          {"minRequests", a.min_requests},
          {"confidence", a.confidence},
          {"percentile", a.percentile},
          {"maxTtftRatio", a.max_ttft_ratio},
          {"maxE2eRatio", a.max_e2e_ratio},
          {"slackMs", a.slack_ms},
          {"maxTtftMs", a.max_ttft_ms},
          {"maxE2eMs", a.max_e2e_ms},
          {"maxErrorRate", a.max_error_rate},
          {"maxErrorRatio", a.max_error_ratio},
          {"minSloAttainment", a.min_slo_attainment}}},
        {"scaleDownStable", ro.scale_down_stable},
    };
    if (!ro.baseline.empty()) out["rollout"]["baseline"] = ro.baseline;
  }
  return out;
}

}  // namespace gpusched::config
