// Admission: decides at arrival whether a request may wait for service.
//
// Checks, in order: the tenant's requests-per-minute and tokens-per-minute
// token buckets (tokens = input + max_output_tokens, corrected when the real
// output length is known), the model queue's bound (Triton's max_queue_size),
// the tenant's bound on queued requests, and deadline feasibility (reject at
// once when the predicted first token already falls after the deadline,
// rather than let the request time out later). Every rejection carries a
// reason code and a Retry-After estimate. Buckets are charged only when the
// request is admitted.
//
// Clock-driven (every call takes `now`), no I/O, no allocation per request
// once the tenant table is sized. Not thread-safe.
#ifndef GPUSCHED_SERVING_ADMISSION_H_
#define GPUSCHED_SERVING_ADMISSION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "serving/request.h"

namespace gpusched::serving {

enum class RejectReason : uint8_t {
  kNone = 0,
  kRateLimitedRequests,  // requests per minute
  kRateLimitedTokens,    // tokens per minute
  kModelQueueFull,       // the deployment's max_queue_size
  kTenantQueueFull,      // the tenant's max_queued
  kDeadlineInfeasible,   // predicted first token after the deadline
  kQueueTimeout,         // waited longer than its class timeout
  kPromptTooLong,        // can never fit a replica's KV cache
  kNoReplica,            // the deployment cannot get a replica
  kTenantConcurrency,    // the tenant's max_concurrency
};
inline constexpr int kNumRejectReasons = 10;
// Stable snake_case name, used in reports, metrics labels and API errors.
const char* RejectReasonName(RejectReason reason);

struct Verdict {
  RejectReason reason = RejectReason::kNone;
  // When a retry could succeed (0 when unknown or immediate).
  Micros retry_after = 0;
  bool admitted() const { return reason == RejectReason::kNone; }
};

// A token bucket refilled continuously at `rate` per second up to `burst`.
class TokenBucket {
 public:
  TokenBucket() = default;  // unlimited
  TokenBucket(double rate_per_second, double burst);
  bool unlimited() const { return rate_ <= 0; }
  // New rate and depth; the level is kept (refilled to `now` at the old
  // rate first), cut to the new depth: a change never adds tokens. From
  // unlimited the bucket starts full.
  void Reconfigure(double rate_per_second, double burst, Micros now);
  // Takes `n` if available; otherwise takes nothing.
  bool TryTake(double n, Micros now);
  // Returns `n` (e.g. an over-estimate), up to the burst.
  void Give(double n, Micros now);
  // Takes `n` even when that makes the level negative (an under-estimate
  // corrected after the fact; the debt delays later requests).
  void Force(double n, Micros now);
  // How long until `n` would be available (0 if now).
  Micros TimeUntil(double n, Micros now);
  double level(Micros now);

 private:
  void Refill(Micros now);
  double rate_ = 0;  // per second; <= 0 means unlimited
  double burst_ = 0;
  double level_ = 0;
  Micros last_ = 0;
};

struct TenantLimits {
  double requests_per_minute = 0;  // 0: unlimited
  double tokens_per_minute = 0;    // 0: unlimited; input + output tokens
  // Bucket depth as minutes of the rate (1: a minute's allowance at once).
  double burst_minutes = 1.0;
  int64_t max_queued = 0;  // requests waiting across models; 0: unbounded
  // Requests admitted and not yet finished (waiting or running), across
  // models; 0: unbounded.
  int64_t max_concurrency = 0;
  bool operator==(const TenantLimits&) const = default;
};

absl::Status ValidateTenantLimits(const TenantLimits& limits);

// This gateway's part of a tenant's limits when several gateways serve it
// (docs/ha.md, "Tenant limits"): rates and bucket depths are multiplied by
// `rate`; the concurrency and queue bounds are replaced by whole slots
// (0: none here; -1: the whole limit).
struct TenantShare {
  double rate = 1.0;  // in [0, 1]
  int64_t max_concurrency = -1;
  int64_t max_queued = -1;
  bool operator==(const TenantShare&) const = default;
};

// What the dispatcher knows about the request's queue at arrival.
struct QueueOutlook {
  int64_t model_queued = 0;
  int64_t model_queue_limit = 0;  // 0: unbounded
  // Predicted absolute time of the first token if admitted (kNever:
  // unknown, so no deadline check).
  Micros predicted_first_token = kNever;
  // Predicted time until a queue slot frees (for queue-full Retry-After).
  Micros predicted_drain = 0;
};

class Admission {
 public:
  // `limits` must be valid (ValidateTenantLimits).
  // Changing limits keeps what the buckets hold (TokenBucket::Reconfigure).
  void SetTenantLimits(TenantId tenant, const TenantLimits& limits, Micros now);
  // This gateway's share of the tenant's limits (default: all of them).
  void SetTenantShare(TenantId tenant, const TenantShare& share, Micros now);

  Verdict Admit(const Request& r, const QueueOutlook& outlook, Micros now);

  // The admitted request left the queue (dispatched, expired or cancelled).
  void OnDequeued(const Request& r);
  // Corrects the token bucket with the real output length.
  void OnCompleted(const Request& r, int32_t output_tokens, Micros now);
  // The admitted request was never served (expired, rejected later):
  // refund what it was charged.
  void OnNotServed(const Request& r, Micros now);

  int64_t tenant_queued(TenantId tenant) const {
    return tenant < tenants_.size() ? tenants_[tenant].queued : 0;
  }
  int64_t tenant_active(TenantId tenant) const {
    return tenant < tenants_.size() ? tenants_[tenant].active : 0;
  }

 private:
  struct TenantState {
    TenantLimits limits;
    TenantShare share;
    TokenBucket requests;
    TokenBucket tokens;
    int64_t queued = 0;
    int64_t active = 0;  // admitted, not yet finished
  };
  TenantState& State(TenantId t);
  // The buckets for s.limits and s.share.
  static void Reconfigure(TenantState& s, Micros now);
  // The bounds in force here (0: unbounded, -1: nothing here).
  static int64_t Bound(int64_t limit, int64_t share);
  std::vector<TenantState> tenants_;
};

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_ADMISSION_H_
