#include "control/rollout.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gpusched::control {

using nlohmann::json;

namespace {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(v.size()));
  const size_t i =
      static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size())));
  return v[i - 1];
}

std::string Ms(double s) { return absl::StrFormat("%.0f ms", s * 1000); }

}  // namespace

json VersionFigures::Json() const {
  json j = {{"requests", requests},
            {"errors", errors},
            {"errorRate", error_rate},
            {"ttftSeconds", ttft_s},
            {"e2eSeconds", e2e_s}};
  j["sloAttainment"] =
      slo_attainment < 0 ? json(nullptr) : json(slo_attainment);
  return j;
}

VersionFigures Summarize(const std::vector<VersionSample>& samples,
                         double percentile, double ttft_slo_s) {
  VersionFigures f;
  std::vector<double> ttft, e2e;
  int64_t within = 0;
  for (const VersionSample& s : samples) {
    ++f.requests;
    if (!s.ok) {
      ++f.errors;
      continue;
    }
    ttft.push_back(s.ttft_s);
    e2e.push_back(s.e2e_s);
    if (s.ttft_s <= ttft_slo_s) ++within;
  }
  if (f.requests > 0) {
    f.error_rate = static_cast<double>(f.errors) / f.requests;
  }
  f.ttft_s = Percentile(std::move(ttft), percentile);
  f.e2e_s = Percentile(std::move(e2e), percentile);
  if (ttft_slo_s > 0 && f.requests > 0) {
    f.slo_attainment = static_cast<double>(within) / f.requests;
  }
  return f;
}

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kInconclusive:
      return "inconclusive";
    case Verdict::kPass:
      return "pass";
    case Verdict::kFail:
      return "fail";
  }
  return "?";
}

json Analysis::Json() const {
  return {{"verdict", VerdictName(verdict)},
          {"why", why},
          {"stable", stable.Json()},
          {"canary", canary.Json()}};
}

Analysis Analyze(const config::AnalysisSpec& spec, const VersionFigures& stable,
                 const VersionFigures& canary) {
  Analysis a;
  a.stable = stable;
  a.canary = canary;
  if (canary.requests < spec.min_requests) {
    a.why = absl::StrCat("the canary has ", canary.requests, " of ",
                         spec.min_requests, " requests in the window");
    return a;
  }
  std::vector<std::string> failed, missing;
  if (canary.error_rate > spec.max_error_rate) {
    failed.push_back(
        absl::StrFormat("error rate %.1f%% > %.1f%% (%d of %d requests)",
                        canary.error_rate * 100, spec.max_error_rate * 100,
                        canary.errors, canary.requests));
  }
  const std::string p = absl::StrFormat("p%g", spec.percentile);
  if (spec.max_ttft_ms > 0 && canary.ttft_s * 1000 > spec.max_ttft_ms) {
    failed.push_back(absl::StrCat(p, " TTFT ", Ms(canary.ttft_s), " > ",
                                  spec.max_ttft_ms, " ms"));
  }
  if (spec.max_e2e_ms > 0 && canary.e2e_s * 1000 > spec.max_e2e_ms) {
    failed.push_back(absl::StrCat(p, " end-to-end ", Ms(canary.e2e_s), " > ",
                                  spec.max_e2e_ms, " ms"));
  }
  if (spec.min_slo_attainment > 0 && canary.slo_attainment >= 0 &&
      canary.slo_attainment < spec.min_slo_attainment) {
    failed.push_back(absl::StrFormat("SLO attainment %.1f%% < %.1f%%",
                                     canary.slo_attainment * 100,
                                     spec.min_slo_attainment * 100));
  }
  const bool ratios = spec.max_ttft_ratio > 0 || spec.max_e2e_ratio > 0;
  if (ratios && stable.requests < spec.min_requests) {
    missing.push_back(absl::StrCat("the stable has ", stable.requests, " of ",
                                   spec.min_requests,
                                   " requests in the window"));
  } else {
    auto ratio = [&](const char* what, double c, double s, double max) {
      // A stable that answered in ~0 s: compare against 1 ms.
      const double r = c / std::max(s, 0.001);
      if (max > 0 && r > max) {
        failed.push_back(
            absl::StrFormat("%s %s %s = %.2fx the stable's %s (max %.2fx)", p,
                            what, Ms(c), r, Ms(s), max));
      }
    };
    ratio("TTFT", canary.ttft_s, stable.ttft_s, spec.max_ttft_ratio);
    ratio("end-to-end", canary.e2e_s, stable.e2e_s, spec.max_e2e_ratio);
  }
  if (!failed.empty()) {
    a.verdict = Verdict::kFail;
    a.why = absl::StrJoin(failed, "; ");
  } else if (!missing.empty()) {
    a.why = absl::StrJoin(missing, "; ");
  } else {
    a.verdict = Verdict::kPass;
    a.why = absl::StrFormat(
        "canary %s TTFT %s, end-to-end %s, errors %.1f%% over %d requests; "
        "stable %s, %s over %d",
        p, Ms(canary.ttft_s), Ms(canary.e2e_s), canary.error_rate * 100,
        canary.requests, Ms(stable.ttft_s), Ms(stable.e2e_s), stable.requests);
  }
  return a;
}

const char* RolloutPhaseName(RolloutPhase p) {
  switch (p) {
    case RolloutPhase::kProgressing:
      return "progressing";
    case RolloutPhase::kPaused:
      return "paused";
    case RolloutPhase::kPromoted:
      return "promoted";
    case RolloutPhase::kRolledBack:
      return "rolled_back";
    case RolloutPhase::kAborted:
      return "aborted";
  }
  return "?";
}

absl::StatusOr<RolloutPhase> ParseRolloutPhase(std::string_view name) {
  for (RolloutPhase p : {RolloutPhase::kProgressing, RolloutPhase::kPaused,
                         RolloutPhase::kPromoted, RolloutPhase::kRolledBack,
                         RolloutPhase::kAborted}) {
    if (name == RolloutPhaseName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown rollout phase '", std::string(name), "'"));
}

Rollout::Rollout(config::RolloutSpec spec, Micros now)
    : spec_(std::move(spec)), step_started_(now) {
  if (spec_.steps.empty()) spec_.steps = config::DefaultRolloutSteps();
}

absl::StatusOr<Rollout> Rollout::Restore(config::RolloutSpec spec,
                                         const json& state, Micros now) {
  Rollout r(std::move(spec), now);
  if (!state.is_object()) {
    return absl::InvalidArgumentError("rollout state: not an object");
  }
  const auto phase = state.find("phase");
  const auto step = state.find("step");
  if (phase == state.end() || !phase->is_string() || step == state.end() ||
      !step->is_number_integer()) {
    return absl::InvalidArgumentError(
        "rollout state: needs a string phase and an integer step");
  }
  auto p = ParseRolloutPhase(phase->get<std::string>());
  if (!p.ok()) return p.status();
  const int64_t s = step->get<int64_t>();
  if (s < 0 || s >= static_cast<int64_t>(r.spec_.steps.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("rollout state: step ", s, " is not one of the ",
                     r.spec_.steps.size(), " steps"));
  }
  r.phase_ = *p;
  r.step_ = static_cast<int>(s);
  if (auto why = state.find("reason"); why != state.end() && why->is_string()) {
    r.reason_ = why->get<std::string>();
  }
  return r;
}

json Rollout::State() const {
  return {{"phase", RolloutPhaseName(phase_)},
          {"step", step_},
          {"canaryWeight", canary_weight()},
          {"reason", reason_}};
}

int Rollout::canary_weight() const {
  switch (phase_) {
    case RolloutPhase::kPromoted:
      return 100;
    case RolloutPhase::kRolledBack:
    case RolloutPhase::kAborted:
      return 0;
    default:
      return spec_.steps[step_].weight;
  }
}

Micros Rollout::WindowStart(Micros now) const {
  return std::max(
      step_started_,
      now - static_cast<Micros>(spec_.analysis.window_s * kMicrosPerSecond));
}

Micros Rollout::NextDeadline() const {
  if (phase_ != RolloutPhase::kProgressing || spec_.steps[step_].manual) {
    return kNever;
  }
  return step_started_ +
         static_cast<Micros>(spec_.steps[step_].pause_s * kMicrosPerSecond);
}

RolloutChange Rollout::Change(const std::string& kind,
                              std::string message) const {
  RolloutChange c;
  c.kind = kind;
  c.canary_weight = canary_weight();
  c.message = std::move(message);
  c.details = {{"phase", RolloutPhaseName(phase_)},
               {"step", step_},
               {"canaryWeight", c.canary_weight},
               {"analysis", last_.Json()}};
  return c;
}

RolloutChange Rollout::Advance(Micros now, const std::string& why) {
  step_started_ = now;
  noted_inconclusive_ = false;
  if (step_ + 1 >= static_cast<int>(spec_.steps.size())) {
    phase_ = RolloutPhase::kPromoted;
    reason_ = why;
    return Change("rollout.promoted", absl::StrCat("canary ", spec_.canary,
                                                   " promoted to 100%: ", why));
  }
  ++step_;
  reason_.clear();
  return Change("rollout.step",
                absl::StrCat("canary ", spec_.canary, " at ",
                             spec_.steps[step_].weight, "% (step ", step_ + 1,
                             " of ", spec_.steps.size(), "): ", why));
}

std::vector<RolloutChange> Rollout::Step(Micros now,
                                         const VersionFigures& stable,
                                         const VersionFigures& canary) {
  std::vector<RolloutChange> out;
  if (done()) return out;
  last_ = Analyze(spec_.analysis, stable, canary);
  if (last_.verdict == Verdict::kFail) {
    phase_ = RolloutPhase::kRolledBack;
    reason_ = last_.why;
    out.push_back(Change(
        "rollout.rolled_back",
        absl::StrCat("canary ", spec_.canary, " rolled back to 0% at step ",
                     step_ + 1, ": ", last_.why)));
    return out;
  }
  if (phase_ != RolloutPhase::kProgressing || now < NextDeadline()) return out;
  if (last_.verdict == Verdict::kPass) {
    out.push_back(Advance(now, absl::StrCat("analysis passed: ", last_.why)));
  } else if (!noted_inconclusive_) {
    noted_inconclusive_ = true;
    out.push_back(Change(
        "rollout.analysis",
        absl::StrCat("canary ", spec_.canary, " stays at ", canary_weight(),
                     "%: the analysis is inconclusive (", last_.why, ")")));
  }
  return out;
}

absl::StatusOr<RolloutChange> Rollout::Promote(Micros now, bool full) {
  if (done()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the rollout is ", RolloutPhaseName(phase_), "; nothing to promote"));
  }
  phase_ = RolloutPhase::kProgressing;
  if (full) step_ = static_cast<int>(spec_.steps.size()) - 1;
  return Advance(now, full ? "promoted by hand (full)" : "promoted by hand");
}

absl::StatusOr<RolloutChange> Rollout::Pause(Micros now) {
  if (phase_ != RolloutPhase::kProgressing) {
    return absl::FailedPreconditionError(absl::StrCat("the rollout is ",
                                                      RolloutPhaseName(phase_),
                                                      "; only a progressing "
                                                      "rollout can be paused"));
  }
  phase_ = RolloutPhase::kPaused;
  reason_ = "paused by hand";
  return Change("rollout.paused",
                absl::StrCat("rollout of ", spec_.canary, " paused at ",
                             canary_weight(), "%"));
}

absl::StatusOr<RolloutChange> Rollout::Resume(Micros now) {
  if (phase_ != RolloutPhase::kPaused) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the rollout is ", RolloutPhaseName(phase_), ", not paused"));
  }
  phase_ = RolloutPhase::kProgressing;
  reason_.clear();
  step_started_ = now;
  return Change("rollout.resumed",
                absl::StrCat("rollout of ", spec_.canary, " resumed at ",
                             canary_weight(), "%"));
}

absl::StatusOr<RolloutChange> Rollout::Abort(Micros now,
                                             const std::string& why) {
  if (done()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the rollout is ", RolloutPhaseName(phase_), " already"));
  }
  phase_ = RolloutPhase::kAborted;
  reason_ = why.empty() ? "aborted by hand" : why;
  return Change(
      "rollout.aborted",
      absl::StrCat("rollout of ", spec_.canary,
                   " aborted: the stable takes 100% (", reason_, ")"));
}

absl::StatusOr<RolloutChange> Rollout::Retry(Micros now) {
  if (phase_ != RolloutPhase::kRolledBack && phase_ != RolloutPhase::kAborted) {
    return absl::FailedPreconditionError(
        absl::StrCat("the rollout is ", RolloutPhaseName(phase_),
                     "; only a rolled back or aborted rollout can be retried"));
  }
  phase_ = RolloutPhase::kProgressing;
  step_ = 0;
  step_started_ = now;
  reason_.clear();
  last_ = Analysis();
  noted_inconclusive_ = false;
  return Change(
      "rollout.step",
      absl::StrCat("rollout of ", spec_.canary, " retried at ", canary_weight(),
                   "% (step 1 of ", spec_.steps.size(), ")"));
}

}  // namespace gpusched::control
