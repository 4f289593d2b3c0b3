#include "placement/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"

namespace gpusched::placement {

std::string Decision::Summary(const ClusterState& cs) const {
  if (placed) {
    std::vector<std::string> gpus;
    for (const GpuShare& s : allocation.gpus) {
      gpus.push_back(absl::StrCat(
          s.gpu, s.milli < 1000 ? absl::StrCat(":", s.milli, "m") : ""));
    }
    return absl::StrCat("placed on ", cs.spec(allocation.node).name, " GPUs [",
                        absl::StrJoin(gpus, ","), "] score ", score, " (",
                        nodes_feasible, "/", nodes_total, " nodes feasible)");
  }
  std::vector<std::string> parts;
  for (const auto& [reason, n] : reasons)
    parts.push_back(absl::StrCat(n, " ", reason));
  return absl::StrCat(nodes_feasible, "/", nodes_total,
                      " nodes are available: ", absl::StrJoin(parts, ", "));
}

Scheduler::Scheduler(ClusterState* cs, std::unique_ptr<ScorePlugin> policy,
                     uint64_t seed,
                     std::vector<std::unique_ptr<FilterPlugin>> filters)
    : cs_(cs),
      policy_(std::move(policy)),
      filters_(std::move(filters)),
      rng_(seed) {}

int Scheduler::ShapeId(const PodRequest& pod) {
  auto [it, inserted] =
      shapes_.try_emplace(ShapeOf(pod), static_cast<int>(shapes_.size()));
  return it->second;
}

int16_t Scheduler::ReasonId(const FilterPlugin& plugin, const char* reason) {
  std::string key = absl::StrCat(plugin.name(), ": ", reason);
  auto [it, inserted] =
      reason_ids_.try_emplace(key, static_cast<int16_t>(reason_names_.size()));
  if (inserted) reason_names_.push_back(std::move(key));
  return it->second;
}

Scheduler::CacheEntry& Scheduler::Entry(int class_id, int shape) {
  if (class_id >= static_cast<int>(cache_.size())) cache_.resize(class_id + 1);
  ClassCache& cc = cache_[class_id];
  const uint32_t gen = cs_->node_class(class_id).generation;
  const uint64_t epoch = policy_->epoch();
  const uint64_t cluster_epoch = cs_->cluster_epoch();
  if (cc.generation != gen || cc.epoch != epoch ||
      cc.cluster_epoch != cluster_epoch) {
    cc.generation = gen;
    cc.epoch = epoch;
    cc.cluster_epoch = cluster_epoch;
    cc.by_shape.clear();
  }
  if (shape >= static_cast<int>(cc.by_shape.size())) {
    cc.by_shape.resize(shape + 1);
  }
  return cc.by_shape[shape];
}

Decision Scheduler::Schedule(const PodRequest& pod,
                             const absl::flat_hash_set<int>* avoid) {
  if (avoid != nullptr && avoid->empty()) avoid = nullptr;
  // NVLink "preferred" means: an NVLink-connected gang on any node that has
  // one, whatever the policy's scores; only where none has, any GPUs.
  if (pod.kind == GpuKind::kWhole && pod.gpus > 1 &&
      pod.topology == inventory::Topology::kPreferred) {
    PodRequest strict = pod;
    strict.topology = inventory::Topology::kRequired;
    Decision d = ScheduleOnce(strict, avoid);
    if (d.placed) return d;
  }
  return ScheduleOnce(pod, avoid);
}

Decision Scheduler::ScheduleOnce(const PodRequest& pod,
                                 const absl::flat_hash_set<int>* avoid) {
  Decision d;
  d.nodes_total = cs_->num_nodes();
  const int shape = ShapeId(pod);
  const bool invariant = policy_->ClassInvariant();
  reason_counts_.assign(reason_names_.size(), 0);
  Candidate best;
  std::vector<Candidate>& top = d.top;  // distinct scores, best first
  // Higher score wins; on equal scores the lower node index does.
  auto consider = [&](int node, double score) {
    if (best.node < 0 || score > best.score ||
        (score == best.score && node < best.node)) {
      best = {node, score};
    }
    for (Candidate& c : top) {
      if (c.score == score) {
        c.node = std::min(c.node, node);
        return;
      }
    }
    if (top.size() == 3 && score < top.back().score) return;
    top.push_back({node, score});
    std::sort(top.begin(), top.end(),
              [](const Candidate& a, const Candidate& b) {
                return a.score > b.score;
              });
    if (top.size() > 3) top.pop_back();
  };

  for (int c : cs_->live_classes()) {
    const inventory::NodeClass& nc = cs_->node_class(c);
    // Members of a class are alike: any one not avoided stands for it.
    int rep = -1;
    int n = 0;
    for (int m : nc.members) {
      if (avoid != nullptr && avoid->contains(m)) continue;
      if (rep < 0) rep = m;
      ++n;
      if (avoid == nullptr) break;
    }
    if (rep < 0) continue;
    if (avoid == nullptr) n = static_cast<int>(nc.members.size());
    CacheEntry& e = Entry(c, shape);
    if (e.reason == kUnknown) {
      e.reason = kFeasible;
      for (const auto& f : filters_) {
        const FilterVerdict v = f->Filter(pod, *cs_, rep);
        if (!v.ok()) {
          e.reason = ReasonId(*f, v.reason);
          break;
        }
      }
      if (e.reason == kFeasible && invariant) {
        e.score = policy_->Score(pod, *cs_, rep);
      }
    }
    if (e.reason != kFeasible) {
      if (e.reason >= static_cast<int>(reason_counts_.size())) {
        reason_counts_.resize(reason_names_.size(), 0);
      }
      reason_counts_[e.reason] += n;
      continue;
    }
    d.nodes_feasible += n;
    if (invariant) {
      consider(rep, e.score);
    } else {
      for (int node : nc.members) {
        if (avoid != nullptr && avoid->contains(node)) continue;
        consider(node, policy_->Score(pod, *cs_, node));
      }
    }
  }
  if (best.node < 0) {
    for (size_t r = 0; r < reason_counts_.size(); ++r) {
      if (reason_counts_[r] > 0) {
        d.reasons.emplace_back(reason_names_[r], reason_counts_[r]);
      }
    }
    std::sort(
        d.reasons.begin(), d.reasons.end(), [](const auto& a, const auto& b) {
          return a.second != b.second ? a.second > b.second : a.first < b.first;
        });
    return d;
  }
  d.score = best.score;
  d.allocation.node = best.node;
  d.allocation.cpu_milli = pod.cpu_milli;
  d.allocation.memory_mib = pod.memory_mib;
  d.allocation.gpus = policy_->SelectGpus(pod, *cs_, best.node, rng_);
  CHECK(static_cast<int>(d.allocation.gpus.size()) == pod.gpus)
      << "policy " << policy_->name() << " chose " << d.allocation.gpus.size()
      << " GPUs for a " << pod.gpus
      << "-GPU pod on a node that passed every filter";
  d.placed = true;
  return d;
}

Decision Scheduler::Place(const std::string& pod_id, const PodRequest& pod,
                          const absl::flat_hash_set<int>* avoid) {
  policy_->Offered(pod);
  Decision d = Schedule(pod, avoid);
  if (!d.placed && avoid != nullptr && !avoid->empty()) d = Schedule(pod);
  if (!d.placed) return d;
  const absl::Status st = cs_->Assume(pod_id, d.allocation, pod.info);
  if (!st.ok()) {
    d.placed = false;
    d.reasons = {{std::string(st.message()), 1}};
    return d;
  }
  policy_->Observe(pod, d.allocation, *cs_);
  return d;
}

Decision Scheduler::PlaceOn(const std::string& pod_id, const PodRequest& pod,
                            int node) {
  Decision d;
  d.nodes_total = cs_->num_nodes();
  if (node < 0 || node >= cs_->num_nodes()) {
    d.reasons = {{absl::StrCat("no node with index ", node), 1}};
    return d;
  }
  for (const auto& f : filters_) {
    const FilterVerdict v = f->Filter(pod, *cs_, node);
    if (!v.ok()) {
      d.reasons = {{absl::StrCat(f->name(), ": ", v.reason), 1}};
      return d;
    }
  }
  d.nodes_feasible = 1;
  d.score = policy_->Score(pod, *cs_, node);
  d.top = {{node, d.score}};
  d.allocation.node = node;
  d.allocation.cpu_milli = pod.cpu_milli;
  d.allocation.memory_mib = pod.memory_mib;
  d.allocation.gpus = policy_->SelectGpus(pod, *cs_, node, rng_);
  CHECK(static_cast<int>(d.allocation.gpus.size()) == pod.gpus)
      << "policy " << policy_->name() << " chose " << d.allocation.gpus.size()
      << " GPUs on a node that passed every filter";
  const absl::Status st = cs_->Assume(pod_id, d.allocation, pod.info);
  if (!st.ok()) {
    d.reasons = {{std::string(st.message()), 1}};
    return d;
  }
  d.placed = true;
  policy_->Observe(pod, d.allocation, *cs_);
  return d;
}

}  // namespace gpusched::placement
