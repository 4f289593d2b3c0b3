// Readers for the Alibaba GPU-sharing trace (Weng et al., ATC'23;
// openb_pod_list_*.csv). Node lists are read by inventory/alibaba_nodes.h.
#ifndef GPUSCHED_SIM_ALIBABA_TRACE_H_
#define GPUSCHED_SIM_ALIBABA_TRACE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "inventory/resources.h"

namespace gpusched::sim {

struct TracePod {
  std::string name;
  inventory::ResourceRequest request;
};

// Columns name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec (others are
// ignored). num_gpu = 0: CPU-only; gpu_milli < 1000: a share of one GPU;
// gpu_milli = 1000: num_gpu whole GPUs; gpu_spec "A|B": allowed models.
// Errors name the file, line and column.
absl::StatusOr<std::vector<TracePod>> ReadAlibabaPods(const std::string& path);

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_ALIBABA_TRACE_H_
