#include "sim/serve_sim.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "serving/batcher.h"
#include "serving/dispatcher.h"
#include "serving/latency_model.h"
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
  ModelId deployment = 0;
  std::unique_ptr<LlmReplicaSim> llm;
  std::unique_ptr<TensorReplicaSim> tensor;
  Micros NextEventTime() const {
    return llm ? llm->NextEventTime() : tensor->NextEventTime();
  }
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
    ReplicaId next_replica = 0;
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
      for (int i = 0; i < d.replicas; ++i) {
        Replica rep;
        rep.deployment = model;
        if (d.kind == "llm") {
          LlmReplicaConfig rc;
          rc.latency = latency;
          rc.kv_capacity_tokens = latency.kv_capacity_tokens;
          rc.max_num_seqs = d.engine.max_num_seqs;
          rc.max_num_batched_tokens = d.engine.max_num_batched_tokens;
          rc.block_tokens = trace.block_tokens > 0 ? trace.block_tokens
                                                   : d.engine.block_tokens;
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
        int64_t kv_budget = 0;
        if (d.kind == "llm") {
          kv_budget = d.engine.kv_budget_tokens < 0 ? latency.kv_capacity_tokens
                                                    : d.engine.kv_budget_tokens;
        }
        dispatcher_.AddReplica(model, next_replica, d.max_ongoing_requests,
                               kv_budget);
        replicas_.push_back(std::move(rep));
        run_.replicas.push_back({d.name, 0, 0, 0});
        ++next_replica;
      }
    }
    completions_.assign(run_.deployment_names.size(), 0);
    arrivals_.assign(run_.deployment_names.size(), 0);
    return absl::OkStatus();
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
      now = std::min({t_event, t_arrival, t_timeout});
      if (now == kNever) break;
      while (next_sample <= now) {
        Sample(next_sample);
        next_sample += sample_every;
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
      // Arrivals.
      while (next_arrival < n &&
             sim_requests_[next_arrival].req.arrival == now) {
        const serving::Request& r = sim_requests_[next_arrival].req;
        ++arrivals_[r.model];
        const serving::Verdict v = dispatcher_.Submit(r, now);
        if (v.admitted()) {
          SetQueued(r.tenant, +1, now);
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
      assigned.clear();
      dispatcher_.Dispatch(now, &assigned);
      for (const serving::Assignment& a : assigned) {
        SimRequest& s = sim_requests_[a.request.id];
        s.req = a.request;  // as dispatched (carries its dispatch time)
        replica_of_[a.request.id] = a.replica;
        run_.requests[a.request.id].dispatched = now;
        SetQueued(a.request.tenant, -1, now);
        Replica& rep = replicas_[a.replica];
        if (rep.llm) {
          rep.llm->Enqueue(&s, now);
        } else if (!rep.tensor->Enqueue(&s, now)) {
          // The batcher's own queue bound (max_queue_size) is full.
          run_.requests[a.request.id].reason = RejectReason::kModelQueueFull;
          dispatcher_.OnFinished(a.request, a.replica, -1, now);
        }
        PublishLoad(a.replica);
        Schedule(a.replica);
      }
    }
    Sample(next_sample);
    Micros end = 0;
    for (const RequestOutcome& o : run_.requests) {
      end = std::max({end, o.arrival, o.finished});
    }
    run_.simulated_end = end;
    for (size_t r = 0; r < replicas_.size(); ++r) {
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
  std::vector<int64_t> arrivals_, completions_;
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
