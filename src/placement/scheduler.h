// Scheduler: filter -> score -> select -> (optionally) assume, for one pod
// at a time, against one ClusterState.
//
// Candidate search walks NodeClasses (nodes with identical spec and free
// resources), not nodes: one filter verdict and, for class-invariant
// policies, one score per class, cached per (class, pod shape) until the
// class changes, the policy's epoch moves or a cluster-wide quantity that
// scores may be normalised by changes (ClusterState::cluster_epoch). Ties on
// the top score go to the lowest node index (ClusterState's tie-break order),
// as the FGD authors' simulator does with its seeded node order. The seeded Rng
// serves policies that choose GPUs at random. Not thread-safe; owns its
// plugins.
#ifndef GPUSCHED_PLACEMENT_SCHEDULER_H_
#define GPUSCHED_PLACEMENT_SCHEDULER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/random.h"
#include "placement/framework.h"

namespace gpusched::placement {

struct Candidate {
  int node = -1;
  double score = 0;
};

struct Decision {
  bool placed = false;
  Allocation allocation;
  double score = 0;
  // Up to three best nodes with distinct scores, best first (decision log).
  std::vector<Candidate> top;
  int nodes_total = 0;
  int nodes_feasible = 0;
  // "Plugin: reason" -> nodes rejected for it, most first.
  std::vector<std::pair<std::string, int>> reasons;

  // "0/1213 nodes are available: 900 GpuFit: insufficient GPU milli, 313
  // GpuModel: GPU model mismatch" (or where it went when placed).
  std::string Summary(const ClusterState& cs) const;
};

class Scheduler {
 public:
  Scheduler(
      ClusterState* cs, std::unique_ptr<ScorePlugin> policy, uint64_t seed,
      std::vector<std::unique_ptr<FilterPlugin>> filters = DefaultFilters());

  // Where `pod` would go now; changes nothing. A multi-GPU gang with NVLink
  // `preferred` is placed as `required` when some node can take it so.
  // Nodes in `avoid` are not considered (a deployment's spread: the nodes
  // of its other replicas).
  Decision Schedule(const PodRequest& pod,
                    const absl::flat_hash_set<int>* avoid = nullptr);
  // Schedule, then Assume the allocation under `pod_id` and tell the policy.
  // With `avoid`, its nodes are taken only when no other node fits.
  Decision Place(const std::string& pod_id, const PodRequest& pod,
                 const absl::flat_hash_set<int>* avoid = nullptr);

  // Place on `node` only (after preemption freed it): the node must pass
  // every filter; the policy still chooses the GPUs.
  Decision PlaceOn(const std::string& pod_id, const PodRequest& pod, int node);

  ScorePlugin& policy() { return *policy_; }
  ClusterState& cluster() { return *cs_; }

 private:
  struct CacheEntry {
    int16_t reason = kUnknown;  // kUnknown, kFeasible or a reason id
    double score = 0;
  };
  static constexpr int16_t kUnknown = -2;
  static constexpr int16_t kFeasible = -1;
  struct ClassCache {
    uint32_t generation = UINT32_MAX;
    uint64_t epoch = 0;          // the policy's
    uint64_t cluster_epoch = 0;  // ClusterState::cluster_epoch()
    std::vector<CacheEntry> by_shape;
  };

  Decision ScheduleOnce(const PodRequest& pod,
                        const absl::flat_hash_set<int>* avoid);
  int ShapeId(const PodRequest& pod);
  int16_t ReasonId(const FilterPlugin& plugin, const char* reason);
  CacheEntry& Entry(int class_id, int shape);

  ClusterState* cs_;
  std::unique_ptr<ScorePlugin> policy_;
  std::vector<std::unique_ptr<FilterPlugin>> filters_;
  Rng rng_;
  absl::flat_hash_map<PodShape, int> shapes_;
  std::vector<std::string> reason_names_;
  absl::flat_hash_map<std::string, int16_t> reason_ids_;
  std::vector<ClassCache> cache_;
  std::vector<int> reason_counts_;  // scratch, reused across calls
};

}  // namespace gpusched::placement

#endif  // GPUSCHED_PLACEMENT_SCHEDULER_H_
