// Autoscaler: per deployment, how many replicas it should have, and when the
// count changes, why (the signal values that drove it, for the event log).
//
// Policy core: no threads, no I/O, no wall clock. The owner (the live
// controller, or `gpusched sim serve`) feeds observations with Observe(),
// calls Evaluate(now) after observations and at NextDeadline(), and carries
// out the decisions (starts or stops replicas). Deterministic; not
// thread-safe (the core runs on one strand).
//
// Knobs (AutoscalingConfig), named as in Ray Serve where Ray has them, with
// their defaults:
//   min_replicas: 1              # 0 allows scale-to-zero
//   max_replicas: 1              # >= max(1, min_replicas)
//   policy: target-ongoing       # target-ongoing | slo
//   target_ongoing_requests: 2   # target-ongoing: wanted in-flight + queued
//                                #   requests per replica (Ray's default 2)
//   look_back_period_s: 30       # window averaging the ongoing requests
//   upscale_delay_s: 30          # a higher count must be wanted this long
//   downscale_delay_s: 600       # a lower count must be wanted this long
//   max_concurrent_starts: 4     # replicas starting (not yet ready) at once
//   idle_timeout_s: 300          # min_replicas 0: no request in flight or
//                                #   queued for this long -> 0 replicas
//   slo_ttft_s: 0                # slo: the TTFT (or queue wait) SLO, > 0
//   slo_percentile: 0.9          # slo: the percentile compared with it
//   slo_window_s: 60             # slo: samples older than this are dropped
//   slo_headroom: 0.5            # slo: scale down while the percentile is
//                                #   under slo_headroom * slo_ttft_s
//
// Rules, evaluated per deployment in this order (the first that applies
// decides; `target` is the count last decided):
//   1. bounds: target < min -> min, target > max -> max, at once.
//   2. held requests: target 0 and a request queued (held) or in flight ->
//      1 at once. Concurrent first requests start one replica, not many:
//      further replicas follow the normal rules.
//   3. idle: min_replicas 0, target > 0, no request in flight or queued
//      since idle_timeout_s -> 0.
//   4. desired count from the policy, clamped to [max(min, 1), max] while
//      target > 0 (only rule 3 reaches 0):
//        target-ongoing: ceil(mean(in_flight + queued over the look-back
//          period) / target_ongoing_requests);
//        slo: p = slo_percentile of the TTFT samples (measured or
//          predicted) in the window; p > slo_ttft_s -> max(target + 1,
//          ceil(target * min(p / slo_ttft_s, 2))); p < slo_headroom *
//          slo_ttft_s -> target - 1; else (or no samples) target.
//      Stabilization (Ray Serve's upscale/downscale delays, with the
//      Kubernetes HPA's choice of value): a run starts at the first
//      Evaluate whose desired count is above (below) target and ends at the
//      first one that is not. Once a run has lasted upscale_delay_s
//      (downscale_delay_s), the count wanted throughout it applies: the
//      smallest desired count seen in an upscale run, the largest in a
//      downscale run. So a count must persist for the delay to apply.
//   Every increase is capped so that at most max_concurrent_starts replicas
//   are starting; the rest of an upscale run's count follows, without a new
//   delay, as replicas become ready.
// Each decision is one step: {deployment, from, to, reason, signals}.
#ifndef GPUSCHED_AUTOSCALE_AUTOSCALER_H_
#define GPUSCHED_AUTOSCALE_AUTOSCALER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"

namespace gpusched::autoscale {

enum class Policy { kTargetOngoing, kSlo };

// "target-ongoing" | "slo".
const char* PolicyName(Policy p);
bool ParsePolicy(absl::string_view name, Policy* out);

struct AutoscalingConfig {
  int min_replicas = 1;
  int max_replicas = 1;
  Policy policy = Policy::kTargetOngoing;
  double target_ongoing_requests = 2;
  double look_back_period_s = 30;
  double upscale_delay_s = 30;
  double downscale_delay_s = 600;
  int max_concurrent_starts = 4;
  double idle_timeout_s = 300;
  double slo_ttft_s = 0;
  double slo_percentile = 0.9;
  double slo_window_s = 60;
  double slo_headroom = 0.5;
  bool operator==(const AutoscalingConfig&) const = default;
};

// InvalidArgument naming each bad knob.
absl::Status ValidateAutoscalingConfig(const AutoscalingConfig& c);

// What the owner saw of one deployment at one moment.
struct Observation {
  int64_t in_flight = 0;  // dispatched to replicas, not finished
  int64_t queued = 0;     // waiting in gpusched (held, at zero replicas)
  int ready = 0;          // replicas serving
  int starting = 0;       // replicas launched, not yet ready
  // TTFT (or queue wait) of requests that got their first token since the
  // last observation, in seconds.
  std::vector<double> ttft_samples_s;
  // A predicted TTFT for the next request (e.g. from the latency model and
  // the queue); < 0: none.
  double predicted_ttft_s = -1;
};

enum class Reason {
  kMinReplicas,
  kMaxReplicas,
  kHeldRequests,
  kIdleTimeout,
  kTargetOngoing,
  kSloViolated,
  kSloHeadroom,
};
// Stable snake_case names: min_replicas, max_replicas, held_requests,
// idle_timeout, target_ongoing_requests, slo_violated, slo_headroom.
const char* ReasonName(Reason r);

// The signal values behind a decision (-1 where the policy does not use it).
struct Signals {
  double ongoing_mean = -1;  // mean in_flight + queued over the look-back
  int64_t in_flight = 0;     // last observation
  int64_t queued = 0;
  int ready = 0;
  int starting = 0;
  double ttft_p_s = -1;  // slo: the percentile over the window
  int64_t samples = 0;   // slo: TTFT samples in the window
  double idle_s = -1;    // seconds without load; -1 when busy
  int desired = 0;       // the policy's desired count at this evaluation
  double run_s = 0;      // how long the stabilization run lasted
  // "key=value ..." for the event log.
  std::string ToString() const;
};

struct Decision {
  std::string deployment;
  int from = 0;
  int to = 0;
  Reason reason = Reason::kTargetOngoing;
  Signals signals;
};

class Autoscaler {
 public:
  Autoscaler() = default;
  Autoscaler(const Autoscaler&) = delete;
  Autoscaler& operator=(const Autoscaler&) = delete;

  // Adds a deployment that has `initial` replicas at `now` (clamped into
  // [min, max] by rule 1 at the next Evaluate). Returns its index, used by
  // Observe and target(). InvalidArgument on a bad config or a duplicate
  // name.
  absl::StatusOr<int> AddDeployment(std::string name,
                                    const AutoscalingConfig& config,
                                    int initial, Micros now);
  // New knobs for an existing deployment (rule 1 applies at once).
  absl::Status UpdateConfig(int deployment, const AutoscalingConfig& config);

  // The owner changed the count itself (a replica was evicted to make room
  // for another model): `target` becomes the decided count, without a
  // decision, and any stabilization run restarts.
  void SetTarget(int deployment, int target);

  // Records what the owner saw at `now` (non-decreasing per deployment).
  void Observe(int deployment, Micros now, const Observation& o);

  // Applies the rules to every deployment; appends at most one decision per
  // deployment, in deployment order. The owner carries them out; the
  // autoscaler assumes an increase starts (to - from) replicas and a
  // decrease stops starting replicas first, until the next Observe.
  void Evaluate(Micros now, std::vector<Decision>* out);

  // The earliest time a timer (stabilization delay, idle timeout, a held
  // request waiting at zero) makes Evaluate decide something without a new
  // observation; kNever if none. Call Evaluate after Observe too: new load
  // changes the desired count.
  Micros NextDeadline() const;

  int num_deployments() const { return static_cast<int>(deps_.size()); }
  int target(int deployment) const { return deps_[deployment].target; }
  const std::string& name(int deployment) const {
    return deps_[deployment].name;
  }
  const AutoscalingConfig& config(int deployment) const {
    return deps_[deployment].config;
  }
  // The mean in_flight + queued over the look-back window at the last
  // Observe (the target_ongoing_requests policy's signal); -1 before any.
  double OngoingMean(int deployment) const;

 private:
  struct Run {
    Micros since = kNever;  // kNever: no run
    int bound = 0;          // min (up) or max (down) desired over the run
  };
  struct Deployment {
    std::string name;
    AutoscalingConfig config;
    int target = 0;
    Observation last;  // ttft_samples_s moved into samples
    Micros last_observed = 0;
    Micros evaluated = -1;                           // last Evaluate
    Micros idle_since = 0;                           // kNever while busy
    std::deque<std::pair<Micros, int64_t>> ongoing;  // (t, in_flight+queued)
    std::deque<std::pair<Micros, double>> samples;   // (t, ttft seconds)
    Run up, down;
  };

  void Prune(Deployment& d, Micros now) const;
  static double MeanOngoing(const Deployment& d);  // d.ongoing not empty
  int Desired(const Deployment& d, Micros now, Signals* s) const;
  // The highest count an increase may reach now (max_concurrent_starts).
  int StartCap(const Deployment& d) const;
  void Apply(Deployment& d, int to, Reason reason, const Signals& s,
             std::vector<Decision>* out);

  std::vector<Deployment> deps_;
};

}  // namespace gpusched::autoscale

#endif  // GPUSCHED_AUTOSCALE_AUTOSCALER_H_
