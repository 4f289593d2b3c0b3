// PodRequest: a ResourceRequest compiled against one ClusterState, in the
// form the placement hot path reads (model constraint as a bit mask, a shape
// key for score caches). Value type; thread-compatible.
#ifndef GPUSCHED_PLACEMENT_POD_REQUEST_H_
#define GPUSCHED_PLACEMENT_POD_REQUEST_H_

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/status/statusor.h"
#include "inventory/cluster_state.h"
#include "inventory/resources.h"

namespace gpusched::placement {

using inventory::ClusterState;
using inventory::GpuKind;
using inventory::Topology;

struct PodRequest {
  GpuKind kind = GpuKind::kNone;
  int gpus = 0;  // GPUs touched: whole N, 1 for fraction or MIG, else 0
  // Per GPU: 1000 for whole, the share for a fraction, the profile's
  // compute share for MIG (0 if no node's model has the profile).
  int gpu_milli = 0;
  int64_t gpu_memory_mib = 0;  // per GPU minimum (whole) or amount (fraction)
  std::string mig_profile;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  uint64_t model_mask = ~uint64_t{0};  // bit i: ClusterState model id i ok
  bool any_model = true;
  Topology topology = Topology::kAny;
  inventory::PodInfo info;

  int64_t TotalGpuMilli() const { return int64_t{gpus} * gpu_milli; }
  bool ModelAllowed(int model_id) const {
    return any_model || (model_id >= 0 && ((model_mask >> model_id) & 1));
  }
};

// Everything placement looks at, except the pod's identity: two requests
// with equal shapes get equal filter results and scores on a node.
using PodShape = std::tuple<int, int, int, int64_t, std::string, int64_t,
                            int64_t, uint64_t, bool, int>;
PodShape ShapeOf(const PodRequest& p);

// Validates `req` and resolves its model names (and a MIG profile's compute
// share) against the nodes `cs` has now; recompile a pending request after
// nodes join. A model that no node has is not an error: the pod is simply
// unschedulable, with a reason.
absl::StatusOr<PodRequest> CompilePodRequest(
    const inventory::ResourceRequest& req, const ClusterState& cs,
    inventory::PodInfo info = {});

}  // namespace gpusched::placement

#endif  // GPUSCHED_PLACEMENT_POD_REQUEST_H_
