#include "control/place.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "common/check.h"
#include "control/room.h"

namespace gpusched::control {

void WeightsLocality::Loaded(const std::string& path, int node) {
  if (path.empty() || node < 0) return;
  std::vector<int>& nodes = nodes_[path];
  std::erase(nodes, node);
  nodes.insert(nodes.begin(), node);
  used_[path] = ++clock_;
  if (nodes_.size() > kMaxPaths) {
    auto oldest = std::min_element(
        used_.begin(), used_.end(),
        [](const auto& a, const auto& b) { return a.second < b.second; });
    nodes_.erase(oldest->first);
    used_.erase(oldest);
  }
}

std::vector<int> WeightsLocality::Nodes(const std::string& path) const {
  auto it = nodes_.find(path);
  return it == nodes_.end() ? std::vector<int>{} : it->second;
}

bool WeightsLocality::IsLocal(const std::string& path, int node) const {
  auto it = nodes_.find(path);
  return it != nodes_.end() && std::find(it->second.begin(), it->second.end(),
                                         node) != it->second.end();
}

std::vector<std::string> WeightsLocality::Paths(int node) const {
  std::vector<std::string> paths;
  for (const auto& [path, nodes] : nodes_) {
    if (std::find(nodes.begin(), nodes.end(), node) != nodes.end()) {
      paths.push_back(path);
    }
  }
  return paths;
}

int64_t QueueGpuMilli(const inventory::ClusterState& cluster,
                      const std::string& queue) {
  int64_t milli = 0;
  for (int n = 0; n < cluster.num_nodes(); ++n) {
    for (const std::string& pod : cluster.PodsOnNode(n)) {
      const inventory::PodRecord* r = cluster.FindPod(pod);
      if (r != nullptr && r->info.tenant == queue) {
        milli += r->allocation.GpuMilli();
      }
    }
  }
  return milli;
}

namespace {

// A share of one GPU placed on a GPU a sibling holds moves to another GPU
// of the same node that fits it, when there is one.
void KeepOffGpus(inventory::ClusterState& cluster, const std::string& pod_id,
                 const placement::PodRequest& pod,
                 const absl::flat_hash_set<std::pair<int, int>>& taken,
                 placement::Decision& d) {
  inventory::Allocation& a = d.allocation;
  if (a.gpus.size() != 1 || !a.gpus[0].mig_profile.empty() ||
      !taken.contains({a.node, a.gpus[0].gpu})) {
    return;
  }
  const inventory::Allocation chosen = a;
  cluster.Forget(pod_id);
  const int gpus = static_cast<int>(cluster.state(a.node).gpus.size());
  for (int g = 0; g < gpus; ++g) {
    if (taken.contains({a.node, g})) continue;
    inventory::Allocation moved = chosen;
    moved.gpus[0].gpu = g;
    if (cluster.Fits(moved).empty() &&
        cluster.Assume(pod_id, moved, pod.info).ok()) {
      a = moved;
      return;
    }
  }
  CHECK(cluster.Assume(pod_id, chosen, pod.info).ok())
      << "the placement of " << pod_id << " no longer fits";
}

}  // namespace

PlaceResult PlaceReplica(inventory::ClusterState& cluster,
                         placement::Scheduler& scheduler,
                         const WeightsLocality& locality, const PlaceAsk& ask) {
  PlaceResult out;
  absl::StatusOr<placement::PodRequest> pod =
      placement::CompilePodRequest(ask.request, cluster, ask.info);
  if (!pod.ok()) {
    out.kind = PlaceResult::Kind::kInvalid;
    out.why = std::string(pod.status().message());
    return out;
  }
  out.pod = *std::move(pod);
  if (ask.limit_gpus > 0) {
    if (std::optional<std::string> why =
            OverGpuLimit(ask.owner, QueueGpuMilli(cluster, ask.info.tenant),
                         out.pod->TotalGpuMilli(), ask.limit_gpus)) {
      out.kind = PlaceResult::Kind::kOverLimit;
      out.why = *why;
      out.reasons = {{"TenantQuota", 1}};
      return out;
    }
  }
  // The siblings' nodes and GPUs.
  absl::flat_hash_set<int> sibling_nodes;
  absl::flat_hash_set<std::pair<int, int>> sibling_gpus;
  if (ask.spread != "none") {
    for (const std::string& s : ask.siblings) {
      const inventory::PodRecord* rec = cluster.FindPod(s);
      if (rec == nullptr || rec->allocation.node < 0) continue;
      if (ask.spread == "node") sibling_nodes.insert(rec->allocation.node);
      for (const inventory::GpuShare& g : rec->allocation.gpus) {
        sibling_gpus.insert({rec->allocation.node, g.gpu});
      }
    }
  }
  // A node where the weights are local, off the siblings' nodes and not in
  // `outside`.
  auto place_local = [&](const absl::flat_hash_set<int>& outside) {
    for (int node : locality.Nodes(ask.weights)) {
      if (node >= cluster.num_nodes() || sibling_nodes.contains(node) ||
          outside.contains(node)) {
        continue;
      }
      out.decision = scheduler.PlaceOn(ask.replica, *out.pod, node);
      if (out.decision.placed) {
        out.weights_local = true;
        return true;
      }
    }
    return false;
  };
  if (ask.node_cost.empty() || ask.node_cost.size() > PlaceAsk::kMaxNodeCosts) {
    if (!place_local({})) {
      out.decision = scheduler.Place(ask.replica, *out.pod, &sibling_nodes);
    }
  } else {
    // By cost, cheapest first: within each cost, where the weights are
    // local, then off the siblings' nodes, then anywhere.
    auto cost_of = [&](int node) {
      auto it = ask.node_cost.find(node);
      return it == ask.node_cost.end() ? 0.0 : it->second;
    };
    std::set<double> costs = {0.0};
    for (const auto& [node, cost] : ask.node_cost) costs.insert(cost);
    for (double cost : costs) {
      absl::flat_hash_set<int> outside;
      for (int n = 0; n < cluster.num_nodes(); ++n) {
        if (cost_of(n) != cost) outside.insert(n);
      }
      if (outside.size() == static_cast<size_t>(cluster.num_nodes())) continue;
      if (place_local(outside)) break;
      absl::flat_hash_set<int> avoid = outside;
      avoid.insert(sibling_nodes.begin(), sibling_nodes.end());
      placement::Decision where = scheduler.Schedule(*out.pod, &avoid);
      if (!where.placed) where = scheduler.Schedule(*out.pod, &outside);
      if (where.placed) {
        out.decision =
            scheduler.PlaceOn(ask.replica, *out.pod, where.allocation.node);
        if (out.decision.placed) break;
      }
    }
    if (!out.decision.placed) {  // why, over every node
      out.decision = scheduler.Schedule(*out.pod);
      out.decision.placed = false;  // nothing was assumed
    }
  }
  if (out.decision.placed && !sibling_gpus.empty()) {
    KeepOffGpus(cluster, ask.replica, *out.pod, sibling_gpus, out.decision);
  }
  if (!out.decision.placed) {
    out.kind = PlaceResult::Kind::kNoFit;
    out.why = out.decision.Summary(cluster);
    for (const auto& [reason, n] : out.decision.reasons) {
      out.reasons[reason] = n;
    }
    return out;
  }
  (void)cluster.Bind(ask.replica);
  out.kind = PlaceResult::Kind::kPlaced;
  return out;
}

}  // namespace gpusched::control
