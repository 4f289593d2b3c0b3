// The Controller's views: the JSON the control API answers with
// (docs/control-api.md), the metrics snapshot, logs. Each takes the
// controller's lock for one consistent read.
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "inventory/mig.h"
#include "runtime/controller.h"
#include "runtime/controller_internal.h"

namespace gpusched::runtime {

using nlohmann::json;

// What a view shows of one replica, copied under the lock.
struct Controller::ReplicaView {
  std::string name, deployment, state, endpoint, message, node;
  bool ready = false;  // serves: gpusched's probe and the manager agree
  int pid = 0;
  int metrics_port = 0;  // 0: the endpoint's
  int restarts = 0;
  Micros started_wall = 0;
  std::vector<inventory::GpuShare> shares;
};

// ... and of one deployment.
struct Controller::DeploymentView {
  std::string name;
  json manifest;
  int64_t generation = 0;
  Micros created = 0, updated = 0;
  int desired = 0;
  bool autoscaled = false, deleting = false;
  std::vector<ReplicaView> replicas;
  int ready = 0;
  std::string parked_by;  // the route holding it at 0 replicas
};

Controller::ReplicaView Controller::ViewOf(const Deployment& d,
                                           const Row& row) const {
  static const Replica kNone;
  const Replica& r = row.io ? *row.io : kNone;
  ReplicaView v;
  v.name = row.name();
  v.deployment = d.spec.name;
  v.state = row.state();
  v.ready = row.ready();
  if (r.endpoint.port) v.endpoint = net::EndpointKey(r.endpoint);
  v.pid = r.pid;
  v.metrics_port = r.metrics_port;
  if (row.core) {
    v.restarts = row.core->restarts;
    v.message = row.core->message;
  }
  v.started_wall = r.started_wall;
  if (r.placed && r.allocation.node >= 0) {
    v.node = cluster_state_.spec(r.allocation.node).name;
    v.shares = r.allocation.gpus;
  }
  return v;
}

Controller::DeploymentView Controller::ViewOf(const Deployment& d) const {
  DeploymentView v;
  v.name = d.spec.name;
  v.manifest = d.manifest;
  v.generation = d.generation;
  v.created = d.created;
  v.updated = d.updated;
  v.desired = d.spec.endpoints.empty()
                  ? ReplicaTarget(d)
                  : static_cast<int>(d.spec.endpoints.size());
  v.autoscaled = scaling_.has(d.spec.name);
  v.deleting = d.deleting;
  v.parked_by = d.parked_by;
  for (const Row& r : Rows(d)) {
    v.replicas.push_back(ViewOf(d, r));
    v.ready += r.ready();
  }
  return v;
}

json Controller::ReplicaJson(const ReplicaView& v) {
  json j = {{"name", v.name},         {"deployment", v.deployment},
            {"state", v.state},       {"ready", v.ready},
            {"endpoint", v.endpoint}, {"pid", v.pid},
            {"restarts", v.restarts}, {"message", v.message},
            {"node", v.node}};
  if (v.started_wall) j["startedAt"] = IsoTime(v.started_wall);
  if (v.metrics_port != 0) j["metricsPort"] = v.metrics_port;
  json gpus = json::array(), shares = json::array();
  for (const inventory::GpuShare& g : v.shares) {
    gpus.push_back(g.gpu);
    shares.push_back({{"gpu", g.gpu},
                      {"milli", g.milli},
                      {"memoryMiB", g.memory_mib},
                      {"mig", g.mig_profile}});
    if (g.mig_start >= 0) shares.back()["migStart"] = g.mig_start;
  }
  j["gpus"] = std::move(gpus);
  j["gpuShare"] = std::move(shares);
  return j;
}

json Controller::DeploymentJson(DeploymentView v) const {
  json j = std::move(v.manifest);
  j["metadata"]["generation"] = v.generation;
  j["metadata"]["created"] = IsoTime(v.created);
  j["metadata"]["updated"] = IsoTime(v.updated);
  const runtime::ServingLoad load = gateway_->Load(v.name);
  json reps = json::array();
  std::string message;
  for (const ReplicaView& r : v.replicas) {
    reps.push_back(ReplicaJson(r));
    if (message.empty()) message = r.message;
  }
  j["status"] = {
      {"replicas", v.replicas.size()},   {"desiredReplicas", v.desired},
      {"autoscaled", v.autoscaled},      {"readyReplicas", v.ready},
      {"queued", load.queued},           {"inFlight", load.in_flight},
      {"deleting", v.deleting},          {"message", message},
      {"replicaStatus", std::move(reps)}};
  if (!v.parked_by.empty()) j["status"]["parkedBy"] = v.parked_by;
  return j;
}

json Controller::DeploymentsJson(const std::string& only) {
  std::vector<DeploymentView> views;
  bool follower = false;
  {
    absl::MutexLock lock(&mu_);
    follower = !leading_;
    for (const auto& [name, d] : deployments_) {
      if (only.empty() || only == name) views.push_back(ViewOf(d));
    }
  }
  json items = json::array();
  for (DeploymentView& v : views) {
    items.push_back(DeploymentJson(std::move(v)));
    if (follower) FollowerStatus(items.back());
  }
  return items;
}

json Controller::TenantsJson(const std::string& only) {
  absl::MutexLock lock(&mu_);
  json items = json::array();
  for (const auto& [name, t] : tenants_) {
    if (!only.empty() && only != name) continue;
    json j = t.manifest;
    j["metadata"]["generation"] = t.generation;
    j["metadata"]["created"] = IsoTime(t.created);
    j["metadata"]["updated"] = IsoTime(t.updated);
    if (options_.metrics != nullptr) {
      const auto [gpu_seconds, cost] = options_.metrics->TenantUsage(name);
      j["status"] = {{"gpuSeconds", gpu_seconds}, {"cost", cost}};
    }
    items.push_back(j);
  }
  return items;
}

json Controller::ReplicasJson() {
  if (!Leading()) return FollowerReplicas();
  std::vector<ReplicaView> views;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, d] : deployments_) {
      for (const Row& r : Rows(d)) views.push_back(ViewOf(d, r));
    }
  }
  json items = json::array();
  for (const ReplicaView& v : views) items.push_back(ReplicaJson(v));
  return items;
}

json Controller::GpusJson() {
  if (!Leading()) {
    if (std::optional<json> p = Published("cluster/gpus")) return *p;
  }
  absl::MutexLock lock(&mu_);
  json items = json::array();
  for (int n = 0; n < cluster_state_.num_nodes(); ++n) {
    const inventory::NodeSpec& spec = cluster_state_.spec(n);
    for (int g = 0; g < spec.gpu_count; ++g) {
      const runtime::DriverMetrics::Snapshot::Gpu v = GpuView(n, g);
      json gj = {{"node", v.node},
                 {"index", g},
                 {"model", v.model},
                 {"memoryMiB", v.memory_mib},
                 {"simulated", v.simulated},
                 {"healthy", v.healthy},
                 {"uuid", ""},
                 {"allocatedMilli", v.allocated_milli},
                 {"allocatedMemoryMiB", v.allocated_memory_mib}};
      if (v.nvml) {
        gj["uuid"] = cluster_.gpus[g].uuid;
        gj["memoryUsedMiB"] = v.nvml_memory_used_mib;
        gj["utilizationPct"] = v.nvml_utilization_pct;
      }
      json holders = json::array();
      for (const auto& [name, d] : deployments_) {
        for (const auto& [rn, r] : d.procs) {
          if (!r.placed || r.allocation.node != n) continue;
          for (const inventory::GpuShare& s : r.allocation.gpus) {
            if (s.gpu != g) continue;
            holders.push_back({{"name", rn},
                               {"deployment", name},
                               {"milli", s.milli},
                               {"memoryMiB", s.memory_mib},
                               {"mig", s.mig_profile}});
          }
        }
      }
      gj["replicas"] = holders;
      // A static MIG layout: each instance, with who holds it.
      if (g < static_cast<int>(spec.mig_instances.size()) &&
          !spec.mig_instances[g].empty()) {
        const inventory::GpuState& st = cluster_state_.state(n).gpus[g];
        json instances = json::array();
        for (const inventory::MigInstance& m : spec.mig_instances[g]) {
          std::string holder;
          for (const auto& [name, d] : deployments_) {
            for (const auto& [rn, r] : d.procs) {
              if (!r.placed || r.allocation.node != n) continue;
              for (const inventory::GpuShare& s : r.allocation.gpus) {
                if (s.gpu == g && s.mig_start == m.start) holder = rn;
              }
            }
          }
          const uint32_t mask = inventory::StaticMigMask(spec, g, m.start);
          instances.push_back({{"profile", m.profile},
                               {"start", m.start},
                               {"replica", holder},
                               {"foreign", (st.mig_foreign & mask) != 0}});
        }
        gj["migInstances"] = std::move(instances);
      }
      items.push_back(gj);
    }
  }
  return items;
}

json Controller::NodesJson() {
  if (!Leading()) {
    if (std::optional<json> p = Published("cluster/nodes")) return *p;
  }
  absl::MutexLock lock(&mu_);
  json items = json::array();
  for (int n = 0; n < cluster_state_.num_nodes(); ++n) {
    const inventory::NodeSpec& spec = cluster_state_.spec(n);
    const inventory::NodeState& st = cluster_state_.state(n);
    int64_t allocated = 0;
    for (const inventory::GpuState& g : st.gpus) {
      allocated += inventory::kMilliPerGpu - g.milli_free;
    }
    json weights = weights_.Paths(n);
    items.push_back({{"name", spec.name},
                     {"simulated", spec.simulated},
                     {"weights", weights},
                     {"gpus", spec.gpu_count},
                     {"gpuModel", spec.gpu_model},
                     {"cpuMilli", spec.cpu_milli},
                     {"memoryMiB", spec.memory_mib},
                     {"allocatedGpuMilli", allocated},
                     {"cpuFreeMilli", st.cpu_free},
                     {"memoryFreeMiB", st.memory_free_mib}});
    if (!spec.address.empty()) items.back()["address"] = spec.address;
    // What the cluster manager (Slurm) last said about it.
    if (auto r = node_reports_.find(spec.name); r != node_reports_.end()) {
      items.back()["usable"] = r->second.usable;
      items.back()["state"] = r->second.state;
      items.back()["reason"] = r->second.reason;
      items.back()["foreignGpus"] = r->second.foreign_gpus;
    }
    // Capacity on demand: a pool node's state (coming, going, being
    // emptied), which the dashboard marks.
    if (auto pn = pool_nodes_.find(spec.name); pn != pool_nodes_.end()) {
      items.back()["pool"] = pn->second.pool;
      items.back()["capacityState"] =
          planner_.Cordoned().count(spec.name)
              ? "consolidating"
              : backends::PoolNodeStateName(pn->second.state);
    }
  }
  return items;
}

json Controller::QueuesJson() {
  absl::MutexLock lock(&mu_);
  json items = json::array();
  for (const auto& [name, d] : deployments_) {
    const runtime::ServingLoad load = gateway_->Load(name);
    items.push_back({{"deployment", name},
                     {"queued", load.queued},
                     {"inFlight", load.in_flight},
                     {"replicasReady", load.replicas}});
  }
  return items;
}

bool Controller::HasDeployment(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = deployments_.find(name);
  return it != deployments_.end() && !it->second.deleting;
}

std::optional<int> Controller::DesiredReplicas(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = deployments_.find(name);
  if (it == deployments_.end() || it->second.deleting) return std::nullopt;
  return ReplicaTarget(it->second);
}

bool Controller::HasTenant(const std::string& name) {
  absl::MutexLock lock(&mu_);
  return tenants_.count(name) > 0;
}

std::vector<std::string> Controller::TenantModels(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  auto t = tenants_.find(tenant);
  if (t == tenants_.end()) return out;
  for (const auto& [name, d] : deployments_) {
    const auto& models = t->second.spec.models;
    if (!d.deleting &&
        (models.empty() ||
         std::find(models.begin(), models.end(), name) != models.end())) {
      out.push_back(name);
    }
  }
  return out;
}

absl::StatusOr<std::string> Controller::Logs(const std::string& deployment,
                                             const std::string& replica,
                                             const std::string& stream,
                                             int lines) {
  std::string name;
  {
    absl::MutexLock lock(&mu_);
    auto it = deployments_.find(deployment);
    if (it == deployments_.end()) {
      return absl::NotFoundError(
          absl::StrCat("deployment '", deployment, "' not found"));
    }
    std::vector<std::string> names;
    for (const control::Replica& r : it->second.life.replicas()) {
      names.push_back(r.name);
      if (replica.empty() ? name.empty() : r.name == replica) name = r.name;
    }
    if (name.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "replica '", replica, "' not found; replicas of ", deployment, ": ",
          names.empty() ? "none" : absl::StrJoin(names, ", ")));
    }
  }
  if (stream != "stdout" && stream != "stderr") {
    return absl::InvalidArgumentError("stream must be stdout or stderr");
  }
  return TailLines(absl::StrCat(options_.log_dir, "/", name,
                                stream == "stdout" ? ".out" : ".err"),
                   lines);
}

// --- Metrics ----------------------------------------------------------------

runtime::DriverMetrics::Snapshot::Gpu Controller::GpuView(int n, int g) const {
  const inventory::NodeSpec& spec = cluster_state_.spec(n);
  const inventory::GpuState& st = cluster_state_.state(n).gpus[g];
  runtime::DriverMetrics::Snapshot::Gpu v;
  v.node = spec.name;
  v.model = spec.gpu_model;
  v.index = g;
  v.simulated = spec.simulated;
  v.memory_mib = spec.gpu_memory_mib;
  v.healthy = st.healthy;  // false too for GPUs held by others' work
  v.allocated_milli = inventory::kMilliPerGpu - st.milli_free;
  v.allocated_memory_mib = spec.gpu_memory_mib - st.memory_free_mib;
  // NVML GPUs are node 0's (ControllerCluster::gpus).
  if (!spec.simulated && n == 0 && g < static_cast<int>(cluster_.gpus.size())) {
    const backends::DiscoveredGpu& dg = cluster_.gpus[g];
    v.nvml = true;
    v.healthy = dg.healthy;
    v.nvml_memory_used_mib = dg.memory_total_mib ? dg.memory_used_mib : 0;
    v.nvml_utilization_pct = dg.utilization_gpu_pct;
  }
  return v;
}

runtime::DriverMetrics::Snapshot Controller::MetricsSnapshot() {
  static constexpr const char* kStates[] = {"pending",   "starting", "ready",
                                            "unhealthy", "backoff",  "draining",
                                            "external"};
  absl::MutexLock lock(&mu_);
  runtime::DriverMetrics::Snapshot snap;
  if (!leading_) {
    // A follower's own queues; the cluster is the leader's to report.
    snap.leader = false;
    for (const auto& [name, d] : deployments_) {
      runtime::DriverMetrics::Snapshot::Deployment sd;
      sd.name = name;
      const runtime::ServingLoad load = gateway_->Load(name);
      sd.queued = load.queued;
      sd.in_flight = load.in_flight;
      sd.queue_limit = d.spec.max_queue_size;
      snap.deployments.push_back(std::move(sd));
    }
    return snap;
  }
  for (const auto& [name, info] : pools_) {
    runtime::DriverMetrics::Snapshot::Pool sp;
    sp.name = name;
    std::map<std::string, int> by_state;
    for (const auto& [node, pn] : pool_nodes_) {
      if (pn.pool == name) ++by_state[backends::PoolNodeStateName(pn.state)];
    }
    sp.nodes.assign(by_state.begin(), by_state.end());
    sp.usd = info.usd;
    snap.pools.push_back(std::move(sp));
  }
  snap.idle_usd = idle_usd_;
  for (const auto& [name, d] : deployments_) {
    runtime::DriverMetrics::Snapshot::Deployment sd;
    sd.name = name;
    sd.desired = d.deleting ? 0
                 : d.spec.endpoints.empty()
                     ? ReplicaTarget(d)
                     : static_cast<int>(d.spec.endpoints.size());
    const std::vector<Row> rows = Rows(d);
    for (const char* st : kStates) {
      int count = 0;
      for (const Row& r : rows) count += std::string_view(r.state()) == st;
      sd.replicas.emplace_back(st, count);
    }
    const runtime::ServingLoad load = gateway_->Load(name);
    sd.queued = load.queued;
    sd.in_flight = load.in_flight;
    sd.queue_limit = d.spec.max_queue_size;
    snap.deployments.push_back(std::move(sd));
    for (const Row& r : rows) {
      if (r.ready() && r.io != nullptr) {
        snap.replicas.push_back({name, r.name(), r.io->signals});
      }
    }
  }
  for (int n = 0; n < cluster_state_.num_nodes(); ++n) {
    for (int g = 0; g < cluster_state_.spec(n).gpu_count; ++g) {
      snap.gpus.push_back(GpuView(n, g));
    }
  }
  // Nodes (usable, replicas on them) and tenants' GPUs against their quota.
  snap.nodes.resize(cluster_state_.num_nodes());
  for (int n = 0; n < cluster_state_.num_nodes(); ++n) {
    snap.nodes[n].name = cluster_state_.spec(n).name;
    if (auto it = node_reports_.find(snap.nodes[n].name);
        it != node_reports_.end()) {
      snap.nodes[n].usable = it->second.usable;
    }
  }
  std::map<std::string, double> owned;  // tenant -> GPUs held
  for (const auto& [name, d] : deployments_) {
    for (const auto& [rn, r] : d.procs) {
      if (!r.placed || r.allocation.node < 0 ||
          r.allocation.node >= cluster_state_.num_nodes()) {
        continue;
      }
      ++snap.nodes[r.allocation.node].replicas;
      if (d.spec.tenant.empty()) continue;
      for (const inventory::GpuShare& g : r.allocation.gpus) {
        owned[d.spec.tenant] += g.milli / 1000.0;
      }
    }
  }
  for (const auto& [name, t] : tenants_) {
    snap.tenants.push_back({name, t.spec.quota.gpus, t.spec.quota.limit,
                            owned.contains(name) ? owned[name] : 0.0});
  }
  for (const auto& [name, r] : routes_) {
    runtime::DriverMetrics::Snapshot::Route sr;
    sr.name = name;
    for (size_t i = 0; i < r.spec.targets.size() && i < r.weights.size(); ++i) {
      sr.weights.emplace_back(r.spec.targets[i].version, r.weights[i]);
    }
    if (r.rollout) {
      sr.phase = control::RolloutPhaseName(r.rollout->phase());
      sr.step = r.rollout->step() + 1;
    }
    snap.routes.push_back(std::move(sr));
  }
  return snap;
}

}  // namespace gpusched::runtime
