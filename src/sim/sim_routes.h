// SimRoutes: the simulator's ModelRoutes (config::ServeSimConfig::routes):
// a request for a route's public name goes to one target, picked by weight
// at its arrival (serving::WeightedSplit, as the gateway picks), and a
// route's canary rollout is the live one (control::Rollout), stepped every
// `interval` of simulated time on the samples of the requests finished so
// far. `gpusched sim serve` reports each route's split and rollout events.
// Deterministic; not thread-safe.
#ifndef GPUSCHED_SIM_SIM_ROUTES_H_
#define GPUSCHED_SIM_SIM_ROUTES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "config/model_route.h"
#include "control/rollout.h"
#include "nlohmann/json.hpp"
#include "serving/split.h"

namespace gpusched::sim {

// What happened to one route in a run.
struct RouteEvent {
  Micros t = 0;
  std::string route, kind, message;
  int canary_weight = 0;
  nlohmann::json details;
};
struct RouteRun {
  std::string name;
  std::vector<std::string> versions, deployments;
  std::vector<int> weights;       // at the end
  std::vector<int64_t> requests;  // per target
  std::string phase;              // the rollout's at the end, "" if none
};

class SimRoutes {
 public:
  // `deployment_ids`: the simulated deployments' ids by name; `slo_s`: each
  // deployment's TTFT SLO (0: none), by id.
  static absl::StatusOr<SimRoutes> Create(
      const std::vector<config::ModelRouteSpec>& routes,
      const absl::flat_hash_map<std::string, uint32_t>& deployment_ids,
      std::vector<double> slo_s, uint64_t seed, Micros interval);

  // The route named `name`, or -1.
  int Find(const std::string& name) const;
  // The deployment request `id` of `tenant` for route `route` goes to.
  uint32_t Pick(int route, uint64_t id, const std::string& tenant);
  // A request of deployment `d` finished (or failed) at `t`.
  void Record(uint32_t d, Micros t, const control::VersionSample& s);
  // When Step should next run (kNever without a running rollout).
  Micros NextStep() const;
  // Steps every running rollout at `now`.
  void Step(Micros now);

  const std::vector<RouteEvent>& events() const { return events_; }
  std::vector<RouteRun> Results() const;

 private:
  struct Route {
    config::ModelRouteSpec spec;
    std::vector<uint32_t> targets;  // deployment ids
    std::vector<int> weights;
    std::optional<serving::WeightedSplit> split;
    std::optional<control::Rollout> rollout;
    std::vector<int64_t> requests;
  };
  void SetWeights(Route& r);
  // Deployment `d`'s samples finished after `since`.
  control::VersionWindow Window(uint32_t d, Micros since, double slo_s) const;

  std::vector<Route> routes_;
  std::vector<double> slo_s_;
  // Per deployment id: (finish time, sample), in time order, within the
  // running rollouts' windows.
  std::vector<std::vector<std::pair<Micros, control::VersionSample>>> samples_;
  uint64_t seed_ = 0;
  Micros interval_ = kMicrosPerSecond;
  Micros next_ = kNever;
  std::vector<RouteEvent> events_;
};

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_SIM_ROUTES_H_
