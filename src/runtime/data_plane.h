// DataPlane: what the live driver (runtime::Controller) needs of the data
// plane, and all it may call there. The driver pushes: which deployments
// and tenants are served (from their specs), which replicas are ready and
// how loaded their engines say they are; it reads: the load per
// deployment and per endpoint, the TTFT samples for the slo autoscaling
// policy; and it is told when a request is held at zero replicas (the
// demand sink). The data plane never calls into the driver otherwise.
// gateway::Gateway implements it; tests may fake it.
//
// Implementations are thread-safe: the driver calls from its loop and its
// API threads.
#ifndef GPUSCHED_RUNTIME_DATA_PLANE_H_
#define GPUSCHED_RUNTIME_DATA_PLANE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "config/manifest.h"
#include "control/rollout.h"
#include "net/upstream.h"
#include "serving/dispatcher.h"

namespace gpusched::runtime {

// A deployment's requests now.
struct ServingLoad {
  int64_t queued = 0;     // waiting in the data plane (held or queued)
  int64_t in_flight = 0;  // dispatched to replicas, not finished
  int replicas = 0;       // ready replicas it routes to
  // Of `queued`, held for want of a ready replica, and since when (steady
  // clock; 0 when none is held).
  int64_t held = 0;
  Micros held_since = 0;
};

// What one tenant asked of this data plane since it started: requests
// that reached admission (admitted or not) and the tokens they asked for
// (input + max output). Counters: the driver takes rates from differences.
struct TenantUsage {
  int64_t requests = 0;
  int64_t tokens = 0;
};

class DataPlane {
 public:
  virtual ~DataPlane() = default;

  // Serves `spec` under its name (creates or updates it); `classes` are
  // the priority classes, most important first. InvalidArgument naming the
  // field on a spec it cannot serve (nothing changes then).
  virtual absl::Status ServeDeployment(
      const config::DeploymentSpec& spec,
      const std::vector<std::string>& classes) = 0;
  // New requests for it are refused; queued ones are still served until
  // SetReplicas(name, {}).
  virtual void RemoveDeployment(const std::string& name) = 0;
  virtual absl::Status ServeTenant(const config::TenantSpec& spec) = 0;
  // The tenant's keys stop working at once.
  virtual void RemoveTenant(const std::string& name) = 0;

  // The ready replicas of `name`: the only way the data plane learns of
  // them. One left out takes no new request; its in-flight ones finish.
  virtual void SetReplicas(const std::string& name,
                           const std::vector<net::Endpoint>& ready) = 0;
  // Engine-reported load of the replica at `ep` (for the routers).
  virtual void UpdateEngineLoad(const net::Endpoint& ep,
                                const serving::EngineLoad& load) = 0;

  virtual ServingLoad Load(const std::string& name) = 0;
  // Requests proxied to `ep` and not finished.
  virtual int64_t InFlightOn(const net::Endpoint& ep) = 0;
  // TTFTs (seconds) of `deployment`'s requests that got their first token
  // after `since` (steady clock).
  virtual std::vector<double> TtftSince(const std::string& deployment,
                                        Micros since) = 0;
  // The finished requests of `deployment` after `since` (steady clock),
  // failed ones included, for a rollout's analysis (control/rollout.h).
  virtual std::vector<control::VersionSample> SamplesSince(
      const std::string& deployment, Micros since) = 0;

  // Serves the route under its name with these weights (one per target, in
  // spec order; a rollout's, or the spec's); creates or replaces it.
  // InvalidArgument naming the problem (nothing changes then).
  virtual absl::Status ServeRoute(const config::ModelRouteSpec& spec,
                                  const std::vector<int>& weights) = 0;
  // Requests for the name are refused from now on.
  virtual void RemoveRoute(const std::string& name) = 0;

  // By tenant name (tenants that sent nothing may be left out).
  virtual std::map<std::string, TenantUsage> TenantUsages() = 0;
  // This data plane's shares of tenants' limits when several serve them
  // (serving::TenantShare); a tenant left out has all of its limits here.
  virtual void SetTenantShares(
      const std::map<std::string, serving::TenantShare>& shares) = 0;

  // Expires queued requests past their timeout; called every pass.
  virtual void Tick() = 0;

  // Called with the deployment and the request's arrival (steady clock)
  // when a request is held while the deployment has no ready replica, on
  // the thread that received it and without the data plane's own lock.
  using DemandSink =
      std::function<void(const std::string& deployment, Micros arrival)>;
  virtual void SetDemandSink(DemandSink sink) = 0;
};

}  // namespace gpusched::runtime

#endif  // GPUSCHED_RUNTIME_DATA_PLANE_H_
