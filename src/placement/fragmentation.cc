#include "placement/fragmentation.h"

#include <algorithm>
#include <map>

#include "common/check.h"

namespace gpusched::placement {

ShapeKey ShapeKeyOf(const PodRequest& p) {
  return {p.cpu_milli, p.gpu_milli, p.gpus, p.model_mask, p.any_model};
}

void ShapeCounter::Add(const PodRequest& pod) {
  auto [it, inserted] = groups_.try_emplace(ShapeKeyOf(pod));
  Group& g = it->second;
  if (inserted) g.example = pod;
  ++g.count;
  g.memory_sum += pod.memory_mib;
  ++total_;
}

TargetWorkload ShapeCounter::Typical(double coverage) const {
  std::vector<std::pair<ShapeKey, const Group*>> sorted;
  for (const auto& [key, g] : groups_) sorted.emplace_back(key, &g);
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    if (a.second->count != b.second->count) {
      return a.second->count > b.second->count;
    }
    return a.first > b.first;  // larger shape first on equal counts
  });
  TargetWorkload out;
  double cum = 0;
  for (const auto& [key, g] : sorted) {
    if (cum >= coverage * total_) break;
    cum += g->count;
    WorkloadShape s{g->example, g->count};
    s.pod.memory_mib = static_cast<int64_t>(g->memory_sum / g->count);
    out.push_back(std::move(s));
  }
  for (WorkloadShape& s : out) s.weight /= cum;
  return out;
}

TargetWorkload TypicalShapes(const std::vector<PodRequest>& pods,
                             double coverage) {
  ShapeCounter counter;
  for (const PodRequest& p : pods) counter.Add(p);
  return counter.Typical(coverage);
}

int64_t FragNode::TotalFree() const {
  int64_t total = 0;
  for (int i = 0; i < num_gpus; ++i) total += free[i];
  return total;
}

int FragNode::IdleGpus() const {
  int idle = 0;
  for (int i = 0; i < num_gpus; ++i) idle += free[i] == inventory::kMilliPerGpu;
  return idle;
}

FragNode FragNodeOf(const ClusterState& cs, int node) {
  const inventory::NodeState& st = cs.state(node);
  FragNode n;
  n.model_id = cs.node_model_id(node);
  n.spec_id = cs.node_spec_id(node);
  n.cpu_free = st.cpu_free;
  n.memory_free_mib = st.memory_free_mib;
  for (const inventory::GpuState& g : st.gpus) {
    if (!g.healthy || g.Partitioned()) continue;
    CHECK(n.num_gpus < static_cast<int>(n.free.size()))
        << "more than 16 GPUs on node " << cs.spec(node).name;
    n.free[n.num_gpus++] = g.milli_free;
  }
  return n;
}

Fragmentation::Fragmentation(TargetWorkload workload)
    : workload_(std::move(workload)) {
  for (const WorkloadShape& s : workload_) {
    cpu_thresholds_.push_back(s.pod.cpu_milli);
  }
  std::sort(cpu_thresholds_.begin(), cpu_thresholds_.end());
  cpu_thresholds_.erase(
      std::unique(cpu_thresholds_.begin(), cpu_thresholds_.end()),
      cpu_thresholds_.end());
}

double Fragmentation::Compute(const FragNode& n) const {
  return SumOverShapes(workload_, n, [&](const PodRequest& m, double r) {
    int hosts = 0;
    int64_t small = 0;
    for (int i = 0; i < n.num_gpus; ++i) {
      if (n.free[i] >= m.gpu_milli) {
        ++hosts;
      } else {
        small += n.free[i];
      }
    }
    const bool fits = hosts >= m.gpus && n.cpu_free >= m.cpu_milli;
    return fits ? static_cast<double>(small) : r;
  });
}

double Fragmentation::Of(const FragNode& n) {
  // Canonical key: CPU only matters through the thresholds it clears; GPU
  // order does not matter.
  std::array<int32_t, 19> key{};
  key[0] = n.model_id;
  key[1] =
      static_cast<int32_t>(std::upper_bound(cpu_thresholds_.begin(),
                                            cpu_thresholds_.end(), n.cpu_free) -
                           cpu_thresholds_.begin());
  key[2] = n.num_gpus;
  std::copy(n.free.begin(), n.free.begin() + n.num_gpus, key.begin() + 3);
  std::sort(key.begin() + 3, key.begin() + 3 + n.num_gpus);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  const double f = Compute(n);
  if (memo_.size() > (1u << 18)) memo_.clear();  // ~25 MB at most
  memo_.emplace(key, f);
  return f;
}

}  // namespace gpusched::placement
