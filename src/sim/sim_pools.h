// Capacity on demand in `gpusched sim serve`: the config's cluster.pools as
// the fleet's pools (prices from the table unless a pool sets one, spot
// losses from a rate or a trace file), and the SLO a deployment's cost per
// token is judged at (control/capacity.h). Stateless; thread-compatible.
#ifndef GPUSCHED_SIM_SIM_POOLS_H_
#define GPUSCHED_SIM_SIM_POOLS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "config/serve_sim_config.h"
#include "control/capacity.h"
#include "sim/sim_fleet.h"

namespace gpusched::sim {

// Errors name the config line and the pool (a GPU the price table lacks,
// an unreadable or malformed preemption trace; at most 1,000,000 times).
absl::StatusOr<std::vector<FleetPool>> FleetPoolsFor(
    const config::ServeSimConfig& cfg);

// The strictest TTFT and TPOT targets of the tenants, the token counts of
// the synthetic tenants that send to `d`, and the concurrency its replicas
// run at (the autoscaler's target, else max_ongoing_requests).
control::SloTarget SloTargetFor(const config::ServeSimConfig& cfg,
                                const config::SimDeploymentSpec& d);

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_SIM_POOLS_H_
