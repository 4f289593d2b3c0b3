// gpu-packing (FGD paper's GpuPacking baseline): share a partly used GPU >
// use idle GPUs of a partly used node > an idle node. Integer bands as in
// the authors' simulator:
//   CPU-only pod: 0 everywhere (placed at random);
//   node with every GPU idle (F of them): max(33 - F, F);
//   taking u > 0 idle GPUs on a partly used node: max(50 - u, 33);
//   a share on a partly used GPU with f free milli: max(100 - f/100, 50).
#include <algorithm>

#include "placement/gpu_select.h"
#include "placement/plugins/plugins.h"

namespace gpusched::placement {
namespace {

class GpuPackingPolicy : public ScorePlugin {
 public:
  absl::string_view name() const override { return "gpu-packing"; }
  double Score(const PodRequest& pod, const ClusterState& cs,
               int node) override {
    if (pod.kind == GpuKind::kNone) return 0;
    const inventory::NodeState& st = cs.state(node);
    const int gpus = static_cast<int>(st.gpus.size());
    if (st.idle_gpus == gpus) {
      return std::max(33 - st.idle_gpus, st.idle_gpus);
    }
    // Walk GPUs by ascending free milli (stable) taking the first that fit.
    std::vector<int> order(gpus);
    for (int i = 0; i < gpus; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return st.gpus[a].milli_free < st.gpus[b].milli_free;
    });
    int taken = 0, idle_taken = 0, first_free = 0;
    for (int i : order) {
      if (taken == pod.gpus) break;
      if (!ShareFits(pod, st.gpus[i])) continue;
      if (taken == 0) first_free = st.gpus[i].milli_free;
      if (st.gpus[i].Idle()) ++idle_taken;
      ++taken;
    }
    if (idle_taken > 0) return std::max(50 - idle_taken, 33);
    return std::max(100 - ((first_free * 100 / 1000) / 10), 50);
  }
};

}  // namespace

std::unique_ptr<ScorePlugin> NewGpuPackingPolicy(const PolicyOptions&) {
  return std::make_unique<GpuPackingPolicy>();
}

}  // namespace gpusched::placement
