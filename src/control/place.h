// Placing one replica: the steps both drivers (the live controller and the
// simulator's fleet) take before a replica gets GPUs, once:
//   1. compile the deployment's resource request against the cluster (a
//      bad request is the replica's launch failure, with the reason);
//   2. the owner's GPU limit (a tenant's quota.limit): what its replicas
//      hold now plus this one must stay within it (control::OverGpuLimit);
//   3. weights locality: the nodes where the replica's weights are already
//      local (a replica loaded them there before, or the driver found them
//      on the node's disk) are tried first, most recently loaded first;
//   4. else the placement policy's choice over every node.
// What does not fit comes back with the placement layer's reasons, so the
// driver can make room (control/room.h) or retry later. A placed replica is
// bound in the ClusterState under its name.
//
// Policy core: no threads, no I/O, no clock. Thread-compatible.
#ifndef GPUSCHED_CONTROL_PLACE_H_
#define GPUSCHED_CONTROL_PLACE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "inventory/cluster_state.h"
#include "inventory/resources.h"
#include "nlohmann/json.hpp"
#include "placement/pod_request.h"
#include "placement/scheduler.h"

namespace gpusched::control {

// Where each weights path is local: nodes, most recently loaded first.
// Bounded: kMaxPaths paths (the least recently loaded one is forgotten).
class WeightsLocality {
 public:
  static constexpr size_t kMaxPaths = 4096;
  // A replica loaded `path` on `node` (or the driver found it there).
  void Loaded(const std::string& path, int node);
  // The nodes where `path` is local, most recent first; none for "".
  std::vector<int> Nodes(const std::string& path) const;
  bool IsLocal(const std::string& path, int node) const;
  // The paths local on `node`, in name order.
  std::vector<std::string> Paths(int node) const;
  size_t size() const { return nodes_.size(); }

 private:
  std::map<std::string, std::vector<int>> nodes_;
  std::map<std::string, uint64_t> used_;  // path -> last Loaded (a counter)
  uint64_t clock_ = 0;
};

struct PlaceAsk {
  std::string replica;  // its pod name in the ClusterState
  inventory::ResourceRequest request;
  inventory::PodInfo info;  // info.tenant: its owner's queue
  // The owner's GPU limit in GPUs (0: none), named `owner` in the reason.
  std::string owner;
  double limit_gpus = 0;
  // The weights it loads ("": none): WeightsLocality's nodes go first.
  std::string weights;
  // Where it goes against the other replicas of its deployment (`siblings`,
  // their pod names): "node" keeps off their nodes where another node fits,
  // then off their GPUs; "gpu" keeps off their GPUs only; "none".
  std::string spread = "node";
  std::vector<std::string> siblings;
  // What a node costs this replica (capacity on demand: its pool's USD per
  // million tokens or per GPU-hour for it; a node absent costs 0, as a
  // static node is paid for anyway). Non-empty: the cheapest nodes that fit
  // take it, in the order above within them (weights, spread, the policy's
  // score), so that dearer nodes empty and can be given back. At most
  // kMaxNodeCosts entries.
  std::map<int, double> node_cost;
  static constexpr size_t kMaxNodeCosts = 1 << 16;
};

struct PlaceResult {
  enum class Kind {
    kPlaced,     // bound; `decision` says where
    kInvalid,    // the request cannot be compiled: `why`
    kOverLimit,  // the owner's GPU limit: `why`
    kNoFit,      // no node has room now: `why`, `decision.reasons`
  };
  Kind kind = Kind::kNoFit;
  std::optional<placement::PodRequest> pod;  // compiled (not for kInvalid)
  placement::Decision decision;
  bool weights_local = false;  // placed on a node where they are local
  std::string why;
  // Unschedulable reasons for the event log: {"TenantQuota": 1}, or the
  // placement layer's "Plugin: reason" -> nodes.
  nlohmann::json reasons = nlohmann::json::object();
};

// GPUs (milli) held by the pods of `queue` in `cluster`.
int64_t QueueGpuMilli(const inventory::ClusterState& cluster,
                      const std::string& queue);

// Steps 1-4 above; binds the replica when placed.
PlaceResult PlaceReplica(inventory::ClusterState& cluster,
                         placement::Scheduler& scheduler,
                         const WeightsLocality& locality, const PlaceAsk& ask);

}  // namespace gpusched::control

#endif  // GPUSCHED_CONTROL_PLACE_H_
