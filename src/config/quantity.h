// Kubernetes resource quantities ("96", "0.5", "500m" CPUs; "768Gi", "1G"
// bytes) as gpusched keeps them: milli-CPUs and MiB, rounded down. Shared by
// the Inventory and Deployment manifests. Pure functions; thread-safe.
#ifndef GPUSCHED_CONFIG_QUANTITY_H_
#define GPUSCHED_CONFIG_QUANTITY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace gpusched::config {

// nullopt if malformed or negative.
std::optional<int64_t> ParseCpuMilli(absl::string_view quantity);
std::optional<int64_t> ParseMemoryMib(absl::string_view quantity);

// The shortest exact quantity: 2000 -> "2", 500 -> "500m"; 10240 -> "10Gi",
// 100 -> "100Mi", 0 -> "0". Parse(Format(x)) == x for x >= 0.
std::string FormatCpuMilli(int64_t milli);
std::string FormatMemoryMib(int64_t mib);

}  // namespace gpusched::config

#endif  // GPUSCHED_CONFIG_QUANTITY_H_
