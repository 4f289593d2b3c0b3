#include "serving/split.h"

#include <algorithm>

#include "absl/status/status.h"

namespace gpusched::serving {

absl::StatusOr<WeightedSplit> WeightedSplit::Create(
    const std::vector<int>& weights) {
  WeightedSplit s;
  int64_t sum = 0;
  for (int w : weights) {
    if (w < 0) return absl::InvalidArgumentError("split: a weight is < 0");
    sum += w;
    s.upper_.push_back(sum);
  }
  if (sum <= 0) {
    return absl::InvalidArgumentError("split: no target has weight > 0");
  }
  return s;
}

int WeightedSplit::Pick(uint64_t key) const {
  const int64_t point =
      static_cast<int64_t>(key % static_cast<uint64_t>(upper_.back()));
  // The first slice whose upper bound is above the point (empty slices have
  // upper == the previous one and are never picked).
  return static_cast<int>(
      std::upper_bound(upper_.begin(), upper_.end(), point) - upper_.begin());
}

uint64_t StickyHash(std::string_view key) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  // Finalizer (splitmix64): nearby keys land far apart.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

}  // namespace gpusched::serving
