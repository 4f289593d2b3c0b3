#include "control/room.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "autoscale/swap.h"
#include "placement/preemption.h"
#include "placement/quota.h"

namespace gpusched::control {
namespace {

int64_t Milli(double gpus) { return static_cast<int64_t>(gpus * 1000 + 0.5); }

RoomPlan TrySwap(inventory::ClusterState& cluster,
                 placement::Scheduler& scheduler, const RoomAsk& ask,
                 const std::vector<RoomCandidate>& candidates, Micros now,
                 Micros swap_min_idle) {
  std::vector<autoscale::SwapCandidate> swap;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const RoomCandidate& c = candidates[i];
    if (!c.ready) continue;
    swap.push_back({static_cast<int64_t>(i), c.deployment, c.class_rank,
                    c.autoscaled, c.preemptible, c.idle, c.last_busy});
  }
  // SwapOrder leaves out the asking deployment's own replicas.
  std::vector<autoscale::SwapCandidate> order = autoscale::SwapOrder(
      std::move(swap), ask.deployment, ask.class_rank, now, swap_min_idle);
  // The fewest, in that order, whose GPUs let it fit: tried on the cluster
  // state, then put back as they were.
  size_t fit = 0;
  std::vector<std::pair<std::string, inventory::PodRecord>> removed;
  for (size_t i = 0; i < order.size() && fit == 0; ++i) {
    const std::string& name = candidates[order[i].id].replica;
    const inventory::PodRecord* rec = cluster.FindPod(name);
    if (rec == nullptr) continue;
    removed.emplace_back(name, *rec);
    cluster.Forget(name);
    if (scheduler.Schedule(ask.pod).placed) fit = i + 1;
  }
  for (const auto& [name, rec] : removed) {
    (void)cluster.Assume(name, rec.allocation, rec.info);
    if (rec.bound) (void)cluster.Bind(name);
  }
  RoomPlan plan;
  if (fit == 0) return plan;
  plan.kind = RoomPlan::Kind::kSwap;
  for (size_t i = 0; i < fit; ++i) {
    const RoomCandidate& c = candidates[order[i].id];
    RoomVictim v;
    v.replica = c.replica;
    v.idle_for = c.last_busy > 0 ? now - c.last_busy : -1;
    plan.victims.push_back(std::move(v));
  }
  return plan;
}

}  // namespace

const char* RoomKindName(RoomPlan::Kind kind) {
  switch (kind) {
    case RoomPlan::Kind::kNone:
      return "none";
    case RoomPlan::Kind::kSwap:
      return "swap";
    case RoomPlan::Kind::kPreempt:
      return "preempt";
  }
  return "none";
}

RoomPlan PlanRoom(inventory::ClusterState& cluster,
                  placement::Scheduler& scheduler,
                  const std::vector<std::unique_ptr<placement::FilterPlugin>>&
                      preemption_filters,
                  const RoomAsk& ask,
                  const std::vector<RoomCandidate>& candidates,
                  const std::vector<RoomQueue>& queues, Micros now,
                  Micros swap_min_idle) {
  RoomPlan swap =
      TrySwap(cluster, scheduler, ask, candidates, now, swap_min_idle);
  if (swap.kind == RoomPlan::Kind::kSwap) return swap;

  // Preemption, by the cluster layer's rules: owners are leaf queues with
  // their quotas, every placed replica charged to its owner.
  std::vector<placement::QueueConfig> configs;
  absl::flat_hash_set<std::string> seen;
  auto add_queue = [&](const std::string& name, const RoomQueue* q) {
    if (!seen.insert(name).second) return;
    placement::QueueConfig c;
    c.name = name;
    if (q != nullptr) {
      c.gpu.quota = Milli(q->quota_gpus);
      if (q->limit_gpus > 0) {
        c.gpu.limit = std::max(c.gpu.quota, Milli(q->limit_gpus));
      }
      c.gpu.over_quota_weight = q->over_quota_weight;
    }
    configs.push_back(std::move(c));
  };
  for (const RoomQueue& q : queues) add_queue(q.name, &q);
  add_queue(ask.pod.info.tenant, nullptr);
  for (const RoomCandidate& c : candidates) {
    if (const inventory::PodRecord* rec = cluster.FindPod(c.replica)) {
      add_queue(rec->info.tenant, nullptr);
    }
  }
  RoomPlan plan;
  auto tree = placement::QueueTree::Create(std::move(configs));
  if (!tree.ok()) {
    plan.why = std::string(tree.status().message());
    return plan;
  }
  for (const RoomCandidate& c : candidates) {
    if (c.replica == ask.replica) continue;
    const inventory::PodRecord* rec = cluster.FindPod(c.replica);
    if (rec == nullptr) continue;
    (void)tree->Charge(c.replica, rec->info.tenant,
                       placement::AmountsOf(rec->allocation),
                       rec->info.priority);
  }
  const placement::PreemptionPlan p =
      placement::PlanPreemption(cluster, *tree, ask.pod, preemption_filters);
  if (!p.found || p.victims.empty()) {
    plan.why = p.found ? "it fits without preemption" : p.reason;
    return plan;
  }
  plan.kind = RoomPlan::Kind::kPreempt;
  plan.node = p.node;
  for (const placement::PreemptionVictim& v : p.victims) {
    RoomVictim out;
    out.replica = v.pod;
    out.rule = v.reason;
    out.priority = v.priority;
    out.gpu_milli = v.gpu_milli;
    plan.victims.push_back(std::move(out));
  }
  return plan;
}

std::optional<std::string> OverGpuLimit(const std::string& tenant,
                                        int64_t used_milli, int64_t need_milli,
                                        double limit_gpus) {
  if (limit_gpus <= 0) return std::nullopt;
  const int64_t limit = static_cast<int64_t>(limit_gpus * 1000 + 0.5);
  if (used_milli + need_milli <= limit) return std::nullopt;
  return absl::StrFormat(
      "tenant %s's GPU limit: %.2f of %.2f GPUs in use, this replica needs "
      "%.2f more",
      tenant, used_milli / 1000.0, limit / 1000.0, need_milli / 1000.0);
}

std::vector<int> PassOrder(const std::vector<PassEntry>& deployments) {
  std::vector<int> order(deployments.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const PassEntry& x = deployments[a];
    const PassEntry& y = deployments[b];
    if (x.victims_gone != y.victims_gone) return x.victims_gone;
    return x.class_rank < y.class_rank;
  });
  return order;
}

}  // namespace gpusched::control
