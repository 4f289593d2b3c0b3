#include "autoscale/autoscaler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpusched::autoscale {

const char* PolicyName(Policy p) {
  return p == Policy::kSlo ? "slo" : "target-ongoing";
}

bool ParsePolicy(absl::string_view name, Policy* out) {
  if (name == "target-ongoing") {
    *out = Policy::kTargetOngoing;
  } else if (name == "slo") {
    *out = Policy::kSlo;
  } else {
    return false;
  }
  return true;
}

const char* ReasonName(Reason r) {
  switch (r) {
    case Reason::kMinReplicas:
      return "min_replicas";
    case Reason::kMaxReplicas:
      return "max_replicas";
    case Reason::kHeldRequests:
      return "held_requests";
    case Reason::kIdleTimeout:
      return "idle_timeout";
    case Reason::kTargetOngoing:
      return "target_ongoing_requests";
    case Reason::kSloViolated:
      return "slo_violated";
    case Reason::kSloHeadroom:
      return "slo_headroom";
  }
  return "unknown";
}

std::string Signals::ToString() const {
  std::string s = absl::StrCat("desired=", desired, " in_flight=", in_flight,
                               " queued=", queued, " ready=", ready,
                               " starting=", starting);
  if (ongoing_mean >= 0) absl::StrAppend(&s, " ongoing_mean=", ongoing_mean);
  if (ttft_p_s >= 0) {
    absl::StrAppend(&s, " ttft_p_s=", ttft_p_s, " samples=", samples);
  }
  if (idle_s >= 0) absl::StrAppend(&s, " idle_s=", idle_s);
  if (run_s > 0) absl::StrAppend(&s, " run_s=", run_s);
  return s;
}

absl::Status ValidateAutoscalingConfig(const AutoscalingConfig& c) {
  std::vector<std::string> bad;
  if (c.min_replicas < 0) bad.push_back("min_replicas must be >= 0");
  if (c.max_replicas < 1 || c.max_replicas < c.min_replicas) {
    bad.push_back("max_replicas must be >= max(1, min_replicas)");
  }
  if (!(c.target_ongoing_requests > 0)) {
    bad.push_back("target_ongoing_requests must be > 0");
  }
  if (!(c.look_back_period_s > 0)) {
    bad.push_back("look_back_period_s must be > 0");
  }
  if (!(c.upscale_delay_s >= 0)) bad.push_back("upscale_delay_s must be >= 0");
  if (!(c.downscale_delay_s >= 0)) {
    bad.push_back("downscale_delay_s must be >= 0");
  }
  if (c.max_concurrent_starts < 1) {
    bad.push_back("max_concurrent_starts must be >= 1");
  }
  if (!(c.idle_timeout_s >= 0)) bad.push_back("idle_timeout_s must be >= 0");
  if (c.policy == Policy::kSlo && !(c.slo_ttft_s > 0)) {
    bad.push_back("policy slo needs slo_ttft_s > 0");
  }
  if (!(c.slo_percentile > 0 && c.slo_percentile <= 1)) {
    bad.push_back("slo_percentile must be in (0, 1]");
  }
  if (!(c.slo_window_s > 0)) bad.push_back("slo_window_s must be > 0");
  if (!(c.slo_headroom >= 0 && c.slo_headroom < 1)) {
    bad.push_back("slo_headroom must be in [0, 1)");
  }
  if (bad.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("autoscaling: ", absl::StrJoin(bad, "; ")));
}

absl::StatusOr<int> Autoscaler::AddDeployment(std::string name,
                                              const AutoscalingConfig& config,
                                              int initial, Micros now) {
  if (absl::Status s = ValidateAutoscalingConfig(config); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("deployment ", name, ": ", s.message()));
  }
  for (const Deployment& d : deps_) {
    if (d.name == name) {
      return absl::InvalidArgumentError(
          absl::StrCat("deployment ", name, " added twice"));
    }
  }
  Deployment d;
  d.name = std::move(name);
  d.config = config;
  d.target = std::max(initial, 0);
  d.last.ready = d.target;
  d.last_observed = now;
  d.idle_since = now;
  deps_.push_back(std::move(d));
  return static_cast<int>(deps_.size()) - 1;
}

absl::Status Autoscaler::UpdateConfig(int deployment,
                                      const AutoscalingConfig& config) {
  if (deployment < 0 || deployment >= num_deployments()) {
    return absl::NotFoundError(absl::StrCat("no deployment ", deployment));
  }
  if (absl::Status s = ValidateAutoscalingConfig(config); !s.ok()) return s;
  Deployment& d = deps_[deployment];
  d.config = config;
  d.up = d.down = Run{};
  d.evaluated = -1;
  return absl::OkStatus();
}

void Autoscaler::SetTarget(int deployment, int target) {
  Deployment& d = deps_[deployment];
  d.target = std::max(0, target);
  d.up = d.down = Run{};
}

void Autoscaler::Observe(int deployment, Micros now, const Observation& o) {
  Deployment& d = deps_[deployment];
  d.last.in_flight = o.in_flight;
  d.last.queued = o.queued;
  d.last.ready = o.ready;
  d.last.starting = o.starting;
  d.last_observed = std::max(d.last_observed, now);
  const int64_t load = o.in_flight + o.queued;
  d.ongoing.emplace_back(now, load);
  if (load > 0) {
    d.idle_since = kNever;
  } else if (d.idle_since == kNever) {
    d.idle_since = now;
  }
  for (double x : o.ttft_samples_s) d.samples.emplace_back(now, x);
  if (o.predicted_ttft_s >= 0) d.samples.emplace_back(now, o.predicted_ttft_s);
  Prune(d, now);
}

double Autoscaler::OngoingMean(int deployment) const {
  const Deployment& d = deps_[deployment];
  return d.ongoing.empty() ? -1 : MeanOngoing(d);
}

double Autoscaler::MeanOngoing(const Deployment& d) {
  double sum = 0;
  for (const auto& [t, v] : d.ongoing) sum += static_cast<double>(v);
  return sum / static_cast<double>(d.ongoing.size());
}

void Autoscaler::Prune(Deployment& d, Micros now) const {
  const Micros look_back = FromSeconds(d.config.look_back_period_s);
  while (!d.ongoing.empty() && d.ongoing.front().first <= now - look_back) {
    d.ongoing.pop_front();
  }
  const Micros window = FromSeconds(d.config.slo_window_s);
  while (!d.samples.empty() && d.samples.front().first <= now - window) {
    d.samples.pop_front();
  }
}

int Autoscaler::Desired(const Deployment& d, Micros now, Signals* s) const {
  const AutoscalingConfig& c = d.config;
  const int64_t load = d.last.in_flight + d.last.queued;
  s->in_flight = d.last.in_flight;
  s->queued = d.last.queued;
  s->ready = d.last.ready;
  s->starting = d.last.starting;
  s->idle_s = d.idle_since == kNever ? -1 : ToSeconds(now - d.idle_since);
  int64_t raw = d.target;
  if (c.policy == Policy::kTargetOngoing) {
    const double mean =
        d.ongoing.empty() ? static_cast<double>(load) : MeanOngoing(d);
    s->ongoing_mean = mean;
    // The epsilon keeps an exact multiple (4 / 2) from rounding up.
    raw = static_cast<int64_t>(
        std::ceil(mean / c.target_ongoing_requests - 1e-9));
  } else {
    s->samples = static_cast<int64_t>(d.samples.size());
    if (!d.samples.empty()) {
      std::vector<double> v;
      v.reserve(d.samples.size());
      for (const auto& [t, x] : d.samples) v.push_back(x);
      // Nearest rank: the smallest value with at least p of the samples at
      // or below it.
      size_t k = static_cast<size_t>(
          std::ceil(c.slo_percentile * static_cast<double>(v.size()) - 1e-9));
      k = std::clamp<size_t>(k, 1, v.size()) - 1;
      std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(k),
                       v.end());
      const double p = v[k];
      s->ttft_p_s = p;
      if (p > c.slo_ttft_s) {
        const double ratio = std::min(p / c.slo_ttft_s, 2.0);
        raw = std::max<int64_t>(
            d.target + 1, static_cast<int64_t>(std::ceil(d.target * ratio)));
      } else if (p < c.slo_headroom * c.slo_ttft_s) {
        raw = d.target - 1;
      }
    }
  }
  const int64_t lo = std::max(c.min_replicas, 1);
  return static_cast<int>(std::clamp<int64_t>(raw, lo, c.max_replicas));
}

int Autoscaler::StartCap(const Deployment& d) const {
  return d.last.ready + d.config.max_concurrent_starts;
}

void Autoscaler::Apply(Deployment& d, int to, Reason reason, const Signals& s,
                       std::vector<Decision>* out) {
  Decision dec;
  dec.deployment = d.name;
  dec.from = d.target;
  dec.to = to;
  dec.reason = reason;
  dec.signals = s;
  out->push_back(std::move(dec));
  if (to > d.target) {
    d.last.starting += to - d.target;
  } else {
    // Starting replicas stop first: they serve nothing yet.
    int stop = d.target - to;
    const int k = std::min(stop, d.last.starting);
    d.last.starting -= k;
    stop -= k;
    d.last.ready -= std::min(stop, d.last.ready);
  }
  d.target = to;
}

void Autoscaler::Evaluate(Micros now, std::vector<Decision>* out) {
  for (Deployment& d : deps_) {
    d.evaluated = now;
    Prune(d, now);
    const AutoscalingConfig& c = d.config;
    Signals s;
    const int desired = Desired(d, now, &s);
    s.desired = desired;
    const int cap = StartCap(d);
    const int64_t load = d.last.in_flight + d.last.queued;
    const Reason policy_up = c.policy == Policy::kSlo ? Reason::kSloViolated
                                                      : Reason::kTargetOngoing;
    const Reason policy_down = c.policy == Policy::kSlo
                                   ? Reason::kSloHeadroom
                                   : Reason::kTargetOngoing;

    if (d.target < c.min_replicas) {
      d.up = d.down = Run{};
      const int to = std::min(c.min_replicas, cap);
      if (to > d.target) Apply(d, to, Reason::kMinReplicas, s, out);
      continue;
    }
    if (d.target > c.max_replicas) {
      d.up = d.down = Run{};
      Apply(d, c.max_replicas, Reason::kMaxReplicas, s, out);
      continue;
    }
    if (d.target == 0) {
      d.up = d.down = Run{};
      if (load > 0 && cap >= 1) Apply(d, 1, Reason::kHeldRequests, s, out);
      continue;
    }
    if (c.min_replicas == 0 && d.idle_since != kNever &&
        now - d.idle_since >= FromSeconds(c.idle_timeout_s)) {
      d.up = d.down = Run{};
      Apply(d, 0, Reason::kIdleTimeout, s, out);
      continue;
    }
    if (desired > d.target) {
      d.down = Run{};
      if (d.up.since == kNever) {
        d.up = Run{now, desired};
      } else {
        d.up.bound = std::min(d.up.bound, desired);
      }
      s.run_s = ToSeconds(now - d.up.since);
      if (now - d.up.since >= FromSeconds(c.upscale_delay_s)) {
        const int to = std::min(d.up.bound, cap);
        // A start-capped step keeps the run: the rest follows as replicas
        // become ready, without waiting a new delay.
        if (to >= d.up.bound) d.up = Run{};
        if (to > d.target) Apply(d, to, policy_up, s, out);
      }
    } else if (desired < d.target) {
      d.up = Run{};
      if (d.down.since == kNever) {
        d.down = Run{now, desired};
      } else {
        d.down.bound = std::max(d.down.bound, desired);
      }
      s.run_s = ToSeconds(now - d.down.since);
      if (now - d.down.since >= FromSeconds(c.downscale_delay_s)) {
        const int to = d.down.bound;
        d.down = Run{};
        Apply(d, to, policy_down, s, out);
      }
    } else {
      d.up = d.down = Run{};
    }
  }
}

Micros Autoscaler::NextDeadline() const {
  Micros next = kNever;
  for (const Deployment& d : deps_) {
    const AutoscalingConfig& c = d.config;
    const bool fresh = d.evaluated < d.last_observed;
    const int64_t load = d.last.in_flight + d.last.queued;
    // Immediate rules wait only for an Evaluate after the observation that
    // triggered them (a start-capped one waits for the next observation).
    if (fresh && (d.target < c.min_replicas || d.target > c.max_replicas ||
                  (d.target == 0 && load > 0))) {
      next = std::min(next, d.last_observed);
    }
    if (c.min_replicas == 0 && d.target > 0 && d.idle_since != kNever) {
      next = std::min(next, d.idle_since + FromSeconds(c.idle_timeout_s));
    }
    if (d.up.since != kNever) {
      const Micros t = d.up.since + FromSeconds(c.upscale_delay_s);
      // A run past its delay is only start-capped: the next observation
      // (a replica ready) moves it, not time.
      if (t > d.evaluated) next = std::min(next, t);
    }
    if (d.down.since != kNever) {
      next = std::min(next, d.down.since + FromSeconds(c.downscale_delay_s));
    }
  }
  return next;
}

}  // namespace gpusched::autoscale
