// Test helpers for drivers of control::ReplicaSet (tests only).
#ifndef GPUSCHED_CONTROL_LIFECYCLE_TESTING_H_
#define GPUSCHED_CONTROL_LIFECYCLE_TESTING_H_

#include "control/lifecycle.h"

namespace gpusched::control {

// Brings every replica of the current version to ready as a driver would:
// launches what the pass asks for at `now`, then answers the readiness
// probes 10 ms later.
inline void MakeReady(ReplicaSet& set, Micros now) {
  LifecycleOutput out;
  set.Reconcile(now, &out);
  for (const LifecycleAction& a : out.actions) {
    if (a.kind == LifecycleAction::Kind::kLaunch) set.Launched(a.replica, now);
  }
  out.Clear();
  const Micros probe = now + 10 * kMicrosPerMilli;
  set.Reconcile(probe, &out);
  for (const LifecycleAction& a : out.actions) {
    if (a.kind == LifecycleAction::Kind::kProbe) {
      set.ProbeResult(a.replica, true, probe, &out);
    }
  }
}

}  // namespace gpusched::control

#endif  // GPUSCHED_CONTROL_LIFECYCLE_TESTING_H_
