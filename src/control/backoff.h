// Restart delay after an engine exits: `initial`, doubling on each quick
// exit up to `max`; an engine that stayed up `reset_after` starts again at
// `initial`. Pure and clock-driven: the lifecycle core calls OnStarted/OnExit
// and starts again once now >= NextStart(now).
#ifndef GPUSCHED_CONTROL_BACKOFF_H_
#define GPUSCHED_CONTROL_BACKOFF_H_

#include "common/clock.h"

namespace gpusched::control {

class RestartBackoff {
 public:
  struct Options {
    Micros initial = 1 * kMicrosPerSecond;
    Micros max = 60 * kMicrosPerSecond;
    double multiplier = 2.0;
    Micros reset_after = 300 * kMicrosPerSecond;
  };

  RestartBackoff() : RestartBackoff(Options()) {}
  explicit RestartBackoff(Options options);

  void OnStarted(Micros now);
  // The process exited (or failed to start) at `now`.
  void OnExit(Micros now);
  // The earliest time >= now at which to start again.
  Micros NextStart(Micros now) const;
  // The delay the next OnExit will apply (absent a reset).
  Micros current_delay() const { return delay_; }
  // Exits since the last long enough run.
  int consecutive_failures() const { return failures_; }

 private:
  Options options_;
  Micros delay_;
  Micros started_at_ = kNever;
  Micros next_start_ = 0;
  int failures_ = 0;
};

}  // namespace gpusched::control

#endif  // GPUSCHED_CONTROL_BACKOFF_H_
