// Capacity on demand: when to add nodes, of which pool, and when to give
// them back (DESIGN.md section 10, docs/capacity.md). Policy core shared by
// the live controller (nodes through a backends::CapacityManager: Slurm's
// power saving, Kubernetes' autoscalers) and the simulator (sim/sim_fleet.h:
// pools with provisioning delays, prices and spot preemptions).
//
// The planner sees pools (nodes that can be added, all alike), the pools'
// nodes and what they hold, and the replicas that fit on no node now. Each
// Plan() returns what the driver must do:
//   - kAdd: ask a pool for more nodes, when replicas have waited for
//     `scale_up_delay` and the nodes already coming do not take them. The
//     pool is the cheapest per output token at the deployment's SLO and
//     demand (CostPerToken below, from the latency models: a lightly loaded
//     replica pays for its GPU-hours, not its tokens) among the pools whose
//     GPUs meet it, that are below their max_nodes and did not fail to come
//     up in the last `failed_pool_backoff`; with `cost_aware` off (the
//     "reactive" policy of the comparisons), the first pool in the
//     configured order that fits, as Cluster Autoscaler's simplest
//     expander does. Spot follows SkyServe's knobs: each deployment keeps
//     `base_ondemand_fallback_replicas` on on-demand nodes, and with
//     `dynamic_ondemand_fallback` a deployment that lost spot nodes uses
//     on-demand ones until spot has stayed up for `spot_recovery_delay`.
//   - kMove: a replica on a nearly empty node (at most `consolidate_below`
//     of its GPUs held) whose replicas all fit on the other up nodes is
//     moved: the driver starts its replacement elsewhere, waits for it to be
//     ready, then drains it (control::ReplicaSet::Move), so no request
//     fails. The node is cordoned meanwhile (Cordoned()).
//   - kRelease: a node with no replica for `scale_down_delay` goes back
//     (never below the pool's min_nodes).
// Every action carries its why, and the events name the numbers.
//
// Policy core: no threads, no I/O, no clock (every call takes `now`).
// Thread-compatible.
#ifndef GPUSCHED_CONTROL_CAPACITY_H_
#define GPUSCHED_CONTROL_CAPACITY_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "config/capacity_config.h"
#include "nlohmann/json.hpp"
#include "serving/latency_model.h"

namespace gpusched::control {

// A set of nodes that can be added, all alike.
struct NodePool {
  std::string name;
  std::string gpu;  // the latency models' GPU name ("A100-80GB")
  int gpus_per_node = 8;
  double price_per_node_hour = 0;  // USD
  bool spot = false;
  // Ask to registered: measured where the driver can, else this default.
  Micros provisioning_delay = 120 * kMicrosPerSecond;
  int min_nodes = 0;
  int max_nodes = 0;
  // Bounds for what comes from outside (config, a cluster manager).
  static constexpr int kMaxNodes = 4096;
  static constexpr int kMaxGpusPerNode = 16;
};
// Names the field: "pools[2].max_nodes: must be >= min_nodes (3)".
absl::Status ValidatePool(const NodePool& pool, const std::string& where);

struct CapacityOptions {
  Micros scale_up_delay = 30 * kMicrosPerSecond;
  Micros scale_down_delay = 600 * kMicrosPerSecond;
  bool cost_aware = true;   // false: the first pool that fits (reactive)
  bool consolidate = true;  // move replicas off nearly empty nodes
  double consolidate_below = 0.5;
  int base_ondemand_fallback_replicas = 0;
  bool dynamic_ondemand_fallback = false;
  Micros spot_recovery_delay = 600 * kMicrosPerSecond;
  Micros failed_pool_backoff = 600 * kMicrosPerSecond;
  int max_nodes_per_plan = 64;  // bounds one Plan's asks
};

// The options a config's `capacity:` block sets (policy "reactive": the
// first pool that fits and no consolidation).
CapacityOptions CapacityOptionsFrom(const config::CapacitySpec& spec);

// What one replica of a model costs per output token on a GPU while it
// meets an SLO, from the fitted latency model. Its capacity at the SLO is
// the batch (at most max_batch) with the most output tokens per second
// whose decode step stays within the TPOT target (default_tpot_s without
// one) and whose KV fits, each request prefilling `input_tokens` within the
// TTFT target and decoding `output_tokens`. Infeasible when one prompt's
// prefill alone misses the TTFT target.
//
// The cost is judged at the replica's demand: it serves
// min(capacity, demand) concurrent requests, and pays its GPU-hours
// whatever it serves. So a lightly loaded replica costs least on the
// cheapest GPU-hour that meets the SLO, and a busy one on the GPU with the
// most tokens per dollar at its capacity. Without a demand (< 0) the
// replica is judged full (at its capacity). With `demand_on` and
// `replicas`, the demand is the deployment's token rate measured on the GPU
// it runs on (SloTarget): a faster GPU serves that rate with fewer replicas
// only where the deployment needs more than one.
struct SloTarget {
  double ttft_s = 0;  // 0: none
  double tpot_s = 0;  // 0: default_tpot_s
  int input_tokens = 512;
  int output_tokens = 128;
  int max_batch = 256;
  // Ongoing requests per replica the deployment has (the autoscaler's
  // look-back mean over its replicas: Scaling::DemandPerReplica); < 0:
  // unknown. Below kMinDemand it counts as kMinDemand (the ranking of
  // GPUs is the same for every demand below one request).
  double demand = -1;
  // The deployment's replicas that serve (placed) and the latency model of
  // the GPU they run on, where `demand` was measured (nullptr: the GPU
  // judged). The deployment's output-token rate is `replicas` replicas at
  // `demand` concurrent requests each on that GPU (at most its capacity:
  // requests over it wait, and tell no rate); a replica on the GPU
  // judged serves at most its capacity and at most that whole rate. So a
  // faster GPU is not credited with tokens that do not arrive: the same
  // requests finish sooner there, at a lower concurrency, and it pays only
  // where the deployment needs fewer of its replicas.
  int replicas = 1;
  const serving::LatencyModel* demand_on = nullptr;
  static constexpr int kMaxReplicas = 1 << 20;
  static constexpr double kDefaultTpotS = 0.1;
  static constexpr double kMinDemand = 0.01;
};
struct TokenCost {
  bool feasible = false;
  int batch = 0;                   // the capacity at the SLO (concurrency)
  double tokens_per_s = 0;         // output tokens per replica at that batch
  double served_concurrency = 0;   // min(batch, demand)
  double served_tokens_per_s = 0;  // output tokens per replica at it
  double usd_per_mtok = 0;         // USD per million output tokens served
  std::string why;                 // infeasible: the figures
};
TokenCost CostPerToken(const serving::LatencyModel& model,
                       double price_per_gpu_hour, const SloTarget& slo);

// A node of a pool, as the planner sees it.
struct PoolNodeView {
  std::string node;
  std::string pool;
  enum class Phase { kProvisioning, kUp, kReleasing };
  Phase phase = Phase::kProvisioning;
  Micros since = 0;  // entered the phase
  int gpus = 0;
  double gpus_held = 0;  // by replicas (fractions count their share)
  std::vector<std::string> replicas;  // placed here
};

// A replica that fits on no node now.
struct WaitingReplica {
  std::string replica;
  std::string deployment;
  int gpus = 1;         // whole GPUs on one node (a fraction counts 1)
  Micros since = 0;     // waiting since
  bool spot_ok = true;  // the deployment may run on spot nodes
  // USD per million output tokens at its SLO and its deployment's demand
  // per replica on each pool's GPU (CostPerToken); a pool absent here
  // cannot serve it (no latency model, or it misses the SLO).
  std::map<std::string, double> usd_per_mtok;
  // usd_per_mtok holds USD per hour of the replica's GPUs instead (live,
  // where the latency models do not know its model on every pool's GPU):
  // the same order, another unit, which capacity.requested names.
  bool per_hour = false;
};

// Free GPUs on an up node that is not cordoned (static or pool), for
// consolidation.
struct NodeRoom {
  std::string node;
  int free_gpus = 0;
};

struct CapacityInput {
  std::vector<NodePool> pools;  // in the configured order
  std::vector<PoolNodeView> nodes;
  std::vector<WaitingReplica> waiting;
  std::vector<NodeRoom> room;
  // Per deployment: its replicas placed on on-demand pool nodes or static
  // nodes (for base_ondemand_fallback_replicas).
  std::map<std::string, int> ondemand_replicas;
  // Per placed replica: the whole GPUs it holds (a fraction counts 1), and
  // whether it may move now (ready, of the current version; one that
  // starts or drains does not).
  std::map<std::string, int> replica_gpus;
  std::set<std::string> movable;
};

struct CapacityAction {
  enum class Kind { kAdd, kMove, kRelease };
  Kind kind = Kind::kAdd;
  std::string pool;
  int count = 0;                      // kAdd
  std::vector<std::string> replicas;  // kAdd: for whom; kMove: which
  std::string node;                   // kMove: from; kRelease: which
  std::string why;
};

struct CapacityEvent {
  std::string kind;  // capacity.requested, capacity.failed, node.released,
                     // node.consolidating, spot.preempted, ...
  std::string message;
  nlohmann::json details = nlohmann::json::object();
};

struct CapacityPlan {
  std::vector<CapacityAction> actions;
  std::vector<CapacityEvent> events;
};

class CapacityPlanner {
 public:
  explicit CapacityPlanner(CapacityOptions options = {});
  const CapacityOptions& options() const { return options_; }

  // What the driver saw happen to pool nodes.
  // `node` of `pool` did not come up (Slurm: ResumeTimeout): the pool is
  // skipped for failed_pool_backoff, and the event says why.
  void NodeFailed(const std::string& pool, const std::string& node,
                  const std::string& why, Micros now, CapacityPlan* out);
  // A spot node was taken back: its replicas are replaced by the driver
  // (they are waiting again); with dynamic_ondemand_fallback its
  // deployments go on-demand for spot_recovery_delay.
  void SpotLost(const std::string& pool, const std::string& node,
                const std::vector<std::string>& deployments, Micros now,
                CapacityPlan* out);

  // The pass.
  CapacityPlan Plan(const CapacityInput& in, Micros now);

  // Nodes being emptied for consolidation: placement keeps off them.
  const std::set<std::string>& Cordoned() const { return cordoned_; }
  // The deployments currently held on on-demand by the dynamic fallback.
  std::vector<std::string> FallbackDeployments(Micros now) const;

 private:
  void PlanAdds(const CapacityInput& in, Micros now, CapacityPlan* plan);
  void PlanReleases(const CapacityInput& in, Micros now, CapacityPlan* plan);
  void PlanMoves(const CapacityInput& in, Micros now, CapacityPlan* plan);
  // Whether `w` may go on a spot node, with `planned` more of its
  // deployment's replicas on on-demand nodes in this plan.
  bool SpotAllowed(const CapacityInput& in, const WaitingReplica& w,
                   int planned, Micros now) const;

  CapacityOptions options_;
  std::map<std::string, Micros> pool_failed_;   // pool -> last failure
  std::map<std::string, Micros> spot_lost_;     // deployment -> last loss
  std::map<std::string, Micros> sparse_since_;  // node -> nearly empty since
  std::map<std::string, Micros> busy_;  // node -> last seen with a replica
  std::set<std::string> cordoned_;
};

}  // namespace gpusched::control

#endif  // GPUSCHED_CONTROL_CAPACITY_H_
