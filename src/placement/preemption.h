// Preemption planning: when a pod cannot be placed, which running pods to
// evict, on which node, so that it can.
//
// Who may be evicted (checked per running pod; `Q` is the preemptor's leaf
// queue, PodInfo::tenant, and `p` its priority):
//   0. Never a pod whose PodInfo::preemptible is false (the `system` class).
//   1. Priority: a pod of priority < p that is in Q, or that is borrowed:
//      over its leaf's quota (QueueTree::OverQuotaPods) while its branch —
//      its ancestor just below the lowest common ancestor with Q, or its
//      leaf when they are siblings — uses more than its quota. A lower-
//      priority pod that another queue's guarantee covers is never taken:
//      otherwise that queue would reclaim it back at once.
//   2. Reclaim: when the preemptor is in quota (QueueTree::Admit), a pod of
//      another queue, of any priority, that is over its leaf's quota while
//      its branch is above its fair share. Fair shares are computed with
//      the preemptor's request added to Q's demand.
// A pod the tree has no charge for counts as in quota in the queue its
// PodInfo::tenant names.
//
// Which set: on each node whose static filters (GPU model; for a MIG request
// also a MIG-capable model with the profile) pass, the set of eligible pods
// whose eviction makes the pod fit, cheapest by
//   a. lowest highest victim priority (lowest priority first),
//   b. least GPU milli released (so least released beyond the need),
//   c. fewest victims, then the lowest sum of victim priorities,
// then across nodes by the same cost and the lowest node index. "Fits" is
// computed on a node-local view with the rules of the default filters
// (gpu_select.h) plus the preemptor's queue limits, which victims in the
// limited queue's subtree free. A MIG request fits where ChooseMigSlice
// finds a slice on the view: victims' MIG slices free their slots, and a GPU
// takes slices only once every fractional or whole share on it is gone. It
// asks its queue for its profile's GPU milli. The search is exact within a
// budget of fit checks per node; past it, the best set found so far is used
// (always a minimal set: no victim can be spared). The chosen node is then
// confirmed by running the given filters on a one-node scratch copy with the
// victims gone (FilterPlugin's contract makes that exact); a node they reject
// is skipped for the next cheapest.
//
// PlanPreemption changes nothing. ApplyPreemption evicts and places; the
// caller owns telling the Launcher and re-queueing the victims. Not
// thread-safe: call on the policy core's thread.
#ifndef GPUSCHED_PLACEMENT_PREEMPTION_H_
#define GPUSCHED_PLACEMENT_PREEMPTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "inventory/cluster_state.h"
#include "placement/framework.h"
#include "placement/pod_request.h"
#include "placement/quota.h"
#include "placement/scheduler.h"

namespace gpusched::placement {

struct PreemptionVictim {
  std::string pod;
  std::string queue;  // its leaf queue (or PodInfo::tenant if not charged)
  int priority = 0;
  int64_t gpu_milli = 0;
  std::string reason;  // which rule makes it eligible, with the numbers
};

struct PreemptionPlan {
  bool found = false;
  int node = -1;
  // Lowest priority first, then pod id. Empty when the pod fits as is.
  std::vector<PreemptionVictim> victims;
  int64_t gpu_milli_released = 0;
  // Released minus the pod's own GPU milli, floored at 0.
  int64_t gpu_milli_excess = 0;
  // False when the chosen node's search ran out of budget (the set is
  // minimal but may not be the cheapest).
  bool exhaustive = true;
  // ClusterState::version() the plan was made against.
  uint64_t cluster_version = 0;
  // Found: a one-line summary. Not found: why, with node counts per reason
  // and counts of running pods kept per rule.
  std::string reason;

  std::vector<std::string> VictimIds() const;
};

struct PreemptionOptions {
  // Fit checks per node before settling for the best set found so far.
  int max_fit_checks_per_node = 4096;
};

// Plans room for `pod` (its PodInfo names the queue and priority). `filters`
// should be the filters the Scheduler runs (DefaultFilters()). Nodes are
// scanned in index order.
PreemptionPlan PlanPreemption(
    const inventory::ClusterState& cs, const QueueTree& queues,
    const PodRequest& pod,
    const std::vector<std::unique_ptr<FilterPlugin>>& filters,
    const PreemptionOptions& options = {});

// Carries out `plan`: Forgets every victim in the scheduler's cluster and
// Releases it from `queues` (if not null), then places `pod` under `pod_id`
// on the plan's node (Scheduler::PlaceOn) and Charges it to its queue.
// FailedPrecondition, with nothing changed, if no plan was found or the
// cluster changed since planning; Internal if the pod still does not fit on
// that node once the victims are gone (the scheduler's filters disagree with
// the plan's): the victims are then restored as they were; Charge's error if
// the tree refuses the pod (it stays placed).
absl::StatusOr<Decision> ApplyPreemption(const PreemptionPlan& plan,
                                         const std::string& pod_id,
                                         const PodRequest& pod,
                                         Scheduler& scheduler,
                                         QueueTree* queues);

}  // namespace gpusched::placement

#endif  // GPUSCHED_PLACEMENT_PREEMPTION_H_
