// GatewayMetrics: the gateway's request metrics (docs/metrics.md) in a
// metrics::Registry. The gateway asks once per (deployment, tenant, class)
// for that tuple's RequestCells and keeps the pointer; every later request
// updates atomics through it, with no label hashing and no lock.
//
// Owned by `gpusched serve`, outlives the Gateway and the Controller.
// Thread-safe.
#ifndef GPUSCHED_GATEWAY_GATEWAY_METRICS_H_
#define GPUSCHED_GATEWAY_GATEWAY_METRICS_H_

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "metrics/registry.h"
#include "serving/admission.h"

namespace gpusched::gateway {

class GatewayMetrics {
 public:
  struct DeploymentCells {
    metrics::Histogram* ttft = nullptr;
    metrics::Histogram* tpot = nullptr;
    metrics::Histogram* e2e = nullptr;
    metrics::Counter* held = nullptr;    // held at zero ready replicas
    metrics::Histogram* hold = nullptr;  // hold time of released ones
    bool has_slo = false;                // guarded by GatewayMetrics::mu_
    std::array<metrics::Counter*, serving::kNumRejectReasons> rejections{};
    // The deployment's SLO in microseconds (0: none), set by the controller.
    std::atomic<Micros> ttft_slo{0}, tpot_slo{0};
  };
  struct RequestCells {
    DeploymentCells* deployment = nullptr;
    metrics::Counter* ok = nullptr;        // answered 2xx
    metrics::Counter* error = nullptr;     // engine error or no replica
    metrics::Counter* rejected = nullptr;  // admission, queue timeout
    metrics::Counter* input_tokens = nullptr;
    metrics::Counter* output_tokens = nullptr;
    metrics::Counter* throttled = nullptr;  // the tenant's, rate limits
    // (deployment, tenant)'s SLO counters, set once the deployment has an
    // SLO (null: none).
    std::atomic<metrics::Counter*> slo_requests{nullptr}, slo_met{nullptr};
  };

  explicit GatewayMetrics(metrics::Registry* registry);

  // Stable for the registry's life; takes a mutex (call once per tuple).
  RequestCells* Cells(const std::string& deployment, const std::string& tenant,
                      const std::string& priority_class);

  // Hot-path hooks (lock-free).
  static void Rejected(RequestCells* c, serving::RejectReason reason);
  // A proxied request ended: `first_byte` is when the first byte of the
  // answer (non-streamed) or the first SSE chunk arrived (0: none);
  // `output_tokens` as the engine reported (streamed: the chunks).
  static void Finished(RequestCells* c, bool ok, bool stream, Micros arrival,
                       Micros first_byte, Micros end, int64_t input_tokens,
                       int64_t output_tokens);
  // A request was held: it arrived while its deployment had no ready
  // replica.
  static void Held(RequestCells* c);
  // A held request left the queue for a replica after `seconds`.
  static void Released(RequestCells* c, double seconds);
  // A request refused before it reached a deployment's queue
  // (unauthenticated, forbidden, unknown_model, unknown_priority,
  // bad_deadline).
  void Invalid(const char* reason);
  // A stream's replica failed mid-stream: migrated, or ended with an error.
  void Migration(const std::string& deployment, bool migrated);
  // The counter of requests a route sent to `version` (takes a mutex:
  // call once per target).
  metrics::Counter* RouteCell(const std::string& route,
                              const std::string& version);

  // The deployment's SLO (milliseconds, 0: none).
  void SetSlo(const std::string& deployment, double ttft_ms, double tpot_ms);
  // Input + output tokens each tenant used on `deployment` so far.
  std::vector<std::pair<std::string, double>> TokensByTenant(
      const std::string& deployment);

 private:
  DeploymentCells* Deployment(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Points `c` at its (deployment, tenant) SLO counters.
  void SetSloCells(const std::string& deployment, const std::string& tenant,
                   RequestCells* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  metrics::CounterFamily* requests_;
  metrics::CounterFamily* rejections_;
  metrics::CounterFamily* throttled_;
  metrics::CounterFamily* invalid_;
  metrics::CounterFamily* input_tokens_;
  metrics::CounterFamily* output_tokens_;
  metrics::CounterFamily* slo_requests_;
  metrics::CounterFamily* slo_met_;
  metrics::HistogramFamily* ttft_;
  metrics::HistogramFamily* tpot_;
  metrics::HistogramFamily* e2e_;
  metrics::CounterFamily* held_;
  metrics::HistogramFamily* hold_;
  metrics::CounterFamily* migrations_;
  metrics::CounterFamily* routed_;

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<DeploymentCells>> deployments_
      ABSL_GUARDED_BY(mu_);
  std::map<std::tuple<std::string, std::string, std::string>,
           std::unique_ptr<RequestCells>>
      cells_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpusched::gateway

#endif  // GPUSCHED_GATEWAY_GATEWAY_METRICS_H_
