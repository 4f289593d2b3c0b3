#include "sim/sim_routes.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpusched::sim {

absl::StatusOr<SimRoutes> SimRoutes::Create(
    const std::vector<config::ModelRouteSpec>& routes,
    const absl::flat_hash_map<std::string, uint32_t>& deployment_ids,
    std::vector<double> slo_s, uint64_t seed, Micros interval) {
  SimRoutes s;
  s.slo_s_ = std::move(slo_s);
  s.samples_.resize(s.slo_s_.size());
  s.seed_ = seed;
  s.interval_ = std::max<Micros>(1, interval);
  for (const config::ModelRouteSpec& spec : routes) {
    Route r;
    r.spec = spec;
    for (const config::RouteTargetSpec& t : spec.targets) {
      auto it = deployment_ids.find(t.deployment);
      if (it == deployment_ids.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("route '", spec.name, "': unknown deployment '",
                         t.deployment, "'"));
      }
      r.targets.push_back(it->second);
    }
    r.requests.assign(r.targets.size(), 0);
    if (spec.rollout) {
      r.rollout.emplace(*spec.rollout, 0);
      s.next_ = s.interval_;
    }
    s.SetWeights(r);
    if (!r.split) {
      return absl::InvalidArgumentError(
          absl::StrCat("route '", spec.name, "': no target has weight > 0"));
    }
    s.routes_.push_back(std::move(r));
  }
  return s;
}

void SimRoutes::SetWeights(Route& r) {
  r.weights = r.spec.RolloutWeights(r.rollout ? r.rollout->canary_weight() : 0);
  if (r.split && r.split->weights() == r.weights) return;  // credits go on
  auto split = serving::WeightedSplit::Create(r.weights);
  if (split.ok()) r.split = *std::move(split);
}

int SimRoutes::Find(const std::string& name) const {
  for (size_t i = 0; i < routes_.size(); ++i) {
    if (routes_[i].spec.name == name) return static_cast<int>(i);
  }
  return -1;
}

uint32_t SimRoutes::Pick(int route, uint64_t id, const std::string& tenant) {
  Route& r = routes_[route];
  // No sessions in traces: sticky per tenant, else exact shares, as the
  // gateway's.
  const int i = r.spec.sticky == "tenant"
                    ? r.split->Pick(serving::StickyHash(tenant))
                    : r.split->Next(serving::StickyHash(
                          absl::StrCat(seed_, ":", route, ":", id)));
  ++r.requests[i];
  return r.targets[i];
}

void SimRoutes::Record(uint32_t d, Micros t, const control::VersionSample& s) {
  // Only a running rollout reads samples (Step keeps its windows only).
  if (d < samples_.size() && next_ != kNever) samples_[d].push_back({t, s});
}

control::VersionWindow SimRoutes::Window(uint32_t d, Micros since,
                                         double slo_s) const {
  control::VersionWindow w(slo_s);
  const auto& v = samples_[d];
  auto it = std::upper_bound(
      v.begin(), v.end(), since,
      [](Micros t, const auto& sample) { return t < sample.first; });
  for (; it != v.end(); ++it) w.Add(it->second);
  return w;
}

Micros SimRoutes::NextStep() const { return next_; }

void SimRoutes::Step(Micros now) {
  bool running = false;
  Micros keep_from = now;  // the earliest window still read
  for (Route& r : routes_) {
    if (!r.rollout || r.rollout->done()) continue;
    // The canary against the baseline where the route has one, else the
    // stable.
    const std::string& canary = r.spec.rollout->canary;
    const std::string reference = r.spec.rollout->baseline.empty()
                                      ? r.spec.Stable()
                                      : r.spec.rollout->baseline;
    uint32_t c = 0, s = 0;
    for (size_t i = 0; i < r.targets.size(); ++i) {
      if (r.spec.targets[i].deployment == canary) c = r.targets[i];
      if (r.spec.targets[i].deployment == reference) s = r.targets[i];
    }
    const Micros since = r.rollout->WindowStart(now);
    const double slo = slo_s_[c];
    for (const control::RolloutChange& ch :
         r.rollout->Step(now, Window(s, since, slo), Window(c, since, slo))) {
      SetWeights(r);
      events_.push_back({now, r.spec.name, ch.kind, ch.message,
                         ch.canary_weight, ch.details});
    }
    if (!r.rollout->done()) {
      running = true;
      keep_from = std::min(keep_from, r.rollout->WindowStart(now));
    }
  }
  // Windows only move forward (the simulator has no Retry): older samples
  // are never read again, so memory stays bounded by the windows.
  for (auto& v : samples_) {
    auto it = std::upper_bound(
        v.begin(), v.end(), running ? keep_from : kNever,
        [](Micros t, const auto& sample) { return t < sample.first; });
    v.erase(v.begin(), it);
  }
  next_ = running ? now + interval_ : kNever;
}

std::vector<RouteRun> SimRoutes::Results() const {
  std::vector<RouteRun> out;
  for (const Route& r : routes_) {
    RouteRun run;
    run.name = r.spec.name;
    for (const config::RouteTargetSpec& t : r.spec.targets) {
      run.versions.push_back(t.version);
      run.deployments.push_back(t.deployment);
    }
    run.weights = r.weights;
    run.requests = r.requests;
    if (r.rollout) run.phase = control::RolloutPhaseName(r.rollout->phase());
    out.push_back(std::move(run));
  }
  return out;
}

}  // namespace gpusched::sim
