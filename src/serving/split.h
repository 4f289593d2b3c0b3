// WeightedSplit: which of a public model's versions (config::ModelRoute's
// targets) a request goes to, by weight. A request's key, a hash of its
// session or tenant (sticky) or a random draw, falls into one slice of
// [0, total weight), the slices laid out in target order. So a sticky key
// stays on its version while the weights stand, and when weight moves from
// one target to the next (a canary step) only the keys in the slice that
// moves change version. The gateway and the simulator pick with it.
// Thread-compatible value type.
#ifndef GPUSCHED_SERVING_SPLIT_H_
#define GPUSCHED_SERVING_SPLIT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gpusched::serving {

class WeightedSplit {
 public:
  // `weights` >= 0, at least one > 0.
  static absl::StatusOr<WeightedSplit> Create(const std::vector<int>& weights);
  // The index of the target `key` falls on (one with weight > 0).
  int Pick(uint64_t key) const;
  int size() const { return static_cast<int>(upper_.size()); }

 private:
  std::vector<int64_t> upper_;  // cumulative weights
};

// A stable 64-bit hash of a sticky key (the same in every run and build,
// unlike absl::Hash), spread over the whole range.
uint64_t StickyHash(std::string_view key);

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_SPLIT_H_
