// Where the nodes and GPUs come from, for `gpusched inventory` and
// `gpusched serve`: this machine's GPUs through NVML, else (or only) a
// declared inventory (an Inventory manifest, or a node list in the Alibaba
// trace's CSV format).
#ifndef GPUSCHED_MAIN_INVENTORY_SOURCE_H_
#define GPUSCHED_MAIN_INVENTORY_SOURCE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/local/nvml.h"
#include "inventory/cluster_state.h"

namespace gpusched {

struct Inventory {
  std::string source;  // "nvml" or "declared"
  std::string config;  // the manifest read, for "declared"
  std::vector<inventory::NodeSpec> nodes;
  std::vector<backends::DiscoveredGpu> gpus;  // for "nvml"
};

// `source`: "auto" (NVML, else the declared inventory; `on_fallback` is told
// why NVML was not used), "nvml" or "declared". `declared` is the manifest
// or CSV path; `declared_given` says whether the user named it (for the
// message when it is missing).
absl::StatusOr<Inventory> LoadInventory(
    const std::string& source, const std::string& declared, bool declared_given,
    const std::function<void(const std::string&)>& on_fallback);

}  // namespace gpusched

#endif  // GPUSCHED_MAIN_INVENTORY_SOURCE_H_
