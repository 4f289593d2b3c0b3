// Canary rollouts as a policy core (no threads, no I/O, no clock reads):
// the live controller (runtime/controller_routes.cc) and the simulator
// (sim/serve_sim.cc) drive the same Rollout with their own clocks and the
// request samples their data planes measured.
//
// A Rollout walks config::RolloutSpec's steps. At each step the canary gets
// the step's weight (the stable the rest) for at least the step's pause;
// the step ends when the analysis over the last `windowS` of the step
// passes (or, for a manual step, when Promote() is called). After the last
// step the canary gets 100 (promoted). Whenever the analysis fails, at any
// step and also while paused, the canary gets 0 at once (rolled back).
// Abort() is a manual rollback; Retry() starts again from the first step.
//
// The analysis (Analyze) compares the canary with the stable over the same
// window and rolls back only on evidence (docs/versions.md, "The
// analysis"): latencies with a one-sided Mann-Whitney U test at the
// configured confidence, failing only when the difference is significant,
// the percentile ratio is above its threshold (maxTtftRatio, maxE2eRatio:
// the effect size) and the difference is above the absolute slack
// (slackMs); error rates with exact tests (Fisher against the stable's,
// binomial against the maxErrorRate cap); SLO attainment with a binomial
// test. Before the samples the confidence needs, the verdict is
// inconclusive, never a rollback.
// Thread-compatible.
#ifndef GPUSCHED_CONTROL_ROLLOUT_H_
#define GPUSCHED_CONTROL_ROLLOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "config/model_route.h"
#include "nlohmann/json.hpp"

namespace gpusched::control {

// One finished request of one version.
struct VersionSample {
  double ttft_s = 0;
  double e2e_s = 0;
  bool ok = true;
};

// The latency samples kept per version and window (a uniform reservoir
// beyond it); counts stay exact.
inline constexpr size_t kMaxWindowSamples = 2048;

// A version's requests in an analysis window: exact counts, and the ok
// requests' latencies as a uniform reservoir of at most kMaxWindowSamples
// (Algorithm R with a fixed seed: the same samples in the same order give
// the same reservoir, so simulations stay reproducible).
struct VersionWindow {
  explicit VersionWindow(double ttft_slo_s = 0) : ttft_slo_s(ttft_slo_s) {}
  void Add(const VersionSample& s);

  double ttft_slo_s = 0;  // 0: no SLO
  int64_t requests = 0, errors = 0;
  int64_t within_slo = 0;                // ok requests with TTFT <= the SLO
  std::vector<double> ttft_s, e2e_s;     // ok requests (the reservoir)
  uint64_t rng = 0x9e3779b97f4a7c15ULL;  // the reservoir's draws
};
// The window of `samples`; `ttft_slo_s` 0: no SLO.
VersionWindow Collect(const std::vector<VersionSample>& samples,
                      double ttft_slo_s);

// A version's figures over a window, for people.
struct VersionFigures {
  int64_t requests = 0;
  int64_t errors = 0;
  double error_rate = 0;
  int64_t latency_samples = 0;  // ok requests in the reservoir
  double ttft_s = 0;            // percentile of the ok requests (0 without)
  double e2e_s = 0;
  double ttft_median_s = 0, e2e_median_s = 0;
  double slo_attainment = -1;  // share with TTFT within the SLO; -1: no SLO
  nlohmann::json Json() const;
};

// `percentile` in 1..100 (nearest rank).
VersionFigures Summarize(const VersionWindow& w, double percentile);

enum class Verdict { kInconclusive, kPass, kFail };
const char* VerdictName(Verdict v);

// One check of the analysis and the numbers behind its verdict.
struct Check {
  std::string name;  // ttft, e2e, errors, errorRateCap, ttftCap, e2eCap, slo
  std::string test;  // mann-whitney-u, fisher-exact, binomial, cap
  Verdict verdict = Verdict::kInconclusive;
  // Error checks: the look that judged them (ErrorLooks; 0: none yet) and
  // the p-value that look needed.
  int look = 0;
  double alpha = 0;
  int64_t n_stable = 0, n_canary = 0;           // samples (latency) or requests
  double stable = 0, canary = 0;                // percentile seconds, or rates
  double stable_median = 0, canary_median = 0;  // latency checks
  double effect = 0;     // canary / stable (infinity over a stable 0)
  double threshold = 0;  // the max ratio, the cap or the min attainment
  double slack_ms = 0;   // latency ratio checks
  double p_value = -1;   // -1: no test
  std::string why;
  nlohmann::json Json() const;
};

struct Analysis {
  Verdict verdict = Verdict::kInconclusive;
  std::string why;  // the failed checks, or what data is missing
  VersionFigures stable, canary;
  double confidence = 0;
  double percentile = 0;
  int64_t min_samples = 0;  // per version, what the confidence needs
  std::vector<Check> checks;
  nlohmann::json Json() const;
};

// Both versions' request and error counts over some span.
struct ErrorCounts {
  int64_t stable_requests = 0, stable_errors = 0;
  int64_t canary_requests = 0, canary_errors = 0;
  ErrorCounts operator+(const ErrorCounts& o) const;
};
ErrorCounts Counts(const VersionWindow& stable, const VersionWindow& canary);

// Errors are judged over the rollout's requests so far (every earlier
// step's window plus the current one), not over one window: telling 2%
// from 1% needs thousands of requests, more than the 5% step's window
// holds. Judged again and again, the error checks spend the confidence over
// looks (a group-sequential design with Bonferroni spending): look k = 1,
// 2, ... comes when the canary's requests so far first reach minRequests,
// then at least twice the previous look's, and once where each step's
// pause ends; it fails only on a p-value below LookAlpha(1 - confidence,
// k). The looks' shares add up to 1 - confidence, so an identical canary is
// rolled back on errors with a probability of at most 1 - confidence
// however long the rollout runs. Between looks the last look's verdicts
// hold.
struct ErrorLooks {
  ErrorCounts before;       // the rollout's earlier windows
  int look = 0;             // this evaluation is look `look`; 0: not a look
  std::vector<Check> held;  // not a look: the last look's error checks
};
// 5 alpha / ((k + 4) (k + 5)) for look k >= 1: 1/6, 1/8.4, 1/11.2, ... of
// alpha, 1/54.4 at look 12 (the shares add up to alpha).
double LookAlpha(double alpha, int look);

// The window alone, one look at the full 1 - confidence (for one-off
// judgements and tests).
Analysis Analyze(const config::AnalysisSpec& spec, const VersionWindow& stable,
                 const VersionWindow& canary);
// As a rollout judges: errors over `looks` (see ErrorLooks).
Analysis Analyze(const config::AnalysisSpec& spec, const VersionWindow& stable,
                 const VersionWindow& canary, const ErrorLooks& looks);

enum class RolloutPhase {
  kProgressing,
  kPaused,
  kPromoted,
  kRolledBack,
  kAborted
};
const char* RolloutPhaseName(RolloutPhase p);
absl::StatusOr<RolloutPhase> ParseRolloutPhase(std::string_view name);

// What a Step or a manual action changed, for the event log.
struct RolloutChange {
  std::string kind;  // rollout.step, rollout.promoted, rollout.rolled_back,
                     // rollout.paused, rollout.resumed, rollout.aborted,
                     // rollout.analysis (inconclusive at a step's end)
  int canary_weight = 0;
  std::string message;
  nlohmann::json details;
};

class Rollout {
 public:
  Rollout(config::RolloutSpec spec, Micros now);
  // Resumes a persisted rollout (State()); its step restarts at `now`.
  static absl::StatusOr<Rollout> Restore(config::RolloutSpec spec,
                                         const nlohmann::json& state,
                                         Micros now);

  // Where the analysis window starts now: the later of the step's start
  // and now - windowS. The caller summarizes both versions from there.
  Micros WindowStart(Micros now) const;
  // One evaluation: rolls back on a failed analysis, moves to the next step
  // when the step's pause is over and its analysis passed. Returns the
  // changes (usually none).
  std::vector<RolloutChange> Step(Micros now, const VersionWindow& stable,
                                  const VersionWindow& canary);
  // When Step can next change something by itself (the step's pause end),
  // or kNever. The analysis can fail at any time, so drivers also call
  // Step whenever samples arrive (the live controller: every pass).
  Micros NextDeadline() const;

  // Manual actions; FailedPrecondition when the phase does not allow them.
  // Promote: the next step now, or with `full` straight to 100.
  absl::StatusOr<RolloutChange> Promote(Micros now, bool full);
  absl::StatusOr<RolloutChange> Pause(Micros now);
  absl::StatusOr<RolloutChange> Resume(Micros now);
  absl::StatusOr<RolloutChange> Abort(Micros now, const std::string& why);
  absl::StatusOr<RolloutChange> Retry(Micros now);

  RolloutPhase phase() const { return phase_; }
  bool done() const {
    return phase_ == RolloutPhase::kPromoted ||
           phase_ == RolloutPhase::kRolledBack ||
           phase_ == RolloutPhase::kAborted;
  }
  int step() const { return step_; }
  int canary_weight() const;
  const config::RolloutSpec& spec() const { return spec_; }
  const std::string& reason() const { return reason_; }
  // The reason given with a manual action (`gpusched rollout ACTION
  // --reason`): the rollout's reason from then on, as an abort's is.
  void set_reason(std::string why) { reason_ = std::move(why); }
  const Analysis& last_analysis() const { return last_; }
  Micros step_started() const { return step_started_; }

  // The requests the error checks have judged so far (every earlier
  // window and the current one) and the looks taken (ErrorLooks).
  ErrorCounts errors_so_far() const { return carried_ + window_; }
  int error_looks() const { return looks_; }

  // {"phase","step","canaryWeight","reason","errorsSoFar"}: what Restore
  // reads ("errorsSoFar" optional: the counts and looks of ErrorLooks).
  nlohmann::json State() const;

 private:
  RolloutChange Advance(Micros now, const std::string& why);
  // The current window's counts join the earlier ones (its step ends or
  // restarts; the next window starts after it).
  void CarryWindow();
  RolloutChange Change(const std::string& kind, std::string message) const;

  config::RolloutSpec spec_;
  RolloutPhase phase_ = RolloutPhase::kProgressing;
  int step_ = 0;
  Micros step_started_ = 0;
  std::string reason_;
  Analysis last_;
  bool noted_inconclusive_ = false;
  // Errors over the rollout (ErrorLooks): the earlier windows' counts, the
  // current window's (at the last Step), the looks taken, the canary
  // request count the next look waits for, the last look's checks.
  ErrorCounts carried_, window_;
  int looks_ = 0;
  int64_t next_look_ = 0;
  bool looked_at_step_end_ = false;
  std::vector<Check> error_checks_;
};

}  // namespace gpusched::control

#endif  // GPUSCHED_CONTROL_ROLLOUT_H_
