// `gpusched sim serve`: the request layer (Admission, ModelQueue, Router,
// Dispatcher) driven on one thread by a virtual clock over a request trace,
// with simulated replicas (continuous batching with a bounded KV cache and
// an LRU prefix cache; dynamic batching for tensor models) whose iteration
// times come from the fitted latency models.
//
// Deterministic: the same config and seed give the same results. Not
// thread-safe; one run per object.
#ifndef GPUSCHED_SIM_SERVE_SIM_H_
#define GPUSCHED_SIM_SERVE_SIM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "config/serve_sim_config.h"
#include "serving/admission.h"
#include "serving/request.h"

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
  std::vector<int> deployment_gpus;  // GPUs held per deployment (replicas x tp)
  std::vector<std::string> latency_sources;  // per deployment
  std::vector<RequestOutcome> requests;
  std::vector<LoadSample> load;
  std::vector<ReplicaStats> replicas;
  // Backlog intervals per tenant: [start, end) while it had queued requests.
  std::vector<std::vector<std::pair<Micros, Micros>>> backlog;
  Micros simulated_end = 0;
  double wall_seconds = 0;
};

absl::StatusOr<ServeSimRun> RunServeSim(const config::ServeSimConfig& config);

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_SERVE_SIM_H_
