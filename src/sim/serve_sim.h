// `gpusched sim serve`: the request layer (Admission, ModelQueue, Router,
// Dispatcher) driven on one thread by a virtual clock over a request trace,
// with simulated replicas (continuous batching with a bounded KV cache and
// an LRU prefix cache; dynamic batching for tensor models) whose iteration
// times come from the fitted latency models.
//
// Capacity: every deployment's replicas live in the control core the live
// controller runs (control::ReplicaSet), driven by sim::SimFleet
// (sim/sim_fleet.h): placement on nodes (cluster.gpus in nodes of
// cluster.gpus_per_node; tensor_parallel GPUs on one node or gpu_fraction
// of one GPU) by the scheduler live uses, room from control::PlanRoom (swap
// idle replicas of autoscaled deployments, then preempt lower priorities;
// victims drain), readiness at the first 10 ms probe after a replica's cold
// start (sim/cold_start.h). The initial replicas serve from time 0.
// Autoscaled deployments are driven by autoscale::Autoscaler, observed every
// `autoscaling_interval_s` and at each request that arrives with no replica
// ready (held in the queue until one is).
// Deterministic: the same config and seed give the same results. Not
// thread-safe; one run per object.
#ifndef GPUSCHED_SIM_SERVE_SIM_H_
#define GPUSCHED_SIM_SERVE_SIM_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "config/serve_sim_config.h"
#include "serving/admission.h"
#include "serving/request.h"
#include "sim/sim_fleet.h"
#include "sim/sim_routes.h"

namespace gpusched::sim {

// What happened to one request.
struct RequestOutcome {
  serving::TenantId tenant = 0;
  serving::ModelId deployment = 0;
  serving::ClassId cls = 0;
  Micros arrival = 0;
  Micros dispatched = -1;
  Micros first_token = -1;
  Micros finished = -1;
  int32_t input_tokens = 0;
  int32_t output_tokens = 0;
  int64_t cached_tokens = 0;
  // Arrived while its deployment had no ready replica (held for a start).
  bool held = false;
  // kNone when completed; otherwise why it was not served.
  serving::RejectReason reason = serving::RejectReason::kNone;
  bool completed() const {
    return finished >= 0 && reason == serving::RejectReason::kNone;
  }
};

// One sample of the load over time.
struct LoadSample {
  Micros t = 0;
  std::vector<int64_t> queued;       // per deployment, in gpusched's queue
  std::vector<int64_t> outstanding;  // per deployment, on replicas
  std::vector<int64_t> arrivals;     // per deployment, in the last interval
  std::vector<int64_t> completions;  // per deployment, in the last interval
  std::vector<int> replicas;         // per deployment, starting or ready
};

// One capacity decision, as the live controller logs it: kind is
// deployment.autoscaled, replica.started, replica.ready, replica.stopped,
// replica.evicted, replica.preempted, replica.draining or
// replica.unschedulable.
struct CapacityEvent {
  Micros t = 0;
  std::string kind;
  std::string deployment;
  std::string message;  // the why, with the numbers
};

// What one deployment's replicas cost and did (autoscaling, swapping,
// preemption).
struct DeploymentCapacity {
  bool autoscaling = false;
  std::string priority_class;
  double gpu_seconds = 0;      // GPUs held (starting, ready or draining)
  double replica_seconds = 0;  // replicas held, integrated over time
  int replicas_max = 0;
  int64_t starts = 0;                        // replicas started after time 0
  std::vector<double> cold_start_s;          // start -> ready of each
  int64_t evictions = 0;                     // idle replicas swapped out
  int64_t preemptions = 0;                   // replicas preempted (drained)
  std::map<std::string, int64_t> decisions;  // autoscaler, by reason
};

struct ReplicaStats {
  std::string deployment;
  int64_t iterations = 0;
  int64_t preemptions = 0;
  double busy_seconds = 0;
};

struct ServeSimRun {
  config::ServeSimConfig config;
  std::string trace_format;
  std::string trace_source;
  int64_t trace_requests = 0;
  // Per tenant (by TenantId): name, fair-share weight and SLOs.
  std::vector<std::string> tenant_names;
  std::vector<double> tenant_weights;
  std::vector<config::SloSpec> tenant_slos;
  std::vector<std::string> deployment_names;
  std::vector<std::string> class_names;
  // GPUs held per deployment: replicas x tp, or x gpu_fraction.
  std::vector<double> deployment_gpus;
  std::vector<std::string> latency_sources;  // per deployment
  std::vector<RequestOutcome> requests;
  std::vector<LoadSample> load;
  std::vector<ReplicaStats> replicas;
  // Per deployment. `elastic`: some deployment autoscales or the cluster is
  // bounded (the report then has the capacity sections).
  std::vector<DeploymentCapacity> capacity;
  bool elastic = false;
  std::vector<CapacityEvent> events;  // in time order
  // Per route: the split and its rollout's events (sim/sim_routes.h).
  std::vector<RouteRun> routes;
  std::vector<RouteEvent> route_events;
  // Capacity on demand (cluster.pools) or a static price: what the nodes
  // cost (sim/sim_fleet.h).
  bool has_cost = false;
  FleetCost cost;
  // When the last replica change happened or the last request finished.
  Micros capacity_end = 0;
  // Backlog intervals per tenant: [start, end) while it had queued requests.
  std::vector<std::vector<std::pair<Micros, Micros>>> backlog;
  Micros simulated_end = 0;
  double wall_seconds = 0;
};

absl::StatusOr<ServeSimRun> RunServeSim(const config::ServeSimConfig& config);

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_SERVE_SIM_H_
