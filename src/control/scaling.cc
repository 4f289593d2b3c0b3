#include "control/scaling.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpusched::control {

Scaling::Scaling() : autoscaler_(std::make_unique<autoscale::Autoscaler>()) {}

absl::Status Scaling::Set(const std::string& name,
                          const autoscale::AutoscalingConfig& config,
                          int initial, Micros now) {
  if (auto it = index_.find(name); it != index_.end()) {
    return autoscaler_->UpdateConfig(it->second, config);
  }
  absl::StatusOr<int> index =
      autoscaler_->AddDeployment(name, config, initial, now);
  if (!index.ok()) return index.status();
  index_[name] = *index;
  return absl::OkStatus();
}

void Scaling::Remove(const std::string& name, Micros now) {
  if (!index_.contains(name)) return;
  // The Autoscaler cannot forget one: a new one with the others, at their
  // targets, in their order.
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [n, i] : index_) {
    if (n != name) order.emplace_back(i, n);
  }
  std::sort(order.begin(), order.end());
  auto next = std::make_unique<autoscale::Autoscaler>();
  std::map<std::string, int> index;
  for (const auto& [i, n] : order) {
    // Cannot fail: the knobs were valid and the names are unique.
    absl::StatusOr<int> k = next->AddDeployment(n, autoscaler_->config(i),
                                                autoscaler_->target(i), now);
    if (k.ok()) index[n] = *k;
  }
  autoscaler_ = std::move(next);
  index_ = std::move(index);
  held_since_.erase(name);
}

int Scaling::target(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : autoscaler_->target(it->second);
}

double Scaling::DemandPerReplica(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return -1;
  const double mean = autoscaler_->OngoingMean(it->second);
  if (mean < 0) return -1;
  return mean / std::max(1, autoscaler_->target(it->second));
}

bool Scaling::WantsTtft(const std::string& name) const {
  auto it = index_.find(name);
  return it != index_.end() &&
         autoscaler_->config(it->second).policy == autoscale::Policy::kSlo;
}

void Scaling::Resume(const std::string& name, int count) {
  auto it = index_.find(name);
  if (it == index_.end()) return;
  const autoscale::AutoscalingConfig& c = autoscaler_->config(it->second);
  autoscaler_->SetTarget(it->second,
                         std::clamp(count, c.min_replicas, c.max_replicas));
}

int Scaling::SwappedOut(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) return -1;
  const int target = std::max(0, autoscaler_->target(it->second) - 1);
  autoscaler_->SetTarget(it->second, target);
  return target;
}

bool Scaling::Held(const std::string& name, Micros arrival) {
  auto it = index_.find(name);
  if (it == index_.end()) return false;
  held_since_.try_emplace(name, arrival);
  return autoscaler_->target(it->second) == 0;
}

void Scaling::Observe(const std::string& name, Micros now, ScalingLoad load,
                      const ReplicaSet& set) {
  auto it = index_.find(name);
  if (it == index_.end()) return;
  autoscale::Observation o;
  o.in_flight = load.in_flight;
  o.queued = load.queued;
  o.ready = set.ready();
  o.starting = set.starting();
  o.ttft_samples_s = std::move(load.ttft_samples_s);
  autoscaler_->Observe(it->second, now, o);
}

void Scaling::Evaluate(Micros now, std::vector<ScaleStep>* out) {
  decisions_.clear();
  autoscaler_->Evaluate(now, &decisions_);
  for (autoscale::Decision& dec : decisions_) {
    ScaleStep step;
    step.deployment = dec.deployment;
    step.from = dec.from;
    step.to = dec.to;
    step.reason = dec.reason;
    if (dec.from == 0 && dec.to > 0) {
      auto held = held_since_.find(dec.deployment);
      step.demand_arrival = held != held_since_.end() ? held->second : now;
      held_since_.erase(dec.deployment);
    }
    if (dec.to == 0) held_since_.erase(dec.deployment);
    const autoscale::Signals& s = dec.signals;
    const char* reason = autoscale::ReasonName(dec.reason);
    step.event.kind = "deployment.autoscaled";
    step.event.message = absl::StrCat(
        "deployment ", dec.deployment, " autoscaled from ", dec.from, " to ",
        dec.to, " replicas (", reason, ": ", s.ToString(), ")");
    step.event.details = {{"from", dec.from},
                          {"to", dec.to},
                          {"reason", reason},
                          {"signals",
                           {{"desired", s.desired},
                            {"in_flight", s.in_flight},
                            {"queued", s.queued},
                            {"ready", s.ready},
                            {"starting", s.starting},
                            {"ongoing_mean", s.ongoing_mean},
                            {"ttft_p_s", s.ttft_p_s},
                            {"samples", s.samples},
                            {"idle_s", s.idle_s},
                            {"run_s", s.run_s}}}};
    out->push_back(std::move(step));
  }
}

}  // namespace gpusched::control
