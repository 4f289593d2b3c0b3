// WeightedSplit: which of a public model's versions (config::ModelRoute's
// targets) a request goes to, by weight. Two ways:
//  - Pick(key), for sticky requests: the key, a hash of the session or
//    tenant, falls into one slice of [0, total weight), the slices laid out
//    in target order. So a sticky key stays on its version while the
//    weights stand, and when weight moves from one target to the next (a
//    canary step) only the keys in the slice that moves change version.
//  - Next(draw), for the others: exact shares with a random phase. Every
//    target but the heaviest (the first of the heaviest on a tie) earns
//    its weight / total of a request per request and is picked once its
//    credit reaches a threshold drawn in [1, 2); the heaviest takes every
//    request no other is due. So after n requests a lighter target has had
//    at most n * weight / total of them (never more: a canary at 5% is
//    never sent more than 5% of the requests, as a draw per request would
//    be half the time) and more than that minus 2 (a few more while
//    several light targets are due at once); the gaps between its
//    requests vary, so a client's periodic pattern (long, short, long, ...)
//    cannot lock onto one version.
// The gateway and the simulator pick with it. Thread-compatible value type:
// Next changes its state.
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
  // The index of the next request's target (one with weight > 0); `draw`
  // is a fresh random number (a picked target's next threshold).
  int Next(uint64_t draw);
  int size() const { return static_cast<int>(upper_.size()); }
  // The weights it was created with.
  std::vector<int> weights() const;

 private:
  std::vector<int64_t> upper_;  // cumulative weights
  int heaviest_ = 0;
  // Per target, in units of 1 / total: the credit earned and not spent,
  // and the credit at which it is next picked (0: not drawn yet).
  std::vector<int64_t> credit_;
  std::vector<int64_t> due_;
};

// A stable 64-bit hash of a sticky key (the same in every run and build,
// unlike absl::Hash), spread over the whole range.
uint64_t StickyHash(std::string_view key);

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_SPLIT_H_
