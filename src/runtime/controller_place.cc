// The Controller's placement and launch of one replica: the tenant GPU
// limit, weights-local nodes first, making room (control/room.h) when it
// does not fit, then the engine through the Launcher (runtime/engine_launch).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "control/room.h"
#include "placement/pod_request.h"
#include "placement/priority.h"
#include "runtime/controller.h"
#include "runtime/controller_internal.h"
#include "runtime/engine_launch.h"

namespace gpusched::runtime {

using nlohmann::json;

inventory::PodInfo Controller::PodInfoOf(const Deployment& d) const {
  inventory::PodInfo info{QueueOf(d.spec.tenant), 500, d.spec.preemptible};
  auto cls = placement::PriorityClasses::Defaults().Find(d.spec.priority_class);
  if (cls.ok()) {
    info.priority = cls->value;
    info.preemptible = info.preemptible && cls->preemptible;
  }
  return info;
}

void Controller::DrainReplica(Deployment& d, const std::string& replica,
                              const std::string& why, Micros now) {
  control::LifecycleOutput out;
  d.life.Drain(replica, why, now, &out);
  Carry(d, out, now);
}

bool Controller::MakeRoom(Deployment& d, Replica& r,
                          const placement::PodRequest& pod, Micros now) {
  // Victims already draining for it: wait for them.
  std::vector<std::string> still;
  for (const std::string& victim : r.awaiting) {
    for (const auto& [name, od] : deployments_) {
      auto it = od.procs.find(victim);
      if (it != od.procs.end() && it->second.placed) {
        still.push_back(victim);
        break;
      }
    }
  }
  r.awaiting = std::move(still);
  if (!r.awaiting.empty()) return true;
  // The placed replicas, and the owners' queues with their quotas.
  control::RoomAsk ask;
  ask.pod = pod;
  ask.replica = r.name;
  ask.class_rank = ClassRank(d.spec.priority_class);
  std::vector<control::RoomCandidate> candidates;
  absl::flat_hash_map<std::string,
                      std::pair<Deployment*, const control::Replica*>>
      placed;
  std::set<std::string> owners = {QueueOf(d.spec.tenant)};
  int index = 0;
  for (auto& [name, od] : deployments_) {
    ++index;
    if (&od == &d) ask.deployment = index;
    owners.insert(QueueOf(od.spec.tenant));
    const bool queued = &od != &d && gateway_->Load(name).queued > 0;
    for (const control::Replica& o : od.life.replicas()) {
      auto io = od.procs.find(o.name);
      if (io == od.procs.end() || !io->second.placed || o.name == r.name) {
        continue;
      }
      const bool ready = o.state == control::ReplicaState::kReady;
      placed[o.name] = {&od, &o};
      candidates.push_back(
          {o.name, index, ClassRank(od.spec.priority_class),
           scaling_.has(od.spec.name), od.spec.preemptible,
           ready && !od.deleting,
           ready && !queued && gateway_->InFlightOn(io->second.endpoint) == 0,
           o.last_busy});
    }
  }
  std::vector<control::RoomQueue> queues;
  for (const std::string& q : owners) {
    if (auto t = tenants_.find(q); t != tenants_.end()) {
      const config::TenantQuotaSpec& quota = t->second.spec.quota;
      queues.push_back({q, quota.gpus, quota.limit, quota.over_quota_weight});
    }
  }
  const control::RoomPlan plan =
      control::PlanRoom(cluster_state_, *scheduler_, preemption_filters_, ask,
                        candidates, queues, now, options_.swap_min_idle);
  for (const control::RoomVictim& v : plan.victims) {
    auto it = placed.find(v.replica);
    if (it == placed.end()) continue;
    auto [vd, vr] = it->second;
    const std::string victim = vr->name;  // vr dies with the drain
    if (vr->state == control::ReplicaState::kDraining) {
      r.awaiting.push_back(victim);
      continue;
    }
    if (plan.kind == control::RoomPlan::Kind::kSwap) {
      const int replicas = scaling_.SwappedOut(vd->spec.name);
      const double idle_s = v.idle_for >= 0 ? v.idle_for / 1e6 : -1;
      const std::string why = absl::StrFormat(
          "swapped out for %s (%s, class %s): idle%s, least recently used of "
          "class %s or lower",
          r.name, d.spec.name, d.spec.priority_class,
          idle_s >= 0 ? absl::StrFormat(" for %.1f s", idle_s) : "",
          d.spec.priority_class);
      DrainReplica(*vd, victim, why, now);
      Event("replica.evicted", vd->spec.name, absl::StrCat(victim, " ", why),
            json{{"replica", victim},
                 {"for", d.spec.name},
                 {"for_replica", r.name},
                 {"class", vd->spec.priority_class},
                 {"idle_s", idle_s},
                 {"replicas", replicas}});
      if (options_.metrics) options_.metrics->Evicted();
      (void)store_->PutDesiredReplicas(vd->spec.name, replicas, Wall(),
                                       FenceLocked());
    } else {
      const std::string why = absl::StrFormat(
          "preempted by %s (%s, class %s, priority %d): %s", r.name,
          d.spec.name, d.spec.priority_class, pod.info.priority, v.rule);
      DrainReplica(*vd, victim, why, now);
      Event("replica.preempted", vd->spec.name, absl::StrCat(victim, " ", why),
            json{{"replica", victim},
                 {"for", d.spec.name},
                 {"for_replica", r.name},
                 {"priority", v.priority},
                 {"preemptor_priority", pod.info.priority},
                 {"gpu_milli", v.gpu_milli},
                 {"rule", v.rule},
                 {"node", cluster_state_.spec(plan.node).name}});
      if (options_.metrics) options_.metrics->Preempted();
    }
    r.awaiting.push_back(victim);
  }
  return !r.awaiting.empty();
}

void Controller::Release(Replica& r) {
  if (r.placed) cluster_state_.Forget(r.name);
  r.placed = false;
  if (r.ask_pid != 0) {  // a Pod that waits for a node asks no more
    absl::MutexLock l(&launcher_mu_);
    (void)launcher_->Kill(r.ask_pid);
    r.ask_pid = 0;
  }
}

void Controller::Launch(Deployment& d, Replica& r, Micros now,
                        control::LifecycleOutput* out) {
  // The first replica launched after a scale from zero serves the held
  // requests.
  ColdStart* cold =
      d.cold && (d.cold->replica.empty() || d.cold->replica == r.name)
          ? &*d.cold
          : nullptr;
  if (cold) cold->replica = r.name;
  auto fail = [&](const std::string& why) {
    d.life.LaunchFailed(r.name, why, now, out);
  };
  // Placement found no room (yet): retried at `retry_at`; a new reason is
  // recorded.
  auto unplaced = [&](const std::string& why, Micros retry_at, json details) {
    if (d.life.Unplaced(r.name, why, retry_at)) {
      Event("replica.unschedulable", d.spec.name,
            absl::StrCat(r.name, ": ", why), std::move(details));
    }
  };
  if (!r.placed && AdoptLeftover(d, r, now)) return;
  if (!r.placed) {
    if (d.spec.resources.kind == "none") {
      r.placed = true;
      r.allocation = {};
    } else {
      control::PlaceAsk ask;
      ask.replica = r.name;
      ask.request = ToRequest(d.spec.resources);
      ask.info = PodInfoOf(d);
      // The owner's GPU limit (quota.limit, in GPUs) bounds what its
      // deployments hold.
      if (auto t = tenants_.find(d.spec.tenant); t != tenants_.end()) {
        ask.owner = d.spec.tenant;
        ask.limit_gpus = t->second.spec.quota.limit;
      }
      // Nodes where the weights are local first.
      ask.weights = WeightsPath(d);
      ask.spread = d.spec.spread;
      for (const auto& [name, other] : d.procs) {
        if (name != r.name && other.placed) ask.siblings.push_back(name);
      }
      if (!ask.weights.empty() && cluster_.source == "nvml" &&
          !weights_.IsLocal(ask.weights, 0) &&
          std::filesystem::exists(ask.weights)) {
        weights_.Loaded(ask.weights, 0);  // on this machine's disk
      }
      // Capacity on demand: the cheapest nodes first, by what each pool
      // costs it (as the planner judges it), so dearer nodes empty.
      if (!pools_.empty() && options_.capacity.policy == "gpusched") {
        const std::map<std::string, double> costs =
            PoolCosts(d, std::max(1, ask.request.gpus), NodePools(), nullptr);
        for (const auto& [node, pn] : pool_nodes_) {
          auto c = costs.find(pn.pool);
          const int idx = cluster_state_.FindNode(node);
          if (c != costs.end() && idx >= 0) ask.node_cost[idx] = c->second;
        }
      }
      const Micros place_start = Now();
      control::PlaceResult placed =
          control::PlaceReplica(cluster_state_, *scheduler_, weights_, ask);
      const placement::Decision& dec = placed.decision;
      if (options_.metrics &&
          (placed.kind == control::PlaceResult::Kind::kPlaced ||
           placed.kind == control::PlaceResult::Kind::kNoFit)) {
        options_.metrics->Placement(dec, ToSeconds(Now() - place_start));
      }
      switch (placed.kind) {
        case control::PlaceResult::Kind::kPlaced:
          break;
        case control::PlaceResult::Kind::kInvalid:
          fail(placed.why);
          return;
        case control::PlaceResult::Kind::kOverLimit:
          unplaced(placed.why, now + kMicrosPerSecond,
                   json{{"reasons", placed.reasons}});
          return;
        case control::PlaceResult::Kind::kNoFit:
          if (MakeRoom(d, r, *placed.pod, now)) {
            // Placed once its victims are gone (checked every tick).
            (void)d.life.Unplaced(
                r.name,
                absl::StrCat("waiting for ", r.awaiting.size(),
                             " replica(s) to drain to make room: ",
                             absl::StrJoin(r.awaiting, ", ")),
                now + options_.tick);
            return;
          }
          unplaced(placed.why, now + kMicrosPerSecond,
                   json{{"reasons", placed.reasons}});
          waiting_since_.try_emplace(r.name, now);  // capacity's backlog
          // The others of the deployment waiting to be placed ask for the
          // same: they would not fit either. They wait for the same retry
          // without a placement each (freed GPUs retry them at once), so a
          // backlog costs one placement per deployment and second.
          for (const control::Replica& c : d.life.replicas()) {
            if (c.name != r.name &&
                c.state == control::ReplicaState::kPending && !c.launching) {
              (void)d.life.Unplaced(c.name, placed.why, now + kMicrosPerSecond);
              waiting_since_.try_emplace(c.name, now);
            }
          }
          return;
      }
      r.placed = true;
      r.allocation = dec.allocation;
      waiting_since_.erase(r.name);
      json top = json::array();
      for (const placement::Candidate& c : dec.top) {
        top.push_back(
            {{"node", cluster_state_.spec(c.node).name}, {"score", c.score}});
      }
      json gpus = json::array();
      for (const inventory::GpuShare& g : dec.allocation.gpus) {
        gpus.push_back({{"gpu", g.gpu},
                        {"milli", g.milli},
                        {"memoryMiB", g.memory_mib},
                        {"mig", g.mig_profile}});
      }
      Event("replica.placed", d.spec.name,
            absl::StrCat(r.name, ": ", dec.Summary(cluster_state_)),
            json{{"node", cluster_state_.spec(dec.allocation.node).name},
                 {"gpus", gpus},
                 {"score", dec.score},
                 {"top", top},
                 {"policy", options_.placement_policy},
                 {"weightsPath", ask.weights},
                 {"weightsLocal", placed.weights_local}});
    }
  }
  if (cold && cold->placed == 0) cold->placed = Now();
  runtime::EngineLaunchInput in;
  in.engine = &d.engine;
  in.replica = r.name;
  in.deployment = d.spec.name;
  in.model = d.spec.model.empty() ? d.spec.name : d.spec.model;
  in.resources = d.spec.resources;
  in.allocation = r.allocation;
  if (r.allocation.node >= 0) {
    in.node = &cluster_state_.spec(r.allocation.node);
    // NVML GPUs belong to node 0, this machine, when discovered.
    if (!in.node->simulated && r.allocation.node == 0 &&
        !cluster_.gpus.empty()) {
      in.nvml_gpus = &cluster_.gpus;
    }
  }
  in.self_path = options_.self_path;
  in.host = options_.engine_host;
  in.mps = options_.mps;
  in.log_dir = options_.log_dir;
  absl::StatusOr<runtime::EngineLaunch> launch = runtime::PlanEngineLaunch(in);
  if (!launch.ok()) {
    fail(std::string(launch.status().message()));
    return;
  }
  launch->process.tag =
      LaunchTag(launch->port, launch->metrics_port, d.life.version());
  // The engine starts after this pass, outside the lock (fork and exec
  // take milliseconds, more on a busy machine): FinishStart reports back.
  StartJob job;
  job.deployment = d.spec.name;
  job.replica = r.name;
  job.launch = *std::move(launch);
  if (r.ask_pid != 0) {
    // Its Pod waited for a node: bound where placement chose, with the
    // engine (port, argv) it was created with.
    backends::ProcessPlacement where = job.launch.process.placement;
    std::vector<std::string> ids = job.launch.gpu_ids;
    std::string host = job.launch.host;
    job.launch = std::move(r.ask_launch);
    job.launch.process.placement = std::move(where);
    job.launch.gpu_ids = std::move(ids);
    job.launch.host = std::move(host);
    job.bind = r.ask_pid;
    r.ask_pid = 0;
    r.ask_pool.clear();
  }
  starts_.push_back(std::move(job));
}

void Controller::FinishStart(StartJob& job, Micros now) {
  auto dit = deployments_.find(job.deployment);
  Replica* found = nullptr;
  if (dit != deployments_.end() && dit->second.life.Find(job.replica)) {
    auto rit = dit->second.procs.find(job.replica);
    if (rit != dit->second.procs.end()) found = &rit->second;
  }
  if (found == nullptr) {
    // Gone while it started (cannot happen while the core waits for the
    // report; kept safe): the engine must not outlive it.
    if (job.pid.ok()) {
      absl::MutexLock lock(&launcher_mu_);
      (void)launcher_->Kill(*job.pid);
    }
    return;
  }
  Deployment& d = dit->second;
  Replica& r = *found;
  control::LifecycleOutput out;
  if (!job.pid.ok()) {
    d.life.LaunchFailed(r.name, std::string(job.pid.status().message()), now,
                        &out);
    Carry(d, out, now);
    return;
  }
  const backends::ProcessSpec& spec = job.launch.process;
  const std::vector<std::string>& ids = job.launch.gpu_ids;
  const int port = job.launch.port;
  const backends::ProcessId pid = *job.pid;
  {
    std::ofstream pf(PidFile(r.name), std::ios::trunc);
    pf << pid << "\n" << spec.argv.front() << "\n";
  }
  if (d.cold && d.cold->replica == r.name && d.cold->launched == 0) {
    d.cold->launched = Now();
  }
  r.pid = pid;
  r.manager_ready = !manager_readiness_;
  r.manager_lost = false;
  r.endpoint = {job.launch.host, static_cast<uint16_t>(port)};
  r.metrics_port = job.launch.metrics_port;
  d.life.Launched(r.name, now);
  // The engine loads its weights on this node: they are local there now.
  if (const std::string w = WeightsPath(d);
      !w.empty() && r.placed && r.allocation.node >= 0) {
    weights_.Loaded(w, r.allocation.node);
  }
  r.started_wall = Wall();
  if (options_.metrics) options_.metrics->ReplicaStarted(d.spec.name);
  Event("replica.started", d.spec.name,
        absl::StrCat(r.name, " started: pid ", pid, ", port ", port,
                     ids.empty() ? ""
                                 : absl::StrCat(", CUDA_VISIBLE_DEVICES=",
                                                absl::StrJoin(ids, ","))),
        json{{"replica", r.name},
             {"pid", pid},
             {"port", port},
             {"gpus", ids},
             {"argv", spec.argv}});
}

}  // namespace gpusched::runtime
