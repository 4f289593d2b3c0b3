#include "sim/sim_fleet.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/status.h"
#include "control/room.h"
#include "placement/pod_request.h"
#include "placement/registry.h"

namespace gpusched::sim {

SimFleet::SimFleet(FleetOptions options, FleetHost* host)
    : options_(std::move(options)),
      host_(host),
      planner_(options_.capacity),
      rng_(options_.seed) {}

void SimFleet::SetCapacity(std::vector<FleetPool> pools,
                           control::CapacityOptions options, Micros interval,
                           double static_usd_per_gpu_hour) {
  options_.pools = std::move(pools);
  options_.capacity = options;
  options_.capacity_interval = interval;
  options_.static_usd_per_gpu_hour = static_usd_per_gpu_hour;
  planner_ = control::CapacityPlanner(options);
}

absl::Status SimFleet::Init() {
  if (options_.cluster_gpus <= 0 && options_.pools.empty()) {
    return absl::OkStatus();
  }
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
  // Every pool's nodes exist from the start, powered down (their GPUs take
  // nothing) until the planner asks for them.
  for (size_t i = 0; i < options_.pools.size(); ++i) {
    const control::NodePool& p = options_.pools[i].pool;
    RETURN_IF_ERROR(
        control::ValidatePool(p, absl::StrCat("cluster.pools[", i, "]")));
    usage_.push_back({p.name, p.gpu, p.spot, p.price_per_node_hour});
    trace_pos_.push_back(0);
    for (int k = 0; k < p.max_nodes; ++k) {
      inventory::NodeSpec s;
      s.name = absl::StrCat(p.name, "-", k);
      s.gpu_count = p.gpus_per_node;
      s.gpu_model = p.spot ? absl::StrCat(p.gpu, ":spot") : p.gpu;
      s.gpu_memory_mib = 81920;
      s.cpu_milli = 1000000;
      s.memory_mib = 1 << 24;
      ASSIGN_OR_RETURN(const int id, cluster_.AddNode(s));
      PoolNode n;
      n.pool = static_cast<int>(i);
      n.node = id;
      pool_node_of_[id] = static_cast<int>(pool_nodes_.size());
      pool_nodes_.push_back(n);
      SetNodeUp(pool_nodes_.back(), false);
    }
  }
  if (!options_.pools.empty()) next_capacity_ = 0;
  auto policy =
      placement::NewPolicy(options_.policy, placement::PolicyOptions{});
  if (!policy.ok()) return policy.status();
  scheduler_ = std::make_unique<placement::Scheduler>(
      &cluster_, *std::move(policy), /*seed=*/1);
  return absl::OkStatus();
}

int SimFleet::AddDeployment(FleetDeployment d) {
  const int m = static_cast<int>(deps_.size());
  dep_usd_.push_back(0);
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
  if (!pool_nodes_.empty()) {
    PoolEvents(now);
    if (now >= next_capacity_) PlanCapacity(now);
  }
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
          dep_usd_[m] +=
              p.milli / 1000.0 * ToSeconds(now - p.placed_at) * p.usd_per_gpu_s;
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
  std::string gpu;  // a pool node's GPUs; "" on a static node
  if (auto pn = pool_node_of_.find(p.node); pn != pool_node_of_.end()) {
    gpu = options_.pools[pool_nodes_[pn->second].pool].pool.gpu;
  }
  const FleetEngine e =
      host_->StartEngine(m, replica, gpus, p.weights_local, gpu, now);
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
    p.placed_at = now;
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
  ask.request.gpu_models = AllowedModels(d);
  // Capacity on demand: the cheapest nodes first, by what each pool costs
  // it per token at its demand (as the planner judges it).
  if (!pool_nodes_.empty() && options_.capacity.cost_aware) {
    const std::map<std::string, double> costs =
        PoolCosts(m, host_->DemandPerReplica(m));
    for (const PoolNode& n : pool_nodes_) {
      if (n.phase != PoolNode::Phase::kUp) continue;
      auto c = costs.find(options_.pools[n.pool].pool.name);
      if (c != costs.end()) ask.node_cost[n.node] = c->second;
    }
  }
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
      p.placed_at = now;
      p.usd_per_gpu_s = NodePrice(p.node);
      p.waiting_since = -1;
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
  if (p.waiting_since < 0) p.waiting_since = now;
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
  if (dirty_ || freed_) return 0;
  Micros t = deadline_;
  for (const PoolNode& n : pool_nodes_) {
    if (n.phase == PoolNode::Phase::kProvisioning) t = std::min(t, n.up_at);
    if (n.phase == PoolNode::Phase::kNotice) t = std::min(t, n.lost_at);
  }
  return t;
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
  Micros next = busy && pending_ ? std::max(retry_, now) : kNever;
  if (!pool_nodes_.empty()) {
    // Spot losses while the run goes on; the planner's passes too, and
    // after the run until every node it can give back is given back
    // (the nodes are paid for until then).
    if (busy) {
      for (const PoolNode& n : pool_nodes_) {
        if (n.phase == PoolNode::Phase::kUp) {
          next = std::min(next, std::max(n.lost_at, now));
        }
      }
    }
    if (busy || NodesToGiveBack()) {
      next = std::min(next, std::max(next_capacity_, now));
    }
  }
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

// --- Capacity on demand -------------------------------------------------

void SimFleet::SetNodeUp(PoolNode& n, bool up) {
  for (int g = 0; g < cluster_.spec(n.node).gpu_count; ++g) {
    CHECK(cluster_.SetGpuHealth(n.node, g, up).ok());
  }
}

void SimFleet::Bill(PoolNode& n, Micros now) {
  usage_[n.pool].node_seconds += ToSeconds(now - n.billed_since);
  n.billed_since = now;
}

double SimFleet::NodePrice(int node) const {
  auto pn = pool_node_of_.find(node);
  if (pn == pool_node_of_.end()) {
    return options_.static_usd_per_gpu_hour / 3600.0;
  }
  const control::NodePool& p =
      options_.pools[pool_nodes_[pn->second].pool].pool;
  return p.price_per_node_hour / p.gpus_per_node / 3600.0;
}

int SimFleet::DeploymentOf(const std::string& replica) const {
  for (size_t m = 0; m < deps_.size(); ++m) {
    if (deps_[m].procs.count(replica)) return static_cast<int>(m);
  }
  return -1;
}

std::vector<std::string> SimFleet::AllowedModels(const Dep& d) const {
  if (pool_nodes_.empty()) return {};
  // Static nodes, and the pools whose GPUs serve it at its SLO; spot ones
  // only when it may run there now (control::CapacityPlanner's rules:
  // its on-demand base first, none while it falls back after a loss).
  std::vector<std::string> models = {"sim"};
  bool spot_ok = d.spec.spot_ok;
  if (spot_ok && options_.capacity.base_ondemand_fallback_replicas > 0) {
    int ondemand = 0;
    for (const auto& [name, p] : d.procs) {
      if (!p.placed) continue;
      auto pn = pool_node_of_.find(p.node);
      ondemand += pn == pool_node_of_.end() ||
                  !options_.pools[pool_nodes_[pn->second].pool].pool.spot;
    }
    spot_ok = ondemand >= options_.capacity.base_ondemand_fallback_replicas;
  }
  if (spot_ok) {
    for (const std::string& f : planner_.FallbackDeployments(last_now_)) {
      if (f == d.spec.name) spot_ok = false;
    }
  }
  for (const FleetPool& fp : options_.pools) {
    if (!d.spec.usd_per_mtok.count(fp.pool.name)) continue;
    if (fp.pool.spot && !spot_ok) continue;
    models.push_back(fp.pool.spot ? absl::StrCat(fp.pool.gpu, ":spot")
                                  : fp.pool.gpu);
  }
  return models;
}

bool SimFleet::NodesToGiveBack() const {
  std::vector<int> live(options_.pools.size(), 0);
  for (const PoolNode& n : pool_nodes_) {
    if (n.phase == PoolNode::Phase::kProvisioning ||
        n.phase == PoolNode::Phase::kNotice) {
      return true;
    }
    live[n.pool] += n.phase == PoolNode::Phase::kUp;
  }
  // An empty node above its pool's min_nodes goes after scale_down_delay.
  for (const PoolNode& n : pool_nodes_) {
    if (n.phase == PoolNode::Phase::kUp &&
        cluster_.PodsOnNode(n.node).empty() &&
        live[n.pool] > options_.pools[n.pool].pool.min_nodes) {
      return true;
    }
  }
  return false;
}

Micros SimFleet::NextLoss(int pool, Micros now) {
  const FleetPool& fp = options_.pools[pool];
  if (!fp.pool.spot || fp.preemptions_per_node_hour <= 0) return kNever;
  std::exponential_distribution<double> gap(fp.preemptions_per_node_hour /
                                            3600.0);
  return now + std::max<Micros>(1, FromSeconds(gap(rng_)));
}

void SimFleet::PoolEvents(Micros now) {
  last_now_ = now;
  // Trace losses: the node of the pool up the longest gets the notice.
  for (size_t i = 0; i < options_.pools.size(); ++i) {
    const std::vector<Micros>& times = options_.pools[i].preemption_times;
    while (trace_pos_[i] < times.size() && times[trace_pos_[i]] <= now) {
      ++trace_pos_[i];
      PoolNode* oldest = nullptr;
      for (PoolNode& n : pool_nodes_) {
        if (n.pool == static_cast<int>(i) && n.phase == PoolNode::Phase::kUp &&
            (oldest == nullptr || n.since < oldest->since)) {
          oldest = &n;
        }
      }
      if (oldest != nullptr) oldest->lost_at = now;
    }
  }
  for (PoolNode& n : pool_nodes_) {
    const control::NodePool& pool = options_.pools[n.pool].pool;
    const std::string& name = cluster_.spec(n.node).name;
    if (n.phase == PoolNode::Phase::kProvisioning && now >= n.up_at) {
      n.phase = PoolNode::Phase::kUp;
      n.since = now;
      n.lost_at = NextLoss(n.pool, now);
      SetNodeUp(n, true);
      ++usage_[n.pool].provisioned;
      freed_ = true;  // pending replicas try again
      Log(now, "node.provisioned", -1,
          absl::StrFormat("node %s of pool %s is up (%d x %s) after %.0f s",
                          name, pool.name, pool.gpus_per_node, pool.gpu,
                          ToSeconds(pool.provisioning_delay)));
    } else if (n.phase == PoolNode::Phase::kUp && now >= n.lost_at) {
      // The notice: its replicas drain (replaced at once elsewhere); the
      // node goes at the notice's end.
      n.phase = PoolNode::Phase::kNotice;
      n.since = now;
      n.lost_at = now + kSpotNotice;
      SetNodeUp(n, false);
      ++usage_[n.pool].preempted;
      std::vector<std::string> deployments;
      for (const std::string& pod : cluster_.PodsOnNode(n.node)) {
        const int m = DeploymentOf(pod);
        if (m < 0) continue;
        if (std::find(deployments.begin(), deployments.end(),
                      deps_[m].spec.name) == deployments.end()) {
          deployments.push_back(deps_[m].spec.name);
        }
        Drain(m, pod, absl::StrCat("its spot node ", name, " is taken back"),
              now);
      }
      control::CapacityPlan plan;
      planner_.SpotLost(pool.name, name, deployments, now, &plan);
      for (const control::CapacityEvent& e : plan.events) {
        Log(now, e.kind.c_str(), -1, e.message);
      }
    } else if (n.phase == PoolNode::Phase::kNotice && now >= n.lost_at) {
      for (const std::string& pod : cluster_.PodsOnNode(n.node)) {
        const int m = DeploymentOf(pod);
        if (m < 0) continue;
        const Proc& p = deps_[m].procs.at(pod);
        if (p.running) notice_in_flight_ += host_->InFlight(p.engine);
      }
      Bill(n, now);
      n.phase = PoolNode::Phase::kDown;
      n.since = now;
      n.lost_at = kNever;
    }
  }
}

std::map<std::string, double> SimFleet::PoolCosts(int m, double demand) const {
  const FleetDeployment& d = deps_[m].spec;
  std::map<std::string, double> costs = d.usd_per_mtok;
  if (demand < 0) return costs;
  // Its replicas (decided: placed or waiting), those placed, and the pools
  // they run on. The demand per replica is over the decided ones; the
  // placed ones serve it.
  int replicas = 0, placed = 0;
  std::map<std::string, int> on;
  for (const auto& [name, p] : deps_[m].procs) {
    if (!p.placed && p.waiting_since < 0) continue;
    ++replicas;
    placed += p.placed;
    auto pn = p.placed ? pool_node_of_.find(p.node) : pool_node_of_.end();
    if (pn != pool_node_of_.end()) {
      ++on[options_.pools[pool_nodes_[pn->second].pool].pool.name];
    }
  }
  const serving::LatencyModel* measured = nullptr;
  int most = 0;
  double cheapest = 0;
  for (const FleetPool& fp : options_.pools) {
    auto model = d.pool_latency.find(fp.pool.name);
    if (model == d.pool_latency.end() || !costs.count(fp.pool.name)) continue;
    const double gpu_hour = fp.pool.price_per_node_hour / fp.pool.gpus_per_node;
    auto n = on.find(fp.pool.name);
    if (n != on.end()
            ? n->second > most
            : most == 0 && (measured == nullptr || gpu_hour < cheapest)) {
      most = n != on.end() ? n->second : 0;
      cheapest = gpu_hour;
      measured = &model->second;
    }
  }
  for (const FleetPool& fp : options_.pools) {
    auto model = d.pool_latency.find(fp.pool.name);
    if (model == d.pool_latency.end() || !costs.count(fp.pool.name)) continue;
    control::SloTarget slo = d.slo;
    slo.demand = demand * std::max(1, replicas) / std::max(1, placed);
    slo.replicas = std::max(1, placed);
    slo.demand_on = measured;
    const control::TokenCost c = control::CostPerToken(
        model->second, fp.pool.price_per_node_hour / fp.pool.gpus_per_node,
        slo);
    if (c.feasible) costs[fp.pool.name] = c.usd_per_mtok;
  }
  return costs;
}

void SimFleet::PlanCapacity(Micros now) {
  next_capacity_ = now + std::max<Micros>(1, options_.capacity_interval);
  control::CapacityInput in;
  for (const FleetPool& fp : options_.pools) in.pools.push_back(fp.pool);
  const std::set<std::string>& cordoned = planner_.Cordoned();
  for (const PoolNode& n : pool_nodes_) {
    if (n.phase == PoolNode::Phase::kDown ||
        n.phase == PoolNode::Phase::kNotice) {
      continue;
    }
    control::PoolNodeView v;
    v.node = cluster_.spec(n.node).name;
    v.pool = options_.pools[n.pool].pool.name;
    v.phase = n.phase == PoolNode::Phase::kUp
                  ? control::PoolNodeView::Phase::kUp
                  : control::PoolNodeView::Phase::kProvisioning;
    v.since = n.since;
    v.gpus = cluster_.spec(n.node).gpu_count;
    for (const std::string& pod : cluster_.PodsOnNode(n.node)) {
      const int m = DeploymentOf(pod);
      if (m < 0) continue;
      v.gpus_held += deps_[m].procs.at(pod).milli / 1000.0;
      v.replicas.push_back(pod);
    }
    in.nodes.push_back(std::move(v));
  }
  for (int node = 0; node < cluster_.num_nodes(); ++node) {
    const std::string& name = cluster_.spec(node).name;
    if (cordoned.count(name)) continue;
    const int idle = cluster_.state(node).idle_gpus;
    if (idle > 0) in.room.push_back({name, idle});
  }
  for (size_t m = 0; m < deps_.size(); ++m) {
    const Dep& d = deps_[m];
    std::optional<std::map<std::string, double>> costs;  // once per pass
    for (const auto& [name, p] : d.procs) {
      const control::Replica* r = d.life.Find(name);
      if (r == nullptr) continue;
      if (p.placed) {
        in.replica_gpus[name] = static_cast<int>((p.milli + 999) / 1000);
        if (r->state == control::ReplicaState::kReady && !r->moving &&
            r->version == d.life.version()) {
          in.movable.insert(name);
        }
        auto pn = pool_node_of_.find(p.node);
        if (pn == pool_node_of_.end() ||
            !options_.pools[pool_nodes_[pn->second].pool].pool.spot) {
          ++in.ondemand_replicas[d.spec.name];
        }
      } else if (p.waiting_since >= 0 &&
                 r->state == control::ReplicaState::kPending) {
        control::WaitingReplica w;
        w.replica = name;
        w.deployment = d.spec.name;
        w.gpus = d.spec.gpu_milli > 0 ? 1 : d.spec.tensor_parallel;
        w.since = p.waiting_since;
        w.spot_ok = d.spec.spot_ok;
        if (!costs) {
          costs = PoolCosts(static_cast<int>(m),
                            host_->DemandPerReplica(static_cast<int>(m)));
        }
        w.usd_per_mtok = *costs;
        in.waiting.push_back(std::move(w));
      }
    }
  }
  const control::CapacityPlan plan = planner_.Plan(in, now);
  for (const control::CapacityEvent& e : plan.events) {
    Log(now, e.kind.c_str(), -1, e.message);
  }
  for (const control::CapacityAction& a : plan.actions) {
    switch (a.kind) {
      case control::CapacityAction::Kind::kAdd: {
        int left = a.count;
        for (PoolNode& n : pool_nodes_) {
          if (left == 0) break;
          const control::NodePool& pool = options_.pools[n.pool].pool;
          if (pool.name != a.pool || n.phase != PoolNode::Phase::kDown) {
            continue;
          }
          n.phase = PoolNode::Phase::kProvisioning;
          n.since = now;
          n.up_at = now + pool.provisioning_delay;
          n.billed_since = now;
          ++usage_[n.pool].requested;
          --left;
        }
        break;
      }
      case control::CapacityAction::Kind::kRelease:
        for (PoolNode& n : pool_nodes_) {
          if (cluster_.spec(n.node).name != a.node ||
              n.phase != PoolNode::Phase::kUp) {
            continue;
          }
          Bill(n, now);
          SetNodeUp(n, false);
          n.phase = PoolNode::Phase::kDown;
          n.since = now;
          n.lost_at = kNever;
          ++usage_[n.pool].released;
        }
        break;
      case control::CapacityAction::Kind::kMove: {
        ++consolidations_;
        const int node = cluster_.FindNode(a.node);
        if (auto pn = pool_node_of_.find(node); pn != pool_node_of_.end()) {
          SetNodeUp(pool_nodes_[pn->second], false);  // cordoned
        }
        for (const std::string& r : a.replicas) {
          const int m = DeploymentOf(r);
          if (m >= 0) deps_[m].life.Move(r, a.why);
        }
        dirty_ = true;
        break;
      }
    }
  }
  // Peaks: nodes asked for or up at once.
  std::vector<int> live(options_.pools.size(), 0);
  for (const PoolNode& n : pool_nodes_) {
    live[n.pool] += n.phase != PoolNode::Phase::kDown;
  }
  for (size_t i = 0; i < live.size(); ++i) {
    usage_[i].peak_nodes = std::max(usage_[i].peak_nodes, live[i]);
  }
}

FleetCost SimFleet::Cost(Micros end) const {
  FleetCost c;
  c.static_usd = options_.cluster_gpus * options_.static_usd_per_gpu_hour *
                 ToSeconds(end) / 3600.0;
  c.pools = usage_;
  for (const PoolNode& n : pool_nodes_) {
    if (n.phase != PoolNode::Phase::kDown && end > n.billed_since) {
      c.pools[n.pool].node_seconds += ToSeconds(end - n.billed_since);
    }
  }
  for (PoolUsage& u : c.pools) {
    u.usd = u.node_seconds / 3600.0 * u.usd_per_node_hour;
    c.pools_usd += u.usd;
  }
  c.total_usd = c.static_usd + c.pools_usd;
  c.deployment_usd = dep_usd_;
  double held = 0;
  for (size_t m = 0; m < deps_.size(); ++m) {
    for (const auto& [name, p] : deps_[m].procs) {
      if (p.placed && end > p.placed_at) {
        c.deployment_usd[m] +=
            p.milli / 1000.0 * ToSeconds(end - p.placed_at) * p.usd_per_gpu_s;
      }
    }
    held += c.deployment_usd[m];
  }
  c.idle_usd = std::max(0.0, c.total_usd - held);
  c.consolidations = consolidations_;
  c.notice_in_flight = notice_in_flight_;
  return c;
}

}  // namespace gpusched::sim
