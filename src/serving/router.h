// Router: picks the replica that serves a request, one policy per deployment.
//
// The dispatcher (serving/dispatcher.h) calls Pick only with replicas that are
// ready and below their concurrency cap, so a router never has to say "none";
// requests that find no such replica wait in the ModelQueue. Routers read the
// load the gateway tracks itself (outstanding) and what engines report (KV
// use, waiting and running counts, as vLLM's metrics do). Owned by one
// deployment; not thread-safe (the core runs on one strand).
#ifndef GPUSCHED_SERVING_ROUTER_H_
#define GPUSCHED_SERVING_ROUTER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "serving/latency_model.h"
#include "serving/request.h"

namespace gpusched::serving {

// What a router may know about one candidate replica.
struct ReplicaLoad {
  ReplicaId id = 0;
  int outstanding = 0;      // dispatched by the gateway, not yet completed
  int max_outstanding = 0;  // the concurrency cap (max_ongoing_requests)
  // Engine-reported (or simulated) state; -1 where unknown.
  int waiting = -1;              // requests queued inside the engine
  int running = -1;              // sequences in the running batch
  double kv_used_fraction = -1;  // 0..1
  int64_t kv_tokens = -1;        // context tokens held by running sequences
  // Prompt tokens accepted but not yet prefilled (gateway-tracked).
  int64_t pending_prefill_tokens = 0;
};

struct RouterConfig {
  // round-robin | least-outstanding | power-of-two | prefix-affinity |
  // kv-aware | latency-predictive | session-affinity
  std::string policy = "least-outstanding";
  // prefix-affinity: a replica may take the request for affinity only while
  // its load is at most (1 + load_bound_epsilon) x the mean (Mirrokni et al.).
  double load_bound_epsilon = 0.25;
  // prefix-affinity: how many leading blocks identify the prefix for the
  // consistent-hash fallback.
  int affinity_blocks = 4;
  // prefix-affinity: how many block hashes the router remembers (LRU).
  int64_t prefix_index_capacity = 1 << 20;
  // session-affinity: what to do for requests without a session key.
  std::string session_fallback = "least-outstanding";
};

class Router {
 public:
  virtual ~Router() = default;
  virtual const char* name() const = 0;
  // `replicas` is non-empty; returns an index into it.
  virtual int Pick(const Request& request,
                   std::span<const ReplicaLoad> replicas, Micros now) = 0;
  // The request went to `replica` (whichever router chose it).
  virtual void OnDispatched(const Request& request, ReplicaId replica) {}
  // The replica stopped; forget what is known about it.
  virtual void OnReplicaRemoved(ReplicaId replica) {}
};

// Makes the configured router. `latency` (may be null) is required by
// latency-predictive. Unknown policy -> InvalidArgument listing the names.
absl::StatusOr<std::unique_ptr<Router>> MakeRouter(const RouterConfig& config,
                                                   const LatencyModel* latency,
                                                   uint64_t seed);

std::vector<std::string> RouterNames();

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_ROUTER_H_
