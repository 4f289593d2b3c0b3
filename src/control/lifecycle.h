// ReplicaSet: the life of one deployment's replicas as a clock-driven
// policy core, shared by the live controller (runtime/controller.cc, engines
// through a backends::Launcher) and the simulator (sim/serve_sim.cc,
// simulated engines on a virtual clock).
//
// The core owns the replicas' states and every rule about them:
//   - how many replicas of the current version there should be (the
//     desired count: spec.replicas or the autoscaler's target); missing ones
//     are created pending, extra ones drain (not ready ones first, highest
//     index first; then ready ones with the fewest requests in flight);
//   - rolling replacement: replicas of an older version drain once as many
//     of the current version are ready (or at once when they serve nothing);
//   - launch when due (pending, or after the restart backoff of a failed
//     start or an exit), readiness probes while starting and a startup
//     timeout, health probes while ready with a failure threshold;
//   - drain: no new request, stop once nothing is in flight or the drain
//     grace has passed, forget once stopped.
// It never does I/O, owns no thread and never reads a clock: every call
// takes `now`, and what the driver must do comes back as values
// (LifecycleOutput: actions such as "launch replica X" or "probe replica
// Y", and the events that explain them). The driver carries the actions out
// and reports back (Launched, Unplaced, LaunchFailed, ProbeResult, Exited,
// SetInFlight). Placement and making room are the driver's, through the
// placement layer and control/room.h.
#ifndef GPUSCHED_CONTROL_LIFECYCLE_H_
#define GPUSCHED_CONTROL_LIFECYCLE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "control/backoff.h"
#include "nlohmann/json.hpp"

namespace gpusched::control {

enum class ReplicaState {
  kPending,    // wants GPUs and an engine (or waits to retry placement)
  kStarting,   // engine launched, not ready yet
  kReady,      // serves requests
  kUnhealthy,  // killed (startup timeout or failed health checks); restarts
  kBackoff,    // exited or failed to start; restarts at next_start
  kDraining,   // takes no new request; stopped, then forgotten
};
const char* ReplicaStateName(ReplicaState s);

struct LifecycleOptions {
  // How long a draining replica's in-flight requests may take (kNever:
  // as long as they need).
  Micros drain_grace = 30 * kMicrosPerSecond;
  // How often a starting replica is probed for readiness.
  Micros starting_probe = 10 * kMicrosPerMilli;
  // How often a ready replica's health is checked (0: never).
  Micros health_period = 5 * kMicrosPerSecond;
  // A starting replica not ready after this long is killed and restarted.
  Micros startup_timeout = 600 * kMicrosPerSecond;
  // Health checks failed in a row that make a ready replica unhealthy.
  int failure_threshold = 3;
  RestartBackoff::Options backoff;
};

struct Replica {
  std::string name;  // "<deployment>-<index>"
  int index = 0;
  std::string version;  // what it was launched from (a change replaces it)
  ReplicaState state = ReplicaState::kPending;
  bool running = false;    // its engine exists (launched, not exited)
  bool launching = false;  // a launch action is out, not reported back yet
  bool probing = false;    // a probe action is out
  bool stop_sent = false;  // draining: the stop action is out
  // Being moved to another node (Move): a replacement is created, and this
  // one drains once the replacement is ready.
  bool moving = false;
  RestartBackoff backoff;
  int restarts = 0;
  int health_failures = 0;
  Micros started = 0;     // the last launch
  Micros next_start = 0;  // pending or backoff: when to launch
  Micros next_probe = 0;
  Micros drain_deadline = kNever;
  int64_t in_flight = 0;  // requests on it (the driver's last report)
  Micros last_busy = 0;   // last time it had a request in flight (or started)
  std::string message;    // why it is in its state, for the views
};

struct LifecycleAction {
  enum class Kind {
    kLaunch,  // place it (if not placed) and start its engine; report back
              // with Launched, Unplaced or LaunchFailed
    kProbe,   // check readiness or health; report back with ProbeResult
    kKill,    // kill its engine at once (it is unhealthy); Exited follows
    kStop,    // stop its engine gracefully (drained); Exited follows
    kForget,  // it is gone: release its GPUs and forget it
  };
  Kind kind;
  std::string replica;
};

struct LifecycleEvent {
  std::string kind;  // replica.draining, replica.ready, ...
  std::string replica;
  std::string message;  // "<replica>: why", with the numbers
  nlohmann::json details = nlohmann::json::object();
};

// What the driver must do, in order, and the events to record. Each call
// appends.
struct LifecycleOutput {
  std::vector<LifecycleAction> actions;
  std::vector<LifecycleEvent> events;
  void Clear() {
    actions.clear();
    events.clear();
  }
};

const char* ActionName(LifecycleAction::Kind k);

class ReplicaSet {
 public:
  explicit ReplicaSet(std::string deployment = "",
                      LifecycleOptions options = {});

  const std::string& deployment() const { return deployment_; }
  const LifecycleOptions& options() const { return options_; }
  void set_options(const LifecycleOptions& o) { options_ = o; }

  // --- Desired state ------------------------------------------------------
  // The current version: replicas of another one are replaced, rolling.
  void SetVersion(std::string version) { version_ = std::move(version); }
  const std::string& version() const { return version_; }
  // Replicas of the current version that should run; -1 keeps every
  // replica as it is (a deleted deployment still serving its queue), 0
  // drains them all.
  void SetDesired(int n) { desired_ = n; }
  int desired() const { return desired_; }

  // --- What the driver saw --------------------------------------------------
  // Requests in flight on `replica` now (drives draining and idleness).
  void SetInFlight(std::string_view replica, int64_t n, Micros now);
  // Placement found no room yet: pending, retried at `retry_at`. True when
  // `why` differs from the last reason (the driver then records it).
  bool Unplaced(std::string_view replica, const std::string& why,
                Micros retry_at);
  // The launch failed (no engine runs): restarted after the backoff.
  void LaunchFailed(std::string_view replica, const std::string& why,
                    Micros now, LifecycleOutput* out);
  // Its engine runs now: starting, probed for readiness.
  void Launched(std::string_view replica, Micros now);
  // Its engine runs and serves already: ready at once (an engine adopted
  // after a restart, or the simulator's replicas at time 0).
  void Adopted(std::string_view replica, Micros now, LifecycleOutput* out);
  // Pending replicas waiting for room try again at `now` (GPUs were freed).
  void Retry(Micros now);
  // The answer to a probe action; `where` ("127.0.0.1:8001") goes into the
  // ready event.
  void ProbeResult(std::string_view replica, bool ok, Micros now,
                   LifecycleOutput* out, std::string_view where = "");
  // Its engine exited; `how` says how ("exit code 1", "signal 9"), `hint`
  // is added to the message (where its log is). A draining replica is
  // stopped; any other restarts after the backoff.
  void Exited(std::string_view replica, const std::string& how,
              const std::string& hint, Micros now, LifecycleOutput* out);
  // Moves `replica` to another node without a failed request (capacity
  // consolidation, control/capacity.h): a replacement is created pending
  // (the driver keeps it off the old node), and `replica` drains once as
  // many replicas of the current version as desired are ready. No-op when
  // it drains or moves already; NotFound-like false when unknown.
  bool Move(std::string_view replica, const std::string& why);
  // Drains `replica` (a scale down, a swap, a preemption): no-op when it
  // already drains.
  void Drain(std::string_view replica, const std::string& why, Micros now,
             LifecycleOutput* out);

  // --- The pass -----------------------------------------------------------
  // Creates and drains replicas towards the desired count and version, and
  // emits every action that is due at `now`; with `launch_budget`, at most
  // that many launches (decremented per launch emitted): the others stay
  // due, for the next pass (the driver's bound on its work per pass).
  void Reconcile(Micros now, LifecycleOutput* out,
                 int* launch_budget = nullptr);
  // The earliest time a Reconcile has something to do (kNever: none);
  // without `pending`, launches of pending and backing-off replicas do not
  // count.
  Micros NextDeadline(bool pending = true) const;

  // --- Views ----------------------------------------------------------------
  const std::vector<Replica>& replicas() const { return replicas_; }
  const Replica* Find(std::string_view replica) const;
  // Replicas of the current version that are ready, and those that are
  // not yet (pending, starting, restarting): the autoscaler's counts.
  int ready() const;
  int starting() const;
  bool empty() const { return replicas_.empty(); }

 private:
  Replica* Get(std::string_view replica);
  void Event(LifecycleOutput* out, const char* kind, const Replica& r,
             std::string message, nlohmann::json details = {});
  void Backoff(Replica& r, Micros now);
  void DrainOne(Replica& r, const std::string& why, Micros now,
                LifecycleOutput* out);

  std::string deployment_;
  LifecycleOptions options_;
  std::string version_;
  int desired_ = 0;
  std::vector<Replica> replicas_;  // by index
};

}  // namespace gpusched::control

#endif  // GPUSCHED_CONTROL_LIFECYCLE_H_
