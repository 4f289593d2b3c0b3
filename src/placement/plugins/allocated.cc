// spread (Kubernetes LeastAllocated) and binpack (MostAllocated): the mean,
// over CPU, memory and GPU milli, of the node's free (spread) or used
// (binpack) fraction after placement, as an integer 0..100 like kube.
#include "placement/plugins/plugins.h"

namespace gpusched::placement {
namespace {

class AllocatedPolicy : public ScorePlugin {
 public:
  explicit AllocatedPolicy(bool most) : most_(most) {}
  absl::string_view name() const override {
    return most_ ? "binpack" : "spread";
  }
  double Score(const PodRequest& pod, const ClusterState& cs,
               int node) override {
    const inventory::NodeSpec& spec = cs.spec(node);
    const inventory::NodeState& st = cs.state(node);
    int64_t sum = 0;
    int resources = 0;
    auto add = [&](int64_t capacity, int64_t free_after) {
      if (capacity <= 0) return;
      const int64_t used = capacity - free_after;
      sum += (most_ ? used : free_after) * 100 / capacity;
      ++resources;
    };
    add(spec.cpu_milli, st.cpu_free - pod.cpu_milli);
    add(spec.memory_mib, st.memory_free_mib - pod.memory_mib);
    add(int64_t{spec.gpu_count} * inventory::kMilliPerGpu,
        st.gpu_milli_free - pod.TotalGpuMilli());
    return resources == 0 ? 0 : static_cast<double>(sum / resources);
  }

 private:
  bool most_;
};

}  // namespace

std::unique_ptr<ScorePlugin> NewSpreadPolicy(const PolicyOptions&) {
  return std::make_unique<AllocatedPolicy>(false);
}
std::unique_ptr<ScorePlugin> NewBinpackPolicy(const PolicyOptions&) {
  return std::make_unique<AllocatedPolicy>(true);
}

}  // namespace gpusched::placement
