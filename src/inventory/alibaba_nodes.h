// Reader for the node list of the Alibaba GPU-sharing trace (Weng et al.,
// ATC'23; openb_node_list_*.csv, ../shared/data/alibaba-gpu-v2023/README.md).
//
// Columns sn,cpu_milli,memory_mib,gpu,model (extra columns are ignored).
// One NodeSpec per row: name = sn, gpu_model = the trace's own code (G1, G2,
// G3, T4, P100, V100M16, V100M32, A10, ...) so pod gpu_spec constraints
// match it; gpu_memory_mib from the catalog when the code is a catalog alias
// (T4, P100, V100M16, V100M32, A10), else 0 (G1-G3 are undisclosed); no MIG
// and no NVLink (the trace records neither); simulated = true. An empty or
// "nan" model means a CPU-only node. Errors name the file, line and column;
// every bad row is reported. Thread-compatible.
#ifndef GPUSCHED_INVENTORY_ALIBABA_NODES_H_
#define GPUSCHED_INVENTORY_ALIBABA_NODES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/csv.h"
#include "inventory/cluster_state.h"
#include "inventory/gpu_catalog.h"

namespace gpusched::inventory {

absl::StatusOr<std::vector<NodeSpec>> ReadAlibabaNodes(
    const std::string& path, const GpuCatalog& catalog = GpuCatalog::Builtin());

absl::StatusOr<std::vector<NodeSpec>> AlibabaNodesFromCsv(
    const CsvTable& table, const GpuCatalog& catalog = GpuCatalog::Builtin());

}  // namespace gpusched::inventory

#endif  // GPUSCHED_INVENTORY_ALIBABA_NODES_H_
