// The Inventory manifest: the nodes and GPUs gpusched schedules onto when it
// does not discover them (a simulated cluster, or a cluster described by
// hand). Parsed here, checked against the GPU catalog in
// inventory/declared.h. Every field, with its default:
//
//   apiVersion: gpusched.io/v1   # required, exactly this
//   kind: Inventory              # required, exactly this
//   metadata:                    # optional
//     name: lab                  #   optional, default ""
//     labels: {...}              #   optional, accepted and ignored
//     annotations: {...}         #   optional, accepted and ignored
//   spec:
//     nodes:                     # required, at least one entry
//       - name: gpu              # required; letters, digits, '.', '_', '-'
//         count: 4               # optional. Absent: one node called `name`.
//                                #   Set: `count` nodes name-0 .. name-<N-1>.
//         cpu: "96"              # CPU cores, a Kubernetes quantity: "96",
//                                #   "0.5", "500m". Exactly one of cpu and
//         cpu_milli: 96000       #   cpu_milli (integer milli-CPUs) is
//         required. memory: 768Gi          # main memory, a Kubernetes
//         quantity: bytes,
//                                #   or with Ki Mi Gi Ti Pi / k M G T P
//                                #   (rounded down to MiB). Exactly one of
//         memory_mib: 786432     #   memory and memory_mib is required.
//         labels: {zone: a}      # optional string map, default none
//         simulated: true        # optional, default true: declared, not
//                                #   discovered on real hardware
//         gpus:                  # optional, default: a CPU-only node
//           model: H100-SXM-80GB #   required: a catalog name or alias
//           count: 8             #   required, 1..64
//           memory: 80Gi         #   optional per-GPU memory (or memory_mib);
//                                #     default: the catalog's figure
//           mig: true            #   optional; default: true when the model
//                                #     supports MIG (false keeps the GPUs
//                                #     whole/fractional only)
//           nvlink: all          #   optional, default none:
//                                #     none          no NVLink
//                                #     all           one NVLink domain
//                                #     groups-of-N   domains of N GPUs in
//                                #                   index order (N divides
//                                #                   count)
//                                #     [[0,1],[2,3]] explicit domains; GPUs
//                                #                   not listed are alone
//
// Errors name the file and line ("inv.yaml:12: ...") and every problem is
// reported, one per line, not just the first. This module parses YAML and
// nothing else does (DESIGN.md); it throws nothing: yaml-cpp exceptions are
// turned into statuses here. Thread-compatible.
#ifndef GPUSCHED_CONFIG_INVENTORY_CONFIG_H_
#define GPUSCHED_CONFIG_INVENTORY_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpusched::config {

struct GpuConfig {
  std::string model;
  int count = 0;
  int64_t memory_mib = 0;   // per GPU; 0 = the catalog's figure
  std::optional<bool> mig;  // unset = the model's capability
  // nvlink_group[i]: NVLink domain of GPU i; empty = no NVLink.
  std::vector<int> nvlink_group;
  int line = 0;  // of the `model` field (1-based)
};

// One node, after `count` expansion.
struct NodeConfig {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::vector<std::pair<std::string, std::string>> labels;  // file order
  bool simulated = true;
  std::optional<GpuConfig> gpus;
  int line = 0;  // of the node entry (1-based)
};

struct InventoryConfig {
  std::string source;  // file name used in messages
  std::string name;    // metadata.name
  std::vector<NodeConfig> nodes;
};

// Parses manifest `text` as if read from `source`.
absl::StatusOr<InventoryConfig> ParseInventoryYaml(absl::string_view text,
                                                   std::string source);
// Reads and parses `path`. NotFound if it cannot be read.
absl::StatusOr<InventoryConfig> LoadInventoryFile(const std::string& path);

}  // namespace gpusched::config

#endif  // GPUSCHED_CONFIG_INVENTORY_CONFIG_H_
