// What `scontrol show node|job -d --oneliner` prints, as the Slurm launcher
// and inventory read it (inventory/slurm.h): any text parses or is refused
// with an error, and what parses keeps its invariants.
#include <algorithm>
#include <cstdint>
#include <string>

#include "backends/slurm/slurm_nodes.h"
#include "fuzz/fuzz_input.h"
#include "inventory/cluster_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace be = gpusched::backends;
  namespace inv = gpusched::inventory;
  const auto text = gpusched::fuzz::AsText(data, size);
  auto nodes = be::ParseSlurmNodes(text);
  if (nodes.ok()) {
    for (const be::SlurmNode& n : *nodes) {
      int indexes = 0;  // whole GPUs and MIG devices: one index space
      for (const be::SlurmGpuBlock& b : n.gpu_blocks) {
        gpusched::fuzz::Require(b.first == indexes && b.count >= 0,
                                "GPU blocks that do not follow each other");
        indexes += b.count;
      }
      gpusched::fuzz::Require(n.gpus >= 0 && n.gpus <= indexes &&
                                  indexes <= be::kMaxSlurmGresIndex + 1,
                              "a GPU count out of bounds");
      gpusched::fuzz::Require(
          std::is_sorted(n.gpus_used.begin(), n.gpus_used.end()) &&
              (n.gpus_used.empty() || n.gpus_used.back() < indexes),
          "a used GPU index outside the node");
    }
    auto specs = be::SlurmNodeSpecs(*nodes, {{"a100", "A100-SXM4-80GB"}});
    if (specs.ok()) {
      // Every node is one placement accepts (a static MIG layout the driver
      // would), and Slurm's indexes land on it.
      inv::ClusterState cs;
      for (size_t i = 0; i < specs->size(); ++i) {
        inv::NodeSpec spec = (*specs)[i];
        spec.name = "n" + std::to_string(i);  // names may repeat in input
        gpusched::fuzz::Require(cs.AddNode(spec).ok(),
                                "a node spec placement refuses");
        for (int used : (*nodes)[i].gpus_used) {
          auto spot = be::LocateSlurmGpu((*nodes)[i], spec, used);
          gpusched::fuzz::Require(
              !spot.has_value() ||
                  (spot->gpu >= 0 && spot->gpu < spec.gpu_count),
              "a Slurm index located outside the node");
        }
      }
    }
  }
  auto jobs = be::ParseSlurmJobs(text);
  if (jobs.ok()) {
    for (const be::SlurmJob& j : *jobs) {
      gpusched::fuzz::Require(j.id > 0, "a job id that is not positive");
      gpusched::fuzz::Require(std::is_sorted(j.gpus.begin(), j.gpus.end()),
                              "unsorted job GPUs");
    }
  }
  return 0;
}
