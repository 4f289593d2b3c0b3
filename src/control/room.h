// Making room: what gives way when a replica does not fit. One rule for the
// live controller and (next) the simulator, on the placement layer's own
// state, so that fractions, per-node packing and tenant quotas count:
//   1. Swap: idle ready replicas of other autoscaled deployments of a lower
//      or equal class, in autoscale::SwapOrder's order (lowest class, least
//      recently used); the shortest prefix whose GPUs let the replica fit,
//      tried on the ClusterState and put back.
//   2. Else preemption by the cluster layer's rules
//      (placement::PlanPreemption): every placed replica is charged to its
//      owner's leaf queue with the owner's quota, limit and over-quota
//      weight, so a higher class takes from a lower one and a tenant under
//      its guaranteed quota reclaims from one over it.
// The plan names the victims; the caller drains them (their in-flight
// requests finish) and places the replica once they are gone.
//
// Policy core: no threads, no I/O, no clock (time comes in as `now`).
// PlanRoom changes `cluster` only while it tries swaps and leaves it as it
// found it. Thread-compatible.
#ifndef GPUSCHED_CONTROL_ROOM_H_
#define GPUSCHED_CONTROL_ROOM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "inventory/cluster_state.h"
#include "placement/framework.h"
#include "placement/pod_request.h"
#include "placement/scheduler.h"

namespace gpusched::control {

// A placed replica (its pod id in the ClusterState is `replica`).
struct RoomCandidate {
  std::string replica;
  int deployment = 0;  // any id that tells deployments apart
  int class_rank = 0;  // 0 = the most important class
  bool autoscaled = false;
  bool preemptible = true;
  // Ready, of a deployment that is not being deleted: only these are
  // swapped out (every placed replica may be preempted).
  bool ready = false;
  bool idle = false;  // nothing in flight on it, nothing queued for it
  Micros last_busy = 0;
};

// An owner's leaf queue and its GPU quota (docs/tenancy.md).
struct RoomQueue {
  std::string name;
  double quota_gpus = 0;
  double limit_gpus = 0;  // 0: no limit
  double over_quota_weight = 1;
};

struct RoomAsk {
  placement::PodRequest pod;  // pod.info.tenant names its queue
  std::string replica;        // its name (never a victim of itself)
  int deployment = 0;
  int class_rank = 0;
};

struct RoomVictim {
  std::string replica;
  // Preemption: the rule that made it eligible, with the numbers.
  std::string rule;
  int priority = 0;
  int64_t gpu_milli = 0;
  Micros idle_for = -1;  // swap: how long it had been idle (-1: never used)
};

struct RoomPlan {
  enum class Kind { kNone, kSwap, kPreempt };
  Kind kind = Kind::kNone;
  std::vector<RoomVictim> victims;  // in the order they should go
  int node = -1;                    // preemption: the node it frees
  std::string why;                  // kNone: why nothing can give way
};

const char* RoomKindName(RoomPlan::Kind kind);

// The owner's GPU limit (a RoomQueue's limit_gpus; 0: none) bounds what its
// deployments hold: the reason, when `need_milli` more on top of
// `used_milli` would pass it; nullopt when it fits.
std::optional<std::string> OverGpuLimit(const std::string& tenant,
                                        int64_t used_milli, int64_t need_milli,
                                        double limit_gpus);

// The order a reconcile pass takes the deployments in: those with a
// replica whose victims are gone first (it takes the GPUs it made room
// for; another pending replica must not), then by class, most important
// first; otherwise as given. Returns indices into `deployments`.
struct PassEntry {
  int class_rank = 0;
  bool victims_gone = false;
};
std::vector<int> PassOrder(const std::vector<PassEntry>& deployments);

// See the file comment. `swap_min_idle`: a replica used within this long
// before `now` is not swapped out (against thrashing). `queues` must hold
// the ask's queue and every candidate's (others get no quota).
RoomPlan PlanRoom(inventory::ClusterState& cluster,
                  placement::Scheduler& scheduler,
                  const std::vector<std::unique_ptr<placement::FilterPlugin>>&
                      preemption_filters,
                  const RoomAsk& ask,
                  const std::vector<RoomCandidate>& candidates,
                  const std::vector<RoomQueue>& queues, Micros now,
                  Micros swap_min_idle);

}  // namespace gpusched::control

#endif  // GPUSCHED_CONTROL_ROOM_H_
