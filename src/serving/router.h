// Router: picks the replica that serves a request, one policy per deployment.
//
// The dispatcher (serving/dispatcher.h) calls Pick only with replicas that are
// ready and below their concurrency cap, so a router never has to say "none";
// requests that find no such replica wait in the ModelQueue. Routers read the
// load the gateway tracks itself (outstanding) and what engines report (KV
// use, waiting and running counts, as vLLM's metrics do). Routers that learn
// (prefix-affinity, session-affinity) learn from OnDispatched, not from Pick,
// so a Pick whose request is not dispatched leaves them unchanged;
// round-robin's cursor and power-of-two's draws do move in Pick. Policies and
// formulas: docs/routing.md. Owned by one deployment; not thread-safe (the
// core runs on one strand).
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
  // The same for one replica in every gateway (a hash of its endpoint;
  // ids are each gateway's own): where the routers that hash (prefix- and
  // session-affinity) place it, so that N gateways agree on a prefix's or
  // a session's home replica. 0: use the id.
  uint64_t key = 0;
  int outstanding = 0;      // dispatched by the gateway, not yet completed
  int max_outstanding = 0;  // the concurrency cap (max_ongoing_requests)
  // Engine-reported (or simulated) state; -1 where unknown.
  int waiting = -1;              // requests queued inside the engine
  int running = -1;              // sequences in the running batch
  double kv_used_fraction = -1;  // 0..1
  int64_t kv_tokens = -1;        // context tokens held by running sequences
  // Prompt tokens accepted but not yet prefilled (gateway-tracked).
  int64_t pending_prefill_tokens = 0;
  // The replica's KV budget in tokens (0: none) and the tokens its
  // outstanding requests may grow to (input + max_output_tokens), both
  // gateway-tracked.
  int64_t kv_budget_tokens = 0;
  int64_t reserved_tokens = 0;
};

// Knobs of the TTFT predictor (PredictTtftSeconds); see docs/routing.md.
struct TtftPredictorOptions {
  // Prompt tokens one engine iteration prefills (vLLM's
  // max_num_batched_tokens with chunked prefill): each chunk shares its
  // iteration with one decode step of the running batch.
  int32_t prefill_chunk_tokens = 2048;
  // A replica whose KV cache is at least this full admits nothing new until
  // running sequences finish (vLLM preempts/queues at ~95-100%).
  double kv_full_fraction = 0.95;
  // Output length assumed for running sequences when the request's
  // max_output_tokens is 0 (used only for the KV-full wait).
  int32_t default_output_tokens = 256;
  bool operator==(const TtftPredictorOptions&) const = default;
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
  // prefix-affinity: points per replica on the consistent-hash ring.
  int virtual_nodes = 100;
  // prefix-affinity in the gateway: prompt bytes per block hashed
  // (serving/prompt_blocks.h; the gateway has no tokenizer). The simulator
  // takes its blocks from the trace.
  int prefix_block_chars = 64;
  // session-affinity: what to do for requests without a session key.
  std::string session_fallback = "least-outstanding";
  // session-affinity: how many session -> replica pins the router remembers
  // (LRU).
  int64_t session_capacity = 1 << 20;
  // kv-aware: cost = kv_weight * kv_term + queue_weight * queue_term, both
  // terms in [0, 1] (docs/routing.md). At least one weight must be > 0.
  double kv_weight = 1.0;
  double queue_weight = 1.0;
  // latency-predictive: the TTFT predictor's knobs.
  TtftPredictorOptions ttft;
  bool operator==(const RouterConfig&) const = default;
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
// latency-predictive (also as the session fallback); the router keeps a copy.
// `seed` drives power-of-two's draws. Invalid knobs or an unknown policy ->
// InvalidArgument (the latter listing the names).
absl::StatusOr<std::unique_ptr<Router>> MakeRouter(const RouterConfig& config,
                                                   const LatencyModel* latency,
                                                   uint64_t seed);

std::vector<std::string> RouterNames();

// Predicted time to first token (seconds) if `request` went to `replica` now,
// from the replica's latency model. The engine serves prompts first come,
// first served in chunks of `prefill_chunk_tokens`, each chunk sharing an
// iteration with one decode step of the running batch:
//
//   ahead    = max(0, pending_prefill_tokens) + input_tokens
//   chunks   = ceil(ahead / prefill_chunk_tokens)
//   ttft     = prefill_s(ahead) + chunks * decode_s(running, kv_tokens)
//            + kv_wait
//   kv_wait  = 0 unless the KV cache is full (kv used >= kv_full_fraction,
//              or kv_tokens + ahead > kv_capacity_tokens), then
//              (waiting + 1) * L / (running + 1)
//                * decode_s(max(1, running), kv_tokens)
//              -- the time until waiting + 1 running sequences finish, their
//              remaining outputs spread evenly over [0, L], L the request's
//              max_output_tokens (default_output_tokens when 0).
//
// Unknown engine fields (-1) fall back to gateway-tracked ones: running ->
// outstanding; waiting -> outstanding - running (0 when running is unknown
// too); kv_tokens -> kv_used_fraction * kv_capacity_tokens, else 0; kv used
// -> kv_tokens / kv_capacity_tokens, else only the fit test applies. Pure;
// no allocation.
double PredictTtftSeconds(const LatencyModel& model, const Request& request,
                          const ReplicaLoad& replica,
                          const TtftPredictorOptions& options = {});

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_ROUTER_H_
