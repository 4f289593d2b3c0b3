#include "api/controller_metrics.h"

#include <string>

namespace gpusched::api {

namespace {

using metrics::FamilyDesc;
using metrics::MetricType;
using metrics::Sample;

constexpr double kMiB = 1024.0 * 1024.0;

// The families the collector fills, in this order.
enum Collected {
  kReplicas,
  kDesired,
  kQueueDepth,
  kInFlight,
  kEngineRunning,
  kEngineWaiting,
  kEngineKv,
  kPrefixHitRatio,
  kGpuInfo,
  kGpuMemoryTotal,
  kGpuMemoryUsed,
  kGpuUtilization,
  kGpuAllocatedMilli,
  kGpuHealthy,
  kRouteWeight,
  kRolloutPhase,
  kRolloutStep,
  kQueueLimit,
  kNodeUsable,
  kNodeReplicas,
  kTenantQuota,
  kTenantLimit,
  kTenantAllocated,
  kPoolNodes,
  kPoolCost,
  kIdleCost,
  kNumCollected
};

std::vector<FamilyDesc> CollectedFamilies() {
  const MetricType g = MetricType::kGauge;
  std::vector<FamilyDesc> f(kNumCollected);
  f[kReplicas] = {"gpusched_deployment_replicas",
                  "Replicas of a deployment by state (pending, starting, "
                  "ready, unhealthy, backoff, draining, external).",
                  g,
                  {"deployment", "state"}};
  f[kDesired] = {"gpusched_deployment_replicas_desired",
                 "Replicas the deployment should run (spec.replicas, as "
                 "scaled; attached endpoints count one each).",
                 g,
                 {"deployment"}};
  f[kQueueDepth] = {"gpusched_queue_depth",
                    "Requests queued at the gateway for the deployment.",
                    g,
                    {"deployment"}};
  f[kInFlight] = {"gpusched_requests_in_flight",
                  "Requests dispatched to the deployment's replicas and not "
                  "finished.",
                  g,
                  {"deployment"}};
  f[kEngineRunning] = {"gpusched_engine_running_requests",
                       "Requests in the engine's running batch (batch size; "
                       "from its metrics, e.g. vllm:num_requests_running).",
                       g,
                       {"deployment", "replica"}};
  f[kEngineWaiting] = {"gpusched_engine_waiting_requests",
                       "Requests waiting inside the engine.",
                       g,
                       {"deployment", "replica"}};
  f[kEngineKv] = {"gpusched_engine_kv_cache_usage_ratio",
                  "KV-cache usage reported by the engine (0..1).",
                  g,
                  {"deployment", "replica"}};
  f[kPrefixHitRatio] = {"gpusched_prefix_cache_hit_ratio",
                        "Prefix-cache hit tokens / queried tokens over the "
                        "deployment's life (rate() of the _total counters "
                        "gives a recent one).",
                        g,
                        {"deployment"}};
  f[kGpuInfo] = {"gpusched_gpu_info",
                 "1 per GPU, with its model and whether it is simulated "
                 "(declared inventory).",
                 g,
                 {"node", "gpu", "model", "simulated"}};
  f[kGpuMemoryTotal] = {
      "gpusched_gpu_memory_total_bytes", "GPU memory.", g, {"node", "gpu"}};
  f[kGpuMemoryUsed] = {"gpusched_gpu_memory_used_bytes",
                       "GPU memory in use: source=\"allocation\" is what "
                       "placement gave replicas, source=\"nvml\" what the "
                       "driver reports (NVML GPUs only).",
                       g,
                       {"node", "gpu", "source"}};
  f[kGpuUtilization] = {"gpusched_gpu_utilization_ratio",
                        "GPU utilization (0..1): from NVML when the GPU has "
                        "it (source=\"nvml\"), else the allocated compute "
                        "share (source=\"allocation\").",
                        g,
                        {"node", "gpu", "source"}};
  f[kGpuAllocatedMilli] = {"gpusched_gpu_allocated_milli",
                           "Compute share of the GPU allocated to replicas "
                           "(0..1000; a MIG slice or whole GPU counts its "
                           "share).",
                           g,
                           {"node", "gpu"}};
  f[kGpuHealthy] = {"gpusched_gpu_healthy",
                    "1 when the GPU is healthy (NVML; declared GPUs are).",
                    g,
                    {"node", "gpu"}};
  f[kRouteWeight] = {"gpusched_route_weight",
                     "The share (percent) of a ModelRoute's requests each "
                     "version gets now (the spec's, or the rollout's).",
                     g,
                     {"route", "version"}};
  f[kRolloutPhase] = {"gpusched_rollout_phase",
                      "1 for the phase a route's rollout is in "
                      "(progressing, paused, promoted, rolled_back, "
                      "aborted).",
                      g,
                      {"route", "phase"}};
  f[kPoolNodes] = {"gpusched_pool_nodes",
                   "Nodes of a pool (capacity on demand) by state: "
                   "powered_down, powering_up, up, powering_down, failed.",
                   g,
                   {"pool", "state"}};
  f[kPoolCost] = {"gpusched_pool_cost_usd_total",
                  "What a pool's nodes cost so far (USD): from the ask to "
                  "the give-back, at the pool's price (docs/capacity.md).",
                  MetricType::kCounter,
                  {"pool"}};
  f[kIdleCost] = {"gpusched_idle_cost_usd_total",
                  "The part of the pool nodes' cost that no replica held "
                  "(idle GPUs, nodes coming up or going), USD.",
                  MetricType::kCounter,
                  {}};
  f[kRolloutStep] = {"gpusched_rollout_step",
                     "The step (1-based) a route's rollout is at.",
                     g,
                     {"route"}};
  f[kQueueLimit] = {"gpusched_queue_limit",
                    "The deployment's queue bound (spec.maxQueueSize); no "
                    "series when unbounded.",
                    g,
                    {"deployment"}};
  f[kNodeUsable] = {"gpusched_node_usable",
                    "1 while the node can take replicas, 0 while its cluster "
                    "manager says it cannot (down, drained, cordoned, not "
                    "ready).",
                    g,
                    {"node"}};
  f[kNodeReplicas] = {"gpusched_node_replicas",
                      "Replicas placed on the node (draining ones included).",
                      g,
                      {"node"}};
  f[kTenantQuota] = {"gpusched_tenant_gpu_quota",
                     "GPUs guaranteed to the tenant (spec.quota.gpus).",
                     g,
                     {"tenant"}};
  f[kTenantLimit] = {"gpusched_tenant_gpu_limit",
                     "Most GPUs the tenant's deployments may hold "
                     "(spec.quota.limit); no series without a limit.",
                     g,
                     {"tenant"}};
  f[kTenantAllocated] = {"gpusched_tenant_gpus_allocated",
                         "GPUs (milli / 1000) that placed replicas of the "
                         "deployments the tenant owns (spec.tenant) hold.",
                         g,
                         {"tenant"}};
  return f;
}

// "Plugin: reason" -> {plugin, reason}.
std::pair<std::string, std::string> SplitReason(const std::string& r) {
  const size_t colon = r.find(": ");
  if (colon == std::string::npos) return {"", r};
  return {r.substr(0, colon), r.substr(colon + 2)};
}

}  // namespace

ControllerMetrics::ControllerMetrics(metrics::Registry* r,
                                     gateway::GatewayMetrics* gateway,
                                     std::map<std::string, double> gpu_prices)
    : gateway_(gateway), prices_(std::move(gpu_prices)) {
  replica_starts_ = r->AddCounter(
      "gpusched_replica_starts_total",
      "Engine processes started for the deployment (cold starts, restarts "
      "included).",
      {"deployment"});
  replica_failures_ = r->AddCounter(
      "gpusched_replica_failures_total",
      "Engine failures that lead to a restart with backoff, by reason "
      "(exited: ended on its own; failed: could not be started; unhealthy: "
      "killed after the startup timeout or failed health checks).",
      {"deployment", "reason"});
  last_pass_ =
      r->AddGauge("gpusched_controller_last_pass_timestamp_seconds",
                  "Unix time at which this instance's control loop last "
                  "finished a pass (the loop runs every 50 ms or sooner).")
          ->With({});
  startup_ = r->AddHistogram(
      "gpusched_replica_startup_seconds",
      "From an engine's start to its first passed readiness probe.",
      {"deployment"}, {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600});
  prefix_queries_ = r->AddCounter(
      "gpusched_prefix_cache_queries_total",
      "Prompt tokens looked up in the engines' prefix caches (from "
      "vllm:prefix_cache_queries_total).",
      {"deployment"});
  prefix_hits_ =
      r->AddCounter("gpusched_prefix_cache_hits_total",
                    "Prompt tokens found in the engines' prefix caches (from "
                    "vllm:prefix_cache_hits_total).",
                    {"deployment"});
  placement_attempts_ = r->AddCounter(
      "gpusched_placement_attempts_total",
      "Replica placement attempts by result (placed, unschedulable).",
      {"result"});
  for (const char* result : {"placed", "unschedulable"}) {
    placement_attempts_->With({result});
  }
  placement_latency_ =
      r->AddHistogram("gpusched_placement_duration_seconds",
                      "Time of one placement decision (filter, score, "
                      "reserve).",
                      {}, metrics::ExponentialBuckets(1e-6, 4, 10))
          ->With({});
  unschedulable_ = r->AddCounter(
      "gpusched_unschedulable_total",
      "Placement attempts that found no node, by each filter plugin and "
      "reason that rejected at least one node.",
      {"plugin", "reason"});
  preemptions_ = r->AddCounter("gpusched_preemptions_total",
                               "Replicas preempted (drained) for "
                               "higher-priority ones.")
                     ->With({});
  evictions_ = r->AddCounter("gpusched_evictions_total",
                             "Idle replicas swapped out (drained) for "
                             "another model under GPU pressure.")
                   ->With({});
  scale_decisions_ = r->AddCounter(
      "gpusched_scale_decisions_total",
      "Changes of a deployment's desired replicas, by direction (up, down).",
      {"deployment", "direction"});
  deployment_gpu_seconds_ = r->AddCounter(
      "gpusched_deployment_gpu_seconds_total",
      "GPU-seconds held by the deployment's placed replicas (share = "
      "milli / 1000).",
      {"deployment"});
  deployment_cost_ = r->AddCounter(
      "gpusched_deployment_cost_total",
      "GPU-seconds times the configured price per GPU-hour of the GPU model "
      "(gpu_prices in the serve config) / 3600.",
      {"deployment"});
  tenant_gpu_seconds_ = r->AddCounter(
      "gpusched_tenant_gpu_seconds_total",
      "Deployments' GPU-seconds attributed to tenants in proportion to the "
      "tokens each used on them (idle time is attributed to none).",
      {"tenant"});
  tenant_cost_ = r->AddCounter(
      "gpusched_tenant_cost_total",
      "Deployments' cost attributed to tenants like their GPU-seconds.",
      {"tenant"});
  r->AddCollector(
      CollectedFamilies(),
      [this](std::vector<std::vector<Sample>>* out) { Collect(out); });
}

void ControllerMetrics::SetSource(std::function<Snapshot()> source) {
  {
    absl::MutexLock lock(&mu_);
    source_ = std::move(source);
  }
}

void ControllerMetrics::Placement(const placement::Decision& d,
                                  double seconds) {
  placement_latency_->Observe(seconds);
  placement_attempts_->With({d.placed ? "placed" : "unschedulable"})->Add();
  if (d.placed) return;
  for (const auto& [reason, nodes] : d.reasons) {
    auto [plugin, why] = SplitReason(reason);
    unschedulable_->With({plugin, why})->Add();
  }
}

void ControllerMetrics::ReplicaStarted(const std::string& deployment) {
  replica_starts_->With({deployment})->Add();
  // The failure series start at 0, so that the first failure is an increase
  // (rate() and increase() see nothing before a series' first sample).
  for (const char* reason : {"exited", "failed", "unhealthy"}) {
    replica_failures_->With({deployment, reason});
  }
}

void ControllerMetrics::ReplicaReady(const std::string& deployment,
                                     double startup_seconds) {
  startup_->With({deployment})->Observe(startup_seconds);
}

void ControllerMetrics::ReplicaFailed(const std::string& deployment,
                                      const std::string& reason) {
  replica_failures_->With({deployment, reason})->Add();
}

void ControllerMetrics::LoopPassed(double unix_seconds) {
  last_pass_->Set(unix_seconds);
}

void ControllerMetrics::Scaled(const std::string& deployment, int from,
                               int to) {
  if (from == to) return;
  scale_decisions_->With({deployment, to > from ? "up" : "down"})->Add();
}

void ControllerMetrics::Preempted() { preemptions_->Add(); }

void ControllerMetrics::Evicted() { evictions_->Add(); }

void ControllerMetrics::SetSlo(const std::string& deployment, double ttft_ms,
                               double tpot_ms) {
  if (gateway_) gateway_->SetSlo(deployment, ttft_ms, tpot_ms);
}

void ControllerMetrics::EngineScraped(const std::string& deployment,
                                      const std::string& replica,
                                      const runtime::EngineSignals& s) {
  if (s.prefix_cache_queries < 0 || s.prefix_cache_hits < 0) return;
  double dq, dh;
  {
    absl::MutexLock lock(&mu_);
    auto [it, fresh] =
        engine_prefix_.try_emplace({deployment, replica}, std::pair{0.0, 0.0});
    auto& [q, h] = it->second;
    // A drop: the engine restarted and counts from 0 again.
    dq = s.prefix_cache_queries >= q ? s.prefix_cache_queries - q
                                     : s.prefix_cache_queries;
    dh = s.prefix_cache_hits >= h ? s.prefix_cache_hits - h
                                  : s.prefix_cache_hits;
    q = s.prefix_cache_queries;
    h = s.prefix_cache_hits;
  }
  prefix_queries_->With({deployment})->Add(dq);
  prefix_hits_->With({deployment})->Add(dh);
}

void ControllerMetrics::SetPrice(const std::string& model,
                                 double usd_per_gpu_hour) {
  // The driver's loop calls it, as it calls Accrue (which reads prices_).
  prices_[model] = usd_per_gpu_hour;
}

void ControllerMetrics::Accrue(
    const std::string& deployment,
    const std::vector<std::pair<std::string, double>>& share_by_model,
    double seconds) {
  double gpu_seconds = 0, cost = 0;
  for (const auto& [model, share] : share_by_model) {
    gpu_seconds += share * seconds;
    auto it = prices_.find(model);
    if (it != prices_.end()) cost += share * seconds * it->second / 3600.0;
  }
  // Tokens each tenant used on the deployment since the last call.
  std::vector<std::pair<std::string, double>> used;
  double total = 0;
  if (gateway_) {
    absl::MutexLock lock(&mu_);
    for (const auto& [tenant, tokens] : gateway_->TokensByTenant(deployment)) {
      double& seen = tokens_seen_[{deployment, tenant}];
      if (tokens > seen) {
        used.emplace_back(tenant, tokens - seen);
        total += tokens - seen;
      }
      seen = tokens;
    }
  }
  if (gpu_seconds <= 0) return;
  deployment_gpu_seconds_->With({deployment})->Add(gpu_seconds);
  deployment_cost_->With({deployment})->Add(cost);
  for (const auto& [tenant, tokens] : used) {
    tenant_gpu_seconds_->With({tenant})->Add(gpu_seconds * tokens / total);
    tenant_cost_->With({tenant})->Add(cost * tokens / total);
  }
}

void ControllerMetrics::Collect(std::vector<std::vector<Sample>>* out) {
  std::function<Snapshot()> source;
  {
    absl::MutexLock lock(&mu_);
    source = source_;
  }
  if (!source) return;
  const Snapshot snap = source();
  auto& o = *out;
  for (const Snapshot::Deployment& d : snap.deployments) {
    for (const auto& [state, n] : d.replicas) {
      o[kReplicas].push_back({{d.name, state}, static_cast<double>(n)});
    }
    if (snap.leader) {
      o[kDesired].push_back({{d.name}, static_cast<double>(d.desired)});
    }
    o[kQueueDepth].push_back({{d.name}, static_cast<double>(d.queued)});
    if (d.queue_limit > 0) {
      o[kQueueLimit].push_back({{d.name}, static_cast<double>(d.queue_limit)});
    }
    o[kInFlight].push_back({{d.name}, static_cast<double>(d.in_flight)});
    const double queries = prefix_queries_->With({d.name})->value();
    if (queries > 0) {
      o[kPrefixHitRatio].push_back(
          {{d.name}, prefix_hits_->With({d.name})->value() / queries});
    }
  }
  for (const Snapshot::Replica& r : snap.replicas) {
    const runtime::EngineSignals& s = r.signals;
    if (s.running >= 0)
      o[kEngineRunning].push_back({{r.deployment, r.name}, 1.0 * s.running});
    if (s.waiting >= 0)
      o[kEngineWaiting].push_back({{r.deployment, r.name}, 1.0 * s.waiting});
    if (s.kv_used_fraction >= 0) {
      o[kEngineKv].push_back({{r.deployment, r.name}, s.kv_used_fraction});
    }
  }
  for (const Snapshot::Gpu& g : snap.gpus) {
    const std::string index = std::to_string(g.index);
    o[kGpuInfo].push_back(
        {{g.node, index, g.model, g.simulated ? "true" : "false"}, 1});
    o[kGpuMemoryTotal].push_back({{g.node, index}, g.memory_mib * kMiB});
    o[kGpuMemoryUsed].push_back(
        {{g.node, index, "allocation"}, g.allocated_memory_mib * kMiB});
    if (g.nvml) {
      o[kGpuMemoryUsed].push_back(
          {{g.node, index, "nvml"}, g.nvml_memory_used_mib * kMiB});
    }
    if (g.nvml && g.nvml_utilization_pct >= 0) {
      o[kGpuUtilization].push_back(
          {{g.node, index, "nvml"}, g.nvml_utilization_pct / 100.0});
    } else {
      o[kGpuUtilization].push_back(
          {{g.node, index, "allocation"}, g.allocated_milli / 1000.0});
    }
    o[kGpuAllocatedMilli].push_back({{g.node, index}, 1.0 * g.allocated_milli});
    o[kGpuHealthy].push_back({{g.node, index}, g.healthy ? 1.0 : 0.0});
  }
  for (const Snapshot::Node& n : snap.nodes) {
    o[kNodeUsable].push_back({{n.name}, n.usable ? 1.0 : 0.0});
    o[kNodeReplicas].push_back({{n.name}, 1.0 * n.replicas});
  }
  for (const Snapshot::Tenant& t : snap.tenants) {
    o[kTenantQuota].push_back({{t.name}, t.quota_gpus});
    if (t.limit_gpus > 0) o[kTenantLimit].push_back({{t.name}, t.limit_gpus});
    o[kTenantAllocated].push_back({{t.name}, t.allocated_gpus});
  }
  for (const Snapshot::Pool& p : snap.pools) {
    for (const auto& [state, n] : p.nodes) {
      o[kPoolNodes].push_back({{p.name, state}, 1.0 * n});
    }
    o[kPoolCost].push_back({{p.name}, p.usd});
  }
  if (!snap.pools.empty()) o[kIdleCost].push_back({{}, snap.idle_usd});
  for (const Snapshot::Route& r : snap.routes) {
    for (const auto& [version, weight] : r.weights) {
      o[kRouteWeight].push_back({{r.name, version}, 1.0 * weight});
    }
    if (!r.phase.empty()) {
      o[kRolloutPhase].push_back({{r.name, r.phase}, 1});
      o[kRolloutStep].push_back({{r.name}, 1.0 * r.step});
    }
  }
}

std::pair<double, double> ControllerMetrics::TenantUsage(
    const std::string& tenant) {
  return {tenant_gpu_seconds_->With({tenant})->value(),
          tenant_cost_->With({tenant})->value()};
}

}  // namespace gpusched::api
