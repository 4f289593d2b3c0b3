// best-fit (FGD paper's BestFit baseline): minimise the leftover CPU and GPU
// after placement, each normalised by the largest node spec:
// score = int(100 * (1 - (0.5 cpu_left/max_cpu + 0.5 gpu_left/max_gpu))).
// (The authors then min-max normalise across nodes, which never changes
// the winner, so it is left out.)
#include <cmath>

#include "placement/plugins/plugins.h"

namespace gpusched::placement {
namespace {

class BestFitPolicy : public ScorePlugin {
 public:
  absl::string_view name() const override { return "best-fit"; }
  double Score(const PodRequest& pod, const ClusterState& cs,
               int node) override {
    const NormalizedFit f = NormalizeByMaxSpec(pod, cs, node);
    const double s =
        0.5 * (f.node_cpu - f.pod_cpu) + 0.5 * (f.node_gpu - f.pod_gpu);
    return std::trunc((1 - s) * 100);
  }
};

}  // namespace

std::unique_ptr<ScorePlugin> NewBestFitPolicy(const PolicyOptions&) {
  return std::make_unique<BestFitPolicy>();
}

}  // namespace gpusched::placement
