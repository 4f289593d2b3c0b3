// Model swapping: which idle replicas make room for a replica that does not
// fit. One rule for the live controller and the simulator:
//   * candidates are ready replicas of other autoscaled deployments that
//     are idle (nothing in flight on the replica, nothing queued for its
//     deployment), preemptible, and of a class no more important than the
//     starting replica's (class rank >= its rank; rank 0 = most important);
//   * taken lowest class first (highest rank), then least recently used,
//     then by id; the owner takes the shortest prefix that makes it fit.
// A replica with requests in flight is never swapped out (that is
// preemption, for strictly lower classes only). Pure; thread-compatible.
#ifndef GPUSCHED_AUTOSCALE_SWAP_H_
#define GPUSCHED_AUTOSCALE_SWAP_H_

#include <cstdint>
#include <vector>

#include "common/clock.h"

namespace gpusched::autoscale {

struct SwapCandidate {
  int64_t id = 0;  // the owner's replica id
  int deployment = 0;
  int class_rank = 0;
  bool autoscaled = false;
  bool preemptible = true;
  bool idle = false;     // nothing in flight, nothing queued for it
  Micros last_used = 0;  // last time it had a request
};

// The candidates that may be swapped out for a replica of `deployment` with
// class `rank`, in the order they should go (see the file comment).
// Candidates used within `min_idle` before `now` are kept (not swapped
// out so soon after their last request: swapping thrash).
std::vector<SwapCandidate> SwapOrder(std::vector<SwapCandidate> candidates,
                                     int deployment, int rank, Micros now = 0,
                                     Micros min_idle = 0);

}  // namespace gpusched::autoscale

#endif  // GPUSCHED_AUTOSCALE_SWAP_H_
