#include "sim/serve_sim.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autoscale/autoscaler.h"
#include "autoscale/swap.h"
#include "common/check.h"
#include "common/random.h"
#include "common/status.h"
#include "control/capacity.h"
#include "control/prices.h"
#include "control/scaling.h"
#include "serving/batcher.h"
#include "serving/dispatcher.h"
#include "serving/latency_model.h"
#include "sim/cold_start.h"
#include "sim/replica_sim.h"
#include "sim/serve_trace.h"
#include "sim/sim_fleet.h"
#include "sim/sim_pools.h"
#include "sim/sim_routes.h"

namespace gpusched::sim {
namespace {

using serving::ClassId;
using serving::ModelId;
using serving::RejectReason;
using serving::ReplicaId;
using serving::TenantId;

absl::StatusOr<Trace> LoadWorkload(const config::ServeSimConfig& cfg) {
  const config::SimWorkloadSpec& w = cfg.workload;
  Trace trace;
  if (w.synthetic) {
    SyntheticWorkload sw;
    sw.duration_s = w.duration_s;
    sw.seed = cfg.seed;
    sw.tenants = w.synthetic_tenants;
    ASSIGN_OR_RETURN(trace, GenerateSynthetic(sw));
  } else {
    ASSIGN_OR_RETURN(trace, ReadTrace(w.trace_format, w.trace_path));
  }
  if (w.time_scale != 1) ScaleTrace(trace, w.time_scale);
  TruncateTrace(trace, w.max_requests, w.max_seconds);
  return trace;
}

// One simulated engine of either kind, behind one face for the loop; its
// life (start, readiness, drain, stop) is the fleet's (sim/sim_fleet.h).
struct Replica {
  ModelId deployment = 0;
  std::unique_ptr<LlmReplicaSim> llm;
  std::unique_ptr<TensorReplicaSim> tensor;
  bool serving = false;  // takes requests from the dispatcher
  bool stopped = false;
  double gpus = 0;
  Micros started = 0;
  Micros stopped_at = -1;
  int64_t in_flight = 0;
  Micros last_used = 0;
  Micros NextEventTime() const {
    return llm ? llm->NextEventTime() : tensor->NextEventTime();
  }
};

// A deployment's serving state.
struct Dep {
  const config::SimDeploymentSpec* spec = nullptr;
  serving::LatencyModel latency;
  // Its model's latency on each pool's GPU (capacity on demand).
  std::map<std::string, serving::LatencyModel> latency_on;
  int block_tokens = 16;
  bool autoscaled = false;  // control::Scaling owns its count
  int cls = 0;              // priority class index (0 = most important)
  bool preemptible = true;
  std::vector<double> ttft;  // since the last observation (slo)
};

// The fleet's options for a run: live's lifecycle rules, except that a
// drain waits for its requests however long they take and ready replicas
// are not health-checked (simulated engines do not fail).
FleetOptions FleetOptionsFor(const config::ServeSimConfig& cfg) {
  FleetOptions o;
  o.cluster_gpus = cfg.cluster_gpus;
  o.gpus_per_node = cfg.gpus_per_node;
  o.swap_min_idle = FromSeconds(cfg.swap_min_idle_s);
  o.static_usd_per_gpu_hour = cfg.price_per_gpu_hour;
  o.lifecycle.drain_grace = kNever;
  o.lifecycle.health_period = 0;
  o.lifecycle.startup_timeout = kNever / 4;
  for (const config::SimTenantSpec& t : cfg.tenants) {
    if (t.quota_gpus > 0 || t.limit_gpus > 0) {
      o.queues.push_back(
          {t.name, t.quota_gpus, t.limit_gpus, t.over_quota_weight});
    }
  }
  return o;
}

class Simulation : public ReplicaSimListener, public FleetHost {
 public:
  explicit Simulation(const config::ServeSimConfig& cfg)
      : cfg_(cfg), dispatcher_(cfg.seed), fleet_(FleetOptionsFor(cfg), this) {}

  absl::StatusOr<ServeSimRun> Run() {
    const auto wall_start = std::chrono::steady_clock::now();
    run_.config = cfg_;
    ASSIGN_OR_RETURN(Trace trace, LoadWorkload(cfg_));
    run_.trace_format = trace.format;
    run_.trace_source = trace.source;
    run_.trace_requests = static_cast<int64_t>(trace.requests.size());
    ASSIGN_OR_RETURN(ColdStartModel cold,
                     ColdStartModel::Create(cfg_.cold_start, cfg_.seed));
    cold_ = std::make_unique<ColdStartModel>(std::move(cold));
    RETURN_IF_ERROR(BuildPools());
    RETURN_IF_ERROR(fleet_.Init());
    RETURN_IF_ERROR(Build(trace));
    ASSIGN_OR_RETURN(
        SimRoutes routes,
        SimRoutes::Create(cfg_.routes, deployment_ids_,
                          std::vector<double>(deps_.size(), 0), cfg_.seed,
                          FromSeconds(cfg_.autoscaling_interval_s)));
    routes_.emplace(std::move(routes));
    RETURN_IF_ERROR(MakeRequests(trace));
    Loop();
    if (!pools_.empty() || cfg_.price_per_gpu_hour > 0) {
      run_.has_cost = true;
      run_.cost = fleet_.Cost(run_.simulated_end);
    }
    run_.routes = routes_->Results();
    run_.route_events = routes_->events();
    run_.wall_seconds = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - wall_start)
                            .count();
    return std::move(run_);
  }

  // ReplicaSimListener
  void OnFirstToken(SimRequest* r, Micros now) override {
    RequestOutcome& o = run_.requests[r->req.id];
    o.first_token = now;
    o.cached_tokens = r->cached_prompt_tokens;
    dispatcher_.OnFirstToken(r->req, replica_of_[r->req.id], now);
    Dep& d = deps_[o.deployment];
    if (d.autoscaled) d.ttft.push_back(ToSeconds(now - o.arrival));
  }
  void OnFinished(SimRequest* r, Micros now) override {
    RequestOutcome& o = run_.requests[r->req.id];
    const ReplicaId rep = replica_of_[r->req.id];
    if (r->rejected_too_long) {
      o.reason = RejectReason::kPromptTooLong;
      dispatcher_.OnFinished(r->req, rep, -1, now,
                             /*prefilled=*/o.first_token >= 0);
    } else {
      o.finished = now;
      o.cached_tokens = r->cached_prompt_tokens;
      if (o.first_token < 0) o.first_token = now;
      dispatcher_.OnFinished(r->req, rep, r->output_tokens, now);
    }
    // An injected engine error (the deployment's error_rate): a seeded
    // draw per request, so every run of a seed fails the same requests.
    const double error_rate = deps_[o.deployment].spec->error_rate;
    const bool injected =
        error_rate > 0 &&
        static_cast<double>(Mix64(cfg_.seed ^ Mix64(r->req.id)) >> 11) *
                0x1.0p-53 <
            error_rate;
    routes_->Record(
        o.deployment, now,
        {ToSeconds(o.first_token - o.arrival), ToSeconds(now - o.arrival),
         !r->rejected_too_long && !injected});
    ++completions_[o.deployment];
    Left(rep, now);
  }

 private:
  absl::Status Build(const Trace& trace) {
    for (const config::PriorityClassSpec& c : cfg_.classes) {
      run_.class_names.push_back(c.name);
    }
    // Tenants: the configured ones, then the trace's others in order of
    // appearance, with tenant_defaults.
    for (const config::SimTenantSpec& t : cfg_.tenants) {
      RETURN_IF_ERROR(AddTenant(t));
    }
    for (const TraceRequest& r : trace.requests) {
      const std::string& name =
          r.tenant.empty() ? cfg_.workload.tenant : r.tenant;
      if (!tenant_ids_.contains(name)) {
        config::SimTenantSpec spec = cfg_.tenant_defaults;
        spec.name = name;
        RETURN_IF_ERROR(AddTenant(spec));
      }
    }
    for (const config::SimDeploymentSpec& d : cfg_.deployments) {
      serving::DeploymentSpec spec;
      spec.name = d.name;
      spec.router = d.router;
      spec.max_queue_size = d.queue.max_queue_size;
      serving::QueueOrder order;
      RETURN_IF_ERROR(serving::ParseQueueOrder(d.queue.order, &order));
      for (const config::PriorityClassSpec& c : cfg_.classes) {
        serving::QueueClassConfig k;
        k.name = c.name;
        k.order = order;
        if (!c.order.empty()) {
          RETURN_IF_ERROR(serving::ParseQueueOrder(c.order, &k.order));
        }
        k.timeout = c.timeout_s > 0 ? FromSeconds(c.timeout_s) : kNever;
        spec.queue.classes.push_back(k);
      }
      spec.queue.aging =
          d.queue.aging_s > 0 ? FromSeconds(d.queue.aging_s) : kNever;
      spec.queue.input_weight = d.queue.input_weight;
      spec.queue.output_weight = d.queue.output_weight;
      spec.queue.demote_late = d.queue.demote_late;
      spec.queue.late_margin = FromSeconds(d.queue.late_margin_s);
      spec.fair_share_headroom = d.queue.fair_share_headroom;
      spec.reject_infeasible = d.queue.reject_infeasible;
      serving::LatencyModel latency;
      if (d.kind == "llm") {
        auto found = serving::FindLatencyModel(
            serving::BuiltinLatencyModels(), d.model, d.gpu, d.tensor_parallel);
        if (!found.ok()) return DeploymentError(d, found.status().message());
        latency = *found;
        for (double* c : {&latency.p0, &latency.p1, &latency.p2, &latency.d0,
                          &latency.d1, &latency.d2}) {
          *c *= d.latency_multiplier;
        }
        if (d.engine.kv_capacity_tokens > 0) {
          latency.kv_capacity_tokens = d.engine.kv_capacity_tokens;
        }
        if (latency.kv_capacity_tokens <= 0) {
          return DeploymentError(
              d, absl::StrCat("no KV capacity is known for ", d.model, " on ",
                              d.gpu, "; set engine.kv_capacity_tokens"));
        }
        spec.latency = latency;
        run_.latency_sources.push_back(latency.source);
      } else {
        run_.latency_sources.push_back("tensor batch model");
      }
      ASSIGN_OR_RETURN(const ModelId model, dispatcher_.AddDeployment(spec));
      run_.deployment_names.push_back(d.name);
      run_.deployment_gpus.push_back(
          d.replicas *
          (d.gpu_fraction > 0 ? d.gpu_fraction : 1.0 * d.tensor_parallel));
      deployment_ids_[d.name] = model;
      Dep dep;
      dep.spec = &d;
      dep.latency = latency;
      dep.block_tokens =
          trace.block_tokens > 0 ? trace.block_tokens : d.engine.block_tokens;
      for (size_t c = 0; c < cfg_.classes.size(); ++c) {
        if (cfg_.classes[c].name == d.priority_class) {
          dep.cls = static_cast<int>(c);
          dep.preemptible = cfg_.classes[c].preemptible;
        }
      }
      if (d.autoscaling) {
        RETURN_IF_ERROR(
            scaling_.Set(d.name, d.autoscaling_config, d.replicas, 0));
        dep.autoscaled = true;
        run_.elastic = true;
      }
      FleetDeployment fd;
      fd.name = d.name;
      fd.class_rank = dep.cls;
      fd.priority = 100 * (static_cast<int>(cfg_.classes.size()) - dep.cls);
      fd.preemptible = dep.preemptible;
      fd.autoscaled = d.autoscaling;
      fd.tensor_parallel = d.tensor_parallel;
      fd.owner = d.owner;
      fd.weights = d.model;
      if (!d.owner.empty() &&
          std::none_of(cfg_.tenants.begin(), cfg_.tenants.end(),
                       [&](const config::SimTenantSpec& t) {
                         return t.name == d.owner;
                       })) {
        return DeploymentError(
            d, absl::StrCat("owner '", d.owner,
                            "' is not a tenant of the config's tenants list"));
      }
      fd.gpu_milli =
          d.gpu_fraction > 0
              ? std::max(1, static_cast<int>(d.gpu_fraction * 1000 + 0.5))
              : 0;
      fd.spot_ok = d.spot;
      if (d.kind == "llm") {
        // Where it can run when capacity is added: pools whose GPUs have
        // its latency model and meet its SLO, with their cost per token.
        const control::SloTarget& slo = fd.slo = SloTargetFor(cfg_, d);
        for (const FleetPool& fp : pools_) {
          auto on = serving::FindLatencyModel(serving::BuiltinLatencyModels(),
                                              d.model, fp.pool.gpu,
                                              d.tensor_parallel);
          if (!on.ok()) continue;
          if (d.engine.kv_capacity_tokens > 0) {
            on->kv_capacity_tokens = d.engine.kv_capacity_tokens;
          }
          const control::TokenCost cost = control::CostPerToken(
              *on, fp.pool.price_per_node_hour / fp.pool.gpus_per_node, slo);
          if (!cost.feasible) continue;
          fd.usd_per_mtok[fp.pool.name] = cost.usd_per_mtok;
          fd.pool_latency[fp.pool.name] = *on;
          dep.latency_on[fp.pool.gpu] = *on;
        }
      }
      deps_.push_back(std::move(dep));
      // A replica of it can be built (the same config builds every one).
      RETURN_IF_ERROR(NewEngine(model).status());
      CHECK(fleet_.AddDeployment(fd) == static_cast<int>(model));
      fleet_.SetDesired(model, d.replicas);
      DeploymentCapacity cap;
      cap.autoscaling = d.autoscaling;
      cap.priority_class = d.priority_class;
      run_.capacity.push_back(std::move(cap));
    }
    // The initial replicas are running at time 0.
    warm_ = true;
    fleet_.Reconcile(0);
    warm_ = false;
    if (cfg_.cluster_gpus > 0) run_.elastic = true;
    for (size_t m = 0; m < deps_.size(); ++m) {
      const config::SimDeploymentSpec& d = *deps_[m].spec;
      if (fleet_.ready(static_cast<int>(m)) < d.replicas) {
        return absl::InvalidArgumentError(absl::StrCat(
            cfg_.source, ":", d.line, ": deployment '", d.name,
            "': ", fleet_.ready(static_cast<int>(m)), " of its ", d.replicas,
            " initial replicas fit (", d.tensor_parallel,
            " GPUs each); cluster.gpus is ", cfg_.cluster_gpus, " in nodes of ",
            cfg_.gpus_per_node));
      }
    }
    completions_.assign(run_.deployment_names.size(), 0);
    arrivals_.assign(run_.deployment_names.size(), 0);
    return absl::OkStatus();
  }

  // cluster.pools (sim/sim_pools.h) and the planner's options.
  absl::Status BuildPools() {
    if (cfg_.pools.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(pools_, FleetPoolsFor(cfg_));
    const config::CapacitySpec& k = cfg_.capacity;
    fleet_.SetCapacity(pools_, control::CapacityOptionsFrom(k),
                       FromSeconds(k.interval_s), cfg_.price_per_gpu_hour);
    run_.elastic = true;
    return absl::OkStatus();
  }

  void Log(Micros t, const char* kind, ModelId m, std::string message) {
    run_.events.push_back(
        {t, kind, run_.deployment_names[m], std::move(message)});
  }

  // A simulated engine of deployment `m`, not started.
  absl::StatusOr<Replica> NewEngine(ModelId m,
                                    const std::string& gpu = "") const {
    const Dep& dep = deps_[m];
    const config::SimDeploymentSpec& d = *dep.spec;
    Replica rep;
    rep.deployment = m;
    if (d.kind == "llm") {
      LlmReplicaConfig rc;
      auto on = dep.latency_on.find(gpu);
      rc.latency = on == dep.latency_on.end() ? dep.latency : on->second;
      rc.kv_capacity_tokens = rc.latency.kv_capacity_tokens;
      rc.max_num_seqs = d.engine.max_num_seqs;
      rc.max_num_batched_tokens = d.engine.max_num_batched_tokens;
      rc.block_tokens = dep.block_tokens;
      rc.prefix_caching = d.engine.prefix_caching;
      auto sim = LlmReplicaSim::Create(rc);
      if (!sim.ok()) return DeploymentError(d, sim.status().message());
      rep.llm = *std::move(sim);
    } else {
      TensorReplicaConfig tc;
      tc.batcher.max_batch_size = d.batching.max_batch_size;
      tc.batcher.max_queue_delay_microseconds =
          d.batching.max_queue_delay_microseconds;
      tc.batcher.preferred_batch_sizes = d.batching.preferred_batch_size;
      tc.instances = d.batching.instances;
      tc.base_s = d.batching.base_s * d.latency_multiplier;
      tc.per_item_s = d.batching.per_item_s * d.latency_multiplier;
      auto sim = TensorReplicaSim::Create(tc);
      if (!sim.ok()) return DeploymentError(d, sim.status().message());
      rep.tensor = *std::move(sim);
    }
    return rep;
  }

  // FleetHost: a new engine for deployment `m`; warm ones (the initial
  // replicas) serve at once, the others after a cold start.
  FleetEngine StartEngine(int m, const std::string& replica, double gpus,
                          bool weights_local, const std::string& gpu,
                          Micros now) override {
    (void)replica;
    const config::SimDeploymentSpec& d = *deps_[m].spec;
    auto made = NewEngine(static_cast<ModelId>(m), gpu);
    CHECK(made.ok()) << made.status();  // built once in Build()
    Replica rep = *std::move(made);
    rep.started = now;
    rep.last_used = now;
    rep.gpus = gpus;
    const size_t id = replicas_.size();
    live_.insert(id);
    DeploymentCapacity& cap = run_.capacity[m];
    Micros ready_at = now;
    if (!warm_) {
      ++cap.starts;
      const double cold =
          d.cold_start_s >= 0
              ? d.cold_start_s
              : cold_->Sample(d.model, d.tensor_parallel, weights_local);
      cap.cold_start_s.push_back(cold);
      ready_at = now + std::max<Micros>(1, FromSeconds(cold));
    }
    replicas_.push_back(std::move(rep));
    run_.replicas.push_back({d.name, 0, 0, 0});
    cap.replicas_max = std::max(cap.replicas_max, Live(m));
    return {static_cast<ReplicaId>(id), ready_at};
  }

  void StopEngine(ReplicaId id, Micros now) override {
    Replica& r = replicas_[id];
    r.stopped = true;
    r.stopped_at = now;
    live_.erase(id);
    run_.capacity_end = std::max(run_.capacity_end, now);
  }

  void SetServing(ReplicaId id, bool serving, Micros now) override {
    Replica& r = replicas_[id];
    if (r.serving == serving) return;
    r.serving = serving;
    if (serving) {
      r.last_used = now;
      Join(id);
      run_.capacity_end = std::max(run_.capacity_end, now);
    } else {
      dispatcher_.RemoveReplica(r.deployment, id);
    }
  }

  int64_t InFlight(ReplicaId id) const override {
    return replicas_[id].in_flight;
  }
  Micros LastUsed(ReplicaId id) const override {
    return replicas_[id].last_used;
  }
  bool Queued(int m) const override {
    return dispatcher_.queue(static_cast<ModelId>(m)).size() > 0;
  }
  double DemandPerReplica(int m) const override {
    return scaling_.DemandPerReplica(run_.deployment_names[m]);
  }
  int SwappedOut(int m) override {
    return scaling_.SwappedOut(run_.deployment_names[m]);
  }
  void Log(Micros t, const char* kind, int m, std::string message) override {
    const std::string_view k(kind);
    if (m < 0) {  // the cluster's: capacity on demand
      run_.events.push_back({t, kind, "", std::move(message)});
      return;
    }
    if (k == "replica.evicted") ++run_.capacity[m].evictions;
    if (k == "replica.preempted") ++run_.capacity[m].preemptions;
    run_.events.push_back(
        {t, kind, run_.deployment_names[m], std::move(message)});
  }

  // The replica takes requests from the dispatcher.
  void Join(size_t id) {
    const Dep& dep = deps_[replicas_[id].deployment];
    const config::SimDeploymentSpec& d = *dep.spec;
    int64_t kv_budget = 0;
    if (d.kind == "llm") {
      kv_budget = d.engine.kv_budget_tokens < 0 ? dep.latency.kv_capacity_tokens
                                                : d.engine.kv_budget_tokens;
    }
    dispatcher_.AddReplica(replicas_[id].deployment, static_cast<ReplicaId>(id),
                           d.max_ongoing_requests, kv_budget);
  }

  // Engines of `m` holding GPUs (starting, ready or draining).
  int Live(int m) const {
    int n = 0;
    for (size_t i : live_) n += static_cast<int>(replicas_[i].deployment) == m;
    return n;
  }

  // A request left replica `id` (finished or refused).
  void Left(size_t id, Micros now) {
    Replica& r = replicas_[id];
    --r.in_flight;
    r.last_used = now;
    // A draining one stops once its last request is done.
    if (!r.serving && r.in_flight == 0) fleet_.Poke();
  }

  void Observe(ModelId m, Micros now) {
    Dep& dep = deps_[m];
    control::ScalingLoad l;
    l.in_flight = dispatcher_.outstanding(m);
    l.queued = static_cast<int64_t>(dispatcher_.queue(m).size());
    observed_load_ |= l.in_flight + l.queued > 0;
    l.ttft_samples_s = std::move(dep.ttft);
    dep.ttft.clear();
    scaling_.Observe(run_.deployment_names[m], now, std::move(l),
                     fleet_.life(static_cast<int>(m)));
  }

  // Observes every autoscaled deployment, evaluates, carries the decisions
  // out.
  void Autoscale(Micros now) {
    observed_load_ = false;
    for (size_t m = 0; m < deps_.size(); ++m) {
      if (deps_[m].autoscaled) Observe(static_cast<ModelId>(m), now);
    }
    Decide(now);
  }

  void Decide(Micros now) {
    steps_.clear();
    scaling_.Evaluate(now, &steps_);
    last_evaluate_ = now;
    for (control::ScaleStep& step : steps_) {
      const ModelId m = deployment_ids_.at(step.deployment);
      ++run_.capacity[m].decisions[autoscale::ReasonName(step.reason)];
      Log(now, "deployment.autoscaled", m, std::move(step.event.message));
      fleet_.SetDesired(static_cast<int>(m), step.to);
    }
  }

  // "sim.yaml:12: deployment 'chat': <what>".
  absl::Status DeploymentError(const config::SimDeploymentSpec& d,
                               absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        cfg_.source, ":", d.line, ": deployment '", d.name, "': ", what));
  }

  absl::Status AddTenant(const config::SimTenantSpec& t) {
    serving::TenantSpec spec;
    spec.name = t.name;
    spec.weight = t.weight;
    spec.limits = t.limits;
    ASSIGN_OR_RETURN(const TenantId id, dispatcher_.AddTenant(spec, 0));
    tenant_ids_[t.name] = id;
    run_.tenant_names.push_back(t.name);
    ClassId cls = 0;
    for (size_t c = 0; c < cfg_.classes.size(); ++c) {
      if (cfg_.classes[c].name == t.priority) cls = static_cast<ClassId>(c);
    }
    tenant_class_.push_back(cls);
    run_.tenant_weights.push_back(t.weight);
    run_.tenant_slos.push_back(t.slo);
    run_.backlog.emplace_back();
    tenant_queued_.push_back(0);
    return absl::OkStatus();
  }

  absl::Status MakeRequests(Trace& trace) {
    const size_t n = trace.requests.size();
    sim_requests_.resize(n);
    run_.requests.resize(n);
    replica_of_.assign(n, 0);
    route_of_.assign(n, -1);
    for (size_t i = 0; i < n; ++i) {
      TraceRequest& tr = trace.requests[i];
      const std::string& tenant =
          tr.tenant.empty() ? cfg_.workload.tenant : tr.tenant;
      std::string model =
          tr.model.empty() ? cfg_.workload.deployment : tr.model;
      // A route's name: the target is picked at arrival; its tenant may
      // use every target.
      if (const int route = routes_->Find(model); route >= 0) {
        route_of_[i] = route;
        for (const config::RouteTargetSpec& t : cfg_.routes[route].targets) {
          dispatcher_.DeclareTenant(deployment_ids_.at(t.deployment),
                                    tenant_ids_.at(tenant));
        }
        model = cfg_.routes[route].targets.front().deployment;
      }
      auto dep = deployment_ids_.find(model);
      if (dep == deployment_ids_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(trace.source, ": request ", i + 1, " is for model '",
                         model, "', which no deployment serves"));
      }
      const TenantId t = tenant_ids_.at(tenant);
      // Every tenant in the workload may use the deployments it sends to.
      dispatcher_.DeclareTenant(dep->second, t);
      SimRequest& s = sim_requests_[i];
      serving::Request& r = s.req;
      r.id = i;
      r.tenant = t;
      r.model = dep->second;
      r.priority = tenant_class_[t];
      r.arrival = tr.arrival;
      const config::SloSpec& slo = run_.tenant_slos[t];
      if (slo.ttft_s > 0) {
        r.deadline = tr.arrival + FromSeconds(slo.ttft_s);
      } else if (slo.e2e_s > 0) {
        r.deadline = tr.arrival + FromSeconds(slo.e2e_s);
      }
      r.input_tokens = tr.input_tokens;
      // The trace's output length stands in for the client's max_tokens.
      r.max_output_tokens = tr.output_tokens;
      blocks_.push_back(std::move(tr.prefix_blocks));
      s.output_tokens = tr.output_tokens;
      RequestOutcome& o = run_.requests[i];
      o.tenant = t;
      o.deployment = r.model;
      o.cls = r.priority;
      o.arrival = r.arrival;
      o.input_tokens = r.input_tokens;
      o.output_tokens = tr.output_tokens;
    }
    // Spans into blocks_ are taken once it stops growing.
    for (size_t i = 0; i < n; ++i)
      sim_requests_[i].req.prefix_blocks = blocks_[i];
    return absl::OkStatus();
  }

  void SetQueued(TenantId t, int64_t delta, Micros now) {
    int64_t& q = tenant_queued_[t];
    auto& intervals = run_.backlog[t];
    if (q == 0 && delta > 0) intervals.emplace_back(now, kNever);
    q += delta;
    queued_total_ += delta;
    if (q == 0 && delta < 0) intervals.back().second = now;
  }

  void Schedule(size_t replica) {
    const Micros t = replicas_[replica].NextEventTime();
    if (t != kNever) events_.push({t, replica});
  }

  void PublishLoad(size_t replica) {
    const Replica& rep = replicas_[replica];
    if (!rep.llm) return;
    const serving::ReplicaLoad l = rep.llm->Load();
    dispatcher_.UpdateEngineLoad(
        rep.deployment, static_cast<ReplicaId>(replica),
        {l.waiting, l.running, l.kv_used_fraction, l.kv_tokens});
  }

  void Sample(Micros t) {
    LoadSample s;
    s.t = t;
    const size_t d = run_.deployment_names.size();
    for (size_t m = 0; m < d; ++m) {
      s.queued.push_back(dispatcher_.queue(static_cast<ModelId>(m)).size());
      s.outstanding.push_back(dispatcher_.outstanding(static_cast<ModelId>(m)));
    }
    for (size_t m = 0; m < deps_.size(); ++m) {
      s.replicas.push_back(fleet_.active(static_cast<int>(m)));
    }
    s.arrivals = arrivals_;
    s.completions = completions_;
    std::fill(arrivals_.begin(), arrivals_.end(), 0);
    std::fill(completions_.begin(), completions_.end(), 0);
    run_.load.push_back(std::move(s));
  }

  void Loop() {
    const size_t n = sim_requests_.size();
    const Micros sample_every =
        std::max<Micros>(1, FromSeconds(cfg_.load_sample_s));
    Micros next_sample = sample_every;
    size_t next_arrival = 0;
    std::vector<serving::Assignment> assigned;
    std::vector<serving::Request> expired;
    Micros now = 0;
    const bool autoscaling = scaling_.size() > 0;
    const Micros tick =
        std::max<Micros>(1, FromSeconds(cfg_.autoscaling_interval_s));
    Micros next_tick = tick;
    for (;;) {
      while (!events_.empty() &&
             replicas_[events_.top().second].NextEventTime() !=
                 events_.top().first) {
        events_.pop();  // stale
      }
      const Micros t_event = events_.empty() ? kNever : events_.top().first;
      const Micros t_arrival =
          next_arrival < n ? sim_requests_[next_arrival].req.arrival : kNever;
      const Micros t_timeout = dispatcher_.NextTimeout();
      // The fleet's probes and drains; its retries of pending replicas
      // only while something else goes on: requests held where no replica
      // can start (nothing frees GPUs) end the run unserved rather than
      // keep it going.
      const Micros t_fleet = fleet_.NextDeadline();
      const bool busy = next_arrival < n || !events_.empty() ||
                        t_fleet != kNever ||
                        (observed_load_ && queued_total_ == 0);
      Micros t_control = std::min(t_fleet, fleet_.NextRetry(now, busy));
      Micros t_deadline = kNever;
      if (autoscaling) {
        // Periodic observations while there is work; after it, only the
        // autoscaler's own timers (idle timeouts, delays).
        if (busy) t_control = std::min(t_control, next_tick);
        t_deadline = scaling_.NextDeadline();
        if (t_deadline <= last_evaluate_) t_deadline = kNever;
        t_control = std::min(t_control, t_deadline);
      }
      // Rollouts are stepped while requests come or run.
      const Micros t_routes =
          next_arrival < n || !events_.empty() ? routes_->NextStep() : kNever;
      t_control = std::min(t_control, t_routes);
      now = std::max(now, std::min({t_event, t_arrival, t_timeout, t_control}));
      if (std::min({t_event, t_arrival, t_timeout, t_control}) == kNever) {
        break;
      }
      if (now >= t_routes) routes_->Step(now);
      while (next_sample <= now) {
        Sample(next_sample);
        next_sample += sample_every;
      }
      // Readiness, drains and retries due now.
      if (fleet_.dirty() || now >= t_control) fleet_.Reconcile(now);
      // Replica iterations that end now.
      while (!events_.empty() && events_.top().first == now) {
        const size_t r = events_.top().second;
        events_.pop();
        Replica& rep = replicas_[r];
        if (rep.NextEventTime() != now) continue;
        if (rep.llm) {
          rep.llm->Advance(now, *this);
        } else {
          rep.tensor->Advance(now, *this);
        }
        PublishLoad(r);
        Schedule(r);
      }
      // Replicas drained by them stop; the GPUs freed go to the pending
      // replicas (by class) before any new decision may take them.
      if (fleet_.dirty()) fleet_.Reconcile(now);
      // Arrivals.
      bool held_arrival = false;
      while (next_arrival < n &&
             sim_requests_[next_arrival].req.arrival == now) {
        if (const int route = route_of_[next_arrival]; route >= 0) {
          serving::Request& q = sim_requests_[next_arrival].req;
          q.model = routes_->Pick(route, q.id, run_.tenant_names[q.tenant]);
          run_.requests[q.id].deployment = q.model;
        }
        const serving::Request& r = sim_requests_[next_arrival].req;
        ++arrivals_[r.model];
        const serving::Verdict v = dispatcher_.Submit(r, now);
        if (v.admitted()) {
          SetQueued(r.tenant, +1, now);
          const Dep& dep = deps_[r.model];
          if (fleet_.ready(static_cast<int>(r.model)) == 0) {
            run_.requests[r.id].held = true;
            // At zero replicas: the autoscaler hears of it at once.
            if (dep.autoscaled &&
                scaling_.Held(run_.deployment_names[r.model], now)) {
              Observe(r.model, now);
              held_arrival = true;
            }
          }
        } else {
          run_.requests[r.id].reason = v.reason;
        }
        ++next_arrival;
      }
      if (t_timeout <= now) {
        expired.clear();
        dispatcher_.Expire(now, &expired);
        for (const serving::Request& r : expired) {
          run_.requests[r.id].reason = RejectReason::kQueueTimeout;
          SetQueued(r.tenant, -1, now);
        }
      }
      if (autoscaling) {
        if (now >= next_tick) {
          while (next_tick <= now) next_tick += tick;
          Autoscale(now);
        } else if (now == t_deadline) {
          Autoscale(now);
        } else if (held_arrival) {
          Decide(now);
        }
      }
      // Decisions take effect before the dispatch.
      if (fleet_.dirty()) fleet_.Reconcile(now);
      assigned.clear();
      dispatcher_.Dispatch(now, &assigned);
      for (const serving::Assignment& a : assigned) {
        SimRequest& s = sim_requests_[a.request.id];
        s.req = a.request;  // as dispatched (carries its dispatch time)
        replica_of_[a.request.id] = a.replica;
        run_.requests[a.request.id].dispatched = now;
        SetQueued(a.request.tenant, -1, now);
        Replica& rep = replicas_[a.replica];
        ++rep.in_flight;
        rep.last_used = now;
        if (rep.llm) {
          rep.llm->Enqueue(&s, now);
        } else if (!rep.tensor->Enqueue(&s, now)) {
          // The batcher's own queue bound (max_queue_size) is full.
          run_.requests[a.request.id].reason = RejectReason::kModelQueueFull;
          dispatcher_.OnFinished(a.request, a.replica, -1, now,
                                 /*prefilled=*/false);
          Left(a.replica, now);
        }
        PublishLoad(a.replica);
        Schedule(a.replica);
      }
      if (fleet_.dirty()) fleet_.Reconcile(now);
    }
    Sample(next_sample);
    Micros end = 0;
    for (const RequestOutcome& o : run_.requests) {
      end = std::max({end, o.arrival, o.finished});
    }
    run_.simulated_end = end;
    const Micros capacity_end = std::max(end, run_.capacity_end);
    run_.capacity_end = capacity_end;
    for (size_t r = 0; r < replicas_.size(); ++r) {
      const Replica& rep = replicas_[r];
      DeploymentCapacity& cap = run_.capacity[rep.deployment];
      const double held = ToSeconds(
          (rep.stopped_at >= 0 ? rep.stopped_at : capacity_end) - rep.started);
      cap.replica_seconds += held;
      cap.gpu_seconds += held * rep.gpus;
      ReplicaStats& st = run_.replicas[r];
      if (replicas_[r].llm) {
        const LlmReplicaCounters& c = replicas_[r].llm->counters();
        st.iterations = c.iterations;
        st.preemptions = c.preemptions;
        st.busy_seconds = ToSeconds(c.busy_time);
      } else {
        const TensorReplicaCounters& c = replicas_[r].tensor->counters();
        st.iterations = c.batches;
        // busy_time sums over instances: one replica holds them all.
        st.busy_seconds =
            ToSeconds(c.busy_time) /
            cfg_.deployments[rep_deployment(r)].batching.instances;
      }
    }
  }

  size_t rep_deployment(size_t r) const { return replicas_[r].deployment; }

  const config::ServeSimConfig& cfg_;
  serving::Dispatcher dispatcher_;
  ServeSimRun run_;
  absl::flat_hash_map<std::string, TenantId> tenant_ids_;
  absl::flat_hash_map<std::string, ModelId> deployment_ids_;
  std::vector<ClassId> tenant_class_;
  std::vector<int64_t> tenant_queued_;
  std::vector<Replica> replicas_;
  std::vector<SimRequest> sim_requests_;
  std::vector<std::vector<uint64_t>> blocks_;
  std::vector<ReplicaId> replica_of_;
  std::vector<int> route_of_;  // per request: its route, -1 for none
  std::optional<SimRoutes> routes_;
  std::vector<int64_t> arrivals_, completions_;
  std::vector<Dep> deps_;  // by ModelId
  std::vector<FleetPool> pools_;
  control::Scaling scaling_;
  std::vector<control::ScaleStep> steps_;  // scratch
  std::unique_ptr<ColdStartModel> cold_;
  SimFleet fleet_;
  bool warm_ = false;  // engines started now serve at once (time 0)
  int64_t queued_total_ = 0;
  // The last observation saw load: observe again once it is gone.
  bool observed_load_ = false;
  Micros last_evaluate_ = -1;
  absl::btree_set<size_t> live_;  // replicas not stopped, by id
  // (time, replica) min-heap; entries go stale when a replica's next event
  // moves, and are skipped.
  std::priority_queue<std::pair<Micros, size_t>,
                      std::vector<std::pair<Micros, size_t>>, std::greater<>>
      events_;
};

}  // namespace

absl::StatusOr<ServeSimRun> RunServeSim(const config::ServeSimConfig& config) {
  Simulation sim(config);
  return sim.Run();
}

}  // namespace gpusched::sim
