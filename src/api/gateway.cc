#include "api/gateway.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace gpusched::api {

using nlohmann::json;
using serving::RejectReason;

namespace {

constexpr int kMaxAttempts = 3;

Micros NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A count in an OpenAI response's usage (`key` is "\"completion_tokens\":"
// or "\"prompt_tokens\":"), or -1.
int32_t UsageTokens(const std::string& body, std::string_view key) {
  const size_t at = body.rfind(key);
  if (at == std::string::npos) return -1;
  size_t p = at + key.size();
  int32_t n = 0;
  bool any = false;
  while (p < body.size() && body[p] >= '0' && body[p] <= '9') {
    n = n * 10 + (body[p++] - '0');
    any = true;
  }
  return any ? n : -1;
}

// The top-level fields of an OpenAI request the gateway needs, read with
// nlohmann's SAX interface: the body is checked to be JSON but no document
// is built.
struct OpenAiFields {
  bool object = false;
  std::optional<std::string> model;
  bool model_wrong_type = false;
  std::optional<bool> stream;
  bool stream_wrong_type = false;
  // max_tokens, max_completion_tokens: value, or -1 when of a wrong type.
  std::optional<int64_t> max_tokens[2];
};

class OpenAiScan : public json::json_sax_t {
 public:
  explicit OpenAiScan(OpenAiFields* out) : out_(out) {}
  bool null() override { return Scalar(Kind::kNull, 0, nullptr); }
  bool boolean(bool v) override { return Scalar(Kind::kBool, v, nullptr); }
  bool number_integer(number_integer_t v) override {
    return Scalar(Kind::kInt, v, nullptr);
  }
  bool number_unsigned(number_unsigned_t v) override {
    return Scalar(Kind::kInt,
                  static_cast<int64_t>(std::min<number_unsigned_t>(
                      v, std::numeric_limits<int64_t>::max())),
                  nullptr);
  }
  bool number_float(number_float_t, const string_t&) override {
    return Scalar(Kind::kOther, 0, nullptr);
  }
  bool string(string_t& v) override { return Scalar(Kind::kString, 0, &v); }
  bool binary(binary_t&) override { return Scalar(Kind::kOther, 0, nullptr); }
  bool start_object(std::size_t) override {
    if (depth_ == 0) out_->object = true;
    if (depth_ == 1) Field(Kind::kOther, 0, nullptr);
    ++depth_;
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 1) Field(Kind::kOther, 0, nullptr);
    ++depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool key(string_t& k) override {
    if (depth_ == 1) key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception&) override {
    out_->object = false;
    return false;
  }

 private:
  enum class Kind { kNull, kBool, kInt, kString, kOther };
  bool Scalar(Kind kind, int64_t v, string_t* s) {
    if (depth_ == 1) Field(kind, v, s);
    return true;
  }
  void Field(Kind kind, int64_t v, string_t* s) {
    if (key_ == "model") {
      if (kind == Kind::kString) {
        out_->model = std::move(*s);
      } else {
        out_->model_wrong_type = true;
      }
    } else if (key_ == "stream") {
      if (kind == Kind::kBool) {
        out_->stream = v != 0;
      } else if (kind != Kind::kNull) {
        out_->stream_wrong_type = true;
      }
    } else if (key_ == "max_tokens" || key_ == "max_completion_tokens") {
      if (kind != Kind::kNull) {
        out_->max_tokens[key_ == "max_tokens" ? 0 : 1] =
            kind == Kind::kInt && v >= 1 ? v : -1;
      }
    }
    key_.clear();
  }
  OpenAiFields* out_;
  int depth_ = 0;
  std::string key_;
};

net::HttpResponse JsonResponse(http::status status, const json& body) {
  net::HttpResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump();
  return res;
}

bool IsLimit(RejectReason reason) {
  return reason == RejectReason::kRateLimitedRequests ||
         reason == RejectReason::kRateLimitedTokens ||
         reason == RejectReason::kModelQueueFull ||
         reason == RejectReason::kTenantQueueFull ||
         reason == RejectReason::kTenantConcurrency;
}

}  // namespace

std::string EndpointKey(const net::Endpoint& ep) {
  return absl::StrCat(ep.host, ":", ep.port);
}

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Create(
    const GatewayConfig& config, Authenticator authenticate,
    net::UpstreamOptions upstream) {
  if (config.classes.empty()) {
    return absl::InvalidArgumentError("gateway: at least one priority class");
  }
  std::unique_ptr<Gateway> g(new Gateway());
  g->authenticate_ = std::move(authenticate);
  g->config_ = config;
  g->upstream_options_ = upstream;
  g->upstreams_.push_back(std::make_unique<net::UpstreamClient>(upstream));
  g->dispatcher_ = std::make_unique<serving::Dispatcher>(config.seed);
  return g;
}

Gateway::~Gateway() {
  // The upstream clients' threads stop first: no callback runs after this.
  for (auto& u : upstreams_) u.reset();
}

void Gateway::UseIoContext(boost::asio::io_context& ioc) {
  net::UpstreamOptions o = upstream_options_;
  o.io_context = &ioc;
  auto client = std::make_unique<net::UpstreamClient>(o);
  std::lock_guard<std::mutex> lock(mu_);
  upstreams_.push_back(std::move(client));
}

net::UpstreamClient* Gateway::Upstream() {
  std::lock_guard<std::mutex> lock(mu_);
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
    const auto& models = t.config->models;
    if (!t.deleted &&
        (models.empty() ||
         std::find(models.begin(), models.end(), spec.name) != models.end())) {
      dispatcher_->DeclareTenant(*id, t.id);
    }
  }
  return *id;
}

absl::Status Gateway::UpsertDeployment(const GatewayDeployment& d) {
  if (d.max_ongoing_requests < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "deployment '", d.spec.name, "': max_ongoing_requests must be >= 1"));
  }
  std::lock_guard<std::mutex> lock(mu_);
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
                            m.config.kv_budget_tokens);
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
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it != models_.end()) it->second.deleted = true;
}

void Gateway::SetReplicas(const std::string& name,
                          const std::vector<net::Endpoint>& ready) {
  std::vector<Pending> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
    Reject(p.protocol, p.responder, http::status::service_unavailable,
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

absl::Status Gateway::UpsertTenant(const GatewayTenant& t) {
  std::lock_guard<std::mutex> lock(mu_);
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
                 Tenant{std::make_shared<const GatewayTenant>(t), *id, false})
             .first;
  }
  for (const std::string& name : AllowedModels(it->second)) {
    dispatcher_->DeclareTenant(models_.at(name).current, it->second.id);
  }
  return absl::OkStatus();
}

void Gateway::RemoveTenant(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(name);
  if (it != tenants_.end()) it->second.deleted = true;
}

void Gateway::UpdateEngineLoad(const net::Endpoint& ep,
                               const serving::EngineLoad& load) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = EndpointKey(ep);
  for (const Queue& q : queues_) {
    auto it = q.replicas.find(key);
    if (it != q.replicas.end()) {
      dispatcher_->UpdateEngineLoad(q.id, it->second, load);
    }
  }
}

DeploymentLoad Gateway::Load(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  DeploymentLoad load;
  auto it = models_.find(name);
  if (it == models_.end()) return load;
  const Model& m = it->second;
  load.replicas = static_cast<int>(m.ready.size());
  auto add = [&](serving::ModelId id) {
    load.queued += dispatcher_->queue(id).size();
    load.in_flight += dispatcher_->outstanding(id);
  };
  add(m.current);
  for (serving::ModelId r : m.retired) add(r);
  return load;
}

int64_t Gateway::InFlightOn(const net::Endpoint& ep) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(EndpointKey(ep));
  return it == in_flight_.end() ? 0 : it->second;
}

void Gateway::SetDemandSink(DemandSink sink) {
  std::lock_guard<std::mutex> lock(mu_);
  demand_sink_ = std::move(sink);
}

int64_t Gateway::Queued(const Model& m) const {
  int64_t queued = dispatcher_->queue(m.current).size();
  for (serving::ModelId r : m.retired) queued += dispatcher_->queue(r).size();
  return queued;
}

void Gateway::SetEventSink(std::function<void(runtime::Event)> sink) {
  std::lock_guard<std::mutex> lock(rejections_mu_);
  event_sink_ = std::move(sink);
}

void Gateway::NoteRejection(const std::string& deployment,
                            const std::string& tenant,
                            serving::RejectReason reason) {
  std::lock_guard<std::mutex> lock(rejections_mu_);
  if (event_sink_) ++rejections_[{deployment, tenant, reason}];
}

void Gateway::FlushRejections() {
  std::map<std::tuple<std::string, std::string, serving::RejectReason>, int64_t>
      batch;
  std::function<void(runtime::Event)> sink;
  {
    std::lock_guard<std::mutex> lock(rejections_mu_);
    const Micros now = NowMicros();
    if (rejections_.empty() || now < next_rejection_flush_) return;
    next_rejection_flush_ = now + kMicrosPerSecond;
    batch.swap(rejections_);
    sink = event_sink_;
  }
  const Micros wall = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (const auto& [key, n] : batch) {
    const auto& [deployment, tenant, reason] = key;
    runtime::Event e;
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
    std::lock_guard<std::mutex> lock(mu_);
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
      std::erase_if(m.retired, [&](serving::ModelId id) {
        if (!dispatcher_->queue(id).empty() || dispatcher_->outstanding(id)) {
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
    Reject(p.protocol, p.responder, http::status::service_unavailable,
           "request rejected: queue_timeout (no replica could take it in "
           "time; the deployment may be starting or overloaded)",
           "overloaded_error", kMicrosPerSecond);
  }
  Pump();
}

// --- Requests ---------------------------------------------------------------

void Gateway::Reject(Protocol protocol,
                     const std::shared_ptr<net::Responder>& r,
                     http::status status, const std::string& message,
                     const std::string& type, Micros retry_after) {
  net::HttpResponse res = protocol == Protocol::kOpenAi
                              ? net::JsonError(status, message, type)
                              : JsonResponse(status, json{{"error", message}});
  if (retry_after > 0) {
    res.set(http::field::retry_after,
            std::to_string((retry_after + kMicrosPerSecond - 1) /
                           kMicrosPerSecond));
  }
  r->Send(std::move(res));
}

bool Gateway::Allowed(const Tenant& t, const std::string& model) const {
  auto it = models_.find(model);
  if (it == models_.end() || it->second.deleted) return false;
  const auto& models = t.config->models;
  return models.empty() ||
         std::find(models.begin(), models.end(), model) != models.end();
}

std::vector<std::string> Gateway::AllowedModels(const Tenant& t) const {
  std::vector<std::string> allowed;
  for (const auto& [name, m] : models_) {
    if (Allowed(t, name)) allowed.push_back(name);
  }
  return allowed;
}

std::optional<Gateway::Tenant> Gateway::Authenticate(
    const net::HttpRequest& req, Protocol protocol,
    const std::shared_ptr<net::Responder>& r) {
  const std::string_view auth(req[http::field::authorization].data(),
                              req[http::field::authorization].size());
  if (!auth.starts_with("Bearer ")) {
    Invalid("unauthenticated");
    Reject(protocol, r, http::status::unauthorized,
           "missing API key: send 'Authorization: Bearer <key>'",
           "authentication_error");
    return std::nullopt;
  }
  auto key = authenticate_(auth.substr(7));
  if (!key.ok()) {
    Invalid("unauthenticated");
    Reject(protocol, r, http::status::unauthorized,
           std::string(key.status().message()), "authentication_error");
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tenants_.find(key->tenant);
  if (it == tenants_.end() || it->second.deleted) {
    Invalid("forbidden");
    Reject(protocol, r, http::status::forbidden,
           key->admin ? "an admin key is not a tenant: use a tenant's key "
                        "for inference"
                      : "this key's tenant has no access to any model",
           "permission_error");
    return std::nullopt;
  }
  return it->second;
}

void Gateway::Handle(net::HttpRequest req, std::shared_ptr<net::Responder> r) {
  const std::string target(req.target().substr(0, req.target().find('?')));
  if (target == "/healthz" || target == "/v2/health/live" ||
      target == "/v2/health/ready") {
    net::HttpResponse res{http::status::ok, 11};
    if (target == "/healthz") {
      res.body() = "ok";
    } else {
      res.set(http::field::content_type, "application/json");
      res.body() =
          json{{target == "/v2/health/live" ? "live" : "ready", true}}.dump();
    }
    r->Send(std::move(res));
    return;
  }
  if (absl::StartsWith(target, "/v2/")) {
    HandleKServe(req, std::move(r), target);
    return;
  }
  const std::optional<Tenant> tenant = Authenticate(req, Protocol::kOpenAi, r);
  if (!tenant) return;
  if (target == "/v1/models") {
    json data = json::array();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const std::string& m : AllowedModels(*tenant)) {
        data.push_back(
            {{"id", m}, {"object", "model"}, {"owned_by", "gpusched"}});
      }
    }
    r->Send(JsonResponse(http::status::ok,
                         json{{"object", "list"}, {"data", data}}));
    return;
  }
  if (req.method() != http::verb::post ||
      (target != "/v1/chat/completions" && target != "/v1/completions" &&
       target != "/v1/embeddings")) {
    Reject(Protocol::kOpenAi, r, http::status::not_found,
           "unknown path " + target, "not_found_error");
    return;
  }
  OpenAiFields f;
  OpenAiScan scan(&f);
  const bool parsed = json::sax_parse(req.body(), &scan);
  if (!parsed || !f.object || !f.model || f.model_wrong_type) {
    Reject(Protocol::kOpenAi, r, http::status::bad_request,
           "the body must be a JSON object with a 'model'",
           "invalid_request_error");
    return;
  }
  int64_t max_tokens = 16;
  for (int i = 0; i < 2; ++i) {
    if (!f.max_tokens[i]) continue;
    if (*f.max_tokens[i] < 1) {
      Reject(Protocol::kOpenAi, r, http::status::bad_request,
             absl::StrCat("'", i == 0 ? "max_tokens" : "max_completion_tokens",
                          "' must be a positive integer"),
             "invalid_request_error");
      return;
    }
    max_tokens = *f.max_tokens[i];
  }
  if (f.stream_wrong_type) {
    Reject(Protocol::kOpenAi, r, http::status::bad_request,
           "'stream' must be true or false", "invalid_request_error");
    return;
  }
  if (target == "/v1/embeddings") max_tokens = 0;
  Submit(Protocol::kOpenAi, req, std::move(r), *f.model, target,
         f.stream.value_or(false), max_tokens, *tenant);
}

void Gateway::HandleKServe(net::HttpRequest& req,
                           std::shared_ptr<net::Responder> r,
                           const std::string& target) {
  // /v2/models/{name}[/versions/{v}][/ready|/infer]
  std::vector<std::string> parts = absl::StrSplit(target, '/');
  // parts[0] == "", parts[1] == "v2"
  if (parts.size() < 4 || parts[2] != "models" || parts[3].empty()) {
    Reject(Protocol::kKServe, r, http::status::not_found,
           "unknown path " + target +
               " (KServe v2: /v2/health/{live,ready}, "
               "/v2/models/{name}[/versions/{v}][/ready|/infer])",
           "not_found_error");
    return;
  }
  const std::string model = parts[3];
  size_t i = 4;
  std::string version;
  if (parts.size() > i + 1 && parts[i] == "versions") {
    version = parts[i + 1];
    i += 2;
  }
  const std::string action = parts.size() > i ? parts[i] : "";
  if (parts.size() > i + 1 ||
      (action != "" && action != "ready" && action != "infer")) {
    Reject(Protocol::kKServe, r, http::status::not_found,
           "unknown path " + target, "not_found_error");
    return;
  }
  const std::optional<Tenant> tenant = Authenticate(req, Protocol::kKServe, r);
  if (!tenant) return;
  std::vector<net::Endpoint> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Allowed(*tenant, model)) {
      Reject(Protocol::kKServe, r, http::status::not_found,
             absl::StrCat("model '", model,
                          "' does not exist or is not yours; your models: ",
                          absl::StrJoin(AllowedModels(*tenant), ", ")),
             "not_found_error");
      return;
    }
    ready = models_.at(model).ready;
  }
  const std::string engine_target =
      absl::StrCat("/v2/models/", model, version.empty() ? "" : "/versions/",
                   version, action.empty() ? "" : "/", action);
  if (action == "ready") {
    net::HttpResponse res = JsonResponse(
        ready.empty() ? http::status::service_unavailable : http::status::ok,
        json{{"name", model}, {"ready", !ready.empty()}});
    r->Send(std::move(res));
    return;
  }
  if (action.empty()) {
    if (req.method() != http::verb::get) {
      Reject(Protocol::kKServe, r, http::status::method_not_allowed,
             "model metadata is GET", "invalid_request_error");
      return;
    }
    if (ready.empty()) {
      Reject(Protocol::kKServe, r, http::status::service_unavailable,
             absl::StrCat("model '", model, "' has no ready replica yet"),
             "overloaded_error", kMicrosPerSecond);
      return;
    }
    // Metadata comes from a replica, without queueing.
    net::HttpRequest up{http::verb::get, engine_target, 11};
    auto body = std::make_shared<std::string>();
    auto status = std::make_shared<unsigned>(502);
    net::UpstreamCallbacks cb;
    cb.on_head = [status](const http::response_header<>& h) {
      *status = h.result_int();
    };
    cb.on_data = [body](std::string d) { *body += d; };
    cb.on_done = [this, r, body, status](absl::Status st) {
      if (!st.ok()) {
        Reject(Protocol::kKServe, r, http::status::bad_gateway,
               absl::StrCat("replica failed: ", st.message()), "server_error");
        return;
      }
      net::HttpResponse res{static_cast<http::status>(*status), 11};
      res.set(http::field::content_type, "application/json");
      res.body() = std::move(*body);
      r->Send(std::move(res));
    };
    Upstream()->Send(ready.front(), std::move(up), std::move(cb));
    return;
  }
  if (req.method() != http::verb::post) {
    Reject(Protocol::kKServe, r, http::status::method_not_allowed,
           "infer is POST", "invalid_request_error");
    return;
  }
  json body = json::parse(req.body(), nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("inputs") ||
      !body["inputs"].is_array()) {
    Reject(Protocol::kKServe, r, http::status::bad_request,
           "the body must be a JSON object with an 'inputs' array (KServe v2 "
           "inference request)",
           "invalid_request_error");
    return;
  }
  Submit(Protocol::kKServe, req, std::move(r), model, engine_target, false, 0,
         *tenant);
}

void Gateway::Submit(Protocol protocol, net::HttpRequest& req,
                     std::shared_ptr<net::Responder> r,
                     const std::string& model, std::string engine_target,
                     bool stream, int64_t max_tokens, const Tenant& tenant) {
  const Micros now = NowMicros();
  serving::Request sr;
  sr.arrival = now;
  // Class: the header, else the tenant's, else the second class.
  std::string cls_name(req["X-Gpusched-Priority"]);
  if (cls_name.empty()) cls_name = tenant.config->priority;
  sr.priority = config_.classes.size() > 1 ? 1 : 0;
  if (!cls_name.empty()) {
    auto it = std::find(config_.classes.begin(), config_.classes.end(),
                        absl::AsciiStrToLower(cls_name));
    if (it == config_.classes.end()) {
      Invalid("unknown_priority");
      Reject(protocol, r, http::status::bad_request,
             absl::StrCat("unknown priority class '", cls_name, "' (classes: ",
                          absl::StrJoin(config_.classes, ", "), ")"),
             "invalid_request_error");
      return;
    }
    sr.priority = static_cast<serving::ClassId>(it - config_.classes.begin());
  }
  const std::string deadline(req["X-Gpusched-Deadline-Ms"]);
  if (!deadline.empty()) {
    int64_t ms = 0;
    if (!absl::SimpleAtoi(deadline, &ms) || ms <= 0) {
      Invalid("bad_deadline");
      Reject(protocol, r, http::status::bad_request,
             "X-Gpusched-Deadline-Ms must be a positive integer "
             "(milliseconds)",
             "invalid_request_error");
      return;
    }
    sr.deadline = now + ms * kMicrosPerMilli;
  }
  // Token estimates until the engine reports usage: ~4 bytes per token.
  sr.input_tokens =
      static_cast<int32_t>(std::max<size_t>(1, req.body().size() / 4));
  sr.max_output_tokens =
      static_cast<int32_t>(std::min<int64_t>(max_tokens, 1 << 30));
  Pending p;
  p.target = std::move(engine_target);
  p.body = std::make_shared<const std::string>(std::move(req.body()));
  p.stream = stream;
  p.protocol = protocol;
  p.tenant = tenant.config->spec.name;
  p.deployment = model;
  p.responder = std::move(r);
  serving::Verdict v;
  std::vector<std::string> allowed;
  std::vector<Job> jobs;
  bool known = false;
  int64_t hold_limit = 0;  // > 0: rejected, max_held requests already held
  DemandSink demand;       // set: the first request held at zero replicas
  {
    std::lock_guard<std::mutex> lock(mu_);
    known = Allowed(tenant, model);
    if (!known) allowed = AllowedModels(tenant);
    if (known) {
      sr.tenant = tenant.id;
      Model& m = models_.at(model);
      sr.model = m.current;
      p.cells = CellsFor(m, tenant, sr.priority);
      // No ready replica: the request is held until one is (scale from
      // zero), within the deployment's hold bound.
      const bool cold = m.ready.empty();
      const int64_t held = cold ? Queued(m) : 0;
      if (cold && m.config.max_held > 0 && held >= m.config.max_held) {
        hold_limit = m.config.max_held;
        v.reason = RejectReason::kNoReplica;
        v.retry_after = kMicrosPerSecond;
      } else {
        sr.id = next_id_++;
        p.request = sr;
        p.held = cold;
        v = dispatcher_->Submit(sr, now);
      }
      if (v.admitted()) {
        if (cold) {
          GatewayMetrics::Held(p.cells);
          if (held == 0) demand = demand_sink_;
        }
        pending_.emplace(sr.id, std::move(p));
        DispatchLocked(&jobs);
      }
    }
  }
  if (demand) demand(model, now);
  for (Job& j : jobs) Proxy(std::move(j));
  if (hold_limit > 0) {
    GatewayMetrics::Rejected(p.cells, v.reason);
    stats_.RecordRejected(model, tenant.config->spec.name, now);
    NoteRejection(model, tenant.config->spec.name, v.reason);
    Reject(protocol, p.responder, http::status::service_unavailable,
           absl::StrCat("request rejected: hold_limit: deployment '", model,
                        "' has no ready replica yet and already holds ",
                        hold_limit, hold_limit == 1 ? " request" : " requests",
                        " (spec.autoscaling.maxHeld); a replica is starting, "
                        "retry in 1 s"),
           "overloaded_error", v.retry_after);
    return;
  }
  if (!known) {
    Invalid("unknown_model");
    Reject(protocol, p.responder, http::status::not_found,
           absl::StrCat("model '", model,
                        "' does not exist or is not yours; your models: ",
                        absl::StrJoin(allowed, ", ")),
           "not_found_error");
    return;
  }
  if (!v.admitted()) {
    GatewayMetrics::Rejected(p.cells, v.reason);
    stats_.RecordRejected(model, tenant.config->spec.name, now);
    NoteRejection(model, tenant.config->spec.name, v.reason);
    const bool limit = IsLimit(v.reason);
    Reject(
        protocol, p.responder,
        limit ? http::status::too_many_requests
              : http::status::service_unavailable,
        absl::StrCat("request rejected: ", serving::RejectReasonName(v.reason),
                     v.retry_after > 0
                         ? absl::StrCat("; retry in ",
                                        (v.retry_after + kMicrosPerSecond - 1) /
                                            kMicrosPerSecond,
                                        " s")
                         : ""),
        limit ? "rate_limit_error" : "overloaded_error", v.retry_after);
  }
}

void Gateway::Pump() {
  std::vector<Job> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
                     rep.ep, upstream, p.cells, std::move(finish)});
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
  };
  auto relay = std::make_shared<Relay>();
  net::UpstreamCallbacks cb;
  const bool stream = job.stream;
  const Protocol protocol = job.protocol;
  const serving::Request req = job.a.request;
  const serving::ReplicaId replica = job.a.replica;
  std::shared_ptr<net::Responder> responder = std::move(job.responder);
  GatewayMetrics::RequestCells* cells = job.cells;
  cb.on_head = [relay, stream, responder](const http::response_header<>& h) {
    relay->head = true;
    relay->status = h.result_int();
    if (!stream) relay->first_byte = NowMicros();
    if (stream && relay->status == 200) {
      net::HttpResponse head{http::status::ok, 11};
      head.set(http::field::content_type, "text/event-stream");
      head.set(http::field::cache_control, "no-cache");
      responder->StartStream(std::move(head));
    }
  };
  cb.on_data = [relay, stream, responder](std::string data) {
    if (stream && relay->status == 200) {
      if (relay->first_byte == 0) relay->first_byte = NowMicros();
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
                finish = std::move(job.finish)](absl::Status st) mutable {
    std::vector<Job> jobs;
    if (!st.ok() && !relay->head) {
      // Nothing reached the client: retry on another replica.
      bool retried = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        Pending& p = pending_.at(req.id);
        --in_flight_[p.endpoint];
        if (absl::IsUnavailable(st) && !suspect_until_.contains(p.endpoint)) {
          // Refused or reset: route around it at once, before the
          // controller notices.
          suspect_until_[p.endpoint] = NowMicros() + kMicrosPerSecond;
          for (auto& [name, m] : models_) SyncAll(m);
        }
        p.endpoint.clear();
        dispatcher_->OnFinished(req, replica, -1, NowMicros());
        if (p.attempts < kMaxAttempts) {
          serving::Request again = req;
          again.dispatched = kNever;
          auto it = models_.find(queues_[req.model].name);
          if (it != models_.end() && !it->second.deleted) {
            again.model = it->second.current;
          }
          p.request = again;
          retried = dispatcher_->Submit(again, NowMicros()).admitted();
        }
        if (!retried) pending_.erase(req.id);
        DispatchLocked(&jobs);
      }
      if (!retried) {
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
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(req.id);
      if (it != pending_.end()) {
        --in_flight_[it->second.endpoint];
        pending_.erase(it);
      }
      dispatcher_->OnFinished(req, replica, std::max(0, output), NowMicros());
      DispatchLocked(&jobs);
    }
    for (Job& j : jobs) Proxy(std::move(j));
  };
  job.upstream->Send(job.ep, std::move(up), std::move(cb));
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

}  // namespace gpusched::api
