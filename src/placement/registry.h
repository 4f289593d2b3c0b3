// The placement policies by name, listed explicitly in one place.
#ifndef GPUSCHED_PLACEMENT_REGISTRY_H_
#define GPUSCHED_PLACEMENT_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "placement/plugins/plugins.h"

namespace gpusched::placement {

struct PolicyInfo {
  const char* name;
  const char* description;
  std::unique_ptr<ScorePlugin> (*factory)(const PolicyOptions&);
};

// Every built-in policy, in the order reports list them.
const std::vector<PolicyInfo>& Policies();
std::vector<std::string> PolicyNames();

// NotFound naming the known policies when `name` is not one of them.
absl::StatusOr<std::unique_ptr<ScorePlugin>> NewPolicy(
    absl::string_view name, const PolicyOptions& options);

}  // namespace gpusched::placement

#endif  // GPUSCHED_PLACEMENT_REGISTRY_H_
