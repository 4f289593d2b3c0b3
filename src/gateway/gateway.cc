#include "gateway/gateway.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "gateway/protocol.h"
#include "nlohmann/json.hpp"
#include "runtime/real_clock.h"

namespace gpusched::gateway {

using nlohmann::json;
using serving::RejectReason;

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Create(
    const GatewayConfig& config, Authenticator authenticate,
    net::UpstreamOptions upstream) {
  if (config.classes.empty()) {
    return absl::InvalidArgumentError("gateway: at least one priority class");
  }
  std::unique_ptr<Gateway> g(new Gateway());
  absl::MutexLock lock(&g->mu_);  // not shared yet; for the analysis
  g->authenticate_ = std::move(authenticate);
  g->config_ = config;
  g->upstream_options_ = upstream;
  g->upstreams_.push_back(std::make_unique<net::UpstreamClient>(upstream));
  g->dispatcher_ = std::make_unique<serving::Dispatcher>(config.seed);
  serving::TenantSpec shadow;
  shadow.name = kShadowTenant;
  auto id = g->dispatcher_->AddTenant(shadow, NowMicros());
  if (!id.ok()) return id.status();
  GatewayTenant t;
  t.spec = shadow;
  Tenant& st = g->tenants_[kShadowTenant] =
      Tenant{std::make_shared<const GatewayTenant>(t), *id, false, {}};
  g->shadow_tenant_ = st;
  return g;
}

Gateway::~Gateway() {
  // The upstream clients' threads stop first: no callback runs after this.
  // Stop, not reset: a callback still running may dispatch the next job
  // through upstreams_, which must stay as it is until every thread ended
  // (TSan in CI: reset wrote the pointer a callback was reading).
  for (auto& u : upstreams_) u->Stop();
}

void Gateway::UseIoContext(boost::asio::io_context& ioc) {
  net::UpstreamOptions o = upstream_options_;
  o.io_context = &ioc;
  auto client = std::make_unique<net::UpstreamClient>(o);
  absl::MutexLock lock(&mu_);
  upstreams_.push_back(std::move(client));
}

net::UpstreamClient* Gateway::Upstream() {
  absl::MutexLock lock(&mu_);
  return upstreams_.back().get();
}

// --- Run-time changes -----------------------------------------------------

absl::StatusOr<serving::ModelId> Gateway::NewQueue(const Model& m) {
  serving::DeploymentSpec spec = m.config.spec;
  if (spec.queue.classes.empty()) {
    for (const std::string& c : config_.classes) {
      spec.queue.classes.push_back(
          {c, serving::QueueOrder::kFair, m.config.queue_timeout});
    }
  }
  auto id = dispatcher_->AddDeployment(spec);
  if (!id.ok()) return id.status();
  queues_.push_back({*id, spec.name, {}});
  for (const auto& [name, t] : tenants_) {
    if (!t.deleted && Grants(t, spec.name))
      dispatcher_->DeclareTenant(*id, t.id);
  }
  return *id;
}

// --- Routes
// -------------------------------------------------------------------

absl::Status Gateway::UpsertRoute(const GatewayRoute& route) {
  std::vector<int> weights;
  for (const GatewayRouteTarget& t : route.targets) weights.push_back(t.weight);
  auto split = serving::WeightedSplit::Create(weights);
  if (!split.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("route '", route.name, "': ", split.status().message()));
  }
  Route r{route, *std::move(split), {}, absl::ToUnixSeconds(absl::Now())};
  for (const GatewayRouteTarget& t : route.targets) {
    r.cells.push_back(config_.metrics
                          ? config_.metrics->RouteCell(route.name, t.version)
                          : nullptr);
  }
  absl::MutexLock lock(&mu_);
  if (auto it = models_.find(route.name);
      it != models_.end() && !it->second.deleted) {
    return absl::InvalidArgumentError(
        absl::StrCat("route '", route.name, "': a deployment has this name"));
  }
  if (auto it = routes_.find(route.name); it != routes_.end()) {
    r.created = it->second.created;
    // The same weights again (a restart of the route's config, a pass that
    // changed something else): the split's credits go on.
    if (it->second.split.weights() == weights) r.split = it->second.split;
  }
  routes_.insert_or_assign(route.name, std::move(r));
  for (const GatewayRouteTarget& t : route.targets)
    DeclareTenants(t.deployment);
  return absl::OkStatus();
}

void Gateway::RemoveRoute(const std::string& name) {
  absl::MutexLock lock(&mu_);
  routes_.erase(name);
}

absl::Status Gateway::ServeRoute(const config::ModelRouteSpec& spec,
                                 const std::vector<int>& weights) {
  if (weights.size() != spec.targets.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("route '", spec.name, "': ", weights.size(),
                     " weights for ", spec.targets.size(), " targets"));
  }
  GatewayRoute r;
  r.name = spec.name;
  r.sticky = spec.sticky;
  for (size_t i = 0; i < spec.targets.size(); ++i) {
    r.targets.push_back(
        {spec.targets[i].deployment, spec.targets[i].version, weights[i]});
  }
  if (spec.shadow) {
    r.shadow_deployment = spec.shadow->deployment;
    r.shadow_percent = spec.shadow->percent;
  }
  return UpsertRoute(r);
}

std::vector<control::VersionSample> Gateway::SamplesSince(
    const std::string& deployment, Micros since) {
  return stats_.SamplesSince(deployment, since);
}

void Gateway::DeclareTenants(const std::string& deployment) {
  auto it = models_.find(deployment);
  if (it == models_.end() || it->second.deleted) return;
  for (const auto& [name, t] : tenants_) {
    if (!t.deleted && Grants(t, deployment)) {
      dispatcher_->DeclareTenant(it->second.current, t.id);
    }
  }
}

std::optional<absl::StatusOr<Gateway::RouteChoice>> Gateway::PickRoute(
    const Tenant& t, const std::string& name, const std::string& version,
    const std::string& session) {
  absl::MutexLock lock(&mu_);
  auto it = routes_.find(name);
  if (it == routes_.end() || !Listed(t, name)) return std::nullopt;
  Route& r = it->second;
  int i = -1;
  std::vector<std::string> versions;
  for (size_t j = 0; j < r.config.targets.size(); ++j) {
    versions.push_back(r.config.targets[j].version);
    if (!version.empty() && r.config.targets[j].version == version) {
      i = static_cast<int>(j);
    }
  }
  if (!version.empty() && i < 0) {
    return absl::StatusOr<RouteChoice>(absl::NotFoundError(
        absl::StrCat("model '", name, "' has no version '", version,
                     "'; its versions: ", absl::StrJoin(versions, ", "))));
  }
  if (version.empty()) {
    std::optional<uint64_t> key;
    if (r.config.sticky == "tenant") {
      key = serving::StickyHash(t.config->spec.name);
    } else if (r.config.sticky == "session" && !session.empty()) {
      key = serving::StickyHash(session);
    }
    // Not sticky: exact shares (a canary at 5% never gets more than 5%).
    i = key ? r.split.Pick(*key)
            : r.split.Next(serving::StickyHash(
                  absl::StrCat(config_.seed, ":", route_draws_++)));
  }
  std::string shadow;
  if (!r.config.shadow_deployment.empty() &&
      serving::StickyHash(
          absl::StrCat(config_.seed, ":shadow:", route_draws_++)) %
              100 <
          static_cast<uint64_t>(r.config.shadow_percent)) {
    shadow = r.config.shadow_deployment;
  }
  const GatewayRouteTarget& target = r.config.targets[i];
  return absl::StatusOr<RouteChoice>(
      RouteChoice{target.deployment, target.version, r.cells[i],
                  std::move(versions), std::move(shadow)});
}

bool Gateway::RouteReady(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = routes_.find(name);
  if (it == routes_.end()) return false;
  for (const GatewayRouteTarget& t : it->second.config.targets) {
    if (t.weight == 0) continue;
    auto m = models_.find(t.deployment);
    if (m == models_.end() || m->second.deleted || m->second.ready.empty()) {
      return false;
    }
  }
  return true;
}

absl::Status Gateway::UpsertDeployment(const GatewayDeployment& d) {
  if (d.max_ongoing_requests < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "deployment '", d.spec.name, "': max_ongoing_requests must be >= 1"));
  }
  absl::MutexLock lock(&mu_);
  auto it = models_.find(d.spec.name);
  if (it != models_.end() && !it->second.deleted) {
    Model& m = it->second;
    const bool same_queue =
        m.config.spec.router.policy == d.spec.router.policy &&
        m.config.spec.max_queue_size == d.spec.max_queue_size &&
        m.config.queue_timeout == d.queue_timeout &&
        m.config.spec.queue.classes.size() == d.spec.queue.classes.size();
    const GatewayDeployment old = m.config;
    m.config = d;
    if (same_queue && old.max_ongoing_requests == d.max_ongoing_requests &&
        old.kv_budget_tokens == d.kv_budget_tokens) {
      return absl::OkStatus();
    }
    auto id = NewQueue(m);
    if (!id.ok()) {
      m.config = old;
      return id.status();
    }
    m.retired.push_back(m.current);
    m.current = *id;
    SyncReplicas(m.current, m);
    return absl::OkStatus();
  }
  Model m;
  m.config = d;
  m.created = absl::ToUnixSeconds(absl::Now());
  auto id = NewQueue(m);
  if (!id.ok()) return id.status();
  if (it != models_.end()) {  // re-created while the old one drains
    m.retired = it->second.retired;
    m.retired.push_back(it->second.current);
    m.ready = it->second.ready;
  }
  m.current = *id;
  SyncReplicas(m.current, m);
  models_[d.spec.name] = std::move(m);
  return absl::OkStatus();
}

void Gateway::SyncReplicas(serving::ModelId id, const Model& m) {
  Queue& q = queues_[id];
  std::map<std::string, serving::ReplicaId> keep;
  for (const net::Endpoint& ep : m.ready) {
    const std::string key = EndpointKey(ep);
    if (suspect_until_.contains(key)) continue;
    auto it = q.replicas.find(key);
    if (it != q.replicas.end()) {
      keep.insert(*it);
      q.replicas.erase(it);
      continue;
    }
    const serving::ReplicaId r = next_replica_++;
    dispatcher_->AddReplica(id, r, m.config.max_ongoing_requests,
                            m.config.kv_budget_tokens,
                            serving::StickyHash(key));
    endpoints_[r] = {ep, key};
    keep[key] = r;
  }
  for (const auto& [key, r] : q.replicas) {
    dispatcher_->RemoveReplica(id, r);  // in-flight ones finish
  }
  q.replicas = std::move(keep);
}

void Gateway::SyncAll(const Model& m) {
  SyncReplicas(m.current, m);
  for (serving::ModelId r : m.retired) SyncReplicas(r, m);
}

void Gateway::RemoveDeployment(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(name);
  if (it != models_.end()) it->second.deleted = true;
}

void Gateway::SetReplicas(const std::string& name,
                          const std::vector<net::Endpoint>& ready) {
  std::vector<Pending> failed;
  {
    absl::MutexLock lock(&mu_);
    auto it = models_.find(name);
    if (it == models_.end()) return;
    Model& m = it->second;
    m.ready = ready;
    // The controller's view is authoritative: it has probed these.
    for (const net::Endpoint& ep : ready) {
      suspect_until_.erase(EndpointKey(ep));
    }
    SyncAll(m);
    if (m.deleted && ready.empty()) {
      FailQueued(m.current, &failed);
      for (serving::ModelId r : m.retired) FailQueued(r, &failed);
      models_.erase(it);
    }
  }
  for (Pending& p : failed) {
    GatewayMetrics::Rejected(p.cells, RejectReason::kNoReplica);
    FailPending(p, http::status::service_unavailable,
                "the deployment was deleted before the request could be served",
                "overloaded_error");
  }
  Pump();
}

void Gateway::FailQueued(serving::ModelId id, std::vector<Pending>* out) {
  std::vector<serving::Request> drained;
  dispatcher_->DrainQueue(id, NowMicros(), &drained);
  for (const serving::Request& r : drained) {
    auto it = pending_.find(r.id);
    if (it == pending_.end()) continue;
    out->push_back(std::move(it->second));
    pending_.erase(it);
  }
}

absl::Status Gateway::ServeDeployment(const config::DeploymentSpec& s,
                                      const std::vector<std::string>& classes) {
  GatewayDeployment g;
  g.spec.name = s.name;
  g.spec.router = s.router;
  g.spec.max_queue_size = s.max_queue_size;
  if (s.autoscaling) {
    g.queue_timeout = static_cast<Micros>(s.hold_timeout_s * kMicrosPerSecond);
    g.max_held = s.max_held;
  }
  serving::QueueOrder order = serving::QueueOrder::kFair;
  (void)serving::ParseQueueOrder(s.queue_order, &order);
  for (const std::string& c : classes) {
    g.spec.queue.classes.push_back({c, order, g.queue_timeout});
  }
  g.max_ongoing_requests = s.max_ongoing_requests;
  g.kv_budget_tokens = s.kv_budget_tokens;
  return UpsertDeployment(g);
}

absl::Status Gateway::ServeTenant(const config::TenantSpec& spec) {
  GatewayTenant t;
  t.spec = config::ServingTenant(spec);
  t.priority = spec.priority_class;
  t.models = spec.models;
  return UpsertTenant(t);
}

std::vector<double> Gateway::TtftSince(const std::string& deployment,
                                       Micros since) {
  return stats_.TtftSince(deployment, since);
}

absl::Status Gateway::UpsertTenant(const GatewayTenant& t) {
  absl::MutexLock lock(&mu_);
  auto it = tenants_.find(t.spec.name);
  if (it != tenants_.end()) {
    RETURN_IF_ERROR(
        dispatcher_->UpdateTenant(it->second.id, t.spec, NowMicros()));
    it->second.config = std::make_shared<const GatewayTenant>(t);
    it->second.deleted = false;
  } else {
    auto id = dispatcher_->AddTenant(t.spec, NowMicros());
    if (!id.ok()) return id.status();
    it = tenants_
             .emplace(
                 t.spec.name,
                 Tenant{
                     std::make_shared<const GatewayTenant>(t), *id, false, {}})
             .first;
  }
  for (const std::string& name : AllowedModels(it->second)) {
    dispatcher_->DeclareTenant(models_.at(name).current, it->second.id);
  }
  return absl::OkStatus();
}

void Gateway::RemoveTenant(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = tenants_.find(name);
  if (it != tenants_.end()) it->second.deleted = true;
}

void Gateway::UpdateEngineLoad(const net::Endpoint& ep,
                               const serving::EngineLoad& load) {
  absl::MutexLock lock(&mu_);
  const std::string key = EndpointKey(ep);
  for (const Queue& q : queues_) {
    auto it = q.replicas.find(key);
    if (it != q.replicas.end()) {
      dispatcher_->UpdateEngineLoad(q.id, it->second, load);
    }
  }
}

DeploymentLoad Gateway::Load(const std::string& name) {
  absl::MutexLock lock(&mu_);
  DeploymentLoad load;
  auto it = models_.find(name);
  if (it == models_.end()) return load;
  const Model& m = it->second;
  load.replicas = static_cast<int>(m.ready.size());
  auto add = [&](serving::ModelId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    load.queued += dispatcher_->queue(id).size();
    load.in_flight += dispatcher_->outstanding(id);
  };
  add(m.current);
  for (serving::ModelId r : m.retired) add(r);
  if (m.ready.empty() && load.queued > 0) {
    load.held = load.queued;
    load.held_since = m.held_since;
  }
  return load;
}

std::map<std::string, runtime::TenantUsage> Gateway::TenantUsages() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, runtime::TenantUsage> out;
  for (const auto& [name, t] : tenants_) {
    if (t.deleted || t.id >= usage_.size()) continue;
    const runtime::TenantUsage& u = usage_[t.id];
    if (u.requests > 0) out[name] = u;
  }
  return out;
}

void Gateway::SetTenantShares(
    const std::map<std::string, serving::TenantShare>& shares) {
  absl::MutexLock lock(&mu_);
  const Micros now = NowMicros();
  for (auto& [name, t] : tenants_) {
    auto it = shares.find(name);
    const serving::TenantShare share =
        it == shares.end() ? serving::TenantShare{} : it->second;
    if (share == t.share) continue;
    t.share = share;
    dispatcher_->SetTenantShare(t.id, share, now);
  }
}

int64_t Gateway::InFlightOn(const net::Endpoint& ep) {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(EndpointKey(ep));
  return it == in_flight_.end() ? 0 : it->second;
}

void Gateway::SetDemandSink(DemandSink sink) {
  absl::MutexLock lock(&mu_);
  demand_sink_ = std::move(sink);
}

int64_t Gateway::Queued(const Model& m) const {
  int64_t queued = dispatcher_->queue(m.current).size();
  for (serving::ModelId r : m.retired) queued += dispatcher_->queue(r).size();
  return queued;
}

void Gateway::SetEventSink(std::function<void(store::Event)> sink) {
  absl::MutexLock lock(&rejections_mu_);
  event_sink_ = std::move(sink);
}

void Gateway::NoteRejection(const std::string& deployment,
                            const std::string& tenant,
                            serving::RejectReason reason) {
  absl::MutexLock lock(&rejections_mu_);
  if (event_sink_) ++rejections_[{deployment, tenant, reason}];
}

void Gateway::FlushRejections() {
  std::map<std::tuple<std::string, std::string, serving::RejectReason>, int64_t>
      batch;
  std::function<void(store::Event)> sink;
  {
    absl::MutexLock lock(&rejections_mu_);
    const Micros now = NowMicros();
    if (rejections_.empty() || now < next_rejection_flush_) return;
    next_rejection_flush_ = now + kMicrosPerSecond;
    batch.swap(rejections_);
    sink = event_sink_;
  }
  const Micros wall = runtime::WallClock::Get().Now();
  for (const auto& [key, n] : batch) {
    const auto& [deployment, tenant, reason] = key;
    store::Event e;
    e.time = wall;
    e.kind = "request.rejected";
    e.deployment = deployment;
    e.tenant = tenant;
    e.message = absl::StrCat(n, n == 1 ? " request" : " requests", " of ",
                             tenant, " to ", deployment,
                             " rejected: ", serving::RejectReasonName(reason));
    e.details = json{{"count", n}, {"reason", RejectReasonName(reason)}};
    sink(std::move(e));
  }
}

void Gateway::Tick() {
  std::vector<serving::Request> expired;
  std::vector<Pending> failed;
  {
    absl::MutexLock lock(&mu_);
    dispatcher_->Expire(NowMicros(), &expired);
    for (const serving::Request& r : expired) {
      auto it = pending_.find(r.id);
      if (it == pending_.end()) continue;
      failed.push_back(std::move(it->second));
      pending_.erase(it);
    }
    // Suspects get another chance after a while.
    const Micros now = NowMicros();
    bool expired_suspect = false;
    for (auto it = suspect_until_.begin(); it != suspect_until_.end();) {
      if (it->second <= now) {
        expired_suspect = true;
        suspect_until_.erase(it++);
      } else {
        ++it;
      }
    }
    if (expired_suspect) {
      for (auto& [name, m] : models_) SyncAll(m);
    }
    // Old queues that are empty and idle are forgotten.
    for (auto& [name, m] : models_) {
      std::erase_if(m.retired,
                    [&](serving::ModelId id)
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                          if (!dispatcher_->queue(id).empty() ||
                              dispatcher_->outstanding(id)) {
                            return false;
                          }
                          for (const auto& [key, r] : queues_[id].replicas) {
                            dispatcher_->RemoveReplica(id, r);
                          }
                          queues_[id].replicas.clear();
                          return true;
                        });
    }
  }
  FlushRejections();
  for (Pending& p : failed) {
    GatewayMetrics::Rejected(p.cells, RejectReason::kQueueTimeout);
    NoteRejection(p.deployment, p.tenant, RejectReason::kQueueTimeout);
    FailPending(p, http::status::service_unavailable,
                "request rejected: queue_timeout (no replica could take it in "
                "time; the deployment may be starting or overloaded)",
                "overloaded_error", kMicrosPerSecond);
  }
  Pump();
}

void Gateway::Pump() {
  std::vector<Job> jobs;
  {
    absl::MutexLock lock(&mu_);
    DispatchLocked(&jobs);
  }
  for (Job& j : jobs) Proxy(std::move(j));
}

void Gateway::DispatchLocked(std::vector<Job>* jobs) {
  assigned_.clear();
  const Micros now = NowMicros();
  dispatcher_->Dispatch(now, &assigned_);
  net::UpstreamClient* upstream = upstreams_.back().get();
  for (const serving::Assignment& a : assigned_) {
    Pending& p = pending_.at(a.request.id);
    p.request = a.request;  // as dispatched
    ++p.attempts;
    if (p.held) {
      p.held = false;
      GatewayMetrics::Released(p.cells, ToSeconds(now - p.request.arrival));
    }
    const Replica& rep = endpoints_.at(a.replica);
    p.endpoint = rep.key;
    ++in_flight_[rep.key];
    GatewayStats::Finish finish;  // completed when the request ends
    finish.deployment = queues_[a.request.model].name;
    finish.tenant = p.tenant;
    jobs->push_back({a, p.body, p.target, p.stream, p.protocol, p.responder,
                     rep.ep, upstream, p.cells, std::move(finish), p.resume});
  }
}

void Gateway::Proxy(Job job) {
  net::HttpRequest up{http::verb::post, job.target, 11};
  up.set(http::field::content_type, "application/json");
  up.body() = *job.body;
  struct Relay {
    unsigned status = 0;
    bool head = false;
    std::string text;  // non-streamed body, or the tail of a stream
    int32_t events = 0;
    Micros first_byte = 0;  // the head (not streamed) or first chunk
    // The dispatcher was told of the first token (its prompt is prefilled:
    // the prefix- and latency-aware routers count what is left).
    bool prefilled = false;
  };
  auto relay = std::make_shared<Relay>();
  net::UpstreamCallbacks cb;
  const bool stream = job.stream;
  const Protocol protocol = job.protocol;
  const serving::Request req = job.a.request;
  const serving::ReplicaId replica = job.a.replica;
  std::shared_ptr<net::Responder> responder = std::move(job.responder);
  std::shared_ptr<StreamResume> resume = std::move(job.resume);
  // A continuation of a migrated stream: the client has its head already.
  const bool continuing = resume != nullptr && resume->migrations() > 0;
  if (continuing) relay->first_byte = resume->first_byte();
  GatewayMetrics::RequestCells* cells = job.cells;
  cb.on_head = [relay, stream, responder,
                continuing](const http::response_header<>& h) {
    relay->head = true;
    relay->status = h.result_int();
    if (!stream) relay->first_byte = NowMicros();
    if (stream && relay->status == 200 && !continuing) {
      net::HttpResponse head{http::status::ok, 11};
      head.set(http::field::content_type, "text/event-stream");
      head.set(http::field::cache_control, "no-cache");
      responder->StartStream(std::move(head));
    }
  };
  cb.on_data = [this, relay, stream, responder, resume, req,
                replica](std::string data) {
    if (stream && relay->status == 200) {
      if (resume) {
        data = resume->Relay(data);
        if (data.empty()) return;
      }
      if (relay->first_byte == 0) {
        relay->first_byte = NowMicros();
        if (resume) resume->set_first_byte(relay->first_byte);
      }
      if (!relay->prefilled) {
        relay->prefilled = true;
        absl::MutexLock lock(&mu_);
        dispatcher_->OnFirstToken(req, replica, NowMicros());
      }
      relay->events +=
          static_cast<int32_t>(std::count(data.begin(), data.end(), '\n') / 2);
      // Keep the usage chunk (the engine sends it last), not every chunk.
      if (data.find("\"usage\"") != std::string::npos) relay->text = data;
      responder->SendChunk(std::move(data));
    } else {
      relay->text += data;
    }
  };
  cb.on_done = [this, relay, stream, protocol, responder, req, replica, cells,
                resume, continuing,
                finish = std::move(job.finish)](absl::Status st) mutable {
    std::vector<Job> jobs;
    // The replica failed after the client's stream started (or while a
    // continuation was being sent): migrate the stream, else end it with
    // an error event.
    const bool broken = resume != nullptr && !resume->saw_done() &&
                        ((!st.ok() && relay->head && relay->status == 200) ||
                         (continuing && (!st.ok() || relay->status != 200)));
    if (broken) {
      const std::string why =
          st.ok() ? absl::StrCat("the continuation got HTTP ", relay->status)
                  : std::string(st.message());
      bool migrated = false;
      std::string not_why;
      std::string from, deployment, tenant;
      {
        absl::MutexLock lock(&mu_);
        Pending& p = pending_.at(req.id);
        from = p.endpoint;
        deployment = p.deployment;
        tenant = p.tenant;
        LeftReplica(p, req, replica, /*suspect=*/true, relay->prefilled);
        absl::StatusOr<std::string> body =
            resume->migrations() < config_.max_migrations
                ? resume->ContinuationBody(*p.body)
                : absl::FailedPreconditionError(absl::StrCat(
                      "migration limit ", config_.max_migrations, " reached"));
        if (!body.ok()) {
          not_why = std::string(body.status().message());
        } else {
          const serving::Request again = Requeued(p, req);
          p.body = std::make_shared<const std::string>(*std::move(body));
          resume->BeginContinuation();
          const serving::Verdict v = dispatcher_->Submit(again, NowMicros());
          migrated = v.admitted();
          if (!migrated) {
            not_why = absl::StrCat("no replica took it: ",
                                   serving::RejectReasonName(v.reason));
          }
        }
        if (!migrated) pending_.erase(req.id);
        DispatchLocked(&jobs);
      }
      NoteMigration(deployment, tenant, from, migrated,
                    migrated ? why : absl::StrCat(why, "; ", not_why));
      if (!migrated) {
        finish.now = NowMicros();
        finish.ok = false;
        stats_.RecordFinished(finish);
        GatewayMetrics::Finished(cells, false, stream, req.arrival,
                                 relay->first_byte, NowMicros(), 0,
                                 resume->tokens_sent());
        EndWithError(
            responder,
            absl::StrCat("the replica failed mid-stream (", why,
                         ") and the stream could not continue: ", not_why));
      }
      for (Job& j : jobs) Proxy(std::move(j));
      return;
    }
    if (!st.ok() && !relay->head) {
      // Nothing reached the client: retry on another replica.
      bool retried = false;
      {
        absl::MutexLock lock(&mu_);
        Pending& p = pending_.at(req.id);
        LeftReplica(p, req, replica, absl::IsUnavailable(st), relay->prefilled);
        if (p.attempts < kMaxAttempts) {
          retried =
              dispatcher_->Submit(Requeued(p, req), NowMicros()).admitted();
        }
        if (!retried) pending_.erase(req.id);
        DispatchLocked(&jobs);
      }
      if (!retried) {
        finish.now = NowMicros();
        finish.ok = false;
        stats_.RecordFinished(finish);
        GatewayMetrics::Finished(cells, false, stream, req.arrival, 0,
                                 NowMicros(), 0, 0);
        Reject(
            protocol, responder, http::status::bad_gateway,
            absl::StrCat("no replica could serve the request: ", st.message()),
            "server_error");
      }
      for (Job& j : jobs) Proxy(std::move(j));
      return;
    }
    int32_t output = UsageTokens(relay->text, "\"completion_tokens\":");
    const int32_t input = UsageTokens(relay->text, "\"prompt_tokens\":");
    if (stream) {
      if (output < 0) output = std::max(0, relay->events - 1);
      if (relay->status == 200) {
        responder->EndStream();
      } else {
        net::HttpResponse res{static_cast<http::status>(relay->status), 11};
        res.set(http::field::content_type, "application/json");
        res.body() = relay->text;
        responder->Send(std::move(res));
      }
    } else if (st.ok()) {
      net::HttpResponse res{
          static_cast<http::status>(relay->status ? relay->status : 502), 11};
      res.set(http::field::content_type, "application/json");
      res.body() = std::move(relay->text);
      responder->Send(std::move(res));
    } else {
      Reject(protocol, responder, http::status::bad_gateway,
             absl::StrCat("the replica failed mid-response: ", st.message()),
             "server_error");
    }
    finish.now = NowMicros();
    finish.ttft =
        (relay->first_byte ? relay->first_byte : finish.now) - req.arrival;
    finish.e2e = finish.now - req.arrival;
    finish.input_tokens = input >= 0 ? input : req.input_tokens;
    finish.output_tokens = std::max(0, output);
    finish.ok = st.ok() && relay->status >= 200 && relay->status < 300;
    stats_.RecordFinished(finish);
    GatewayMetrics::Finished(cells, st.ok() && relay->status / 100 == 2, stream,
                             req.arrival, relay->first_byte, NowMicros(),
                             input >= 0 ? input : req.input_tokens,
                             std::max(0, output));
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(req.id);
      if (it != pending_.end()) {
        --in_flight_[it->second.endpoint];
        pending_.erase(it);
      }
      dispatcher_->OnFinished(req, replica, std::max(0, output), NowMicros(),
                              relay->prefilled);
      DispatchLocked(&jobs);
    }
    for (Job& j : jobs) Proxy(std::move(j));
  };
  job.upstream->Send(job.ep, std::move(up), std::move(cb));
}

void Gateway::LeftReplica(Pending& p, const serving::Request& req,
                          serving::ReplicaId replica, bool suspect,
                          bool prefilled) {
  --in_flight_[p.endpoint];
  if (suspect && !suspect_until_.contains(p.endpoint)) {
    // Refused, reset or dead: route around it at once, before the
    // controller notices.
    suspect_until_[p.endpoint] = NowMicros() + kMicrosPerSecond;
    for (auto& [name, m] : models_) SyncAll(m);
  }
  p.endpoint.clear();
  dispatcher_->OnFinished(req, replica, -1, NowMicros(), prefilled);
}

serving::Request Gateway::Requeued(Pending& p, const serving::Request& req) {
  serving::Request again = req;
  again.dispatched = kNever;
  auto it = models_.find(queues_[req.model].name);
  if (it != models_.end() && !it->second.deleted) {
    again.model = it->second.current;
  }
  p.request = again;
  return again;
}

void Gateway::NoteMigration(const std::string& deployment,
                            const std::string& tenant, const std::string& from,
                            bool migrated, const std::string& why) {
  if (config_.metrics) config_.metrics->Migration(deployment, migrated);
  std::function<void(store::Event)> sink;
  {
    absl::MutexLock lock(&rejections_mu_);
    sink = event_sink_;
  }
  if (!sink) return;
  store::Event e;
  e.time = runtime::WallClock::Get().Now();
  e.kind = migrated ? "request.migrated" : "request.stream_failed";
  e.deployment = deployment;
  e.tenant = tenant;
  e.message = migrated
                  ? absl::StrCat("a stream of ", tenant, " to ", deployment,
                                 " continues on another replica: ", why)
                  : absl::StrCat("a stream of ", tenant, " to ", deployment,
                                 " ended with an error event: ", why);
  e.details = json{{"from", from}, {"why", why}};
  sink(std::move(e));
}

// --- Metrics ----------------------------------------------------------------

GatewayMetrics::RequestCells* Gateway::CellsFor(Model& m, const Tenant& t,
                                                serving::ClassId c) {
  if (config_.metrics == nullptr) return nullptr;
  const size_t i = t.id * config_.classes.size() + c;
  if (i >= m.cells.size()) m.cells.resize(i + 1, nullptr);
  if (m.cells[i] == nullptr) {
    m.cells[i] = config_.metrics->Cells(m.config.spec.name, t.config->spec.name,
                                        config_.classes[c]);
  }
  return m.cells[i];
}

void Gateway::Invalid(const char* reason) {
  if (config_.metrics) config_.metrics->Invalid(reason);
}

}  // namespace gpusched::gateway
