// DriverMetrics: the hooks the live driver (runtime::Controller) calls as
// things happen, and the snapshot it hands for each scrape. The metrics
// wiring (api::ControllerMetrics, docs/metrics.md) implements it; the
// driver knows nothing of metric names or the registry. Thread-safe.
#ifndef GPUSCHED_RUNTIME_DRIVER_METRICS_H_
#define GPUSCHED_RUNTIME_DRIVER_METRICS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "placement/scheduler.h"
#include "runtime/engine_metrics.h"

namespace gpusched::runtime {

class DriverMetrics {
 public:
  // What the driver holds now, read at each scrape.
  struct Snapshot {
    // Taken on the leader: replicas, desired counts, GPUs and routes are
    // its. An instance that follows has its own queues only (a series
    // summed over instances must not count the cluster twice).
    bool leader = true;
    struct Deployment {
      std::string name;
      int desired = 0;
      std::vector<std::pair<std::string, int>> replicas;  // state -> count
      int64_t queued = 0;
      int64_t in_flight = 0;
      int64_t queue_limit = 0;  // spec.maxQueueSize (0: unbounded)
    };
    struct Replica {
      std::string deployment, name;
      EngineSignals signals;
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
    struct Route {
      std::string name;
      std::vector<std::pair<std::string, int>> weights;  // version -> %
      std::string phase;  // the rollout's, "" without one
      int step = 0;       // 1-based
    };
    struct Node {
      std::string name;
      // False while its cluster manager says it cannot take work (Slurm
      // DOWN or DRAIN, a Kubernetes node not Ready or cordoned).
      bool usable = true;
      int replicas = 0;  // replicas placed on it (draining ones included)
    };
    struct Tenant {
      std::string name;
      double quota_gpus = 0;  // spec.quota.gpus (guaranteed)
      double limit_gpus = 0;  // spec.quota.limit (0: none)
      // GPUs (milli / 1000) placed replicas of the deployments it owns
      // (spec.tenant) hold.
      double allocated_gpus = 0;
    };
    // Capacity on demand: each pool's nodes by state and what they cost.
    struct Pool {
      std::string name;
      std::vector<std::pair<std::string, int>> nodes;  // state -> count
      double usd = 0;
    };
    std::vector<Deployment> deployments;
    std::vector<Replica> replicas;
    std::vector<Gpu> gpus;
    std::vector<Route> routes;
    std::vector<Node> nodes;
    std::vector<Tenant> tenants;
    std::vector<Pool> pools;
    double idle_usd = 0;  // pool nodes' cost no replica held
  };

  virtual ~DriverMetrics() = default;

  // Read at each scrape; set once, before serving (null: none).
  virtual void SetSource(std::function<Snapshot()> source) = 0;

  virtual void Placement(const placement::Decision& d, double seconds) = 0;
  virtual void ReplicaStarted(const std::string& deployment) = 0;
  virtual void ReplicaReady(const std::string& deployment,
                            double startup_seconds) = 0;
  // A replica's engine failed: `reason` is "exited" (it ended on its own),
  // "failed" (it could not be started) or "unhealthy" (killed after its
  // startup timeout or failed health checks). A restart follows each.
  virtual void ReplicaFailed(const std::string& deployment,
                             const std::string& reason) = 0;
  // The control loop finished a pass at `unix_seconds` (wall clock): the
  // heartbeat a stalled loop stops. Lock-free (a scrape must not wait for
  // a stuck loop).
  virtual void LoopPassed(double unix_seconds) = 0;
  // A change of a deployment's desired replica count.
  virtual void Scaled(const std::string& deployment, int from, int to) = 0;
  // A replica preempted for a higher-priority one; an idle one swapped out.
  virtual void Preempted() = 0;
  virtual void Evicted() = 0;
  // GPU-seconds and cost attributed to `tenant` so far.
  virtual std::pair<double, double> TenantUsage(const std::string& tenant) = 0;
  // The deployment's SLO (spec.slo), for the request layer's attainment.
  virtual void SetSlo(const std::string& deployment, double ttft_ms,
                      double tpot_ms) = 0;
  // One scrape of a replica's engine.
  virtual void EngineScraped(const std::string& deployment,
                             const std::string& replica,
                             const EngineSignals& s) = 0;
  // `share_by_model`: GPUs (milli / 1000) the deployment holds, per GPU
  // model, during the last `seconds`.
  virtual void Accrue(
      const std::string& deployment,
      const std::vector<std::pair<std::string, double>>& share_by_model,
      double seconds) = 0;
  // The price per GPU-hour of a GPU "model" key Accrue gets (capacity on
  // demand: "pool:<name>" for the GPUs of a pool's nodes).
  virtual void SetPrice(const std::string& model, double usd_per_gpu_hour) {}
};

}  // namespace gpusched::runtime

#endif  // GPUSCHED_RUNTIME_DRIVER_METRICS_H_
