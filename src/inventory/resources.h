// The resource model: what a node offers and what a replica (or pod) asks for.
//
// A request asks for exactly one kind of GPU resource — `whole` GPUs on one
// node, a `fraction` of one GPU (compute milli-share plus GPU memory), a `mig`
// slice of a MIG-capable GPU, or none — plus CPU and memory, an optional list
// of acceptable GPU models and an NVLink topology requirement. Plain value
// types; thread-compatible.
#ifndef GPUSCHED_INVENTORY_RESOURCES_H_
#define GPUSCHED_INVENTORY_RESOURCES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpusched::inventory {

// One GPU is 1000 milli.
inline constexpr int kMilliPerGpu = 1000;

enum class GpuKind { kNone, kWhole, kFraction, kMig };
const char* GpuKindName(GpuKind kind);

enum class Topology {
  kAny,        // any set of GPUs on the node
  kPreferred,  // prefer an NVLink-connected set, accept any
  kRequired,   // only an NVLink-connected set
};
const char* TopologyName(Topology t);

struct ResourceRequest {
  GpuKind kind = GpuKind::kNone;
  // kWhole: number of completely free GPUs, all on one node.
  int gpus = 0;
  // kFraction: compute share of one GPU, 1..1000.
  int gpu_milli = 0;
  // kFraction: GPU memory on that GPU; kWhole: per-GPU minimum (0 = any).
  int64_t gpu_memory_mib = 0;
  // kMig: profile name as NVIDIA writes it, e.g. "3g.40gb".
  std::string mig_profile;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  // Acceptable GPU models (catalog names or trace codes); empty = any.
  std::vector<std::string> gpu_models;
  Topology topology = Topology::kAny;
};

// One GPU's part of an allocation.
struct GpuShare {
  int gpu = 0;              // index within the node
  int milli = 0;            // compute share taken
  int64_t memory_mib = 0;   // GPU memory taken
  int mig_start = -1;       // first memory slot of a MIG slice, else -1
  int mig_size = 0;         // memory slots of the MIG slice
  std::string mig_profile;  // profile name for MIG slices

  bool operator==(const GpuShare&) const = default;
};

// Where a request was placed: one node, CPU/memory and the GPU shares.
struct Allocation {
  int node = -1;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::vector<GpuShare> gpus;

  int64_t GpuMilli() const;
  bool operator==(const Allocation&) const = default;
};

}  // namespace gpusched::inventory

#endif  // GPUSCHED_INVENTORY_RESOURCES_H_
