// The router policies behind MakeRouter (serving/router.h), one factory per
// policy. Internal to serving/: callers use MakeRouter, which validates the
// config before calling these. Each router is owned by one deployment and is
// not thread-safe.
#ifndef GPUSCHED_SERVING_ROUTERS_ROUTERS_H_
#define GPUSCHED_SERVING_ROUTERS_ROUTERS_H_

#include <cstdint>
#include <memory>
#include <span>

#include "serving/latency_model.h"
#include "serving/router.h"

namespace gpusched::serving::internal {

// The least-outstanding choice: lowest outstanding / max_outstanding (a cap
// <= 0 counts as 1), then lowest outstanding, then lowest index. Compared
// exactly in integers. `replicas` is non-empty.
int LeastOutstandingIndex(std::span<const ReplicaLoad> replicas);

std::unique_ptr<Router> NewRoundRobinRouter();
std::unique_ptr<Router> NewLeastOutstandingRouter();
std::unique_ptr<Router> NewPowerOfTwoRouter(uint64_t seed);
std::unique_ptr<Router> NewPrefixAffinityRouter(const RouterConfig& config);
std::unique_ptr<Router> NewKvAwareRouter(const RouterConfig& config);
std::unique_ptr<Router> NewLatencyPredictiveRouter(const RouterConfig& config,
                                                   const LatencyModel& model);
std::unique_ptr<Router> NewSessionAffinityRouter(
    const RouterConfig& config, std::unique_ptr<Router> fallback);

}  // namespace gpusched::serving::internal

#endif  // GPUSCHED_SERVING_ROUTERS_ROUTERS_H_
