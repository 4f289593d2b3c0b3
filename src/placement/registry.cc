#include "placement/registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpusched::placement {

const std::vector<PolicyInfo>& Policies() {
  static const std::vector<PolicyInfo> kPolicies = {
      {"random", "a uniformly random feasible node", NewRandomPolicy},
      {"spread", "least allocated node (CPU, memory, GPU)", NewSpreadPolicy},
      {"binpack", "most allocated node (CPU, memory, GPU)", NewBinpackPolicy},
      {"dotprod", "smallest dot product of free and requested (CPU, GPU)",
       NewDotProdPolicy},
      {"gpu-packing", "partly used GPU > partly used node > idle node",
       NewGpuPackingPolicy},
      {"gpu-clustering", "keep pods of one GPU class together",
       NewGpuClusteringPolicy},
      {"best-fit", "least leftover CPU and GPU", NewBestFitPolicy},
      {"fgd", "fragmentation gradient descent (ATC'23)", NewFgdPolicy},
      {"fillfrag", "gpusched: fragmentation by fill capacity",
       NewFillFragPolicy},
  };
  return kPolicies;
}

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const PolicyInfo& p : Policies()) names.push_back(p.name);
  return names;
}

absl::StatusOr<std::unique_ptr<ScorePlugin>> NewPolicy(
    absl::string_view name, const PolicyOptions& options) {
  for (const PolicyInfo& p : Policies()) {
    if (name == p.name) return p.factory(options);
  }
  return absl::NotFoundError(
      absl::StrCat("unknown placement policy '", name,
                   "'; known: ", absl::StrJoin(PolicyNames(), ", ")));
}

}  // namespace gpusched::placement
