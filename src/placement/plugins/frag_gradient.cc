#include "placement/plugins/frag_gradient.h"

#include <cmath>

#include "placement/gpu_select.h"

namespace gpusched::placement {

double FragGradientPolicy::Score(const PodRequest& pod, const ClusterState& cs,
                                 int node) {
  int gpu;
  return Best(pod, cs, node, &gpu);
}

std::vector<GpuShare> FragGradientPolicy::SelectGpus(const PodRequest& pod,
                                                     const ClusterState& cs,
                                                     int node, Rng& rng) {
  if (pod.kind != GpuKind::kFraction) {
    return ScorePlugin::SelectGpus(pod, cs, node, rng);
  }
  int gpu = -1;
  Best(pod, cs, node, &gpu);
  if (gpu < 0) return {};
  return MakeShares(pod, cs.spec(node), {gpu});
}

double FragGradientPolicy::Best(const PodRequest& pod, const ClusterState& cs,
                                int node, int* gpu) {
  const FragNode before = FragNodeOf(cs, node);
  const double f_before = Frag(before);
  FragNode after = before;
  after.cpu_free -= pod.cpu_milli;
  after.memory_free_mib -= pod.memory_mib;
  *gpu = -1;
  if (pod.kind != GpuKind::kFraction) {
    int left = pod.kind == GpuKind::kWhole ? pod.gpus : 0;
    for (int i = 0; i < after.num_gpus && left > 0; ++i) {
      if (after.free[i] == inventory::kMilliPerGpu) {
        after.free[i] = 0;
        --left;
      }
    }
    return Gain(f_before, Frag(after));
  }
  // FragNode lists usable GPUs in index order; map back to GPU indexes.
  const inventory::NodeState& st = cs.state(node);
  double best = -HUGE_VAL;
  int slot = 0;
  for (int i = 0; i < static_cast<int>(st.gpus.size()); ++i) {
    const inventory::GpuState& g = st.gpus[i];
    if (!g.healthy || g.Partitioned()) continue;
    const int k = slot++;
    if (!ShareFits(pod, g)) continue;
    after.free[k] -= pod.gpu_milli;
    const double s = Gain(f_before, Frag(after));
    after.free[k] += pod.gpu_milli;
    if (s > best) {
      best = s;
      *gpu = i;
    }
  }
  return best;
}

}  // namespace gpusched::placement
