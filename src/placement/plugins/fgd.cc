// fgd: Fragmentation Gradient Descent (Weng et al., USENIX ATC'23), as the
// authors' simulator does it. For each way to put the pod on the node (each
// fitting GPU for a share; the lowest-index idle GPUs for whole GPUs) the
// growth of F_n(M) gives s = int(100 * sigmoid((F_before - F_after) / 1000));
// the node scores its best s, and the GPU chosen is the lowest index that
// reaches it. Memory is ignored by the measure, as in the paper.
#include <cmath>

#include "placement/gpu_select.h"
#include "placement/plugins/plugins.h"

namespace gpusched::placement {
namespace {

class FgdPolicy : public ScorePlugin {
 public:
  explicit FgdPolicy(TargetWorkload workload)
      : frag_(std::move(workload), /*with_memory=*/false) {}
  absl::string_view name() const override { return "fgd"; }

  double Score(const PodRequest& pod, const ClusterState& cs,
               int node) override {
    int gpu;
    return Best(pod, cs, node, &gpu);
  }

  std::vector<GpuShare> SelectGpus(const PodRequest& pod,
                                   const ClusterState& cs, int node,
                                   Rng& rng) override {
    if (pod.kind != GpuKind::kFraction) {
      return ScorePlugin::SelectGpus(pod, cs, node, rng);
    }
    int gpu = -1;
    Best(pod, cs, node, &gpu);
    if (gpu < 0) return {};
    return MakeShares(pod, cs.spec(node), {gpu});
  }

 private:
  static double IntScore(double before, double after) {
    return std::trunc(100.0 / (1.0 + std::exp(-(before - after) / 1000.0)));
  }

  double Best(const PodRequest& pod, const ClusterState& cs, int node,
              int* gpu) {
    const FragNode before = FragNodeOf(cs, node);
    const double f_before = frag_.Of(before);
    FragNode after = before;
    after.cpu_free -= pod.cpu_milli;
    after.memory_free_mib -= pod.memory_mib;
    const inventory::NodeState& st = cs.state(node);
    if (pod.kind != GpuKind::kFraction) {
      // Whole GPUs: which idle ones does not change F; take any `gpus`.
      int left = pod.gpus;
      for (int i = 0; i < after.num_gpus && left > 0; ++i) {
        if (after.free[i] == inventory::kMilliPerGpu) {
          after.free[i] = 0;
          --left;
        }
      }
      *gpu = -1;
      return IntScore(f_before, frag_.Of(after));
    }
    // FragNode lists usable GPUs in index order; map back to indexes.
    double best = -1;
    int k = 0;
    for (int i = 0; i < static_cast<int>(st.gpus.size()); ++i) {
      const inventory::GpuState& g = st.gpus[i];
      if (!g.healthy || g.mig_used != 0) continue;
      const int slot = k++;
      if (!ShareFits(pod, g)) continue;
      after.free[slot] -= pod.gpu_milli;
      const double s = IntScore(f_before, frag_.Of(after));
      after.free[slot] += pod.gpu_milli;
      if (s > best) {
        best = s;
        *gpu = i;
      }
    }
    return best;
  }

  Fragmentation frag_;
};

}  // namespace

std::unique_ptr<ScorePlugin> NewFgdPolicy(const PolicyOptions& options) {
  return std::make_unique<FgdPolicy>(options.workload);
}

}  // namespace gpusched::placement
