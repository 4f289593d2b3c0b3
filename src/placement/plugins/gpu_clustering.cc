// gpu-clustering (FGD paper's GpuClustering baseline): keep pods of one
// class together. A pod's class is "share" (a fraction of one GPU) or
// "k-gpu" (k whole GPUs); CPU-only pods have no class, score 0 everywhere
// and are invisible to the grouping. With b = 25 * (8000 - free milli) /
// 8000 (integer; 8000 whatever the node size, as the authors wrote it):
//   node hosts only this class: 75 + b;  hosts it among others: 50 + b;
//   hosts no pod with a class: 25 + b;   hosts only other classes: b.
// The score depends on the pods on the node, not only its free resources,
// so it is not class-invariant.
#include "placement/plugins/plugins.h"

namespace gpusched::placement {
namespace {

// 0 = no class (CPU-only), -1 = share, k = k whole GPUs.
int ClassOf(const inventory::Allocation& a) {
  if (a.gpus.empty()) return 0;
  if (a.gpus.size() == 1 && a.gpus[0].milli < inventory::kMilliPerGpu) {
    return -1;
  }
  return static_cast<int>(a.gpus.size());
}

class GpuClusteringPolicy : public ScorePlugin {
 public:
  absl::string_view name() const override { return "gpu-clustering"; }
  bool ClassInvariant() const override { return false; }
  double Score(const PodRequest& pod, const ClusterState& cs,
               int node) override {
    if (pod.kind == GpuKind::kNone) return 0;
    const int mine = pod.kind == GpuKind::kWhole ? pod.gpus : -1;
    bool same = false, other = false;
    for (const std::string& id : cs.PodsOnNode(node)) {
      const int c = ClassOf(cs.FindPod(id)->allocation);
      if (c == 0) continue;
      (c == mine ? same : other) = true;
    }
    const int64_t b = 25 * (8000 - cs.state(node).gpu_milli_free) / 8000;
    if (same) return static_cast<double>((other ? 50 : 75) + b);
    return static_cast<double>((other ? 0 : 25) + b);
  }
};

}  // namespace

std::unique_ptr<ScorePlugin> NewGpuClusteringPolicy(const PolicyOptions&) {
  return std::make_unique<GpuClusteringPolicy>();
}

}  // namespace gpusched::placement
