// Choosing GPUs inside one node. Pure functions over a node's spec and state;
// thread-compatible.
#ifndef GPUSCHED_PLACEMENT_GPU_SELECT_H_
#define GPUSCHED_PLACEMENT_GPU_SELECT_H_

#include <vector>

#include "common/random.h"
#include "inventory/cluster_state.h"
#include "inventory/gpu_catalog.h"
#include "placement/pod_request.h"

namespace gpusched::placement {

// True if GPU `g` (healthy, not MIG-partitioned) can take a share of `pod`.
bool ShareFits(const PodRequest& pod, const inventory::GpuState& g);
// True if GPU `g` is idle and has at least the pod's per-GPU memory.
bool WholeFits(const PodRequest& pod, const inventory::GpuState& g);

// Tightest fit: the GPU with the least free milli that still fits, lowest
// index on a tie; -1 if none.
int BestFitGpu(const PodRequest& pod, const inventory::NodeState& st);
// A uniformly random fitting GPU; -1 if none.
int RandomFitGpu(const PodRequest& pod, const inventory::NodeState& st,
                 Rng& rng);

// `pod.gpus` idle GPUs for a whole-GPU pod; empty if impossible.
// Without NVLink domains: the lowest-index idle GPUs. With domains: the
// domain with the fewest idle GPUs that still holds the gang (so the
// largest intact domains stay free), lowest indexes within it; if no single
// domain holds it and the topology is only preferred, whole domains are
// taken largest-first.
std::vector<int> ChooseWholeGpus(const PodRequest& pod,
                                 const inventory::NodeSpec& spec,
                                 const inventory::NodeState& st);
// Whether some NVLink domain of the node holds `pod.gpus` idle GPUs (a node
// without domains never does, unless the pod asks for a single GPU).
bool HasNvlinkGang(const PodRequest& pod, const inventory::NodeSpec& spec,
                   const inventory::NodeState& st);

// MIG: the catalog entry of the node's GPU model if it is MIG-capable and
// has `profile`, else null.
const inventory::MigProfile* MigProfileFor(
    const inventory::NodeSpec& spec, const std::string& profile,
    const inventory::GpuModelSpec** model);
// Why no GPU of a node with `spec` can ever hold a slice of `profile` ("GPU
// model not MIG-capable" or "no such MIG profile on this GPU model"); null
// if some GPU could, once free. Depends on the spec only.
const char* MigSpecRejection(const inventory::NodeSpec& spec,
                             const std::string& profile);
// A slice of `pod.mig_profile` on the node: the GPU (already partitioned
// GPUs first, so slices pack and idle GPUs stay whole; lowest index on a
// tie) and the start slot from inventory::ChooseMigStart. Empty if none.
std::vector<inventory::GpuShare> ChooseMigSlice(const PodRequest& pod,
                                                const inventory::NodeSpec& spec,
                                                const inventory::NodeState& st);

// GpuShares for the chosen GPU indexes.
std::vector<inventory::GpuShare> MakeShares(const PodRequest& pod,
                                            const inventory::NodeSpec& spec,
                                            const std::vector<int>& gpus);

}  // namespace gpusched::placement

#endif  // GPUSCHED_PLACEMENT_GPU_SELECT_H_
