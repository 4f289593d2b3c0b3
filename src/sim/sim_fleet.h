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
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
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

struct FleetOptions {
  int cluster_gpus = 0;   // 0: unbounded (placement always succeeds)
  int gpus_per_node = 8;  // the cluster's GPUs in nodes of this many
  Micros swap_min_idle = 0;
  std::string policy = "fillfrag";
  control::LifecycleOptions lifecycle;
  // The owners' queues: quotas for preemption, GPU limits.
  std::vector<control::RoomQueue> queues;
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
  // on a node where its weights are local (loaded there before) or not.
  virtual FleetEngine StartEngine(int deployment, const std::string& replica,
                                  double gpus, bool weights_local,
                                  Micros now) = 0;
  virtual void StopEngine(serving::ReplicaId id, Micros now) = 0;
  // The engine takes requests from the dispatcher, or no longer does.
  virtual void SetServing(serving::ReplicaId id, bool serving, Micros now) = 0;
  virtual int64_t InFlight(serving::ReplicaId id) const = 0;
  virtual Micros LastUsed(serving::ReplicaId id) const = 0;
  virtual bool Queued(int deployment) const = 0;
  // An idle replica of `deployment` was swapped out: its count drops; the
  // host returns the new desired count.
  virtual int SwappedOut(int deployment) = 0;
  virtual void Log(Micros t, const char* kind, int deployment,
                   std::string message) = 0;
};

class SimFleet {
 public:
  SimFleet(FleetOptions options, FleetHost* host);

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
};

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_SIM_FLEET_H_
