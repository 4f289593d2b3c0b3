// Request: the unit the request layer schedules, as the policy core sees it.
//
// A Request is a small value: dense integer ids (tenant, model, class) so the
// hot path never hashes strings, token counts, an absolute first-token
// deadline, and the prompt's chained prefix-block hashes (owned by whoever
// created the request: the gateway's request context or the simulator's
// trace; the span must outlive the request's time in the core).
// Thread-compatible.
#ifndef GPUSCHED_SERVING_REQUEST_H_
#define GPUSCHED_SERVING_REQUEST_H_

#include <cstdint>
#include <span>

#include "common/clock.h"

namespace gpusched::serving {

using RequestId = uint64_t;
// Dense indices, assigned by whoever builds the core (config order).
using TenantId = uint32_t;
using ModelId = uint32_t;    // one per deployment
using ReplicaId = uint32_t;  // stable for the replica's lifetime, never reused
// Priority class index: 0 is the most important (e.g. critical=0, standard=1,
// batch=2, sheddable=3).
using ClassId = uint8_t;

struct Request {
  RequestId id = 0;
  TenantId tenant = 0;
  ModelId model = 0;
  ClassId priority = 0;
  Micros arrival = 0;
  // Absolute time by which the first token must arrive (TTFT SLO), or kNever.
  Micros deadline = kNever;
  int32_t input_tokens = 0;
  // The client's max_tokens: the output estimate used by admission and fair
  // queuing until the request completes and the real count is known.
  int32_t max_output_tokens = 0;
  // Session-affinity key (a hash of the session header), 0 when absent.
  uint64_t session = 0;
  // Predicted time to prefill the prompt on an idle replica (0: unknown).
  // Set by the Dispatcher from the deployment's latency model; deadline
  // ordering uses deadline - prefill_estimate, the latest start time.
  Micros prefill_estimate = 0;
  // Set by the Dispatcher when it hands the request to a replica.
  Micros dispatched = kNever;
  // Chained hashes of the prompt's fixed-size token blocks: equal hash at
  // position i means equal tokens in blocks 0..i. Empty when unknown.
  std::span<const uint64_t> prefix_blocks;
};

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_REQUEST_H_
