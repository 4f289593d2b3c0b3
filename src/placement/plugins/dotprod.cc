// dotprod (FGD paper's DotProd baseline): the smallest dot product of the
// node's free (CPU, GPU) and the pod's request, both normalised by the
// largest node spec; score = int(100 * (1 - dot / 2)).
#include <cmath>

#include "placement/plugins/plugins.h"

namespace gpusched::placement {
namespace {

class DotProdPolicy : public ScorePlugin {
 public:
  absl::string_view name() const override { return "dotprod"; }
  double Score(const PodRequest& pod, const ClusterState& cs,
               int node) override {
    const inventory::NodeState& st = cs.state(node);
    const double max_cpu = static_cast<double>(cs.max_node_cpu_milli());
    const double max_gpu =
        static_cast<double>(cs.max_node_gpus()) * inventory::kMilliPerGpu;
    const double n0 = st.cpu_free / max_cpu, n1 = st.gpu_milli_free / max_gpu;
    const double p0 = pod.cpu_milli / max_cpu,
                 p1 = pod.TotalGpuMilli() / max_gpu;
    const double dot = n0 * p0 + n1 * p1;
    return std::trunc(100 * (1 - dot / 2));
  }
};

}  // namespace

std::unique_ptr<ScorePlugin> NewDotProdPolicy(const PolicyOptions&) {
  return std::make_unique<DotProdPolicy>();
}

}  // namespace gpusched::placement
