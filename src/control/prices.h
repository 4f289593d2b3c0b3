// GPU node prices for capacity on demand (control/capacity.h): the shipped
// table data/gpu_prices.csv (public list prices, each row with its source;
// compiled in) or a user's file of the same format that replaces it.
// Immutable after construction; safe to share across threads.
#ifndef GPUSCHED_CONTROL_PRICES_H_
#define GPUSCHED_CONTROL_PRICES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gpusched::control {

struct GpuPrice {
  std::string gpu;  // the latency models' GPU name ("A100-80GB")
  bool spot = false;
  int gpus_per_node = 1;
  double usd_per_node_hour = 0;
  std::string instance, provider, region, as_of, source;
  double usd_per_gpu_hour() const { return usd_per_node_hour / gpus_per_node; }
};

// The shipped table, parsed once.
const std::vector<GpuPrice>& BuiltinGpuPrices();
// A table in the shipped format read from `text` (named `name` in errors,
// which give the line and the column). At most kMaxRows rows.
inline constexpr int kMaxPriceRows = 1024;
absl::StatusOr<std::vector<GpuPrice>> ParseGpuPrices(const std::string& text,
                                                     const std::string& name);
absl::StatusOr<std::vector<GpuPrice>> LoadGpuPrices(const std::string& path);
// The row for (gpu, spot), names compared case-insensitively; NotFound
// names the GPUs the table has.
absl::StatusOr<GpuPrice> FindGpuPrice(const std::vector<GpuPrice>& table,
                                      const std::string& gpu, bool spot);

}  // namespace gpusched::control

#endif  // GPUSCHED_CONTROL_PRICES_H_
