// Time for the policy core: integer microseconds on one monotonic timeline.
//
// Policy classes never read a wall clock; they take `now` as an argument and
// report their next deadline, so the live driver (real time) and the simulator
// (virtual time) run the same code and every test is deterministic. Clock is
// the one seam that owns "what time is it"; ManualClock serves tests and the
// simulator. Thread-compatible.
#ifndef GPUSCHED_COMMON_CLOCK_H_
#define GPUSCHED_COMMON_CLOCK_H_

#include <cmath>
#include <cstdint>
#include <limits>

namespace gpusched {

// A time point or duration in microseconds (Triton's knobs use the same unit).
using Micros = int64_t;

inline constexpr Micros kMicrosPerSecond = 1'000'000;
inline constexpr Micros kMicrosPerMilli = 1'000;
// "Never": an absent deadline, an idle timer.
inline constexpr Micros kNever = std::numeric_limits<Micros>::max();

inline constexpr double ToSeconds(Micros t) {
  return static_cast<double>(t) / kMicrosPerSecond;
}
// Rounds to the nearest microsecond.
inline Micros FromSeconds(double s) {
  return static_cast<Micros>(std::llround(s * kMicrosPerSecond));
}

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Micros Now() const = 0;
};

// A clock that moves only when told to. Used by tests and the simulator.
class ManualClock : public Clock {
 public:
  explicit ManualClock(Micros start = 0) : now_(start) {}
  Micros Now() const override { return now_; }
  void Set(Micros t) { now_ = t; }
  void Advance(Micros d) { now_ += d; }

 private:
  Micros now_;
};

}  // namespace gpusched

#endif  // GPUSCHED_COMMON_CLOCK_H_
