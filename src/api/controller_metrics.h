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
#include "runtime/engine_metrics.h"

namespace gpusched::api {

class ControllerMetrics {
 public:
  // What the controller holds now, read at each scrape.
  struct Snapshot {
    struct Deployment {
      std::string name;
      int desired = 0;
      std::vector<std::pair<std::string, int>> replicas;  // state -> count
      int64_t queued = 0;
      int64_t in_flight = 0;
    };
    struct Replica {
      std::string deployment, name;
      runtime::EngineSignals signals;
    };
    struct Gpu {
      std::string node, model;
      int index = 0;
      bool simulated = true;
      int64_t memory_mib = 0;
      int64_t allocated_memory_mib = 0;
      int allocated_milli = 0;
      bool healthy = true;
      bool nvml = false;  // the readings below are NVML's
      int64_t nvml_memory_used_mib = 0;
      int nvml_utilization_pct = -1;
    };
    std::vector<Deployment> deployments;
    std::vector<Replica> replicas;
    std::vector<Gpu> gpus;
  };

  // `gpu_prices`: price per GPU-hour by GPU model (absent: 0).
  ControllerMetrics(metrics::Registry* registry,
                    gateway::GatewayMetrics* gateway,
                    std::map<std::string, double> gpu_prices);

  // Read at each scrape; set once, before serving.
  void SetSource(std::function<Snapshot()> source);

  void Placement(const placement::Decision& d, double seconds);
  void ReplicaStarted(const std::string& deployment);
  void ReplicaReady(const std::string& deployment, double startup_seconds);
  // A change of a deployment's desired replica count.
  void Scaled(const std::string& deployment, int from, int to);
  // A replica preempted for a higher-priority one; an idle one swapped out.
  void Preempted();
  void Evicted();
  // GPU-seconds and cost attributed to `tenant` so far.
  std::pair<double, double> TenantUsage(const std::string& tenant);
  // The deployment's SLO (spec.slo), for the gateway's attainment counters.
  void SetSlo(const std::string& deployment, double ttft_ms, double tpot_ms);
  // One scrape of a replica's engine: its prefix-cache counters add to the
  // deployment's (a drop means the engine restarted: counted from 0).
  void EngineScraped(const std::string& deployment, const std::string& replica,
                     const runtime::EngineSignals& s);
  // `share_by_model`: GPUs (milli / 1000) the deployment holds, per GPU
  // model, during the last `seconds`.
  void Accrue(const std::string& deployment,
              const std::vector<std::pair<std::string, double>>& share_by_model,
              double seconds);

 private:
  void Collect(std::vector<std::vector<metrics::Sample>>* out);

  gateway::GatewayMetrics* gateway_;
  std::map<std::string, double> prices_;
  metrics::CounterFamily* replica_starts_;
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
