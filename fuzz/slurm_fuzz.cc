// What `scontrol show node|job -d --oneliner` prints, as the Slurm launcher
// and inventory read it (inventory/slurm.h): any text parses or is refused
// with an error, and what parses keeps its invariants.
#include <algorithm>
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "inventory/slurm.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace inv = gpusched::inventory;
  const auto text = gpusched::fuzz::AsText(data, size);
  auto nodes = inv::ParseSlurmNodes(text);
  if (nodes.ok()) {
    for (const inv::SlurmNode& n : *nodes) {
      gpusched::fuzz::Require(
          n.gpus >= 0 && n.gpus <= inv::kMaxSlurmGresIndex + 1,
          "a GPU count out of bounds");
      gpusched::fuzz::Require(
          std::is_sorted(n.gpus_used.begin(), n.gpus_used.end()) &&
              (n.gpus_used.empty() || n.gpus_used.back() < n.gpus),
          "a used GPU index outside the node");
    }
    (void)inv::SlurmNodeSpecs(*nodes, {{"a100", "A100-SXM4-80GB"}});
  }
  auto jobs = inv::ParseSlurmJobs(text);
  if (jobs.ok()) {
    for (const inv::SlurmJob& j : *jobs) {
      gpusched::fuzz::Require(j.id > 0, "a job id that is not positive");
      gpusched::fuzz::Require(std::is_sorted(j.gpus.begin(), j.gpus.end()),
                              "unsorted job GPUs");
    }
  }
  return 0;
}
