// Scaling: the autoscaler's actuation for the replica lifecycle, once for
// the live controller and the simulator.
//
// An autoscale::Autoscaler decides counts; Scaling is what both drivers did
// around it, each in its own way, before this file:
//   - which deployments are autoscaled (Set adds one or changes its knobs,
//     Remove stops; the Autoscaler itself cannot forget a deployment, so
//     Scaling rebuilds it at the current targets);
//   - observing a deployment: the data plane's load (in flight, queued,
//     TTFT samples for the slo policy) and the ReplicaSet's own counts of
//     ready and starting replicas (current version), so both drivers count
//     them the same way;
//   - held requests: a request held at zero replicas is recorded (the
//     first arrival since the last scale to zero, for the cold-start
//     account) and, at target 0, asks for an evaluation at once (rule 2);
//   - decisions as steps with their deployment.autoscaled event (message
//     and numbers), to be applied with ReplicaSet::SetDesired;
//   - a swap: an idle replica swapped out for another model lowers its
//     deployment's count by one (SwappedOut);
//   - after a restart: Resume puts back the count decided before it (the
//     driver reads it from its event log), clamped to the bounds.
//
// Policy core: no threads, no I/O, no clock reads (`now` comes in).
// Deterministic; thread-compatible.
#ifndef GPUSCHED_CONTROL_SCALING_H_
#define GPUSCHED_CONTROL_SCALING_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "autoscale/autoscaler.h"
#include "common/clock.h"
#include "control/lifecycle.h"

namespace gpusched::control {

// What the data plane saw of one deployment since the last observation.
struct ScalingLoad {
  int64_t in_flight = 0;  // dispatched to replicas, not finished
  int64_t queued = 0;     // waiting (held at zero replicas, or queued)
  // slo policy: TTFTs (or queue waits) of requests that got their first
  // token since the last observation, in seconds.
  std::vector<double> ttft_samples_s;
};

// One decision: set the deployment's desired count to `to`.
struct ScaleStep {
  std::string deployment;
  int from = 0;
  int to = 0;
  autoscale::Reason reason = autoscale::Reason::kTargetOngoing;
  // deployment.autoscaled: "deployment D autoscaled from A to B replicas
  // (reason: signals)", details {from, to, reason, signals{...}}.
  LifecycleEvent event;
  // A scale from zero (from 0, to > 0): when the first request held for it
  // arrived (the decision's time when none was recorded). 0 otherwise.
  Micros demand_arrival = 0;
};

class Scaling {
 public:
  Scaling();
  Scaling(const Scaling&) = delete;
  Scaling& operator=(const Scaling&) = delete;

  // Autoscales `name` from `initial` replicas, or gives an autoscaled
  // deployment new knobs (its target stays; the bounds rule clamps it at
  // the next Evaluate). InvalidArgument on bad knobs.
  absl::Status Set(const std::string& name,
                   const autoscale::AutoscalingConfig& config, int initial,
                   Micros now);
  // `name` is no longer autoscaled (deleted, or its autoscaling removed).
  void Remove(const std::string& name, Micros now);
  bool has(const std::string& name) const { return index_.contains(name); }
  // The count last decided; -1 when `name` is not autoscaled.
  int target(const std::string& name) const;
  // The demand per replica the autoscaler sees: the mean ongoing requests
  // (in flight and queued) over its look-back window, over the count last
  // decided (at least 1). -1 when `name` is not autoscaled or was never
  // observed. Capacity on demand judges pools at it (control/capacity.h).
  double DemandPerReplica(const std::string& name) const;
  int size() const { return static_cast<int>(index_.size()); }
  // The slo policy: the driver passes TTFT samples in ScalingLoad.
  bool WantsTtft(const std::string& name) const;

  // After a restart: the count decided before it, clamped to the bounds.
  void Resume(const std::string& name, int count);
  // An idle replica of `name` was swapped out for another model: the count
  // drops by one (never below 0), without a decision. Returns it.
  int SwappedOut(const std::string& name);

  // A request for `name` arrived at `arrival` and is held (no ready
  // replica). Records the first such arrival since the last scale to zero.
  // True when `name` is at target 0: observe and evaluate at once (rule 2
  // starts one replica without waiting for the next observation).
  bool Held(const std::string& name, Micros arrival);

  // Records what the driver saw of `name` at `now`: the data plane's load
  // and `set`'s ready and starting replicas.
  void Observe(const std::string& name, Micros now, ScalingLoad load,
               const ReplicaSet& set);
  // Applies the rules; appends at most one step per deployment (in the
  // order they were set). The driver sets each step's count as the deployment's
  // desired count and records its event.
  void Evaluate(Micros now, std::vector<ScaleStep>* out);
  // When Evaluate decides something without a new observation (a delay or
  // an idle timeout ends); kNever if nothing is pending.
  Micros NextDeadline() const { return autoscaler_->NextDeadline(); }

 private:
  std::unique_ptr<autoscale::Autoscaler> autoscaler_;
  std::map<std::string, int> index_;            // name -> autoscaler index
  std::map<std::string, Micros> held_since_;    // first held arrival
  std::vector<autoscale::Decision> decisions_;  // scratch
};

}  // namespace gpusched::control

#endif  // GPUSCHED_CONTROL_SCALING_H_
