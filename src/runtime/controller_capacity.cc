// Capacity on demand, the live side (docs/capacity.md): the launcher's
// CapacityManager (Slurm's power saving, Kubernetes' autoscalers) reports
// pools and their nodes; control::CapacityPlanner decides when to ask for
// nodes, which pool, what to move off nearly empty nodes and what to give
// back; this file carries that out and keeps the cost accounts.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "inventory/gpu_catalog.h"
#include "runtime/controller.h"
#include "runtime/controller_internal.h"
#include "serving/latency_model.h"

namespace gpusched::runtime {

using backends::PoolNodeState;
using nlohmann::json;

namespace {

// How many measured provisioning delays a pool keeps (their median is the
// pool's delay).
constexpr size_t kDelaySamples = 16;
// Without a measurement or a configured delay.
constexpr Micros kDefaultProvisioningDelay = 120 * kMicrosPerSecond;
// Nodes learned at run time over a controller's life (a removed one stays
// in the cluster state, powered down, and counts): bounds the cluster state
// where an autoscaler names every new node afresh.
constexpr int kMaxLearnedNodes = 1024;

// A Kubernetes node name: a DNS subdomain (RFC 1123) of up to 253.
constexpr size_t kMaxNodeName = 253;

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The SLO a deployment's cost per token is judged at (as the simulator's
// sim::SloTargetFor): its TTFT and TPOT targets, the concurrency its
// replicas run at (the autoscaler's target, else max_ongoing_requests), and
// `demand`, the ongoing requests per replica the autoscaler sees.
control::SloTarget SloTargetOf(const config::DeploymentSpec& spec,
                               double demand) {
  control::SloTarget slo;
  slo.ttft_s = spec.ttft_slo_ms / 1000.0;
  slo.tpot_s = spec.tpot_slo_ms / 1000.0;
  slo.max_batch = spec.autoscaling
                      ? static_cast<int>(std::ceil(
                            spec.autoscaling->target_ongoing_requests))
                      : spec.max_ongoing_requests;
  slo.max_batch = std::max(1, slo.max_batch);
  slo.demand = demand;
  return slo;
}

}  // namespace

absl::Status Controller::LoadGpuPrices() {
  if (options_.capacity.prices.empty()) {
    gpu_prices_ = control::BuiltinGpuPrices();
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(gpu_prices_,
                   control::LoadGpuPrices(options_.capacity.prices));
  return absl::OkStatus();
}

void Controller::PoolNodeLost(const backends::PoolNodeReport& n, Micros now) {
  // Its replicas are replaced through the node's own report (no longer
  // usable); here the planner and the log learn why.
  std::vector<std::string> deployments;
  if (const int id = cluster_state_.FindNode(n.node); id >= 0) {
    for (const auto& [name, d] : deployments_) {
      for (const auto& [rn, r] : d.procs) {
        if (r.placed && r.allocation.node == id) {
          deployments.push_back(name);
          break;
        }
      }
    }
  }
  const std::string why = n.reason.empty() ? (n.state == PoolNodeState::kFailed
                                                  ? "the manager says failed"
                                                  : "it is gone")
                                           : n.reason;
  auto pool = pools_.find(n.pool);
  control::CapacityPlan plan;
  if (pool != pools_.end() && pool->second.report.spot) {
    planner_.SpotLost(n.pool, n.node, deployments, now, &plan);
  } else {
    plan.events.push_back(
        {"capacity.failed",
         absl::StrCat("node ", n.node, " of pool ", n.pool,
                      " failed after it came up: ", why, "; ",
                      deployments.empty()
                          ? std::string("it held no replica")
                          : absl::StrCat("its replicas of ",
                                         absl::StrJoin(deployments, ", "),
                                         " are replaced"),
                      " (the pool is not skipped: it did come up)"),
         json{{"pool", n.pool},
              {"node", n.node},
              {"reason", why},
              {"deployments", deployments},
              {"afterUp", true}}});
  }
  for (const control::CapacityEvent& e : plan.events) {
    Event(e.kind, "", e.message, e.details);
  }
}

void Controller::ApplyPoolReports(
    std::vector<backends::PoolReport> pools,
    const std::vector<backends::PoolNodeReport>& nodes, Micros now) {
  for (backends::PoolReport& p : pools) {
    const bool fresh = !pools_.count(p.pool);
    PoolInfo& info = pools_[p.pool];
    info.report = std::move(p);
    if (fresh) {
      Event("pool.discovered", "",
            absl::StrFormat("pool %s: up to %d node%s of %d x %s%s",
                            info.report.pool, info.report.max_nodes,
                            info.report.max_nodes == 1 ? "" : "s",
                            info.report.gpus_per_node, info.report.gpu_model,
                            info.report.spot ? ", spot" : ""),
            json{{"pool", info.report.pool},
                 {"gpu", info.report.gpu_model},
                 {"maxNodes", info.report.max_nodes},
                 {"spot", info.report.spot}});
    }
  }
  for (const backends::PoolNodeReport& n : nodes) {
    // A node placement has not seen, which the manager describes (an
    // autoscaler added it): placement learns it now.
    if (n.spec && cluster_state_.FindNode(n.node) < 0 &&
        (n.state == PoolNodeState::kUp ||
         n.state == PoolNodeState::kPoweringUp) &&
        !LearnPoolNode(n, now)) {
      continue;
    }
    PoolNodeInfo& pn = pool_nodes_[n.node];
    const PoolNodeState was = pn.state;
    const bool known = !pn.pool.empty();
    // Seen first after the first report: it came at run time, and says so.
    const bool news = known || pool_nodes_seen_;
    pn.pool = n.pool;
    pn.reason = n.reason;
    if (known && was == n.state) continue;
    pn.since = now;
    pn.state = n.state;
    next_capacity_ = now;  // the planner sees the change at this pass
    const std::string name = n.node;
    // Up, and gone or failed without gpusched giving it back (a release
    // marks it powering down first): a node lost, not a failed resume.
    if (known && was == PoolNodeState::kUp &&
        (n.state == PoolNodeState::kFailed ||
         n.state == PoolNodeState::kPoweredDown)) {
      PoolNodeLost(n, now);
      if (n.state == PoolNodeState::kFailed) continue;
    }
    switch (n.state) {
      case PoolNodeState::kUp: {
        double took = -1;
        if (auto a = asked_at_.find(name); a != asked_at_.end()) {
          took = ToSeconds(now - a->second);
          asked_at_.erase(a);
        } else if (pn.learned && pn.request.empty()) {
          // Kubernetes names no node when asked: the oldest ask of its pool
          // that is still short of nodes took this long.
          PoolAsk* oldest = nullptr;
          for (auto& [request, ask] : pool_asks_) {
            if (ask.pool != n.pool || ask.matched >= ask.count) continue;
            if (oldest == nullptr || ask.since < oldest->since) {
              oldest = &ask;
              pn.request = request;
            }
          }
          if (oldest != nullptr) {
            ++oldest->matched;
            took = ToSeconds(now - oldest->since);
          }
        }
        if (took >= 0) {
          std::vector<double>& d = pools_[n.pool].delays_s;
          d.push_back(took);
          if (d.size() > kDelaySamples) d.erase(d.begin());
        }
        if (news) {
          Event(
              "node.provisioned", "",
              took >= 0
                  ? absl::StrFormat("node %s of pool %s is up, %.1f s after it "
                                    "was asked for",
                                    name, n.pool, took)
                  : absl::StrCat("node ", name, " of pool ", n.pool, " is up"),
              json{{"node", name}, {"pool", n.pool}, {"seconds", took}});
        }
        // Its GPUs take replicas now (the last node report, if any).
        if (auto r = node_reports_.find(name); r != node_reports_.end()) {
          ApplyNodeReport(r->second, now);
        }
        dirty_ = true;
        break;
      }
      case PoolNodeState::kFailed: {
        asked_at_.erase(name);
        control::CapacityPlan plan;
        planner_.NodeFailed(
            n.pool, name,
            n.reason.empty() ? "the manager says failed" : n.reason, now,
            &plan);
        for (const control::CapacityEvent& e : plan.events) {
          Event(e.kind, "", e.message, e.details);
        }
        break;
      }
      case PoolNodeState::kPoweredDown:
        if (news && was != PoolNodeState::kPoweredDown) {
          Event("node.powered_down", "",
                absl::StrCat("node ", name, " of pool ", n.pool,
                             " is powered down"),
                json{{"node", name}, {"pool", n.pool}});
        }
        break;
      case PoolNodeState::kPoweringUp:
      case PoolNodeState::kPoweringDown:
        break;
    }
  }
  pool_nodes_seen_ = true;
}

bool Controller::LearnPoolNode(const backends::PoolNodeReport& n, Micros now) {
  auto refuse = [&](const std::string& why) {
    Event("capacity.failed", "",
          absl::StrCat("node ", n.node, " of pool ", n.pool,
                       " takes no replica: ", why),
          json{{"node", n.node}, {"pool", n.pool}});
    return false;
  };
  if (!config::ValidObjectName(n.node, kMaxNodeName)) {
    return refuse(
        "its name is not a node name (1 to 253 of a-z, 0-9, '-' "
        "and '.')");
  }
  if (n.spec->name != n.node) {
    return refuse(
        absl::StrCat("the manager describes node '", n.spec->name, "' for it"));
  }
  int max_nodes = 0;
  for (const control::NodePool& p : NodePools()) {
    if (p.name == n.pool) max_nodes = p.max_nodes;
  }
  int live = 0, learned = 0;
  for (const auto& [node, pn] : pool_nodes_) {
    learned += pn.learned;
    if (pn.pool == n.pool && pn.state != PoolNodeState::kPoweredDown &&
        pn.state != PoolNodeState::kFailed &&
        cluster_state_.FindNode(node) >= 0) {
      ++live;
    }
  }
  if (live >= max_nodes) {
    return refuse(absl::StrCat("pool ", n.pool, " has ", live, " of its ",
                               max_nodes, " nodes already"));
  }
  if (learned >= kMaxLearnedNodes) {
    return refuse(absl::StrCat(kMaxLearnedNodes,
                               " nodes were learned at run time already"));
  }
  absl::StatusOr<int> idx = cluster_state_.AddNode(*n.spec);
  if (!idx.ok()) return refuse(std::string(idx.status().message()));
  // A node not up yet takes no replica until it is (ApplyNodeReport).
  for (int g = 0; n.state != PoolNodeState::kUp && g < n.spec->gpu_count; ++g) {
    (void)cluster_state_.SetGpuHealth(*idx, g, false);
  }
  pool_nodes_[n.node].learned = true;
  // Replicas that found no room try its GPUs at once, not at their next
  // retry.
  if (n.state == PoolNodeState::kUp) {
    for (auto& [name, d] : deployments_) d.life.Retry(now);
    dirty_ = true;
  }
  return true;
}

void Controller::AskForPoolNode(const std::string& replica,
                                const std::string& pool, Micros now) {
  Deployment* d = nullptr;
  for (auto& [name, dep] : deployments_) {
    if (dep.life.Find(replica)) d = &dep;
  }
  if (d == nullptr) return;
  const control::Replica* core = d->life.Find(replica);
  auto it = d->procs.find(replica);
  if (it == d->procs.end() || core->state != control::ReplicaState::kPending) {
    return;
  }
  Replica& r = it->second;
  if (r.placed || r.ask_pid != 0) return;
  runtime::EngineLaunchInput in;
  in.engine = &d->engine;
  in.replica = r.name;
  in.deployment = d->spec.name;
  in.model = d->spec.model.empty() ? d->spec.name : d->spec.model;
  in.resources = d->spec.resources;
  in.self_path = options_.self_path;
  in.host = options_.engine_host;
  in.mps = options_.mps;
  in.log_dir = options_.log_dir;
  absl::StatusOr<runtime::EngineLaunch> launch = runtime::PlanEngineLaunch(in);
  absl::StatusOr<backends::ProcessId> pid = absl::UnknownError("not asked");
  if (!launch.ok()) {
    pid = launch.status();
  } else {
    // Pinned, as placement will pin it on the node (its first GPUs; Bind
    // pins it again where placement chooses others).
    const config::ResourceSpec& res = d->spec.resources;
    const inventory::ResourceRequest req = ToRequest(res);
    backends::ProcessPlacement& where = launch->process.placement;
    where.pool = pool;
    where.fraction = res.kind == "fraction";
    where.gpu_share =
        where.fraction ? std::clamp(res.milli / 1000.0, 0.0, 1.0) : 0;
    for (int g = 0; g < (res.kind == "whole" ? std::max(1, res.gpus) : 1);
         ++g) {
      where.gpus.push_back(g);
    }
    where.cpu_milli = req.cpu_milli;
    where.memory_mib = req.memory_mib;
    launch->process.tag =
        LaunchTag(launch->port, launch->metrics_port, d->life.version());
    absl::MutexLock l(&launcher_mu_);
    pid = launcher_->Start(launch->process);
  }
  if (!pid.ok()) {
    control::CapacityPlan failed;
    planner_.NodeFailed(pool, "(ask)",
                        absl::StrCat("the Pod of ", replica,
                                     " that asks for a node could not be "
                                     "created: ",
                                     pid.status().message()),
                        now, &failed);
    for (const control::CapacityEvent& e : failed.events) {
      Event(e.kind, "", e.message, e.details);
    }
    return;
  }
  r.ask_pid = *pid;
  r.ask_pool = pool;
  r.ask_launch = *std::move(launch);
  Event("replica.unschedulable", d->spec.name,
        absl::StrCat(replica, ": waits for a node of pool ", pool,
                     " (its Pod is unbound, PodScheduled=False/Unschedulable, "
                     "for the cluster's autoscaler)"),
        json{{"replica", replica}, {"pool", pool}, {"pid", *pid}});
}

absl::StatusOr<backends::ProcessId> Controller::RunStart(const StartJob& job) {
  if (job.bind == 0) return launcher_->Start(job.launch.process);
  absl::Status st = launcher_->Bind(job.bind, job.launch.process.placement);
  if (st.ok()) return job.bind;
  (void)launcher_->Kill(job.bind);  // the ask goes; the replica tries again
  return st;
}

bool Controller::EndedAsk(Replica& r, backends::ProcessId id) {
  if (r.ask_pid == 0 || r.ask_pid != id) return false;
  r.ask_pid = 0;  // its Pod went (deleted outside gpusched): asked again
  r.ask_pool.clear();
  return true;
}

std::vector<control::NodePool> Controller::NodePools() const {
  std::vector<control::NodePool> out;
  for (const auto& [name, info] : pools_) {
    const backends::PoolReport& r = info.report;
    control::NodePool p;
    p.name = name;
    const inventory::GpuModelSpec* model =
        inventory::GpuCatalog::Builtin().Find(r.gpu_model);
    p.gpu = model != nullptr ? model->name : r.gpu_model;
    p.gpus_per_node = std::clamp(r.gpus_per_node, 1, 16);
    p.spot = r.spot;
    p.max_nodes = std::clamp(r.max_nodes, 1, control::NodePool::kMaxNodes);
    const double measured = Median(info.delays_s);
    p.provisioning_delay =
        measured >= 0 ? FromSeconds(measured) : kDefaultProvisioningDelay;
    auto price = control::FindGpuPrice(gpu_prices_, p.gpu, p.spot);
    p.price_per_node_hour =
        price.ok() ? price->usd_per_gpu_hour() * p.gpus_per_node : 0;
    // The serve config's overrides, by pool name.
    for (const config::PoolSpec& o : options_.capacity.pools) {
      if (o.name != name) continue;
      if (!o.gpu.empty()) p.gpu = o.gpu;
      if (o.price_per_node_hour >= 0) {
        p.price_per_node_hour = o.price_per_node_hour;
      }
      if (measured < 0) {
        p.provisioning_delay = FromSeconds(o.provisioning_delay_s);
      }
      p.min_nodes = std::min(o.min_nodes, p.max_nodes);
      p.max_nodes = std::min(o.max_nodes, p.max_nodes);
    }
    out.push_back(std::move(p));
  }
  return out;
}

bool Controller::Cordoned(const std::string& node) const {
  if (planner_.Cordoned().count(node)) return true;
  auto pn = pool_nodes_.find(node);
  return pn != pool_nodes_.end() && pn->second.state != PoolNodeState::kUp;
}

std::map<std::string, double> Controller::PoolCosts(
    const Deployment& d, int gpus, const std::vector<control::NodePool>& pools,
    bool* per_hour_out) const {
  const config::ResourceSpec& res = d.spec.resources;
  control::SloTarget slo =
      SloTargetOf(d.spec, scaling_.DemandPerReplica(d.spec.name));
  // Its demand per replica is over its replicas (placed or waiting); the
  // placed ones serve it, measured on the GPU most of them run on; none
  // placed: the cheapest GPU-hour's.
  int placed = 0;
  std::map<std::string, int> runs_on;
  for (const auto& [rn, r] : d.procs) {
    if (!r.placed || r.allocation.node < 0) continue;
    ++placed;
    const std::string& model = cluster_state_.spec(r.allocation.node).gpu_model;
    const inventory::GpuModelSpec* spec =
        inventory::GpuCatalog::Builtin().Find(model);
    ++runs_on[spec ? spec->name : model];
  }
  std::optional<serving::LatencyModel> measured;
  int most = 0;
  for (const auto& [gpu, n] : runs_on) {
    auto model = serving::FindLatencyModel(serving::BuiltinLatencyModels(),
                                           d.spec.model, gpu, gpus);
    if (model.ok() && n > most) {
      most = n;
      measured = *model;
    }
  }
  if (!measured) {
    double cheapest = 0;
    for (const control::NodePool& p : pools) {
      const double gpu_hour = p.price_per_node_hour / p.gpus_per_node;
      auto model = serving::FindLatencyModel(serving::BuiltinLatencyModels(),
                                             d.spec.model, p.gpu, gpus);
      if (model.ok() && (!measured || gpu_hour < cheapest)) {
        cheapest = gpu_hour;
        measured = *model;
      }
    }
  }
  if (measured) slo.demand_on = &*measured;
  if (slo.demand >= 0) {
    slo.demand *= std::max<double>(1, d.procs.size()) / std::max(1, placed);
  }
  slo.replicas = std::max(1, placed);
  std::map<std::string, double> per_token, per_hour;
  for (const control::NodePool& p : pools) {
    if (p.gpus_per_node < gpus) continue;
    // A node its manager names only when it adds it (Kubernetes) is
    // learned without a MIG layout: a MIG slice could not be placed there.
    if (res.kind == "mig") {
      auto known = pools_.find(p.name);
      if (known == pools_.end() || known->second.report.nodes.empty()) continue;
    }
    if (!res.gpu_models.empty()) {
      bool ok = false;
      for (const std::string& m : res.gpu_models) {
        const inventory::GpuModelSpec* want =
            inventory::GpuCatalog::Builtin().Find(m);
        ok = ok || (want ? want->name == p.gpu : m == p.gpu);
      }
      if (!ok) continue;
    }
    const double gpu_hour = p.price_per_node_hour / p.gpus_per_node;
    per_hour[p.name] = gpu_hour * gpus;
    auto model = serving::FindLatencyModel(serving::BuiltinLatencyModels(),
                                           d.spec.model, p.gpu, gpus);
    if (model.ok()) {
      const control::TokenCost c = control::CostPerToken(*model, gpu_hour, slo);
      if (c.feasible) per_token[p.name] = c.usd_per_mtok;
    }
  }
  const bool per_hour_only = per_token.size() != per_hour.size();
  if (per_hour_out != nullptr) *per_hour_out = per_hour_only;
  return per_hour_only ? per_hour : per_token;
}

void Controller::PlanCapacity(Micros now) {
  if (pools_.empty()) return;
  // Every interval_s, and at once when a waiting replica's scale_up_delay_s
  // has run out since the last pass: an ask is never an interval late.
  bool due = now >= next_capacity_;
  const Micros up_delay = FromSeconds(options_.capacity.scale_up_delay_s);
  for (const auto& [replica, since] : waiting_since_) {
    const Micros ripe = since + up_delay;
    due = due || (ripe > last_capacity_ && ripe <= now);
  }
  if (!due) return;
  backends::CapacityManager* cap = nullptr;
  {
    absl::MutexLock l(&launcher_mu_);
    cap = launcher_->capacity();
  }
  if (cap == nullptr) return;
  last_capacity_ = now;
  next_capacity_ =
      now + std::max<Micros>(kMicrosPerMilli * 10,
                             FromSeconds(options_.capacity.interval_s));
  control::CapacityInput in;
  in.pools = NodePools();
  std::map<std::string, const control::NodePool*> pool_of;
  for (const control::NodePool& p : in.pools) pool_of[p.name] = &p;
  // Which deployment each placed replica belongs to.
  std::map<std::string, const Deployment*> owner;
  for (const auto& [name, d] : deployments_) {
    for (const auto& [rn, r] : d.procs) owner[rn] = &d;
  }
  for (const auto& [node, pn] : pool_nodes_) {
    control::PoolNodeView v;
    v.node = node;
    v.pool = pn.pool;
    v.since = pn.since;
    switch (pn.state) {
      case PoolNodeState::kPoweringUp:
        v.phase = control::PoolNodeView::Phase::kProvisioning;
        break;
      case PoolNodeState::kUp:
        v.phase = control::PoolNodeView::Phase::kUp;
        break;
      case PoolNodeState::kPoweringDown:
        v.phase = control::PoolNodeView::Phase::kReleasing;
        break;
      default:
        continue;
    }
    auto p = pool_of.find(pn.pool);
    v.gpus = p == pool_of.end() ? 0 : p->second->gpus_per_node;
    if (const int idx = cluster_state_.FindNode(node); idx >= 0) {
      v.gpus = cluster_state_.spec(idx).gpu_count;
      for (const std::string& pod : cluster_state_.PodsOnNode(idx)) {
        v.replicas.push_back(pod);
        if (const inventory::PodRecord* rec = cluster_state_.FindPod(pod)) {
          v.gpus_held += rec->allocation.GpuMilli() / 1000.0;
        }
      }
    }
    in.nodes.push_back(std::move(v));
  }
  // Asks of a manager that names no node: nodes coming, until their
  // replicas are bound or gone (or as many nodes came up).
  for (auto it = pool_asks_.begin(); it != pool_asks_.end();) {
    PoolAsk& ask = it->second;
    double held = 0;
    for (const std::string& rn : ask.replicas) {
      auto o = owner.find(rn);
      if (o == owner.end()) continue;
      const auto& procs = o->second->procs;
      auto p = procs.find(rn);
      if (p != procs.end() && p->second.ask_pid != 0) {
        const config::ResourceSpec& res = o->second->spec.resources;
        held += res.kind == "whole" ? std::max(1, res.gpus) : 1;
      }
    }
    if (held == 0 || ask.matched >= ask.count) {
      it = pool_asks_.erase(it);
      continue;
    }
    auto p = pool_of.find(ask.pool);
    const int coming = ask.count - ask.matched;
    for (int i = 0; i < coming; ++i) {
      control::PoolNodeView v;
      v.node = absl::StrCat("(", it->first, "#", i, ")");
      v.pool = ask.pool;
      v.since = ask.since;
      v.phase = control::PoolNodeView::Phase::kProvisioning;
      v.gpus = p == pool_of.end() ? 0 : p->second->gpus_per_node;
      v.gpus_held = held / coming;
      in.nodes.push_back(std::move(v));
    }
    ++it;
  }
  for (int n = 0; n < cluster_state_.num_nodes(); ++n) {
    const std::string& name = cluster_state_.spec(n).name;
    if (Cordoned(name)) continue;
    const int idle = cluster_state_.state(n).idle_gpus;
    if (idle > 0) in.room.push_back({name, idle});
  }
  for (const auto& [name, d] : deployments_) {
    for (const auto& [rn, r] : d.procs) {
      if (!r.placed || r.allocation.node < 0) continue;
      in.replica_gpus[rn] =
          static_cast<int>((r.allocation.GpuMilli() + 999) / 1000);
      const control::Replica* core = d.life.Find(rn);
      if (core != nullptr && core->state == control::ReplicaState::kReady &&
          !core->moving && core->version == d.life.version()) {
        in.movable.insert(rn);
      }
      const std::string& node = cluster_state_.spec(r.allocation.node).name;
      auto pn = pool_nodes_.find(node);
      const bool spot = pn != pool_nodes_.end() &&
                        pool_of.count(pn->second.pool) &&
                        pool_of[pn->second.pool]->spot;
      if (!spot) ++in.ondemand_replicas[name];
    }
  }
  // The backlog: replicas that found no node, with what each pool would
  // cost them (per token at the deployment's SLO and demand per replica,
  // as the simulator judges them, where the latency models know the model
  // on the pool's GPU; else per GPU-hour for every pool).
  for (auto it = waiting_since_.begin(); it != waiting_since_.end();) {
    auto o = owner.find(it->first);
    const Deployment* d = nullptr;
    if (o != owner.end()) d = o->second;
    if (d == nullptr) {
      for (const auto& [name, dep] : deployments_) {
        if (dep.life.Find(it->first)) d = &dep;
      }
    }
    const control::Replica* core = d ? d->life.Find(it->first) : nullptr;
    bool placed = false;
    if (d != nullptr) {
      auto proc = d->procs.find(it->first);
      placed = proc != d->procs.end() && proc->second.placed;
    }
    if (core == nullptr || placed ||
        core->state != control::ReplicaState::kPending) {
      it = waiting_since_.erase(it);
      continue;
    }
    // Its Pod asks for a node already (a node coming, above).
    if (auto p = d->procs.find(it->first);
        p != d->procs.end() && p->second.ask_pid != 0) {
      ++it;
      continue;
    }
    control::WaitingReplica w;
    w.replica = it->first;
    w.deployment = d->spec.name;
    w.since = it->second;
    const config::ResourceSpec& res = d->spec.resources;
    w.gpus = res.kind == "whole" ? std::max(1, res.gpus) : 1;
    w.usd_per_mtok = PoolCosts(*d, w.gpus, in.pools, &w.per_hour);
    in.waiting.push_back(std::move(w));
    ++it;
  }
  control::CapacityPlan plan = planner_.Plan(in, now);
  for (const control::CapacityEvent& e : plan.events) {
    Event(e.kind, "", e.message, e.details);
  }
  for (const control::CapacityAction& a : plan.actions) {
    switch (a.kind) {
      case control::CapacityAction::Kind::kAdd: {
        const std::string request =
            absl::StrCat("gpusched-", a.pool, "-", ++capacity_requests_);
        absl::StatusOr<std::vector<std::string>> added;
        {
          absl::MutexLock l(&launcher_mu_);
          added = cap->AddNodes(a.pool, a.count, request);
        }
        if (!added.ok()) {
          control::CapacityPlan failed;
          planner_.NodeFailed(a.pool, "(ask)",
                              std::string(added.status().message()), now,
                              &failed);
          for (const control::CapacityEvent& e : failed.events) {
            Event(e.kind, "", e.message, e.details);
          }
          break;
        }
        // A manager that names no node (Kubernetes): the replicas' Pods,
        // unbound and Unschedulable, are the ask.
        if (added->empty() && !a.replicas.empty()) {
          for (const std::string& replica : a.replicas) {
            AskForPoolNode(replica, a.pool, now);
          }
          pool_asks_[request] = {.pool = a.pool,
                                 .count = a.count,
                                 .matched = 0,
                                 .since = now,
                                 .replicas = a.replicas};
        }
        for (const std::string& node : *added) {
          PoolNodeInfo& pn = pool_nodes_[node];
          pn.pool = a.pool;
          pn.state = PoolNodeState::kPoweringUp;
          pn.since = now;
          pn.request = request;
          asked_at_[node] = now;
        }
        break;
      }
      case control::CapacityAction::Kind::kRelease: {
        absl::Status s;
        {
          absl::MutexLock l(&launcher_mu_);
          s = cap->ReleaseNode(a.node);
        }
        if (!s.ok()) {
          Event("capacity.failed", "",
                absl::StrCat("node ", a.node, " of pool ", a.pool,
                             " could not be given back: ", s.message()),
                json{{"node", a.node}, {"pool", a.pool}});
          break;
        }
        PoolNodeInfo& pn = pool_nodes_[a.node];
        pn.state = PoolNodeState::kPoweringDown;
        pn.since = now;
        break;
      }
      case control::CapacityAction::Kind::kMove: {
        // Cordoned: its GPUs take no new replica while its replicas move.
        if (const int idx = cluster_state_.FindNode(a.node); idx >= 0) {
          for (int g = 0; g < cluster_state_.spec(idx).gpu_count; ++g) {
            (void)cluster_state_.SetGpuHealth(idx, g, false);
          }
        }
        for (const std::string& replica : a.replicas) {
          auto o = owner.find(replica);
          if (o == owner.end()) continue;
          deployments_[o->second->spec.name].life.Move(replica, a.why);
        }
        dirty_ = true;
        break;
      }
    }
  }
}

void Controller::AccrueCost(Micros now) {
  if (pools_.empty()) return;
  if (cost_at_ < 0) cost_at_ = now;
  if (now - cost_at_ < kMicrosPerSecond) return;
  const double hours = ToSeconds(now - cost_at_) / 3600.0;
  cost_at_ = now;
  std::map<std::string, double> price;  // pool -> USD per node-hour
  for (const control::NodePool& p : NodePools()) {
    price[p.name] = p.price_per_node_hour;
    if (options_.metrics) {
      options_.metrics->SetPrice(absl::StrCat("pool:", p.name),
                                 p.price_per_node_hour / p.gpus_per_node);
    }
  }
  std::map<std::string, std::string> owner;  // replica -> deployment
  for (const auto& [name, d] : deployments_) {
    for (const auto& [rn, r] : d.procs) owner[rn] = name;
  }
  for (const auto& [node, pn] : pool_nodes_) {
    if (pn.state == PoolNodeState::kPoweredDown ||
        pn.state == PoolNodeState::kFailed) {
      continue;  // not billed
    }
    const double node_usd = price[pn.pool] * hours;
    pools_[pn.pool].usd += node_usd;
    double held_usd = 0;
    const int idx = cluster_state_.FindNode(node);
    if (idx >= 0 && pn.state == PoolNodeState::kUp) {
      const int gpus = std::max(1, cluster_state_.spec(idx).gpu_count);
      for (const std::string& pod : cluster_state_.PodsOnNode(idx)) {
        const inventory::PodRecord* rec = cluster_state_.FindPod(pod);
        auto o = owner.find(pod);
        if (rec == nullptr || o == owner.end()) continue;
        const double usd =
            node_usd * rec->allocation.GpuMilli() / 1000.0 / gpus;
        cost_usd_[o->second] += usd;
        held_usd += usd;
        if (auto d = deployments_.find(o->second);
            d != deployments_.end() && !d->second.spec.tenant.empty()) {
          tenant_cost_usd_[d->second.spec.tenant] += usd;
        }
      }
    }
    idle_usd_ += std::max(0.0, node_usd - held_usd);
  }
}

json Controller::PoolsJson() {
  if (!Leading()) {
    if (std::optional<json> p = Published("cluster/pools")) return *p;
  }
  absl::MutexLock lock(&mu_);
  json items = json::array();
  for (const control::NodePool& p : NodePools()) {
    const PoolInfo& info = pools_.at(p.name);
    json nodes = json::object();
    int live = 0;
    for (const auto& [node, pn] : pool_nodes_) {
      if (pn.pool != p.name) continue;
      json nj{{"state", backends::PoolNodeStateName(pn.state)},
              {"since", ToSeconds(pn.since)}};
      if (!pn.reason.empty()) nj["reason"] = pn.reason;
      if (planner_.Cordoned().count(node)) nj["consolidating"] = true;
      nodes[node] = std::move(nj);
      live += pn.state == PoolNodeState::kUp ||
              pn.state == PoolNodeState::kPoweringUp;
    }
    items.push_back(
        {{"name", p.name},
         {"gpu", p.gpu},
         {"managerGpu", info.report.gpu_model},
         {"gpusPerNode", p.gpus_per_node},
         {"spot", p.spot},
         {"pricePerNodeHour", p.price_per_node_hour},
         {"provisioningDelaySeconds", ToSeconds(p.provisioning_delay)},
         {"measuredDelays", info.delays_s.size()},
         {"minNodes", p.min_nodes},
         {"maxNodes", p.max_nodes},
         {"nodesLive", live},
         {"costUsd", info.usd},
         {"nodes", std::move(nodes)}});
  }
  return items;
}

}  // namespace gpusched::runtime
