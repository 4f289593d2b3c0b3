#include "placement/framework.h"

#include "placement/gpu_select.h"

namespace gpusched::placement {
namespace {

class NodeResourcesFit : public FilterPlugin {
 public:
  absl::string_view name() const override { return "NodeResourcesFit"; }
  FilterVerdict Filter(const PodRequest& pod, const ClusterState& cs,
                       int node) const override {
    const inventory::NodeState& st = cs.state(node);
    if (pod.cpu_milli > st.cpu_free) return {"insufficient CPU"};
    if (pod.memory_mib > st.memory_free_mib) return {"insufficient memory"};
    return {};
  }
};

class GpuModel : public FilterPlugin {
 public:
  absl::string_view name() const override { return "GpuModel"; }
  FilterVerdict Filter(const PodRequest& pod, const ClusterState& cs,
                       int node) const override {
    if (pod.kind == GpuKind::kNone) return {};
    if (cs.spec(node).gpu_count == 0) return {"no GPUs"};
    if (!pod.ModelAllowed(cs.node_model_id(node))) {
      return {"GPU model mismatch"};
    }
    return {};
  }
};

class GpuFit : public FilterPlugin {
 public:
  absl::string_view name() const override { return "GpuFit"; }
  FilterVerdict Filter(const PodRequest& pod, const ClusterState& cs,
                       int node) const override {
    const inventory::NodeState& st = cs.state(node);
    switch (pod.kind) {
      case GpuKind::kNone:
        return {};
      case GpuKind::kMig: {
        if (const char* why = MigSpecRejection(cs.spec(node), pod.mig_profile);
            why != nullptr) {
          return {why};
        }
        if (ChooseMigSlice(pod, cs.spec(node), st).empty()) {
          return {"no free MIG slot"};
        }
        return {};
      }
      case GpuKind::kWhole: {
        if (st.idle_gpus < pod.gpus) return {"not enough idle GPUs"};
        if (pod.gpu_memory_mib > 0 &&
            cs.spec(node).gpu_memory_mib < pod.gpu_memory_mib) {
          return {"insufficient GPU memory"};
        }
        return {};
      }
      case GpuKind::kFraction: {
        if (st.max_milli_free < pod.gpu_milli)
          return {"insufficient GPU milli"};
        if (BestFitGpu(pod, st) < 0) return {"insufficient GPU memory"};
        return {};
      }
    }
    return {};
  }
};

class NvlinkTopology : public FilterPlugin {
 public:
  absl::string_view name() const override { return "NvlinkTopology"; }
  FilterVerdict Filter(const PodRequest& pod, const ClusterState& cs,
                       int node) const override {
    if (pod.kind != GpuKind::kWhole ||
        pod.topology != inventory::Topology::kRequired) {
      return {};
    }
    if (!HasNvlinkGang(pod, cs.spec(node), cs.state(node))) {
      return {"no NVLink-connected set of idle GPUs"};
    }
    return {};
  }
};

}  // namespace

std::vector<GpuShare> ScorePlugin::SelectGpus(const PodRequest& pod,
                                              const ClusterState& cs, int node,
                                              Rng& rng) {
  const inventory::NodeSpec& spec = cs.spec(node);
  const inventory::NodeState& st = cs.state(node);
  switch (pod.kind) {
    case GpuKind::kWhole:
      return MakeShares(pod, spec, ChooseWholeGpus(pod, spec, st));
    case GpuKind::kFraction: {
      const int g = BestFitGpu(pod, st);
      if (g < 0) return {};
      return MakeShares(pod, spec, {g});
    }
    case GpuKind::kMig:
      return ChooseMigSlice(pod, spec, st);
    default:
      return {};
  }
}

std::vector<std::unique_ptr<FilterPlugin>> DefaultFilters() {
  std::vector<std::unique_ptr<FilterPlugin>> filters;
  filters.push_back(std::make_unique<NodeResourcesFit>());
  filters.push_back(std::make_unique<GpuModel>());
  filters.push_back(std::make_unique<GpuFit>());
  filters.push_back(std::make_unique<NvlinkTopology>());
  return filters;
}

}  // namespace gpusched::placement
