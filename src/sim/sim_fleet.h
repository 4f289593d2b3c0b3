// SimFleet: the simulator's driver of the replica lifecycle, the
// counterpart of the live controller (runtime/controller.cc). Each deployment's
// replicas live in a control::ReplicaSet (the same core as live: desired
// count, rolling replacement, readiness probes, drain); placement is the
// placement scheduler's on a ClusterState of nodes (per-node packing,
// multi-GPU replicas on one node, fractions of a GPU); making room is
// control::PlanRoom (swap idle replicas of autoscaled deployments, then
// preempt lower classes). What live does with processes and HTTP, the
// fleet does with simulated engines through a FleetHost (sim/serve_sim.cc):
// a launch starts one whose readiness follows its cold start, a readiness
// probe succeeds at the first probe time at or after it (probes every
// LifecycleOptions::starting_probe, as live), a stop ends it.
//
// Pending replicas are tried again when GPUs are freed, and after
// kRetryUnplaced (live's retry) while the run is busy.
// Deterministic; single-threaded; the clock is the caller's `now`.
#ifndef GPUSCHED_SIM_SIM_FLEET_H_
#define GPUSCHED_SIM_SIM_FLEET_H_

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "control/capacity.h"
#include "control/lifecycle.h"
#include "control/place.h"
#include "control/room.h"
#include "inventory/cluster_state.h"
#include "placement/framework.h"
#include "placement/scheduler.h"
#include "serving/request.h"

namespace gpusched::sim {

// How long an unplaced replica waits before it is tried again (as live).
inline constexpr Micros kRetryUnplaced = kMicrosPerSecond;

// A pool of nodes the fleet can add (control/capacity.h), with the spot
// losses the run draws for it.
struct FleetPool {
  control::NodePool pool;
  double preemptions_per_node_hour = 0;  // Poisson, per spot node up
  std::vector<Micros> preemption_times;  // a trace: a node lost at each
};

// A spot node's notice before it is taken back (AWS gives two minutes):
// its replicas drain and are replaced at once; the node goes at the end.
inline constexpr Micros kSpotNotice = 120 * kMicrosPerSecond;

struct FleetOptions {
  int cluster_gpus = 0;   // 0 (and no pools): unbounded
  int gpus_per_node = 8;  // the cluster's GPUs in nodes of this many
  Micros swap_min_idle = 0;
  std::string policy = "fillfrag";
  control::LifecycleOptions lifecycle;
  // The owners' queues: quotas for preemption, GPU limits.
  std::vector<control::RoomQueue> queues;
  // Capacity on demand: pools of nodes added and given back by
  // control::CapacityPlanner every `capacity_interval`.
  std::vector<FleetPool> pools;
  control::CapacityOptions capacity;
  Micros capacity_interval = 5 * kMicrosPerSecond;
  double static_usd_per_gpu_hour = 0;  // the static nodes' price
  uint64_t seed = 1;                   // spot losses
};

// What the pools did and cost over a run.
struct PoolUsage {
  std::string pool;
  std::string gpu;
  bool spot = false;
  double usd_per_node_hour = 0;
  double node_seconds = 0;  // asked for (provisioning) to given back
  double usd = 0;
  int peak_nodes = 0;  // provisioning or up at once
  int64_t requested = 0, provisioned = 0, released = 0, preempted = 0;
};
struct FleetCost {
  double static_usd = 0;
  double pools_usd = 0;
  double total_usd = 0;
  std::vector<double> deployment_usd;  // GPUs held x their node's price
  double idle_usd = 0;                 // the rest: nodes up, GPUs unheld
  std::vector<PoolUsage> pools;
  int64_t consolidations = 0;    // nodes emptied by moving replicas
  int64_t notice_in_flight = 0;  // requests on a spot replica at the end of
                                 // its node's notice (they finish in the
                                 // run; a real node would lose them)
};

struct FleetDeployment {
  std::string name;
  int class_rank = 0;  // 0 = the most important class
  int priority = 500;  // for preemption (placement/preemption.h)
  bool preemptible = true;
  bool autoscaled = false;
  int tensor_parallel = 1;  // whole GPUs per replica, on one node
  int gpu_milli = 0;        // > 0: a fraction of one GPU instead
  std::string owner;        // its owner's queue ("": none)
  // The weights its replicas load (the model's checkpoint): nodes where
  // they were loaded before are tried first (control/place.h).
  std::string weights;
  // Capacity on demand: USD per million output tokens at its SLO on each
  // pool's GPU with the replica judged full (a pool absent: it cannot serve
  // there), the latency model on each such pool's GPU and the SLO, to judge
  // a waiting replica at its deployment's demand (FleetHost::
  // DemandPerReplica), and whether its replicas may run on spot nodes.
  std::map<std::string, double> usd_per_mtok;
  std::map<std::string, serving::LatencyModel> pool_latency;
  control::SloTarget slo;
  bool spot_ok = true;
};

struct FleetEngine {
  serving::ReplicaId id = 0;
  Micros ready_at = 0;  // <= now: serves at once (warm)
};

// What the fleet needs of the simulation.
class FleetHost {
 public:
  virtual ~FleetHost() = default;
  // Starts a simulated engine for `replica` of `deployment`, holding `gpus`
  // on a node where its weights are local (loaded there before) or not, of
  // a pool with GPUs `gpu` ("": a static node, the deployment's own GPU).
  virtual FleetEngine StartEngine(int deployment, const std::string& replica,
                                  double gpus, bool weights_local,
                                  const std::string& gpu, Micros now) = 0;
  virtual void StopEngine(serving::ReplicaId id, Micros now) = 0;
  // The engine takes requests from the dispatcher, or no longer does.
  virtual void SetServing(serving::ReplicaId id, bool serving, Micros now) = 0;
  virtual int64_t InFlight(serving::ReplicaId id) const = 0;
  virtual Micros LastUsed(serving::ReplicaId id) const = 0;
  virtual bool Queued(int deployment) const = 0;
  // The ongoing requests per replica the autoscaler sees for `deployment`
  // (control::Scaling::DemandPerReplica); < 0: unknown.
  virtual double DemandPerReplica(int deployment) const = 0;
  // An idle replica of `deployment` was swapped out: its count drops; the
  // host returns the new desired count.
  virtual int SwappedOut(int deployment) = 0;
  // `deployment` -1: the cluster's (capacity events).
  virtual void Log(Micros t, const char* kind, int deployment,
                   std::string message) = 0;
};

class SimFleet {
 public:
  SimFleet(FleetOptions options, FleetHost* host);

  // Capacity on demand: the pools and the planner's options, before Init.
  void SetCapacity(std::vector<FleetPool> pools,
                   control::CapacityOptions options, Micros interval,
                   double static_usd_per_gpu_hour);
  // Builds the cluster; call once, before the deployments.
  absl::Status Init();
  int AddDeployment(FleetDeployment d);
  void SetDesired(int deployment, int n);
  // The deployment's replicas (what control::Scaling observes).
  const control::ReplicaSet& life(int deployment) const {
    return deps_[deployment].life;
  }
  // The core's counts (current version).
  int ready(int deployment) const;
  // Engines of `deployment` starting or ready (not draining).
  int active(int deployment) const;
  // GPUs held by replicas (placed), in milli-GPUs.
  int64_t gpu_milli_in_use() const { return milli_in_use_; }

  // Something changed (a draining replica's last request left): the next
  // Reconcile is due at once.
  void Poke() { dirty_ = true; }
  bool dirty() const { return dirty_; }
  // Runs every deployment's core (most important class first) and carries
  // its actions out, until nothing is left to do at `now`.
  void Reconcile(Micros now);
  // When Reconcile is next due for probes and drains (kNever: never), and
  // for pending replicas: when an idle replica becomes old enough to swap
  // out for them, and, when `busy` (something else goes on), their
  // retries.
  Micros NextDeadline() const;
  Micros NextRetry(Micros now, bool busy) const;
  // What the pools did and cost from time 0 to `end`.
  FleetCost Cost(Micros end) const;

 private:
  struct Proc {
    bool placed = false;
    int64_t milli = 0;
    int node = -1;  // -1: unbounded cluster
    bool weights_local = false;
    bool running = false;  // an engine exists
    serving::ReplicaId engine = 0;
    Micros ready_at = 0;
    bool serving = false;
    std::vector<std::string> awaiting;  // victims draining for it
    Micros waiting_since = -1;          // fits on no node since (capacity)
    Micros placed_at = 0;
    double usd_per_gpu_s = 0;  // its node's price
  };
  struct PoolNode {
    int pool = 0;
    int node = 0;  // in cluster_
    enum class Phase {
      kDown,
      kProvisioning,
      kUp,
      kNotice
    } phase = Phase::kDown;
    Micros since = 0;         // entered the phase
    Micros up_at = kNever;    // provisioning: registers then
    Micros lost_at = kNever;  // up spot node: its notice starts then;
                              // notice: it goes then
    Micros billed_since = 0;
  };
  struct Dep {
    FleetDeployment spec;
    control::ReplicaSet life;
    std::map<std::string, Proc> procs;
  };
  struct ProbeAnswer {
    Micros at;
    int deployment;
    std::string replica;
  };

  bool Carry(int m, control::LifecycleOutput& out, Micros now);
  // True when `p` waits for victims that are all gone now.
  bool VictimsGone(const Proc& p) const;
  // Deployments in the order a pass reconciles them: those with such a
  // replica first, then by class.
  std::vector<int> PassOrder() const;
  // The deadlines after a pass (they change only in a pass).
  void UpdateDeadlines();
  void Launch(int m, const std::string& replica, Micros now,
              control::LifecycleOutput* out);
  // Places `replica` or makes room for it; true when placed.
  bool Place(int m, const std::string& replica, Proc& p, Micros now,
             control::LifecycleOutput* out);
  void Drain(int m, const std::string& replica, const std::string& why,
             Micros now);
  // Capacity on demand: node arrivals and spot losses due at `now`, then
  // the planner's pass when due.
  void PoolEvents(Micros now);
  void PlanCapacity(Micros now);
  // USD per million output tokens on each pool that can serve the
  // deployment `m`, at `demand` ongoing requests per replica (< 0: judged
  // full) over its replicas, measured on the GPU most of its placed
  // replicas run on (none placed: its cheapest GPU-hour's).
  std::map<std::string, double> PoolCosts(int m, double demand) const;
  void SetNodeUp(PoolNode& n, bool up);
  void Bill(PoolNode& n, Micros now);
  Micros NextLoss(int pool, Micros now);
  // Pool nodes coming or going, or empty above their pool's min_nodes.
  bool NodesToGiveBack() const;
  std::vector<std::string> AllowedModels(const Dep& d) const;
  double NodePrice(int node) const;  // USD per GPU-second
  int DeploymentOf(const std::string& replica) const;
  void Log(Micros t, const char* kind, int m, std::string message) {
    host_->Log(t, kind, m, std::move(message));
  }

  FleetOptions options_;
  FleetHost* host_;
  std::vector<Dep> deps_;
  inventory::ClusterState cluster_;
  std::unique_ptr<placement::Scheduler> scheduler_;
  std::vector<std::unique_ptr<placement::FilterPlugin>> filters_ =
      placement::DefaultFilters();
  std::vector<ProbeAnswer> probes_;  // outstanding readiness probes
  control::WeightsLocality weights_;
  int64_t milli_in_use_ = 0;
  Micros deadline_ = kNever;  // probes and drains
  Micros retry_ = kNever;     // the earliest retry of a pending replica
  bool pending_ = false;      // some replica waits for room
  // The next swap chance NextRetry saw (a cache: Reconcile retries the
  // pending replicas when it is reached).
  mutable Micros swap_chance_ = kNever;
  bool dirty_ = true;
  bool freed_ = false;
  // Capacity on demand.
  control::CapacityPlanner planner_;
  std::vector<PoolNode> pool_nodes_;
  std::vector<PoolUsage> usage_;
  std::vector<size_t> trace_pos_;    // per pool: next preemption_times entry
  std::map<int, int> pool_node_of_;  // cluster node -> pool_nodes_ index
  std::vector<double> dep_usd_;
  Micros next_capacity_ = kNever;
  int64_t consolidations_ = 0;
  int64_t notice_in_flight_ = 0;
  Micros last_now_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_SIM_FLEET_H_
