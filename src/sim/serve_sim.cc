#include "sim/serve_sim.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <queue>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "autoscale/autoscaler.h"
#include "autoscale/swap.h"
#include "common/check.h"
#include "common/status.h"
#include "serving/batcher.h"
#include "serving/dispatcher.h"
#include "serving/latency_model.h"
#include "sim/cold_start.h"
#include "sim/replica_sim.h"
#include "sim/serve_trace.h"

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

// One simulated replica of either kind, behind one face for the loop.
struct Replica {
  enum class State { kStarting, kReady, kDraining, kStopped };
  ModelId deployment = 0;
  std::unique_ptr<LlmReplicaSim> llm;
  std::unique_ptr<TensorReplicaSim> tensor;
  State state = State::kReady;
  Micros started = 0;
  Micros stopped = -1;
  int64_t in_flight = 0;
  Micros last_used = 0;
  int preempted_for = -1;  // the deployment its GPUs are drained for
  Micros NextEventTime() const {
    return llm ? llm->NextEventTime() : tensor->NextEventTime();
  }
};

// A deployment's capacity state.
struct Dep {
  const config::SimDeploymentSpec* spec = nullptr;
  serving::LatencyModel latency;
  int block_tokens = 16;
  int autoscale = -1;  // index in the Autoscaler; -1: fixed count
  int cls = 0;         // priority class index (0 = most important)
  bool preemptible = true;
  int desired = 0;
  int starting = 0, ready = 0;
  Micros pending_since = kNever;  // a wanted replica has no GPUs yet
  int64_t incoming_gpus = 0;      // of replicas draining for it
  std::vector<double> ttft;       // since the last observation (slo)
};

class Simulation : public ReplicaSimListener {
 public:
  explicit Simulation(const config::ServeSimConfig& cfg)
      : cfg_(cfg), dispatcher_(cfg.seed) {}

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
    RETURN_IF_ERROR(Build(trace));
    RETURN_IF_ERROR(MakeRequests(trace));
    Loop();
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
    if (d.autoscale >= 0) d.ttft.push_back(ToSeconds(now - o.arrival));
  }
  void OnFinished(SimRequest* r, Micros now) override {
    RequestOutcome& o = run_.requests[r->req.id];
    const ReplicaId rep = replica_of_[r->req.id];
    if (r->rejected_too_long) {
      o.reason = RejectReason::kPromptTooLong;
      dispatcher_.OnFinished(r->req, rep, -1, now);
    } else {
      o.finished = now;
      o.cached_tokens = r->cached_prompt_tokens;
      if (o.first_token < 0) o.first_token = now;
      dispatcher_.OnFinished(r->req, rep, r->output_tokens, now);
    }
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
      run_.deployment_gpus.push_back(d.replicas * d.tensor_parallel);
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
        ASSIGN_OR_RETURN(dep.autoscale,
                         autoscaler_.AddDeployment(d.name, d.autoscaling_config,
                                                   d.replicas, 0));
        run_.elastic = true;
      }
      dep.desired = d.replicas;
      deps_.push_back(std::move(dep));
      DeploymentCapacity cap;
      cap.autoscaling = d.autoscaling;
      cap.priority_class = d.priority_class;
      run_.capacity.push_back(std::move(cap));
      // The initial replicas are running at time 0.
      for (int i = 0; i < d.replicas; ++i) {
        RETURN_IF_ERROR(StartReplica(model, 0, /*warm=*/true));
      }
    }
    if (cfg_.cluster_gpus > 0) {
      run_.elastic = true;
      if (used_gpus_ > cfg_.cluster_gpus) {
        return absl::InvalidArgumentError(absl::StrCat(
            cfg_.source, ": the deployments' initial replicas take ",
            used_gpus_, " GPUs; cluster.gpus is ", cfg_.cluster_gpus));
      }
    }
    completions_.assign(run_.deployment_names.size(), 0);
    arrivals_.assign(run_.deployment_names.size(), 0);
    return absl::OkStatus();
  }

  void Log(Micros t, const char* kind, ModelId m, std::string message) {
    run_.events.push_back(
        {t, kind, run_.deployment_names[m], std::move(message)});
  }

  // A new replica of deployment `m`: warm ones serve at once (the initial
  // replicas), the others after a cold start.
  absl::Status StartReplica(ModelId m, Micros now, bool warm) {
    Dep& dep = deps_[m];
    const config::SimDeploymentSpec& d = *dep.spec;
    Replica rep;
    rep.deployment = m;
    if (d.kind == "llm") {
      LlmReplicaConfig rc;
      rc.latency = dep.latency;
      rc.kv_capacity_tokens = dep.latency.kv_capacity_tokens;
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
      tc.base_s = d.batching.base_s;
      tc.per_item_s = d.batching.per_item_s;
      auto sim = TensorReplicaSim::Create(tc);
      if (!sim.ok()) return DeploymentError(d, sim.status().message());
      rep.tensor = *std::move(sim);
    }
    rep.started = now;
    rep.last_used = now;
    const size_t id = replicas_.size();
    used_gpus_ += d.tensor_parallel;
    live_.insert(id);
    DeploymentCapacity& cap = run_.capacity[m];
    if (warm) {
      rep.state = Replica::State::kReady;
      ++dep.ready;
      replicas_.push_back(std::move(rep));
      Join(id);
    } else {
      rep.state = Replica::State::kStarting;
      ++dep.starting;
      ++cap.starts;
      const double cold = d.cold_start_s >= 0
                              ? d.cold_start_s
                              : cold_->Sample(d.model, d.tensor_parallel);
      cap.cold_start_s.push_back(cold);
      ready_.push({now + std::max<Micros>(1, FromSeconds(cold)), id});
      Log(now, "replica.started", m,
          absl::StrFormat("replica %d started (cold start %.3f s); %d GPUs "
                          "in use",
                          id, cold, used_gpus_));
      replicas_.push_back(std::move(rep));
    }
    run_.replicas.push_back({d.name, 0, 0, 0});
    cap.replicas_max = std::max(cap.replicas_max, Live(m));
    return absl::OkStatus();
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

  // Replicas of `m` holding GPUs (starting, ready or draining).
  int Live(ModelId m) const {
    int n = 0;
    for (size_t i : live_) n += replicas_[i].deployment == m;
    return n;
  }

  // A request left replica `id` (finished or refused).
  void Left(size_t id, Micros now) {
    Replica& r = replicas_[id];
    --r.in_flight;
    r.last_used = now;
    if (r.state == Replica::State::kDraining && r.in_flight == 0) {
      stopping_.push_back(id);  // stopped once the replica's step is over
    }
  }

  void Stop(size_t id, Micros now) {
    Replica& r = replicas_[id];
    if (r.state == Replica::State::kStopped) return;
    Dep& dep = deps_[r.deployment];
    if (r.state == Replica::State::kStarting) --dep.starting;
    if (r.state == Replica::State::kReady) {
      --dep.ready;
      dispatcher_.RemoveReplica(r.deployment, static_cast<ReplicaId>(id));
    }
    r.state = Replica::State::kStopped;
    r.stopped = now;
    live_.erase(id);
    used_gpus_ -= dep.spec->tensor_parallel;
    if (r.preempted_for >= 0) {
      deps_[r.preempted_for].incoming_gpus -= dep.spec->tensor_parallel;
    }
    freed_ = true;
    run_.capacity_end = std::max(run_.capacity_end, now);
    Log(now, "replica.stopped", r.deployment,
        absl::StrFormat("replica %d stopped; %d GPUs in use", id, used_gpus_));
  }

  // No new request; stopped when its in-flight ones are done.
  void Drain(size_t id, Micros now) {
    Replica& r = replicas_[id];
    if (r.in_flight == 0) return Stop(id, now);
    --deps_[r.deployment].ready;
    dispatcher_.RemoveReplica(r.deployment, static_cast<ReplicaId>(id));
    r.state = Replica::State::kDraining;
  }

  // Starts or stops replicas of `m` towards its desired count.
  void Reconcile(ModelId m, Micros now) {
    Dep& dep = deps_[m];
    const int tp = dep.spec->tensor_parallel;
    while (dep.starting + dep.ready < dep.desired) {
      if (!MakeRoom(m, tp, now)) {
        if (dep.pending_since == kNever) {
          dep.pending_since = now;
          Log(now, "replica.pending", m,
              absl::StrFormat("no room: %d of %d GPUs in use, %d GPUs "
                              "draining for it",
                              used_gpus_, cfg_.cluster_gpus,
                              dep.incoming_gpus));
        }
        break;
      }
      dep.pending_since = kNever;
      const absl::Status st = StartReplica(m, now, /*warm=*/false);
      CHECK(st.ok()) << st.message();  // the same config started at time 0
    }
    if (dep.starting + dep.ready >= dep.desired) dep.pending_since = kNever;
    while (dep.starting + dep.ready > dep.desired) {
      // Starting replicas first (the latest), then the least busy ready one.
      size_t pick = replicas_.size();
      for (size_t i : live_) {
        const Replica& r = replicas_[i];
        if (r.deployment != m) continue;
        if (r.state == Replica::State::kStarting) {
          pick = i;
        } else if (r.state == Replica::State::kReady &&
                   (pick == replicas_.size() ||
                    (replicas_[pick].state == Replica::State::kReady &&
                     r.in_flight < replicas_[pick].in_flight))) {
          pick = i;
        }
      }
      CHECK(pick < replicas_.size());
      if (replicas_[pick].state == Replica::State::kStarting) {
        Stop(pick, now);
      } else {
        Drain(pick, now);
      }
    }
  }

  // Frees `need` GPUs for deployment `m` if it can (see serve_sim.h): true
  // when they are free now. Preempted replicas free theirs once drained.
  bool MakeRoom(ModelId m, int need, Micros now) {
    if (cfg_.cluster_gpus <= 0) return true;
    int64_t free = cfg_.cluster_gpus - used_gpus_;
    if (free >= need) return true;
    Dep& dep = deps_[m];
    // Swap candidates (autoscale/swap.h, the live controller's rule), and
    // the rest of the lower classes for preemption.
    std::vector<autoscale::SwapCandidate> candidates;
    for (size_t i : live_) {
      const Replica& r = replicas_[i];
      if (r.state != Replica::State::kReady || r.deployment == m) continue;
      const Dep& v = deps_[r.deployment];
      candidates.push_back(
          {static_cast<int64_t>(i), static_cast<int>(r.deployment), v.cls,
           v.autoscale >= 0, v.preemptible,
           r.in_flight == 0 && dispatcher_.queue(r.deployment).size() == 0,
           r.last_used});
    }
    std::vector<size_t> idle, busy;
    absl::flat_hash_set<size_t> swappable;
    for (const autoscale::SwapCandidate& c :
         autoscale::SwapOrder(candidates, static_cast<int>(m), dep.cls, now,
                              FromSeconds(cfg_.swap_min_idle_s))) {
      idle.push_back(static_cast<size_t>(c.id));
      swappable.insert(static_cast<size_t>(c.id));
    }
    for (const autoscale::SwapCandidate& c : candidates) {
      if (c.preemptible && c.class_rank > dep.cls &&
          !swappable.contains(static_cast<size_t>(c.id))) {
        busy.push_back(static_cast<size_t>(c.id));
      }
    }
    std::sort(busy.begin(), busy.end(), [&](size_t a, size_t b) {
      const int ca = deps_[replicas_[a].deployment].cls;
      const int cb = deps_[replicas_[b].deployment].cls;
      if (ca != cb) return ca > cb;
      if (replicas_[a].in_flight != replicas_[b].in_flight) {
        return replicas_[a].in_flight < replicas_[b].in_flight;
      }
      return a > b;  // the most recent first
    });
    // The fewest victims, idle ones first, that make it fit.
    int64_t reach = free + dep.incoming_gpus;
    size_t n_idle = 0, n_busy = 0;
    while (reach < need && n_idle < idle.size()) {
      reach +=
          deps_[replicas_[idle[n_idle++]].deployment].spec->tensor_parallel;
    }
    const int64_t by_swap = reach;
    while (reach < need && n_busy < busy.size()) {
      reach +=
          deps_[replicas_[busy[n_busy++]].deployment].spec->tensor_parallel;
    }
    if (reach < need) return false;  // pending until GPUs are freed
    for (size_t k = 0; k < n_idle; ++k) {
      const size_t id = idle[k];
      const ModelId vm = replicas_[id].deployment;
      Dep& v = deps_[vm];
      Log(now, "replica.evicted", vm,
          absl::StrFormat("replica %d swapped out for %s (class %s): idle "
                          "%.3f s, least recently used of class %s or lower",
                          id, run_.deployment_names[m],
                          dep.spec->priority_class,
                          ToSeconds(now - replicas_[id].last_used),
                          dep.spec->priority_class));
      Stop(id, now);
      --v.desired;
      autoscaler_.SetTarget(v.autoscale, v.desired);
      ++run_.capacity[vm].evictions;
    }
    if (by_swap >= need && dep.incoming_gpus == 0) return true;
    for (size_t k = 0; k < n_busy; ++k) {
      const size_t id = busy[k];
      const ModelId vm = replicas_[id].deployment;
      replicas_[id].preempted_for = static_cast<int>(m);
      dep.incoming_gpus += deps_[vm].spec->tensor_parallel;
      ++run_.capacity[vm].preemptions;
      Log(now, "replica.preempted", vm,
          absl::StrFormat("replica %d (class %s, %d in flight) preempted "
                          "for %s (class %s); draining",
                          id, deps_[vm].spec->priority_class,
                          replicas_[id].in_flight, run_.deployment_names[m],
                          dep.spec->priority_class));
      Drain(id, now);
      // Its deployment keeps its count: the replica waits for room again.
      Dep& v = deps_[vm];
      if (v.pending_since == kNever) v.pending_since = now;
    }
    return cfg_.cluster_gpus - used_gpus_ >= need;
  }

  // With swap_min_idle_s, when a pending replica may next find an idle
  // replica old enough to swap out (kNever: none pending, or no such wait).
  Micros NextSwapChance(Micros now) const {
    if (cfg_.swap_min_idle_s <= 0) return kNever;
    bool pending = false;
    for (const Dep& d : deps_) pending |= d.pending_since != kNever;
    if (!pending) return kNever;
    const Micros min_idle = FromSeconds(cfg_.swap_min_idle_s);
    Micros next = kNever;
    for (size_t i : live_) {
      const Replica& r = replicas_[i];
      if (r.state != Replica::State::kReady || r.in_flight > 0) continue;
      const Micros t = r.last_used + min_idle;
      if (t > now) next = std::min(next, t);
    }
    return next;
  }

  // GPUs were freed: pending replicas start, by class, then waiting time.
  void ReconcilePending(Micros now) {
    freed_ = false;
    std::vector<ModelId> pending;
    for (size_t m = 0; m < deps_.size(); ++m) {
      if (deps_[m].pending_since != kNever) pending.push_back(m);
    }
    std::sort(pending.begin(), pending.end(), [&](ModelId a, ModelId b) {
      if (deps_[a].cls != deps_[b].cls) return deps_[a].cls < deps_[b].cls;
      if (deps_[a].pending_since != deps_[b].pending_since) {
        return deps_[a].pending_since < deps_[b].pending_since;
      }
      return a < b;
    });
    for (ModelId m : pending) Reconcile(m, now);
  }

  void Observe(ModelId m, Micros now) {
    Dep& dep = deps_[m];
    autoscale::Observation o;
    o.in_flight = dispatcher_.outstanding(m);
    o.queued = static_cast<int64_t>(dispatcher_.queue(m).size());
    o.ready = dep.ready;
    o.starting = std::max(dep.starting, dep.desired - dep.ready);
    observed_load_ |= o.in_flight + o.queued > 0;
    o.ttft_samples_s = std::move(dep.ttft);
    dep.ttft.clear();
    autoscaler_.Observe(dep.autoscale, now, o);
  }

  // Observes every autoscaled deployment, evaluates, carries the decisions
  // out.
  void Autoscale(Micros now) {
    observed_load_ = false;
    for (size_t m = 0; m < deps_.size(); ++m) {
      if (deps_[m].autoscale >= 0) Observe(static_cast<ModelId>(m), now);
    }
    Decide(now);
  }

  void Decide(Micros now) {
    decisions_.clear();
    autoscaler_.Evaluate(now, &decisions_);
    last_evaluate_ = now;
    for (const autoscale::Decision& d : decisions_) {
      const ModelId m = deployment_ids_.at(d.deployment);
      ++run_.capacity[m].decisions[autoscale::ReasonName(d.reason)];
      Log(now, "deployment.autoscaled", m,
          absl::StrCat("from ", d.from, " to ", d.to, " replicas (",
                       autoscale::ReasonName(d.reason), ": ",
                       d.signals.ToString(), ")"));
      deps_[m].desired = d.to;
      Reconcile(m, now);
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
    for (size_t i = 0; i < n; ++i) {
      TraceRequest& tr = trace.requests[i];
      const std::string& tenant =
          tr.tenant.empty() ? cfg_.workload.tenant : tr.tenant;
      const std::string& model =
          tr.model.empty() ? cfg_.workload.deployment : tr.model;
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
    for (const Dep& dep : deps_) s.replicas.push_back(dep.starting + dep.ready);
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
    const bool autoscaling = autoscaler_.num_deployments() > 0;
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
      Micros t_control = ready_.empty() ? kNever : ready_.top().first;
      Micros t_deadline = kNever;
      if (autoscaling) {
        // Periodic observations while there is work; after it, only the
        // autoscaler's own timers (idle timeouts, delays).
        // Requests held where no replica can start (nothing frees GPUs)
        // end the run unserved rather than keep it going.
        const bool busy = next_arrival < n || !events_.empty() ||
                          !ready_.empty() ||
                          (observed_load_ && queued_total_ == 0);
        if (busy) t_control = std::min(t_control, next_tick);
        t_deadline = autoscaler_.NextDeadline();
        if (t_deadline <= last_evaluate_) t_deadline = kNever;
        t_control = std::min(t_control, t_deadline);
      }
      const Micros t_swap = NextSwapChance(now);
      now = std::min({t_event, t_arrival, t_timeout, t_control, t_swap});
      if (now == kNever) break;
      if (now == t_swap) freed_ = true;  // retry the pending replicas
      while (next_sample <= now) {
        Sample(next_sample);
        next_sample += sample_every;
      }
      // Replicas ready now.
      while (!ready_.empty() && ready_.top().first == now) {
        const size_t id = ready_.top().second;
        ready_.pop();
        Replica& rep = replicas_[id];
        if (rep.state != Replica::State::kStarting) continue;  // cancelled
        rep.state = Replica::State::kReady;
        rep.last_used = now;
        Dep& dep = deps_[rep.deployment];
        --dep.starting;
        ++dep.ready;
        Join(id);
        run_.capacity_end = std::max(run_.capacity_end, now);
        Log(now, "replica.ready", rep.deployment,
            absl::StrFormat("replica %d ready after %.3f s", id,
                            ToSeconds(now - rep.started)));
      }
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
      StopDrained(now);
      // GPUs just freed go to the pending replicas (by class) before any
      // new decision may take them.
      if (freed_) ReconcilePending(now);
      // Arrivals.
      bool held_arrival = false;
      while (next_arrival < n &&
             sim_requests_[next_arrival].req.arrival == now) {
        const serving::Request& r = sim_requests_[next_arrival].req;
        ++arrivals_[r.model];
        const serving::Verdict v = dispatcher_.Submit(r, now);
        if (v.admitted()) {
          SetQueued(r.tenant, +1, now);
          const Dep& dep = deps_[r.model];
          if (dep.ready == 0) {
            run_.requests[r.id].held = true;
            // At zero replicas: the autoscaler hears of it at once.
            if (dep.autoscale >= 0 && autoscaler_.target(dep.autoscale) == 0) {
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
      if (freed_) ReconcilePending(now);
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
          dispatcher_.OnFinished(a.request, a.replica, -1, now);
          Left(a.replica, now);
        }
        PublishLoad(a.replica);
        Schedule(a.replica);
      }
      StopDrained(now);
      if (freed_) ReconcilePending(now);
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
          (rep.stopped >= 0 ? rep.stopped : capacity_end) - rep.started);
      cap.replica_seconds += held;
      cap.gpu_seconds += held * deps_[rep.deployment].spec->tensor_parallel;
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

  // Draining replicas whose last request left stop.
  void StopDrained(Micros now) {
    for (size_t id : stopping_) {
      if (replicas_[id].state == Replica::State::kDraining &&
          replicas_[id].in_flight == 0) {
        Stop(id, now);
      }
    }
    stopping_.clear();
  }

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
  std::vector<int64_t> arrivals_, completions_;
  std::vector<Dep> deps_;  // by ModelId
  autoscale::Autoscaler autoscaler_;
  std::vector<autoscale::Decision> decisions_;  // scratch
  std::unique_ptr<ColdStartModel> cold_;
  int64_t used_gpus_ = 0;
  int64_t queued_total_ = 0;
  bool freed_ = false;
  // The last observation saw load: observe again once it is gone.
  bool observed_load_ =
      false;  // GPUs were freed since the last ReconcilePending
  Micros last_evaluate_ = -1;
  std::vector<size_t> stopping_;  // drained replicas to stop
  absl::btree_set<size_t> live_;  // replicas not stopped, by id
  // (ready time, replica) min-heap of starting replicas.
  std::priority_queue<std::pair<Micros, size_t>,
                      std::vector<std::pair<Micros, size_t>>, std::greater<>>
      ready_;
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
