// Node and Pod objects as the Kubernetes API server returns them, read by
// the Kubernetes inventory (inventory/kubernetes.h): any JSON parses or is
// refused with an error, and what parses keeps its bounds.
#include <cstdint>

#include "backends/kubernetes/kube_nodes.h"
#include "fuzz/fuzz_input.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace be = gpusched::backends;
  namespace inv = gpusched::inventory;
  const auto j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  auto nodes = be::ParseKubeNodeList(j, {"nvidia.com/gpu"});
  if (nodes.ok()) {
    for (const be::KubeNode& n : *nodes) {
      gpusched::fuzz::Require(n.gpus >= 0 && n.gpus <= be::kMaxKubeGpus,
                              "a GPU count out of bounds");
      gpusched::fuzz::Require(n.usable == n.problems.empty(),
                              "usable with problems, or not without one");
      gpusched::fuzz::Require(!n.address.empty(), "a node without address");
    }
    (void)be::KubeNodeSpecs(*nodes, {{"x", "h100"}});
  }
  auto pods = be::ParseKubePodList(j);
  if (pods.ok()) {
    for (const be::KubePod& p : *pods) {
      gpusched::fuzz::Require(p.gpus >= 0 && p.gpus <= be::kMaxKubeGpus,
                              "a pod GPU count out of bounds");
    }
    for (const auto& [node, use] : be::KubeForeignGpuUse(*pods, "a", "b")) {
      gpusched::fuzz::Require(use.gpus >= 0, "negative foreign GPUs");
    }
  }
  (void)be::ParseKubeNode(j);
  (void)be::ParseKubePod(j);
  return 0;
}
