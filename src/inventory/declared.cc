#include "inventory/declared.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace gpusched::inventory {

absl::StatusOr<std::vector<NodeSpec>> DeclaredNodes(
    const config::InventoryConfig& config, const GpuCatalog& catalog) {
  std::vector<NodeSpec> nodes;
  std::vector<std::string> problems;
  auto problem = [&](int line, std::string what) {
    std::string msg = absl::StrCat(config.source, ":", line, ": ", what);
    // Nodes expanded from one entry share lines; report each problem once.
    if (std::find(problems.begin(), problems.end(), msg) == problems.end()) {
      problems.push_back(std::move(msg));
    }
  };
  for (const config::NodeConfig& n : config.nodes) {
    NodeSpec spec;
    spec.name = n.name;
    spec.labels = n.labels;
    spec.cpu_milli = n.cpu_milli;
    spec.memory_mib = n.memory_mib;
    spec.simulated = n.simulated;
    if (n.gpus.has_value()) {
      const config::GpuConfig& g = *n.gpus;
      const GpuModelSpec* model = catalog.Find(g.model);
      if (model == nullptr) {
        problem(g.line, absl::StrCat("unknown GPU model '", g.model,
                                     "'; known models: ",
                                     absl::StrJoin(catalog.Names(), ", ")));
        continue;
      }
      if (g.mig.value_or(false) && !model->mig_capable()) {
        problem(g.line, absl::StrCat("gpus.mig: ", model->name,
                                     " does not support MIG"));
        continue;
      }
      spec.gpu_model = model->name;
      spec.gpu_count = g.count;
      spec.gpu_memory_mib = g.memory_mib > 0 ? g.memory_mib : model->memory_mib;
      if (model->mig_capable() && g.mig.value_or(true)) {
        spec.mig_slots = model->mig_memory_slots;
      }
      spec.nvlink_group = g.nvlink_group;
    }
    nodes.push_back(std::move(spec));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  }
  return nodes;
}

absl::Status AddDeclaredNodes(const config::InventoryConfig& config,
                              ClusterState& state, const GpuCatalog& catalog) {
  ASSIGN_OR_RETURN(std::vector<NodeSpec> nodes, DeclaredNodes(config, catalog));
  for (NodeSpec& spec : nodes) {
    absl::StatusOr<int> added = state.AddNode(std::move(spec));
    if (!added.ok()) return added.status();
  }
  return absl::OkStatus();
}

}  // namespace gpusched::inventory
