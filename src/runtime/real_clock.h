// The real clocks of the live driver (the policy cores take `now` from
// them through the driver; they never read one themselves).
#ifndef GPUSCHED_RUNTIME_REAL_CLOCK_H_
#define GPUSCHED_RUNTIME_REAL_CLOCK_H_

#include "common/clock.h"

namespace gpusched::runtime {

// std::chrono::steady_clock in microseconds: the timeline of deadlines,
// shared with the data plane (request arrivals, TTFT samples).
class SteadyClock : public Clock {
 public:
  Micros Now() const override;
  static const SteadyClock& Get();
};

// The system clock, microseconds since the Unix epoch: event and object
// times.
class WallClock : public Clock {
 public:
  Micros Now() const override;
  static const WallClock& Get();
};

}  // namespace gpusched::runtime

#endif  // GPUSCHED_RUNTIME_REAL_CLOCK_H_
