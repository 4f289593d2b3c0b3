// ControllerMetrics: the control plane's metrics (docs/metrics.md) in a
// metrics::Registry: replicas per state, cold starts, placement attempts
// and latency, unschedulable reasons, scale decisions, engine signals
// (batch size, prefix-cache hits), per-GPU allocation and NVML readings,
// and GPU-seconds and cost per deployment and per tenant.
//
// The Controller calls the hooks as things happen and hands a Snapshot
// source, read once per scrape. GPU time is integrated by Accrue (the
// controller calls it about once a second): a deployment's GPU-seconds are
// the GPU share its placed replicas hold (milli / 1000) times time, and its
// cost that times the configured price per GPU-hour of the GPU model.
// Deployments have no owner tenant, so each interval's GPU-seconds and
// cost are split among tenants in proportion to the tokens (input +
// output) each used on that deployment in the interval; an interval
// without tokens (idle replicas) is charged to no tenant, so the tenants'
// sum is at most the deployments' sum.
//
// Owned by `gpusched serve`; outlives the Controller. Thread-safe.
#ifndef GPUSCHED_API_CONTROLLER_METRICS_H_
#define GPUSCHED_API_CONTROLLER_METRICS_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gateway/gateway_metrics.h"
#include "metrics/registry.h"
#include "placement/scheduler.h"
#include "runtime/driver_metrics.h"
#include "runtime/engine_metrics.h"

namespace gpusched::api {

class ControllerMetrics : public runtime::DriverMetrics {
 public:
  using Snapshot = runtime::DriverMetrics::Snapshot;

  // `gpu_prices`: price per GPU-hour by GPU model (absent: 0).
  ControllerMetrics(metrics::Registry* registry,
                    gateway::GatewayMetrics* gateway,
                    std::map<std::string, double> gpu_prices);

  // runtime::DriverMetrics.
  void SetSource(std::function<Snapshot()> source) override;
  void Placement(const placement::Decision& d, double seconds) override;
  void ReplicaStarted(const std::string& deployment) override;
  void ReplicaReady(const std::string& deployment,
                    double startup_seconds) override;
  void ReplicaFailed(const std::string& deployment,
                     const std::string& reason) override;
  void LoopPassed(double unix_seconds) override;
  void Scaled(const std::string& deployment, int from, int to) override;
  void Preempted() override;
  void Evicted() override;
  std::pair<double, double> TenantUsage(const std::string& tenant) override;
  // Also the gateway's attainment counters.
  void SetSlo(const std::string& deployment, double ttft_ms,
              double tpot_ms) override;
  // Its prefix-cache counters add to the deployment's (a drop means the
  // engine restarted: counted from 0).
  void EngineScraped(const std::string& deployment, const std::string& replica,
                     const runtime::EngineSignals& s) override;
  void Accrue(const std::string& deployment,
              const std::vector<std::pair<std::string, double>>& share_by_model,
              double seconds) override;
  void SetPrice(const std::string& model, double usd_per_gpu_hour) override;

 private:
  void Collect(std::vector<std::vector<metrics::Sample>>* out);

  gateway::GatewayMetrics* gateway_;
  std::map<std::string, double> prices_;
  metrics::CounterFamily* replica_starts_;
  metrics::CounterFamily* replica_failures_;
  metrics::Gauge* last_pass_;
  metrics::HistogramFamily* startup_;
  metrics::CounterFamily* prefix_queries_;
  metrics::CounterFamily* prefix_hits_;
  metrics::CounterFamily* placement_attempts_;
  metrics::Histogram* placement_latency_;
  metrics::Counter* preemptions_;
  metrics::Counter* evictions_;
  metrics::CounterFamily* unschedulable_;
  metrics::CounterFamily* scale_decisions_;
  metrics::CounterFamily* deployment_gpu_seconds_;
  metrics::CounterFamily* deployment_cost_;
  metrics::CounterFamily* tenant_gpu_seconds_;
  metrics::CounterFamily* tenant_cost_;

  absl::Mutex mu_;
  std::function<Snapshot()> source_ ABSL_GUARDED_BY(mu_);
  // Last seen engine counters per replica: {queries, hits}.
  std::map<std::pair<std::string, std::string>, std::pair<double, double>>
      engine_prefix_ ABSL_GUARDED_BY(mu_);
  // Tokens per (deployment, tenant) at the last Accrue.
  std::map<std::pair<std::string, std::string>, double> tokens_seen_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace gpusched::api

#endif  // GPUSCHED_API_CONTROLLER_METRICS_H_
