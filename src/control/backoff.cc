#include "control/backoff.h"

#include <algorithm>

namespace gpusched::control {

RestartBackoff::RestartBackoff(Options options)
    : options_(options), delay_(options.initial) {}

void RestartBackoff::OnStarted(Micros now) { started_at_ = now; }

void RestartBackoff::OnExit(Micros now) {
  if (started_at_ != kNever && now - started_at_ >= options_.reset_after) {
    delay_ = options_.initial;
    failures_ = 0;
  }
  started_at_ = kNever;
  next_start_ = now + delay_;
  ++failures_;
  const double grown = static_cast<double>(delay_) * options_.multiplier;
  delay_ = grown >= static_cast<double>(options_.max)
               ? options_.max
               : static_cast<Micros>(grown);
}

Micros RestartBackoff::NextStart(Micros now) const {
  return std::max(now, next_start_);
}

}  // namespace gpusched::control
