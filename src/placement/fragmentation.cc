#include "placement/fragmentation.h"

#include <algorithm>
#include <map>

#include "common/check.h"

namespace gpusched::placement {

TargetWorkload TypicalShapes(const std::vector<PodRequest>& pods,
                             double coverage) {
  using Key = std::tuple<int64_t, int, int, uint64_t, bool>;
  std::map<Key, std::pair<int, const PodRequest*>> counts;
  for (const PodRequest& p : pods) {
    auto& [n, example] =
        counts[{p.cpu_milli, p.gpu_milli, p.gpus, p.model_mask, p.any_model}];
    if (n++ == 0) example = &p;
  }
  std::vector<std::pair<Key, std::pair<int, const PodRequest*>>> sorted(
      counts.begin(), counts.end());
  std::stable_sort(
      sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
        if (a.second.first != b.second.first)
          return a.second.first > b.second.first;
        return a.first > b.first;  // larger shape first on equal counts
      });
  TargetWorkload out;
  const double total = static_cast<double>(pods.size());
  int cum = 0;
  for (const auto& [key, entry] : sorted) {
    if (cum >= coverage * total) break;
    cum += entry.first;
    out.push_back({*entry.second, static_cast<double>(entry.first)});
    out.back().pod.memory_mib = 0;  // the group's mean, below
  }
  for (const PodRequest& p : pods) {
    for (WorkloadShape& s : out) {
      if (s.pod.cpu_milli == p.cpu_milli && s.pod.gpu_milli == p.gpu_milli &&
          s.pod.gpus == p.gpus && s.pod.model_mask == p.model_mask &&
          s.pod.any_model == p.any_model) {
        s.pod.memory_mib += p.memory_mib;
        break;
      }
    }
  }
  for (WorkloadShape& s : out) {
    s.pod.memory_mib = static_cast<int64_t>(s.pod.memory_mib / s.weight);
  }
  for (WorkloadShape& s : out) s.weight /= cum;
  return out;
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
  n.cpu_free = st.cpu_free;
  n.memory_free_mib = st.memory_free_mib;
  for (const inventory::GpuState& g : st.gpus) {
    if (!g.healthy || g.mig_used != 0) continue;
    CHECK(n.num_gpus < static_cast<int>(n.free.size()))
        << "more than 16 GPUs on node " << cs.spec(node).name;
    n.free[n.num_gpus++] = g.milli_free;
  }
  return n;
}

Fragmentation::Fragmentation(TargetWorkload workload, bool with_memory)
    : workload_(std::move(workload)), with_memory_(with_memory) {
  for (const WorkloadShape& s : workload_) {
    cpu_thresholds_.push_back(s.pod.cpu_milli);
    mem_thresholds_.push_back(s.pod.memory_mib);
  }
  for (auto* t : {&cpu_thresholds_, &mem_thresholds_}) {
    std::sort(t->begin(), t->end());
    t->erase(std::unique(t->begin(), t->end()), t->end());
  }
}

double Fragmentation::Compute(const FragNode& n) const {
  const double r = static_cast<double>(n.TotalFree());
  double f = 0;
  for (const WorkloadShape& s : workload_) {
    const PodRequest& m = s.pod;
    if (m.gpus == 0 || !m.ModelAllowed(n.model_id)) {
      f += s.weight * r;
      continue;
    }
    int hosts = 0;
    int64_t small = 0;
    for (int i = 0; i < n.num_gpus; ++i) {
      if (n.free[i] >= m.gpu_milli) {
        ++hosts;
      } else {
        small += n.free[i];
      }
    }
    const bool fits = hosts >= m.gpus && n.cpu_free >= m.cpu_milli &&
                      (!with_memory_ || n.memory_free_mib >= m.memory_mib);
    f += s.weight * (fits ? static_cast<double>(small) : r);
  }
  return f;
}

double Fragmentation::Of(const FragNode& n) {
  // Canonical key: CPU and memory only matter through the thresholds they
  // clear; GPU order does not matter.
  std::array<int32_t, 20> key{};
  key[0] = n.model_id;
  key[1] =
      static_cast<int32_t>(std::upper_bound(cpu_thresholds_.begin(),
                                            cpu_thresholds_.end(), n.cpu_free) -
                           cpu_thresholds_.begin());
  key[2] = with_memory_
               ? static_cast<int32_t>(std::upper_bound(mem_thresholds_.begin(),
                                                       mem_thresholds_.end(),
                                                       n.memory_free_mib) -
                                      mem_thresholds_.begin())
               : 0;
  key[3] = n.num_gpus;
  std::copy(n.free.begin(), n.free.begin() + n.num_gpus, key.begin() + 4);
  std::sort(key.begin() + 4, key.begin() + 4 + n.num_gpus);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  const double f = Compute(n);
  if (memo_.size() > (1u << 22)) memo_.clear();
  memo_.emplace(key, f);
  return f;
}

}  // namespace gpusched::placement
