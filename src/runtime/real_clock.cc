#include "runtime/real_clock.h"

#include <chrono>

namespace gpusched::runtime {

Micros SteadyClock::Now() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const SteadyClock& SteadyClock::Get() {
  static const SteadyClock clock;
  return clock;
}

Micros WallClock::Now() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const WallClock& WallClock::Get() {
  static const WallClock clock;
  return clock;
}

}  // namespace gpusched::runtime
