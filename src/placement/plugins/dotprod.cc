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
    const NormalizedFit f = NormalizeByMaxSpec(pod, cs, node);
    const double dot = f.node_cpu * f.pod_cpu + f.node_gpu * f.pod_gpu;
    return std::trunc(100 * (1 - dot / 2));
  }
};

}  // namespace

std::unique_ptr<ScorePlugin> NewDotProdPolicy(const PolicyOptions&) {
  return std::make_unique<DotProdPolicy>();
}

}  // namespace gpusched::placement
