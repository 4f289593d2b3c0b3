// QueueTree: hierarchical tenant queues with guaranteed quotas, limits and
// over-quota weights, in KAI-Scheduler / Kueue vocabulary.
//
// The model (docs/tenancy.md has the long form):
//   * An implicit `root` holds every top-level queue (departments, tenants);
//     queues nest to any depth. Pods run in leaf queues only; usage is
//     charged per pod to its leaf and rolled up to every ancestor.
//   * Per queue and resource: `quota` (guaranteed; default 0), `limit` (hard
//     cap; default kNoLimit) and `overQuotaWeight` (share of spare capacity;
//     default 1). GPU milli is always accounted. CPU milli and memory MiB are
//     opt-in for the whole tree: a resource counts once any queue configures
//     it, and then queues that do not get quota 0, no limit, weight 1.
//   * Admit(queue, request): admitted iff every queue on the path stays
//     within its limit; in-quota iff the leaf stays within its quota in every
//     accounted resource the request uses.
//   * Per pod, the quota of a leaf covers its pods in order of priority
//     (highest first), then charge order (oldest first); the pods it does not
//     cover are "over quota" (OverQuotaPods) and may be reclaimed.
//   * Fair share (ComputeFairShares): top-down water-filling. A queue first
//     gets min(quota, demand); what is left of its parent's share goes to
//     the siblings that still want more, in proportion to overQuotaWeight,
//     never above a queue's limit or demand (usage plus pending).
//
// Not thread-safe; owned by the policy core next to its ClusterState.
#ifndef GPUSCHED_PLACEMENT_QUOTA_H_
#define GPUSCHED_PLACEMENT_QUOTA_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inventory/cluster_state.h"
#include "placement/pod_request.h"

namespace gpusched::placement {

// The resources quotas count.
enum class QuotaResource { kGpuMilli = 0, kCpuMilli = 1, kMemoryMib = 2 };
inline constexpr int kNumQuotaResources = 3;
inline constexpr std::array<QuotaResource, kNumQuotaResources> kQuotaResources =
    {QuotaResource::kGpuMilli, QuotaResource::kCpuMilli,
     QuotaResource::kMemoryMib};
// "GPU milli", "CPU milli", "memory MiB".
const char* QuotaResourceName(QuotaResource r);

struct ResourceAmounts {
  int64_t gpu_milli = 0;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;

  int64_t operator[](QuotaResource r) const;
  int64_t& operator[](QuotaResource r);
  ResourceAmounts& operator+=(const ResourceAmounts& o);
  ResourceAmounts& operator-=(const ResourceAmounts& o);
  bool operator==(const ResourceAmounts&) const = default;
};

// What a pod asks for / holds, in quota terms.
ResourceAmounts AmountsOf(const PodRequest& pod);
ResourceAmounts AmountsOf(const inventory::Allocation& alloc);
// Healthy GPU milli, and CPU and memory of every node.
ResourceAmounts ClusterCapacity(const inventory::ClusterState& cs);

// `limit` value meaning "no cap".
inline constexpr int64_t kNoLimit = -1;

// One resource's knobs for one queue.
struct ResourceQuota {
  // `quota`: guaranteed amount; usage up to it is in-quota and protected
  // from reclaim and from other queues' priority preemption. Default 0.
  int64_t quota = 0;
  // `limit`: hard cap on usage (kNoLimit or >= quota). Default kNoLimit.
  int64_t limit = kNoLimit;
  // `overQuotaWeight`: share of the parent's spare capacity relative to
  // siblings (>= 0; 0 = never deserves more than its quota). Default 1.
  double over_quota_weight = 1;
};

struct QueueConfig {
  std::string name;    // unique; "root" is reserved
  std::string parent;  // "" (or "root"): a top-level queue
  ResourceQuota gpu;   // GPU milli (1000 = one GPU); always accounted
  std::optional<ResourceQuota> cpu;     // CPU milli; opt-in, see above
  std::optional<ResourceQuota> memory;  // memory MiB; opt-in, see above
};

struct AdmitVerdict {
  // Within the limit of every queue on the path.
  bool admitted = false;
  // Within the leaf's quota in every accounted resource the request uses.
  bool in_quota = false;
  // Not admitted: every limit exceeded, leaf first ("queue 'team-a': GPU
  // milli 9000 would exceed its limit 8000"). Admitted: "in quota" or the
  // first quota it exceeds.
  std::string reason;
};

// Deserved amounts of one queue; +infinity for resources not accounted.
struct FairShare {
  std::array<double, kNumQuotaResources> deserved{};
  double operator[](QuotaResource r) const {
    return deserved[static_cast<int>(r)];
  }
};
using FairShares = absl::flat_hash_map<std::string, FairShare>;

class QueueTree {
 public:
  static constexpr char kRoot[] = "root";

  // Validates `queues`; the error lists every problem: empty or duplicate
  // names, "root" declared, unknown parent, parent cycles, negative values,
  // a limit below its quota, children's quotas summing above the parent's.
  // (Top-level quotas are not checked against the cluster: capacity moves
  // as GPUs fail; fair shares scale down when guarantees exceed it.)
  static absl::StatusOr<QueueTree> Create(std::vector<QueueConfig> queues);

  QueueTree(QueueTree&&) = default;
  QueueTree& operator=(QueueTree&&) = default;

  bool Contains(const std::string& queue) const;
  bool IsLeaf(const std::string& queue) const;
  // Whether `r` is accounted (GPU always; CPU, memory when configured).
  bool accounted(QuotaResource r) const {
    return accounted_[static_cast<int>(r)];
  }
  // Effective knobs of `queue` for `r` (defaults where not configured);
  // nullptr for an unknown queue and for the root (which has no knobs: its
  // share is the cluster's capacity).
  const ResourceQuota* Knobs(const std::string& queue, QuotaResource r) const;
  // `queue`, its parent, ..., its top-level queue (root excluded); empty
  // for an unknown queue or the root.
  std::vector<std::string> Path(const std::string& queue) const;

  // Whether a new pod asking `request` may join leaf `queue` (see
  // AdmitVerdict). An unknown or non-leaf queue is not admitted.
  AdmitVerdict Admit(const std::string& queue,
                     const ResourceAmounts& request) const;

  // Records that `pod` holds `amount` in leaf `queue`. Limits are not
  // enforced here (Admit decides; a lowered limit does not evict). Errors:
  // unknown queue, non-leaf queue, pod already charged.
  absl::Status Charge(const std::string& pod, const std::string& queue,
                      const ResourceAmounts& amount, int priority = 0);
  // Undoes Charge; false if the pod held nothing (idempotent).
  bool Release(const std::string& pod);
  // The leaf `pod` is charged to; "" if none.
  std::string QueueOf(const std::string& pod) const;
  // Rolled-up usage of `queue` (kRoot: everything); zero if unknown.
  ResourceAmounts Usage(const std::string& queue) const;

  // Pods not covered by their leaf's quota (see the file comment).
  absl::flat_hash_set<std::string> OverQuotaPods() const;
  bool IsOverQuota(const std::string& pod) const;
  // True if `queue` uses more than its quota of some accounted resource.
  bool OverQuota(const std::string& queue) const;

  // Fair shares of every queue (and kRoot = capacity) given the cluster's
  // `capacity` and extra `pending` demand per queue on top of usage
  // (unknown names are ignored).
  FairShares ComputeFairShares(
      const ResourceAmounts& capacity,
      const absl::flat_hash_map<std::string, ResourceAmounts>& pending = {})
      const;
  // True if `queue` uses more than its deserved share of some accounted
  // resource.
  bool OverFairShare(const std::string& queue, const FairShares& shares) const;

 private:
  struct Queue {
    std::string name;
    int parent = -1;
    std::vector<int> children;
    std::array<ResourceQuota, kNumQuotaResources> knobs;
    ResourceAmounts usage;
  };
  struct PodCharge {
    int queue = -1;
    ResourceAmounts amount;
    int priority = 0;
    uint64_t seq = 0;
  };

  using PodRef = std::pair<const std::string*, const PodCharge*>;

  QueueTree() = default;
  int Index(const std::string& queue) const;
  // Adds the over-quota pods among `pods` (all of leaf `leaf`) to `out`.
  void OverQuotaIn(int leaf, std::vector<PodRef> pods,
                   absl::flat_hash_set<std::string>& out) const;
  void Distribute(
      int parent, int r, double amount,
      const std::vector<std::array<double, kNumQuotaResources>>& capped_demand,
      std::vector<FairShare>& shares) const;

  std::vector<Queue> queues_;  // [0] is the root
  absl::flat_hash_map<std::string, int> index_;
  std::array<bool, kNumQuotaResources> accounted_{true, false, false};
  absl::flat_hash_map<std::string, PodCharge> pods_;
  uint64_t next_seq_ = 0;
};

}  // namespace gpusched::placement

#endif  // GPUSCHED_PLACEMENT_QUOTA_H_
