#include "autoscale/swap.h"

#include <algorithm>

namespace gpusched::autoscale {

std::vector<SwapCandidate> SwapOrder(std::vector<SwapCandidate> candidates,
                                     int deployment, int rank, Micros now,
                                     Micros min_idle) {
  std::erase_if(candidates, [&](const SwapCandidate& c) {
    return c.deployment == deployment || !c.autoscaled || !c.preemptible ||
           !c.idle || c.class_rank < rank ||
           (min_idle > 0 && now - c.last_used < min_idle);
  });
  std::sort(candidates.begin(), candidates.end(),
            [](const SwapCandidate& a, const SwapCandidate& b) {
              if (a.class_rank != b.class_rank) {
                return a.class_rank > b.class_rank;
              }
              if (a.last_used != b.last_used) return a.last_used < b.last_used;
              return a.id < b.id;
            });
  return candidates;
}

}  // namespace gpusched::autoscale
