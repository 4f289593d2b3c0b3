// random: a uniformly random feasible node, and a random fitting GPU.
#include "placement/gpu_select.h"
#include "placement/plugins/plugins.h"

namespace gpusched::placement {
namespace {

class RandomPolicy : public ScorePlugin {
 public:
  explicit RandomPolicy(uint64_t seed) : rng_(seed) {}
  absl::string_view name() const override { return "random"; }
  // A fresh random score per node and decision: the best is a uniformly
  // random feasible node.
  bool ClassInvariant() const override { return false; }
  double Score(const PodRequest&, const ClusterState&, int) override {
    return rng_.UniformDouble();
  }
  std::vector<GpuShare> SelectGpus(const PodRequest& pod,
                                   const ClusterState& cs, int node,
                                   Rng& rng) override {
    if (pod.kind != GpuKind::kFraction) {
      return ScorePlugin::SelectGpus(pod, cs, node, rng);
    }
    const int g = RandomFitGpu(pod, cs.state(node), rng);
    if (g < 0) return {};
    return MakeShares(pod, cs.spec(node), {g});
  }

 private:
  Rng rng_;
};

}  // namespace

std::unique_ptr<ScorePlugin> NewRandomPolicy(const PolicyOptions& options) {
  return std::make_unique<RandomPolicy>(options.seed);
}

}  // namespace gpusched::placement
