#include "serving/split.h"

#include <algorithm>

#include "absl/status/status.h"

namespace gpusched::serving {
namespace {

// splitmix64's finalizer: nearby inputs land far apart.
uint64_t Mix64(uint64_t h) {
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

}  // namespace

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
  s.heaviest_ = static_cast<int>(
      std::max_element(weights.begin(), weights.end()) - weights.begin());
  s.credit_.assign(weights.size(), 0);
  s.due_.assign(weights.size(), 0);
  return s;
}

std::vector<int> WeightedSplit::weights() const {
  std::vector<int> w;
  int64_t below = 0;
  for (int64_t u : upper_) {
    w.push_back(static_cast<int>(u - below));
    below = u;
  }
  return w;
}

int WeightedSplit::Next(uint64_t draw) {
  const int64_t total = upper_.back();
  // A threshold in [total, 2 total): one request's credit plus a random
  // part, from `draw` mixed with the target's index.
  auto threshold = [&](size_t i) {
    const uint64_t mixed = Mix64(draw ^ (0x9e3779b97f4a7c15ull * (i + 1)));
    return total + static_cast<int64_t>(mixed % static_cast<uint64_t>(total));
  };
  int pick = heaviest_;
  int64_t most_over = -1;
  int64_t below = 0;
  for (size_t i = 0; i < upper_.size(); ++i) {
    const int64_t w = upper_[i] - below;
    below = upper_[i];
    if (static_cast<int>(i) == heaviest_ || w == 0) continue;
    if (due_[i] == 0) due_[i] = threshold(i);
    credit_[i] += w;
    // The most overdue of the targets that are due.
    if (credit_[i] >= due_[i] && credit_[i] - due_[i] > most_over) {
      most_over = credit_[i] - due_[i];
      pick = static_cast<int>(i);
    }
  }
  if (pick != heaviest_) {
    credit_[pick] -= total;
    due_[pick] = threshold(pick);
  }
  return pick;
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
  return Mix64(h);
}

}  // namespace gpusched::serving
