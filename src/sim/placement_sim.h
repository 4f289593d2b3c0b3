// The packing experiment of "Beware of Fragmentation" (FGD, USENIX ATC'23),
// run through gpusched's own placement engine. See docs/placement-sim.md
// and ../shared/data/alibaba-gpu-v2023/FGD-METHOD.md.
//
// One run = one policy and one seed: shuffle the pods, append pods drawn
// with replacement until the GPU request would pass `inflate` x capacity,
// offer each pod once (no queue, retry, preemption or departure), and after
// each pod record the allocated and arrived GPU milli. Runs are independent
// and deterministic for a seed; RunPlacementExperiment spreads them over
// threads it owns and joins.
#ifndef GPUSCHED_SIM_PLACEMENT_SIM_H_
#define GPUSCHED_SIM_PLACEMENT_SIM_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "inventory/cluster_state.h"
#include "sim/alibaba_trace.h"

namespace gpusched::sim {

struct PlacementSimConfig {
  std::vector<inventory::NodeSpec> nodes;
  std::vector<TracePod> pods;
  std::vector<std::string> policies;
  std::vector<uint64_t> seeds;
  double inflate = 1.3;
  // True: policies get no target workload and learn it from the pods as
  // they arrive (as live); false: the trace's typical shapes (the method).
  bool online_workload = false;
  int threads = 0;  // 0 = hardware concurrency
};

struct PlacementRun {
  std::string policy;
  uint64_t seed = 0;
  int pods_total = 0;
  int pods_failed = 0;
  // Failures by the most common filter reason of each failed pod.
  std::map<std::string, int> failed_by_reason;
  // Key k (arrived = k% of capacity, 0..max) -> allocated % (bucket mean).
  std::map<int, double> allocated_pct;
  // 100 - allocated_pct at keys 100 and 130 (when reached).
  std::map<int, double> unallocated_pct;
  double wall_seconds = 0;
};

struct PlacementSummary {
  std::string policy;
  // key -> (mean, sample sd) of unallocated_pct over seeds.
  std::map<int, std::pair<double, double>> unallocated_pct;
};

struct PlacementExperiment {
  int nodes_total = 0;
  int64_t gpus_total = 0;
  double inflate = 0;
  bool online_workload = false;
  std::vector<PlacementRun> results;  // policy-major, then seed
  std::vector<PlacementSummary> summary;
  double wall_seconds = 0;
};

// Validates the config (known policies, non-empty inputs) and runs it.
absl::StatusOr<PlacementExperiment> RunPlacementExperiment(
    const PlacementSimConfig& config);

// One run; exposed for tests.
absl::StatusOr<PlacementRun> RunPlacementOnce(
    const std::vector<inventory::NodeSpec>& nodes,
    const std::vector<TracePod>& pods, const std::string& policy, uint64_t seed,
    double inflate, bool online_workload = false);

// Parses "42-51", "42,45,50-51" into seeds.
absl::StatusOr<std::vector<uint64_t>> ParseSeeds(const std::string& text);

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_PLACEMENT_SIM_H_
