// Declared inventory: turns a parsed Inventory manifest
// (config/inventory_config.h) into ClusterState NodeSpecs using the GPU
// catalog — per-GPU memory, MIG slots and canonical model names come from
// the catalog. Pure function; thread-safe.
#ifndef GPUSCHED_INVENTORY_DECLARED_H_
#define GPUSCHED_INVENTORY_DECLARED_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/inventory_config.h"
#include "inventory/cluster_state.h"
#include "inventory/gpu_catalog.h"

namespace gpusched::inventory {

// One NodeSpec per declared node, in file order. gpu_model is the catalog's
// canonical name (an alias in the file is resolved); gpu_memory_mib the
// file's override or the catalog's figure; mig_slots the catalog's memory
// slots when the model supports MIG and the file does not say `mig: false`.
// InvalidArgument listing every problem ("file:line: unknown GPU model 'X';
// known models: ..."; `mig: true` on a model without MIG), one per line.
absl::StatusOr<std::vector<NodeSpec>> DeclaredNodes(
    const config::InventoryConfig& config,
    const GpuCatalog& catalog = GpuCatalog::Builtin());

// DeclaredNodes() added to `state`; stops at the first AddNode error.
absl::Status AddDeclaredNodes(
    const config::InventoryConfig& config, ClusterState& state,
    const GpuCatalog& catalog = GpuCatalog::Builtin());

}  // namespace gpusched::inventory

#endif  // GPUSCHED_INVENTORY_DECLARED_H_
