#include "sim/sim_fleet.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "control/room.h"
#include "placement/pod_request.h"
#include "placement/registry.h"

namespace gpusched::sim {

SimFleet::SimFleet(FleetOptions options, FleetHost* host)
    : options_(std::move(options)), host_(host) {}

absl::Status SimFleet::Init() {
  if (options_.cluster_gpus <= 0) return absl::OkStatus();
  const int per_node = std::max(1, options_.gpus_per_node);
  for (int n = 0, left = options_.cluster_gpus; left > 0; ++n) {
    inventory::NodeSpec s;
    s.name = absl::StrCat("node-", n);
    s.gpu_count = std::min(per_node, left);
    left -= s.gpu_count;
    s.gpu_model = "sim";
    s.gpu_memory_mib = 81920;
    s.cpu_milli = 1000000;
    s.memory_mib = 1 << 24;
    auto id = cluster_.AddNode(s);
    if (!id.ok()) return id.status();
  }
  auto policy =
      placement::NewPolicy(options_.policy, placement::PolicyOptions{});
  if (!policy.ok()) return policy.status();
  scheduler_ = std::make_unique<placement::Scheduler>(
      &cluster_, *std::move(policy), /*seed=*/1);
  return absl::OkStatus();
}

int SimFleet::AddDeployment(FleetDeployment d) {
  const int m = static_cast<int>(deps_.size());
  deps_.push_back({d, control::ReplicaSet(d.name, options_.lifecycle), {}});
  deps_.back().life.SetVersion("v1");
  return m;
}

void SimFleet::SetDesired(int m, int n) {
  if (deps_[m].life.desired() != n) dirty_ = true;
  deps_[m].life.SetDesired(n);
}

int SimFleet::ready(int m) const { return deps_[m].life.ready(); }

int SimFleet::active(int m) const {
  int n = 0;
  for (const auto& [name, p] : deps_[m].procs) {
    const control::Replica* r = deps_[m].life.Find(name);
    n += p.running && r && r->state != control::ReplicaState::kDraining;
  }
  return n;
}

void SimFleet::Reconcile(Micros now) {
  dirty_ = false;
  // A swap chance (NextRetry) is due: pending replicas try again.
  if (now >= swap_chance_) freed_ = true;
  // Bounded: each round either carries something out or ends the pass.
  for (int round = 0; round < 64; ++round) {
    bool did = false;
    // Readiness probes whose answer is due.
    for (size_t i = 0; i < probes_.size();) {
      if (probes_[i].at > now) {
        ++i;
        continue;
      }
      const ProbeAnswer a = probes_[i];
      probes_.erase(probes_.begin() + static_cast<std::ptrdiff_t>(i));
      control::LifecycleOutput out;
      deps_[a.deployment].life.ProbeResult(a.replica, true, now, &out);
      did |= Carry(a.deployment, out, now);
    }
    if (freed_) {
      for (Dep& d : deps_) d.life.Retry(now);
      freed_ = false;
    }
    for (int m : PassOrder()) {
      Dep& d = deps_[m];
      for (const auto& [name, p] : d.procs) {
        if (p.running) d.life.SetInFlight(name, host_->InFlight(p.engine), now);
      }
      control::LifecycleOutput out;
      d.life.Reconcile(now, &out);
      did |= Carry(m, out, now);
    }
    if (!did && !freed_) break;
  }
  // Only ready replicas take requests (a draining one finishes its own).
  for (Dep& d : deps_) {
    for (auto& [name, p] : d.procs) {
      const control::Replica* r = d.life.Find(name);
      const bool want =
          p.running && r && r->state == control::ReplicaState::kReady;
      if (want != p.serving) {
        p.serving = want;
        host_->SetServing(p.engine, want, now);
      }
    }
  }
  UpdateDeadlines();
}

bool SimFleet::VictimsGone(const Proc& p) const {
  if (p.awaiting.empty() || p.placed) return false;
  for (const std::string& victim : p.awaiting) {
    for (const Dep& o : deps_) {
      auto it = o.procs.find(victim);
      if (it != o.procs.end() && it->second.placed) return false;
    }
  }
  return true;
}

std::vector<int> SimFleet::PassOrder() const {
  // A replica whose victims are gone takes the GPUs it made room for
  // before any other pending replica may (as live).
  std::vector<control::PassEntry> entries;
  for (const Dep& d : deps_) {
    bool gone = false;
    for (const auto& [name, p] : d.procs) gone = gone || VictimsGone(p);
    entries.push_back({d.spec.class_rank, gone});
  }
  return control::PassOrder(entries);
}

bool SimFleet::Carry(int m, control::LifecycleOutput& out, Micros now) {
  const bool did = !out.actions.empty() || !out.events.empty();
  size_t events = 0;
  for (size_t i = 0; i < out.actions.size() || events < out.events.size();) {
    for (; events < out.events.size(); ++events) {
      const control::LifecycleEvent& e = out.events[events];
      // The fleet logs starts, placements and room itself; the core's
      // ready, draining and stopped.
      if (e.kind == "replica.ready" || e.kind == "replica.stopped" ||
          e.kind == "replica.draining") {
        Log(now, e.kind.c_str(), m, e.message);
      }
    }
    if (i >= out.actions.size()) break;
    const control::LifecycleAction a = out.actions[i++];
    Dep& d = deps_[m];
    Proc& p = d.procs[a.replica];
    switch (a.kind) {
      case control::LifecycleAction::Kind::kLaunch:
        Launch(m, a.replica, now, &out);
        break;
      case control::LifecycleAction::Kind::kProbe: {
        // Probes every starting_probe from now: the first at or after the
        // engine's ready time succeeds.
        const Micros step =
            std::max<Micros>(1, options_.lifecycle.starting_probe);
        const Micros wait = std::max<Micros>(0, p.ready_at - now);
        probes_.push_back(
            {now + (wait + step - 1) / step * step, m, a.replica});
        break;
      }
      case control::LifecycleAction::Kind::kKill:
      case control::LifecycleAction::Kind::kStop:
        if (p.running) {
          if (p.serving) host_->SetServing(p.engine, false, now);
          p.serving = false;
          p.running = false;
          host_->StopEngine(p.engine, now);
          d.life.Exited(a.replica, "drained", "", now, &out);
        }
        break;
      case control::LifecycleAction::Kind::kForget:
        if (p.placed) {
          if (scheduler_) cluster_.Forget(a.replica);
          milli_in_use_ -= p.milli;
          freed_ = true;
        }
        d.procs.erase(a.replica);
        break;
    }
  }
  out.Clear();
  return did;
}

void SimFleet::Launch(int m, const std::string& replica, Micros now,
                      control::LifecycleOutput* out) {
  Dep& d = deps_[m];
  Proc& p = d.procs[replica];
  if (!p.placed && !Place(m, replica, p, now, out)) return;
  const double gpus = p.milli / 1000.0;
  const FleetEngine e =
      host_->StartEngine(m, replica, gpus, p.weights_local, now);
  p.running = true;
  p.engine = e.id;
  p.ready_at = e.ready_at;
  // It loads its weights on that node: they are local there now.
  if (p.node >= 0) weights_.Loaded(d.spec.weights, p.node);
  Log(now, "replica.started", m,
      absl::StrFormat("%s started (cold start %.3f s%s); %.2f GPUs in use",
                      replica, ToSeconds(e.ready_at - now),
                      p.weights_local ? ", weights local" : "",
                      milli_in_use_ / 1000.0));
  if (e.ready_at <= now) {
    d.life.Adopted(replica, now, out);
  } else {
    d.life.Launched(replica, now);
  }
}

bool SimFleet::Place(int m, const std::string& replica, Proc& p, Micros now,
                     control::LifecycleOutput* out) {
  (void)out;
  Dep& d = deps_[m];
  const int64_t milli = d.spec.gpu_milli > 0
                            ? d.spec.gpu_milli
                            : int64_t{1000} * d.spec.tensor_parallel;
  if (!scheduler_) {  // unbounded
    p.placed = true;
    p.milli = milli;
    milli_in_use_ += milli;
    return true;
  }
  control::PlaceAsk ask;
  ask.replica = replica;
  if (d.spec.gpu_milli > 0) {
    ask.request.kind = inventory::GpuKind::kFraction;
    ask.request.gpu_milli = d.spec.gpu_milli;
  } else {
    ask.request.kind = inventory::GpuKind::kWhole;
    ask.request.gpus = d.spec.tensor_parallel;
  }
  ask.info = {d.spec.owner.empty() ? "-" : d.spec.owner, d.spec.priority,
              d.spec.preemptible};
  // The owner's GPU limit bounds what its deployments hold (as live).
  for (const control::RoomQueue& q : options_.queues) {
    if (!d.spec.owner.empty() && q.name == d.spec.owner) {
      ask.owner = q.name;
      ask.limit_gpus = q.limit_gpus;
    }
  }
  ask.weights = d.spec.weights;
  // Its deployment's other replicas, spread over nodes as live.
  for (const auto& [name, other] : d.procs) {
    if (name != replica && other.placed) ask.siblings.push_back(name);
  }
  const control::PlaceResult placed =
      control::PlaceReplica(cluster_, *scheduler_, weights_, ask);
  switch (placed.kind) {
    case control::PlaceResult::Kind::kPlaced:
      p.placed = true;
      p.milli = placed.decision.allocation.GpuMilli();
      p.node = placed.decision.allocation.node;
      p.weights_local = placed.weights_local;
      milli_in_use_ += p.milli;
      p.awaiting.clear();
      return true;
    case control::PlaceResult::Kind::kInvalid:
    case control::PlaceResult::Kind::kOverLimit:
      if (d.life.Unplaced(replica, placed.why, now + kRetryUnplaced)) {
        Log(now, "replica.unschedulable", m,
            absl::StrCat(replica, ": ", placed.why));
      }
      return false;
    case control::PlaceResult::Kind::kNoFit:
      break;
  }
  // Victims already draining for it: wait for them.
  std::erase_if(p.awaiting, [&](const std::string& victim) {
    for (const Dep& o : deps_) {
      auto it = o.procs.find(victim);
      if (it != o.procs.end() && it->second.placed) return false;
    }
    return true;
  });
  if (p.awaiting.empty()) {
    control::RoomAsk room;
    room.pod = *placed.pod;
    room.replica = replica;
    room.deployment = m;
    room.class_rank = d.spec.class_rank;
    std::vector<control::RoomCandidate> candidates;
    for (int v = 0; v < static_cast<int>(deps_.size()); ++v) {
      const Dep& o = deps_[v];
      const bool queued = v != m && host_->Queued(v);
      for (const control::Replica& r : o.life.replicas()) {
        auto it = o.procs.find(r.name);
        if (it == o.procs.end() || !it->second.placed || r.name == replica) {
          continue;
        }
        const Proc& q = it->second;
        const bool ready = r.state == control::ReplicaState::kReady;
        candidates.push_back(
            {r.name, v, o.spec.class_rank, o.spec.autoscaled,
             o.spec.preemptible, ready,
             ready && !queued && host_->InFlight(q.engine) == 0,
             q.running ? host_->LastUsed(q.engine) : r.last_busy});
      }
    }
    const control::RoomPlan plan =
        control::PlanRoom(cluster_, *scheduler_, filters_, room, candidates,
                          options_.queues, now, options_.swap_min_idle);
    for (const control::RoomVictim& v : plan.victims) {
      int vm = -1;
      for (const control::RoomCandidate& c : candidates) {
        if (c.replica == v.replica) vm = c.deployment;
      }
      if (vm < 0) continue;
      const control::Replica* vr = deps_[vm].life.Find(v.replica);
      if (vr != nullptr && vr->state != control::ReplicaState::kDraining) {
        if (plan.kind == control::RoomPlan::Kind::kSwap) {
          const int target = host_->SwappedOut(vm);
          SetDesired(vm, target);
          Log(now, "replica.evicted", vm,
              absl::StrFormat("%s swapped out for %s (%s, class rank %d): "
                              "idle %.3f s, least recently used of its class "
                              "or lower",
                              v.replica, replica, d.spec.name,
                              d.spec.class_rank,
                              v.idle_for >= 0 ? ToSeconds(v.idle_for) : -1.0));
          Drain(vm, v.replica, absl::StrCat("swapped out for ", replica), now);
        } else {
          Log(now, "replica.preempted", vm,
              absl::StrFormat(
                  "%s (%d in flight) preempted for %s (%s); "
                  "draining: %s",
                  v.replica, host_->InFlight(deps_[vm].procs[v.replica].engine),
                  replica, d.spec.name, v.rule));
          Drain(vm, v.replica, absl::StrCat("preempted by ", replica), now);
        }
      }
      p.awaiting.push_back(v.replica);
    }
  }
  if (!p.awaiting.empty()) {
    // Tried again once they are gone (GPUs freed).
    (void)d.life.Unplaced(replica,
                          absl::StrCat("waiting for ", p.awaiting.size(),
                                       " replica(s) to drain to make room: ",
                                       absl::StrJoin(p.awaiting, ", ")),
                          kNever);
    return false;
  }
  const std::string& why = placed.why;
  if (d.life.Unplaced(replica, why, now + kRetryUnplaced)) {
    Log(now, "replica.unschedulable", m,
        absl::StrFormat("%s: %s; %.2f of %d GPUs in use", replica, why,
                        milli_in_use_ / 1000.0, options_.cluster_gpus));
  }
  return false;
}

void SimFleet::Drain(int m, const std::string& replica, const std::string& why,
                     Micros now) {
  control::LifecycleOutput out;
  deps_[m].life.Drain(replica, why, now, &out);
  Carry(m, out, now);
}

Micros SimFleet::NextDeadline() const {
  return dirty_ || freed_ ? 0 : deadline_;
}

void SimFleet::UpdateDeadlines() {
  deadline_ = kNever;
  for (const ProbeAnswer& a : probes_) deadline_ = std::min(deadline_, a.at);
  // Pending retries count in NextRetry.
  retry_ = kNever;
  pending_ = false;
  for (const Dep& d : deps_) {
    deadline_ = std::min(deadline_, d.life.NextDeadline(false));
    for (const control::Replica& r : d.life.replicas()) {
      if (r.state == control::ReplicaState::kPending && !r.launching) {
        pending_ = true;
        retry_ = std::min(retry_, r.next_start);
      }
    }
  }
}

Micros SimFleet::NextRetry(Micros now, bool busy) const {
  const Micros next = busy && pending_ ? std::max(retry_, now) : kNever;
  swap_chance_ = kNever;
  if (!pending_ || options_.swap_min_idle <= 0) return next;
  // An idle ready replica becomes old enough to swap out.
  for (const Dep& d : deps_) {
    for (const auto& [name, p] : d.procs) {
      if (!p.serving || host_->InFlight(p.engine) > 0) continue;
      const Micros t = host_->LastUsed(p.engine) + options_.swap_min_idle;
      if (t > now) swap_chance_ = std::min(swap_chance_, t);
    }
  }
  return std::min(next, swap_chance_);
}

}  // namespace gpusched::sim
