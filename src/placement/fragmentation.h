// The fragmentation measure of FGD (Weng et al., "Beware of Fragmentation",
// USENIX ATC'23), over a target workload of pod shapes.
//
// For a node n with total free GPU milli R and a shape m, F_n(m) = R when m
// needs no GPU, cannot use n's GPU model, or cannot be hosted (too few GPUs
// with enough free milli, or too little CPU); otherwise the free milli on
// GPUs too small for m. F_n(M) = sum_m p_m F_n(m). A placement policy tries
// to make F grow least. Thread-compatible; the memo is not thread-safe.
#ifndef GPUSCHED_PLACEMENT_FRAGMENTATION_H_
#define GPUSCHED_PLACEMENT_FRAGMENTATION_H_

#include <array>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "inventory/cluster_state.h"
#include "placement/pod_request.h"

namespace gpusched::placement {

// One shape of the target workload with its probability.
struct WorkloadShape {
  PodRequest pod;
  double weight = 0;
};
using TargetWorkload = std::vector<WorkloadShape>;

// What makes two pods the same shape for the target workload: CPU, GPU
// milli, GPU count and model constraint. Memory is not part of the shape,
// as in the paper; a shape carries its pods' mean memory.
using ShapeKey = std::tuple<int64_t, int, int, uint64_t, bool>;
ShapeKey ShapeKeyOf(const PodRequest& p);

// Counts pods by shape (one entry per distinct shape, so it stays small
// however many pods it sees) and derives the target workload from them.
class ShapeCounter {
 public:
  void Add(const PodRequest& pod);
  double total() const { return total_; }
  // The FGD target workload: shapes most frequent first (ties: larger shape
  // first), kept while the cumulative count is below `coverage` of all pods
  // (the shape that crosses it is kept), probabilities renormalised.
  TargetWorkload Typical(double coverage = 0.95) const;

 private:
  struct Group {
    PodRequest example;
    double count = 0;
    double memory_sum = 0;
  };
  std::map<ShapeKey, Group> groups_;
  double total_ = 0;
};

// ShapeCounter over `pods`, then Typical(coverage).
TargetWorkload TypicalShapes(const std::vector<PodRequest>& pods,
                             double coverage = 0.95);

// A node's free resources as the measure sees them.
struct FragNode {
  int model_id = -1;
  int spec_id = -1;  // ClusterState::node_spec_id
  int64_t cpu_free = 0;
  int64_t memory_free_mib = 0;
  int num_gpus = 0;
  std::array<int32_t, 16> free{};  // free milli per usable GPU, any order

  int64_t TotalFree() const;
  int IdleGpus() const;
};
FragNode FragNodeOf(const ClusterState& cs, int node);

// sum over shapes m of p_m * (the node's free GPU milli if m needs no GPU
// or cannot use the node's model, else per_gpu_shape(m, free milli)): the
// skeleton every fragmentation measure here shares.
template <typename PerGpuShape>
double SumOverShapes(const TargetWorkload& workload, const FragNode& n,
                     PerGpuShape&& per_gpu_shape) {
  const double r = static_cast<double>(n.TotalFree());
  double f = 0;
  for (const WorkloadShape& s : workload) {
    const bool gpu_use = s.pod.gpus > 0 && s.pod.ModelAllowed(n.model_id);
    f += s.weight * (gpu_use ? per_gpu_shape(s.pod, r) : r);
  }
  return f;
}

class Fragmentation {
 public:
  // Memory is not part of the measure, as in the paper.
  explicit Fragmentation(TargetWorkload workload);

  const TargetWorkload& workload() const { return workload_; }
  // F_n(M) in GPU milli; memoised on the node's canonical state.
  double Of(const FragNode& n);

 private:
  double Compute(const FragNode& n) const;

  TargetWorkload workload_;
  std::vector<int64_t> cpu_thresholds_;  // sorted distinct shape CPUs
  absl::flat_hash_map<std::array<int32_t, 19>, double> memo_;
};

}  // namespace gpusched::placement

#endif  // GPUSCHED_PLACEMENT_FRAGMENTATION_H_
