#include "control/rollout.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/random.h"
#include "control/canary_stats.h"

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
std::string Pct(double r) { return absl::StrFormat("%.2f%%", r * 100); }
std::string Times(double r) {
  return std::isinf(r) ? std::string("inf") : absl::StrFormat("%.2fx", r);
}
std::string P(double p) { return absl::StrFormat("p = %.2g", p); }

// canary / stable, infinity over a stable 0 (no 1 ms floor: the absolute
// slack is what keeps tiny figures from failing).
double Ratio(double canary, double stable) {
  if (stable > 0) return canary / stable;
  return canary > 0 ? std::numeric_limits<double>::infinity() : 1.0;
}

json Finite(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// Latency: significant (Mann-Whitney), above the ratio and above the slack.
Check LatencyCheck(const config::AnalysisSpec& spec, const char* name,
                   const char* label, const std::vector<double>& stable,
                   const std::vector<double>& canary, double max_ratio,
                   int64_t need) {
  Check c;
  c.name = name;
  c.test = "mann-whitney-u";
  c.n_stable = static_cast<int64_t>(stable.size());
  c.n_canary = static_cast<int64_t>(canary.size());
  c.threshold = max_ratio;
  c.slack_ms = spec.slack_ms;
  const std::string p = absl::StrFormat("p%g %s", spec.percentile, label);
  if (c.n_canary < need || c.n_stable < need) {
    c.why = absl::StrCat(label, ": waiting for ", need,
                         " samples a version (canary ", c.n_canary, ", stable ",
                         c.n_stable, ")");
    return c;
  }
  c.stable = Percentile(stable, spec.percentile);
  c.canary = Percentile(canary, spec.percentile);
  c.stable_median = Percentile(stable, 50);
  c.canary_median = Percentile(canary, 50);
  c.effect = Ratio(c.canary, c.stable);
  c.p_value = MannWhitneyGreater(canary, stable).p_value;
  const double alpha = 1 - spec.confidence;
  const bool significant = c.p_value < alpha;
  const bool large = c.effect > max_ratio;
  const bool beyond_slack = (c.canary - c.stable) * 1000 > spec.slack_ms;
  const std::string figures = absl::StrFormat(
      "%s %s vs %s = %s (max %s, slack %g ms), medians %s vs %s, "
      "Mann-Whitney %s (%s needed) over %d/%d samples",
      p, Ms(c.canary), Ms(c.stable), Times(c.effect), Times(max_ratio),
      spec.slack_ms, Ms(c.canary_median), Ms(c.stable_median), P(c.p_value),
      absl::StrFormat("< %.2g", alpha), c.n_canary, c.n_stable);
  c.verdict =
      significant && large && beyond_slack ? Verdict::kFail : Verdict::kPass;
  c.why = figures;
  return c;
}

}  // namespace

void VersionWindow::Add(const VersionSample& s) {
  ++requests;
  if (!s.ok) {
    ++errors;
    return;
  }
  if (ttft_slo_s > 0 && s.ttft_s <= ttft_slo_s) ++within_slo;
  const int64_t seen = requests - errors;  // ok samples so far, this one too
  if (ttft_s.size() < kMaxWindowSamples) {
    ttft_s.push_back(s.ttft_s);
    e2e_s.push_back(s.e2e_s);
    return;
  }
  rng = Mix64(rng);
  const uint64_t j = rng % static_cast<uint64_t>(seen);
  if (j < kMaxWindowSamples) {
    ttft_s[j] = s.ttft_s;
    e2e_s[j] = s.e2e_s;
  }
}

VersionWindow Collect(const std::vector<VersionSample>& samples,
                      double ttft_slo_s) {
  VersionWindow w(ttft_slo_s);
  for (const VersionSample& s : samples) w.Add(s);
  return w;
}

json VersionFigures::Json() const {
  json j = {{"requests", requests},
            {"errors", errors},
            {"errorRate", error_rate},
            {"latencySamples", latency_samples},
            {"ttftSeconds", ttft_s},
            {"e2eSeconds", e2e_s},
            {"ttftMedianSeconds", ttft_median_s},
            {"e2eMedianSeconds", e2e_median_s}};
  j["sloAttainment"] =
      slo_attainment < 0 ? json(nullptr) : json(slo_attainment);
  return j;
}

VersionFigures Summarize(const VersionWindow& w, double percentile) {
  VersionFigures f;
  f.requests = w.requests;
  f.errors = w.errors;
  if (w.requests > 0) {
    f.error_rate = static_cast<double>(w.errors) / w.requests;
  }
  f.latency_samples = static_cast<int64_t>(w.ttft_s.size());
  f.ttft_s = Percentile(w.ttft_s, percentile);
  f.e2e_s = Percentile(w.e2e_s, percentile);
  f.ttft_median_s = Percentile(w.ttft_s, 50);
  f.e2e_median_s = Percentile(w.e2e_s, 50);
  if (w.ttft_slo_s > 0 && w.requests > 0) {
    f.slo_attainment = static_cast<double>(w.within_slo) / w.requests;
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

json Check::Json() const {
  json j = {{"name", name},
            {"test", test},
            {"verdict", VerdictName(verdict)},
            {"stableSamples", n_stable},
            {"canarySamples", n_canary},
            {"stable", stable},
            {"canary", canary},
            {"threshold", threshold},
            {"why", why}};
  if (test == "mann-whitney-u") {
    j["stableMedian"] = stable_median;
    j["canaryMedian"] = canary_median;
    j["slackMs"] = slack_ms;
  }
  if (name == "errors" || name == "errorRateCap") {
    j["look"] = look;
    j["alpha"] = alpha;
  }
  if (test != "cap") j["effect"] = Finite(effect);
  j["pValue"] = p_value < 0 ? json(nullptr) : json(p_value);
  return j;
}

json Analysis::Json() const {
  json cs = json::array();
  for (const Check& c : checks) cs.push_back(c.Json());
  return {{"verdict", VerdictName(verdict)}, {"why", why},
          {"confidence", confidence},        {"percentile", percentile},
          {"minSamples", min_samples},       {"checks", std::move(cs)},
          {"stable", stable.Json()},         {"canary", canary.Json()}};
}

ErrorCounts ErrorCounts::operator+(const ErrorCounts& o) const {
  return {stable_requests + o.stable_requests, stable_errors + o.stable_errors,
          canary_requests + o.canary_requests, canary_errors + o.canary_errors};
}

ErrorCounts Counts(const VersionWindow& stable, const VersionWindow& canary) {
  return {stable.requests, stable.errors, canary.requests, canary.errors};
}

double LookAlpha(double alpha, int look) {
  // (m + 1) / ((k + m) (k + m + 1)) sums to 1 over k >= 1 for any m; m = 4
  // keeps a share for the late looks, where the counts are.
  const double k = std::max(1, look) + 4.0;
  return alpha * 5 / (k * (k + 1));
}

namespace {

// The error checks over `n` (the rollout's requests so far) at look `look`
// with `alpha` (its share of 1 - confidence).
std::vector<Check> ErrorChecks(const config::AnalysisSpec& spec,
                               const ErrorCounts& n, int look, double alpha) {
  auto rate = [](int64_t errors, int64_t requests) {
    return requests > 0 ? static_cast<double>(errors) / requests : 0.0;
  };
  auto check = [&](const char* name, const char* test, double threshold) {
    Check c;
    c.name = name;
    c.test = test;
    c.look = look;
    c.alpha = alpha;
    c.n_canary = n.canary_requests;
    c.n_stable = n.stable_requests;
    c.canary = rate(n.canary_errors, n.canary_requests);
    c.stable = rate(n.stable_errors, n.stable_requests);
    c.threshold = threshold;
    c.effect = Ratio(c.canary, c.stable);
    return c;
  };
  const std::string at =
      look > 1 ? absl::StrFormat(" at look %d", look) : std::string();
  std::vector<Check> out;
  {
    Check c = check("errorRateCap", "binomial", spec.max_error_rate);
    c.p_value = BinomialGreater(n.canary_errors, n.canary_requests,
                                spec.max_error_rate);
    c.verdict = c.p_value < alpha ? Verdict::kFail : Verdict::kPass;
    c.why = absl::StrFormat(
        "error rate %s (%d of %d) against the cap %s: binomial %s (< %.2g "
        "fails%s)",
        Pct(c.canary), n.canary_errors, n.canary_requests, Pct(c.threshold),
        P(c.p_value), alpha, at);
    out.push_back(std::move(c));
  }
  if (spec.max_error_ratio > 0) {
    Check c = check("errors", "fisher-exact", spec.max_error_ratio);
    if (n.stable_requests < spec.min_requests) {
      c.why = absl::StrCat("errors: waiting for ", spec.min_requests,
                           " stable requests (", n.stable_requests, ")");
    } else {
      c.p_value = FisherGreater(n.canary_errors, n.canary_requests,
                                n.stable_errors, n.stable_requests);
      c.verdict = c.p_value < alpha && c.effect > c.threshold ? Verdict::kFail
                                                              : Verdict::kPass;
      c.why = absl::StrFormat(
          "error rate %s (%d of %d) vs %s (%d of %d) = %s (max %s), Fisher "
          "%s (< %.2g needed%s)",
          Pct(c.canary), n.canary_errors, n.canary_requests, Pct(c.stable),
          n.stable_errors, n.stable_requests, Times(c.effect),
          Times(c.threshold), P(c.p_value), alpha, at);
    }
    out.push_back(std::move(c));
  }
  return out;
}

void AddWindowChecks(const config::AnalysisSpec& spec,
                     const VersionWindow& stable, const VersionWindow& canary,
                     Analysis* out);

Analysis AnalyzeWith(const config::AnalysisSpec& spec,
                     const VersionWindow& stable, const VersionWindow& canary,
                     std::vector<Check> error_checks) {
  Analysis a;
  a.stable = Summarize(stable, spec.percentile);
  a.canary = Summarize(canary, spec.percentile);
  a.confidence = spec.confidence;
  a.percentile = spec.percentile;
  const double alpha = 1 - spec.confidence;
  a.min_samples = std::max(spec.min_requests, MinRankSamples(alpha));
  a.checks = std::move(error_checks);
  // The window's checks need its canary requests; the error checks judge
  // their own counts (they may fail while the window fills).
  const bool window_ready = canary.requests >= spec.min_requests;
  if (window_ready) AddWindowChecks(spec, stable, canary, &a);
  std::vector<std::string> failed, waiting, passed;
  for (const Check& c : a.checks) {
    (c.verdict == Verdict::kFail   ? failed
     : c.verdict == Verdict::kPass ? passed
                                   : waiting)
        .push_back(c.why);
  }
  if (!window_ready) {
    waiting.insert(waiting.begin(),
                   absl::StrCat("waiting for ", spec.min_requests,
                                " canary requests in the window (",
                                canary.requests, " so far)"));
  }
  if (!failed.empty()) {
    a.verdict = Verdict::kFail;
    a.why = absl::StrJoin(failed, "; ");
  } else if (!waiting.empty()) {
    a.why = absl::StrJoin(waiting, "; ");
  } else {
    a.verdict = Verdict::kPass;
    a.why = absl::StrJoin(passed, "; ");
  }
  return a;
}

}  // namespace

Analysis Analyze(const config::AnalysisSpec& spec, const VersionWindow& stable,
                 const VersionWindow& canary) {
  std::vector<Check> errors;
  if (canary.requests >= spec.min_requests) {
    errors = ErrorChecks(spec, Counts(stable, canary), 1, 1 - spec.confidence);
  }
  return AnalyzeWith(spec, stable, canary, std::move(errors));
}

Analysis Analyze(const config::AnalysisSpec& spec, const VersionWindow& stable,
                 const VersionWindow& canary, const ErrorLooks& looks) {
  std::vector<Check> errors = looks.held;
  if (looks.look > 0) {
    errors =
        ErrorChecks(spec, looks.before + Counts(stable, canary), looks.look,
                    LookAlpha(1 - spec.confidence, looks.look));
  }
  return AnalyzeWith(spec, stable, canary, std::move(errors));
}

namespace {

// The checks on one window: latencies against the stable's, the caps, SLO
// attainment (the window has its minRequests canary requests).
void AddWindowChecks(const config::AnalysisSpec& spec,
                     const VersionWindow& stable, const VersionWindow& canary,
                     Analysis* out) {
  Analysis& a = *out;
  const double alpha = 1 - spec.confidence;
  if (spec.max_ttft_ratio > 0) {
    a.checks.push_back(LatencyCheck(spec, "ttft", "TTFT", stable.ttft_s,
                                    canary.ttft_s, spec.max_ttft_ratio,
                                    a.min_samples));
  }
  if (spec.max_e2e_ratio > 0) {
    a.checks.push_back(LatencyCheck(spec, "e2e", "end-to-end", stable.e2e_s,
                                    canary.e2e_s, spec.max_e2e_ratio,
                                    a.min_samples));
  }
  // Absolute caps on the canary's percentiles (the stable is not needed).
  auto cap = [&](const char* name, const char* label, double value,
                 double max_ms) {
    if (max_ms <= 0) return;
    Check c;
    c.name = name;
    c.test = "cap";
    c.n_canary = a.canary.latency_samples;
    c.canary = value;
    c.threshold = max_ms / 1000;
    if (c.n_canary < spec.min_requests) {
      c.why = absl::StrCat(label, " cap: waiting for ", spec.min_requests,
                           " ok canary requests (", c.n_canary, ")");
    } else {
      c.verdict = value * 1000 > max_ms ? Verdict::kFail : Verdict::kPass;
      c.why = absl::StrFormat("p%g %s %s (cap %g ms)", spec.percentile, label,
                              Ms(value), max_ms);
    }
    a.checks.push_back(std::move(c));
  };
  cap("ttftCap", "TTFT", a.canary.ttft_s, spec.max_ttft_ms);
  cap("e2eCap", "end-to-end", a.canary.e2e_s, spec.max_e2e_ms);
  if (spec.min_slo_attainment > 0 && a.canary.slo_attainment >= 0) {
    Check c;
    c.name = "slo";
    c.test = "binomial";
    c.n_canary = canary.requests;
    c.canary = a.canary.slo_attainment;
    c.threshold = spec.min_slo_attainment;
    c.effect = c.canary / c.threshold;
    // Misses (late or failed) significantly above the allowed share.
    c.p_value = BinomialGreater(canary.requests - canary.within_slo,
                                canary.requests, 1 - spec.min_slo_attainment);
    c.verdict = c.p_value < alpha ? Verdict::kFail : Verdict::kPass;
    c.why = absl::StrFormat(
        "SLO attainment %s of %d requests (min %s): binomial %s (< %.2g "
        "fails)",
        Pct(c.canary), canary.requests, Pct(c.threshold), P(c.p_value), alpha);
    a.checks.push_back(std::move(c));
  }
}

}  // namespace

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
  // The error checks' counts and looks (older states have none: the
  // rollout's errors are judged from here on).
  if (auto e = state.find("errorsSoFar"); e != state.end() && e->is_object()) {
    int64_t v[6] = {0, 0, 0, 0, 0, 0};
    const char* keys[6] = {"stableRequests", "stableErrors", "canaryRequests",
                           "canaryErrors",   "looks",        "nextLook"};
    for (int i = 0; i < 6; ++i) {
      auto f = e->find(keys[i]);
      if (f == e->end() || !f->is_number_integer() || f->get<int64_t>() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("rollout state: errorsSoFar.", keys[i],
                         " must be an integer >= 0"));
      }
      v[i] = f->get<int64_t>();
    }
    if (v[1] > v[0] || v[3] > v[2] || v[4] > 64) {
      return absl::InvalidArgumentError(
          "rollout state: errorsSoFar: more errors than requests, or more "
          "than 64 looks");
    }
    r.carried_ = {v[0], v[1], v[2], v[3]};
    r.looks_ = static_cast<int>(v[4]);
    r.next_look_ = v[5];
  }
  return r;
}

json Rollout::State() const {
  const ErrorCounts n = errors_so_far();
  return {{"phase", RolloutPhaseName(phase_)},
          {"step", step_},
          {"canaryWeight", canary_weight()},
          {"reason", reason_},
          {"errorsSoFar",
           {{"stableRequests", n.stable_requests},
            {"stableErrors", n.stable_errors},
            {"canaryRequests", n.canary_requests},
            {"canaryErrors", n.canary_errors},
            {"looks", looks_},
            {"nextLook", next_look_}}}};
}

void Rollout::CarryWindow() {
  carried_ = carried_ + window_;
  window_ = {};
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
  CarryWindow();
  looked_at_step_end_ = false;
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
                                         const VersionWindow& stable,
                                         const VersionWindow& canary) {
  std::vector<RolloutChange> out;
  if (done()) return out;
  // Errors over the rollout so far: a look when the canary's requests so
  // far reach the next look's count (ErrorLooks).
  window_ = Counts(stable, canary);
  ErrorLooks looks;
  looks.before = carried_;
  const int64_t so_far = errors_so_far().canary_requests;
  // Also a look where the step would end (once a step): the counts the
  // step's decision rests on.
  const bool step_end = phase_ == RolloutPhase::kProgressing &&
                        now >= NextDeadline() && !looked_at_step_end_;
  if (so_far >= spec_.analysis.min_requests &&
      (so_far >= next_look_ || step_end)) {
    looks.look = ++looks_;
    next_look_ = std::max(next_look_, 2 * so_far);
    looked_at_step_end_ = looked_at_step_end_ || step_end;
  } else {
    looks.held = error_checks_;
  }
  last_ = Analyze(spec_.analysis, stable, canary, looks);
  if (looks.look > 0) {
    error_checks_.clear();
    for (const Check& c : last_.checks) {
      if (c.look > 0) error_checks_.push_back(c);
    }
  }
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
  CarryWindow();
  looked_at_step_end_ = false;
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
  carried_ = window_ = {};
  looks_ = 0;
  next_look_ = 0;
  looked_at_step_end_ = false;
  error_checks_.clear();
  return Change(
      "rollout.step",
      absl::StrCat("rollout of ", spec_.canary, " retried at ", canary_weight(),
                   "% (step 1 of ", spec_.steps.size(), ")"));
}

}  // namespace gpusched::control
