// Helpers for placement tests: small clusters and requests in one line.
#ifndef GPUSCHED_PLACEMENT_TESTING_H_
#define GPUSCHED_PLACEMENT_TESTING_H_

#include <string>
#include <vector>

#include "common/check.h"
#include "inventory/cluster_state.h"
#include "placement/pod_request.h"
#include "placement/quota.h"

namespace gpusched::placement::testing {

inline inventory::NodeSpec Node(const std::string& name, int gpus,
                                int64_t cpu_milli = 96000,
                                const std::string& model = "G2",
                                int64_t memory_mib = 393216) {
  inventory::NodeSpec s;
  s.name = name;
  s.cpu_milli = cpu_milli;
  s.memory_mib = memory_mib;
  s.gpu_count = gpus;
  s.gpu_model = gpus > 0 ? model : "";
  s.gpu_memory_mib = 32768;
  return s;
}

inline PodRequest Compile(const inventory::ResourceRequest& r,
                          const ClusterState& cs) {
  auto p = CompilePodRequest(r, cs);
  CHECK(p.ok()) << p.status();
  return *p;
}

inline inventory::ResourceRequest Share(int milli, int64_t cpu = 1000) {
  inventory::ResourceRequest r;
  r.kind = GpuKind::kFraction;
  r.gpu_milli = milli;
  r.cpu_milli = cpu;
  return r;
}

inline inventory::ResourceRequest Whole(int gpus, int64_t cpu = 1000) {
  inventory::ResourceRequest r;
  r.kind = GpuKind::kWhole;
  r.gpus = gpus;
  r.cpu_milli = cpu;
  return r;
}

inline inventory::ResourceRequest CpuOnly(int64_t cpu) {
  inventory::ResourceRequest r;
  r.cpu_milli = cpu;
  return r;
}

// Assumes a share of `milli` on `gpu` of `node` under a fresh pod id.
inline void Occupy(ClusterState& cs, int node, int gpu, int milli,
                   int64_t cpu = 0) {
  static int next = 0;
  inventory::Allocation a;
  a.node = node;
  a.cpu_milli = cpu;
  if (milli > 0) {
    inventory::GpuShare share;
    share.gpu = gpu;
    share.milli = milli;
    a.gpus.push_back(share);
  }
  CHECK(cs.Assume("occupy-" + std::to_string(next++), a).ok());
}

// A queue with a GPU-milli quota only.
inline QueueConfig GpuQueue(std::string name, std::string parent, int64_t quota,
                            int64_t limit = kNoLimit, double weight = 1) {
  QueueConfig q;
  q.name = std::move(name);
  q.parent = std::move(parent);
  q.gpu.quota = quota;
  q.gpu.limit = limit;
  q.gpu.over_quota_weight = weight;
  return q;
}

}  // namespace gpusched::placement::testing

#endif  // GPUSCHED_PLACEMENT_TESTING_H_
