// Factories of the built-in placement policies (ScorePlugins), one file each.
// The registry (placement/registry.h) lists them by name.
#ifndef GPUSCHED_PLACEMENT_PLUGINS_PLUGINS_H_
#define GPUSCHED_PLACEMENT_PLUGINS_PLUGINS_H_

#include <algorithm>
#include <memory>

#include "placement/fragmentation.h"
#include "placement/framework.h"

namespace gpusched::placement {

struct PolicyOptions {
  // The pod shapes the cluster expects (FGD's target workload). Empty: the
  // fragmentation-aware policies learn it online from what arrives.
  TargetWorkload workload;
  // Seeds policies that draw random numbers (random).
  uint64_t seed = 0;
};

// The node's free and the pod's requested CPU and GPU milli, each divided
// by the largest node spec in the cluster (the units of the FGD paper's
// DotProd and BestFit baselines).
struct NormalizedFit {
  double node_cpu, node_gpu, pod_cpu, pod_gpu;
};
inline NormalizedFit NormalizeByMaxSpec(const PodRequest& pod,
                                        const ClusterState& cs, int node) {
  // A cluster without CPU or GPUs scores everything 0, never NaN.
  const double max_cpu =
      std::max<double>(1, static_cast<double>(cs.max_node_cpu_milli()));
  const double max_gpu = std::max<double>(
      1, static_cast<double>(cs.max_node_gpus()) * inventory::kMilliPerGpu);
  const inventory::NodeState& st = cs.state(node);
  return {st.cpu_free / max_cpu, st.gpu_milli_free / max_gpu,
          pod.cpu_milli / max_cpu, pod.TotalGpuMilli() / max_gpu};
}

std::unique_ptr<ScorePlugin> NewRandomPolicy(const PolicyOptions&);
std::unique_ptr<ScorePlugin> NewSpreadPolicy(const PolicyOptions&);
std::unique_ptr<ScorePlugin> NewBinpackPolicy(const PolicyOptions&);
std::unique_ptr<ScorePlugin> NewDotProdPolicy(const PolicyOptions&);
std::unique_ptr<ScorePlugin> NewGpuPackingPolicy(const PolicyOptions&);
std::unique_ptr<ScorePlugin> NewGpuClusteringPolicy(const PolicyOptions&);
std::unique_ptr<ScorePlugin> NewBestFitPolicy(const PolicyOptions&);
std::unique_ptr<ScorePlugin> NewFgdPolicy(const PolicyOptions&);
std::unique_ptr<ScorePlugin> NewFillFragPolicy(const PolicyOptions&);

}  // namespace gpusched::placement

#endif  // GPUSCHED_PLACEMENT_PLUGINS_PLUGINS_H_
