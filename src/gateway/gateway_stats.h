// GatewayStats: what the gateway's requests did lately, per deployment and
// per tenant, for the dashboard (GET /api/v1/stats, docs/control-api.md).
// The Gateway records each request when it finishes (TTFT, end-to-end
// latency, tokens, outcome) or is rejected at admission. Per deployment it
// keeps counters since start, a ring of the last kSamples latency samples
// (percentiles over those within the window) and per-second buckets for the
// recent request rate; per tenant, counters. Memory is bounded per
// deployment and tenant name.
//
// Not the Prometheus metrics (/metrics): a cheap JSON snapshot meant to be
// polled every second. Thread-safe (one mutex of its own, never held while
// calling out).
#ifndef GPUSCHED_GATEWAY_GATEWAY_STATS_H_
#define GPUSCHED_GATEWAY_GATEWAY_STATS_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "control/rollout.h"
#include "nlohmann/json.hpp"

namespace gpusched::gateway {

class GatewayStats {
 public:
  static constexpr size_t kSamples = 2048;
  static constexpr int kRateSeconds = 10;  // the request-rate window
  static constexpr Micros kWindow = 60 * kMicrosPerSecond;  // percentiles

  struct Finish {
    std::string deployment;
    std::string tenant;
    Micros now = 0;             // steady clock, as the gateway's
    Micros ttft = 0;            // arrival to the response's first byte
    Micros e2e = 0;             // arrival to the last byte
    int64_t input_tokens = 0;   // estimated (the body's bytes / 4)
    int64_t output_tokens = 0;  // the engine's usage, else counted chunks
    bool ok = true;             // 2xx from the engine
  };
  void RecordFinished(const Finish& f);
  void RecordRejected(const std::string& deployment, const std::string& tenant,
                      Micros now);

  // {"windowSeconds", "rateSeconds", "deployments": [{"deployment",
  //  "completed", "errors", "rejected", "inputTokens", "outputTokens",
  //  "requestsPerSecond", "outputTokensPerSecond", "samples",
  //  "ttftSeconds": {"p50","p90","p99"}, "e2eSeconds": {...}}],
  //  "tenants": [{"tenant", "requests", "errors", "rejected", "inputTokens",
  //  "outputTokens", "requestsPerSecond"}]}; percentiles are null without
  // samples in the window.
  nlohmann::json Json(Micros now) const;
  // TTFTs (seconds) of the deployment's requests finished after `since`
  // (steady clock; within the last kSamples), for the SLO autoscaler.
  std::vector<double> TtftSince(const std::string& deployment,
                                Micros since) const;
  nlohmann::json Json() const;  // now: the steady clock, as the gateway's
  // The deployment's requests finished after `since` (within the last
  // kSamples), failed ones included: what a rollout's analysis reads.
  std::vector<control::VersionSample> SamplesSince(
      const std::string& deployment, Micros since) const;

 private:
  struct Bucket {
    int64_t second = -1;
    int64_t requests = 0;
    int64_t output_tokens = 0;
  };
  struct Rate {
    std::array<Bucket, kRateSeconds + 2> buckets;
    void Add(Micros now, int64_t output_tokens);
    // Per second over the last kRateSeconds whole seconds.
    std::pair<double, double> PerSecond(Micros now) const;
  };
  struct Sample {
    Micros time = 0, ttft = 0, e2e = 0;
    bool ok = true;  // failed requests are samples too, without latencies
  };
  struct Deployment {
    int64_t completed = 0, errors = 0, rejected = 0;
    int64_t input_tokens = 0, output_tokens = 0;
    std::vector<Sample> ring;  // up to kSamples; next_ is the oldest when full
    size_t next = 0;
    Rate rate;
    void Keep(const Sample& s);  // into the ring
  };
  struct Tenant {
    int64_t requests = 0, errors = 0, rejected = 0;
    int64_t input_tokens = 0, output_tokens = 0;
    Rate rate;
  };

  mutable absl::Mutex mu_;
  std::map<std::string, Deployment> deployments_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Tenant> tenants_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpusched::gateway

#endif  // GPUSCHED_GATEWAY_GATEWAY_STATS_H_
