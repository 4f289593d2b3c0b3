// The placement framework, in Kubernetes scheduler vocabulary.
//
// A FilterPlugin says whether a node can host a pod, and if not, why (a short
// reason shared by many nodes, so reasons aggregate: "900 insufficient GPU
// milli"). A ScorePlugin is a placement policy: it scores feasible nodes
// (higher is better) and chooses the GPUs within the chosen node. "Does not
// fit" is an outcome with a reason, never an error.
//
// Plugins are owned by one Scheduler and called from its thread only.
#ifndef GPUSCHED_PLACEMENT_FRAMEWORK_H_
#define GPUSCHED_PLACEMENT_FRAMEWORK_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/random.h"
#include "inventory/cluster_state.h"
#include "placement/pod_request.h"

namespace gpusched::placement {

using inventory::Allocation;
using inventory::GpuShare;

// nullptr reason = the node passes.
struct FilterVerdict {
  const char* reason = nullptr;
  bool ok() const { return reason == nullptr; }
};

class FilterPlugin {
 public:
  virtual ~FilterPlugin() = default;
  virtual absl::string_view name() const = 0;
  // Must depend only on the pod's shape and the node's spec and free
  // resources (so one verdict serves a whole NodeClass).
  virtual FilterVerdict Filter(const PodRequest& pod, const ClusterState& cs,
                               int node) const = 0;
};

class ScorePlugin {
 public:
  virtual ~ScorePlugin() = default;
  virtual absl::string_view name() const = 0;
  // Score of a node that passed every filter; higher is better. Equal top
  // scores go to the lowest node index (see Scheduler).
  virtual double Score(const PodRequest& pod, const ClusterState& cs,
                       int node) = 0;
  // The GPU shares for `pod` on `node` (which passed every filter). The
  // default takes the tightest-fitting GPU for a share (lowest index on a
  // tie) and, for whole GPUs, an NVLink-aware gang (see gpu_select.h).
  virtual std::vector<GpuShare> SelectGpus(const PodRequest& pod,
                                           const ClusterState& cs, int node,
                                           Rng& rng);
  // True when Score depends only on the pod's shape and the node's class
  // (spec + free resources): the Scheduler then scores one node per class
  // and caches the score until epoch() changes.
  virtual bool ClassInvariant() const { return true; }
  virtual uint64_t epoch() const { return 0; }
  // Told of every pod Scheduler::Place is asked to place, placed or not,
  // before it is scheduled (adaptive policies learn the workload).
  virtual void Offered(const PodRequest& pod) {}
  // Told of every placement Scheduler::Place makes.
  virtual void Observe(const PodRequest& pod, const Allocation& alloc,
                       const ClusterState& cs) {}
};

// The filters every scheduler runs, in order: NodeResourcesFit (CPU,
// memory), GpuModel, GpuFit (idle GPUs, GPU milli, GPU memory), NvlinkTopology.
std::vector<std::unique_ptr<FilterPlugin>> DefaultFilters();

}  // namespace gpusched::placement

#endif  // GPUSCHED_PLACEMENT_FRAMEWORK_H_
