// The gateway's request handling: authentication, the OpenAI and KServe v2
// routes, admission and queuing (the proxy and the run-time changes are in
// gateway.cc).
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
#include "gateway/gateway.h"
#include "gateway/kserve.h"
#include "gateway/protocol.h"
#include "nlohmann/json.hpp"
#include "serving/prompt_blocks.h"

namespace gpusched::gateway {

using nlohmann::json;
using serving::RejectReason;

// --- Requests ---------------------------------------------------------------

namespace {

// OpenAI's `error.code` for a refusal of this type: what OpenAI's servers
// send in the same case, "" (null) where they send none.
std::string OpenAiCode(const std::string& type) {
  if (type == "authentication_error") return "invalid_api_key";
  if (type == "not_found_error") return "model_not_found";
  if (type == "rate_limit_error") return "rate_limit_exceeded";
  return "";
}

}  // namespace

void Gateway::Reject(Protocol protocol,
                     const std::shared_ptr<net::Responder>& r,
                     http::status status, const std::string& message,
                     const std::string& type, Micros retry_after) {
  net::HttpResponse res =
      protocol == Protocol::kOpenAi
          ? net::JsonError(status, message, type, 11, true, OpenAiCode(type))
          : JsonResponse(status, json{{"error", message}});
  if (retry_after > 0) {
    res.set(http::field::retry_after,
            std::to_string((retry_after + kMicrosPerSecond - 1) /
                           kMicrosPerSecond));
  }
  r->Send(std::move(res));
}

bool Gateway::Listed(const Tenant& t, const std::string& name) {
  const auto& models = t.config->models;
  return models.empty() ||
         std::find(models.begin(), models.end(), name) != models.end();
}

bool Gateway::Grants(const Tenant& t, const std::string& deployment) const {
  if (Listed(t, deployment)) return true;
  for (const auto& [name, r] : routes_) {
    if (!Listed(t, name)) continue;
    for (const GatewayRouteTarget& target : r.config.targets) {
      if (target.deployment == deployment) return true;
    }
  }
  return false;
}

bool Gateway::Allowed(const Tenant& t, const std::string& model) const {
  auto it = models_.find(model);
  if (it == models_.end() || it->second.deleted) return false;
  return Grants(t, model);
}

std::vector<std::string> Gateway::AllowedModels(const Tenant& t) const {
  std::vector<std::string> allowed;
  for (const auto& [name, m] : models_) {
    if (Allowed(t, name)) allowed.push_back(name);
  }
  return allowed;
}

std::vector<std::string> Gateway::PublicModels(const Tenant& t) const {
  std::vector<std::string> names;
  for (const auto& [name, r] : routes_) {
    if (Listed(t, name)) names.push_back(name);
  }
  for (const auto& entry : models_) {
    const std::string& name = entry.first;
    if (!Allowed(t, name)) continue;
    bool targeted = false;
    for (const auto& [route, r] : routes_) {
      for (const GatewayRouteTarget& x : r.config.targets) {
        targeted = targeted || x.deployment == name;
      }
    }
    if (!targeted) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

int64_t Gateway::CreatedOf(const std::string& name) const {
  if (auto it = routes_.find(name); it != routes_.end()) {
    return it->second.created;
  }
  auto it = models_.find(name);
  return it != models_.end() ? it->second.created : 0;
}

namespace {
constexpr auth::Permission kListModels{auth::Resource::kModels,
                                       auth::Verb::kList};
constexpr auth::Permission kGetModel{auth::Resource::kModels, auth::Verb::kGet};
constexpr auth::Permission kInfer{auth::Resource::kModels, auth::Verb::kInfer};
}  // namespace

const std::vector<DataPlaneRoute>& DataPlaneRoutes() {
  static const std::vector<DataPlaneRoute>* const kRoutes =
      new std::vector<DataPlaneRoute>{
          {"GET", "/healthz", std::nullopt},
          {"GET", "/v2/health/live", std::nullopt},
          {"GET", "/v2/health/ready", std::nullopt},
          {"GET", "/v2", std::nullopt},
          {"GET", "/v1/models", kListModels},
          {"POST", "/v1/chat/completions", kInfer},
          {"POST", "/v1/completions", kInfer},
          {"POST", "/v1/embeddings", kInfer},
          {"GET", "/v2/models/{}", kGetModel},
          {"GET", "/v2/models/{}/ready", kGetModel},
          {"POST", "/v2/models/{}/infer", kInfer},
          {"GET", "/v2/models/{}/versions/{}", kGetModel},
          {"GET", "/v2/models/{}/versions/{}/ready", kGetModel},
          {"POST", "/v2/models/{}/versions/{}/infer", kInfer},
      };
  return *kRoutes;
}

std::optional<Gateway::Tenant> Gateway::Authenticate(
    const net::HttpRequest& req, Protocol protocol,
    const std::shared_ptr<net::Responder>& r, auth::Permission permission) {
  const std::string_view auth(req[http::field::authorization].data(),
                              req[http::field::authorization].size());
  if (!auth.starts_with("Bearer ")) {
    Invalid("unauthenticated");
    Reject(protocol, r, http::status::unauthorized,
           "missing API key: send 'Authorization: Bearer <key>'",
           "authentication_error");
    return std::nullopt;
  }
  auto who = authenticate_(auth.substr(7));
  if (!who.ok()) {
    const bool denied =
        who.status().code() == absl::StatusCode::kPermissionDenied;
    Invalid(denied ? "forbidden" : "unauthenticated");
    Reject(protocol, r,
           denied ? http::status::forbidden : http::status::unauthorized,
           std::string(who.status().message()),
           denied ? "permission_error" : "authentication_error");
    return std::nullopt;
  }
  if (who->tenant.empty() ||
      !auth::Allows(*who, permission, {&who->tenant, 1})) {
    Invalid("forbidden");
    Reject(protocol, r, http::status::forbidden,
           who->tenant.empty()
               ? absl::StrCat(who->subject, " acts for no tenant: use a ",
                              "tenant's key or token for inference")
               : std::string(auth::DeniedError(*who, permission, "").message()),
           "permission_error");
    return std::nullopt;
  }
  absl::MutexLock lock(&mu_);
  auto it = tenants_.find(who->tenant);
  if (it == tenants_.end() || it->second.deleted) {
    Invalid("forbidden");
    Reject(protocol, r, http::status::forbidden,
           "this key's tenant has no access to any model", "permission_error");
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
  if (target == "/v2" || target == "/v2/") {
    if (req.method() != http::verb::get) {
      Reject(Protocol::kKServe, r, http::status::method_not_allowed,
             "server metadata is GET", "invalid_request_error");
      return;
    }
    r->Send(JsonResponse(http::status::ok, ServerMetadata(config_.version)));
    return;
  }
  if (absl::StartsWith(target, "/v2/")) {
    HandleKServe(req, std::move(r), target);
    return;
  }
  const std::optional<Tenant> tenant = Authenticate(
      req, Protocol::kOpenAi, r, target == "/v1/models" ? kListModels : kInfer);
  if (!tenant) return;
  if (target == "/v1/models") {
    json data = json::array();
    {
      absl::MutexLock lock(&mu_);
      for (const std::string& m : PublicModels(*tenant)) {
        data.push_back({{"id", m},
                        {"object", "model"},
                        {"created", CreatedOf(m)},
                        {"owned_by", "gpusched"}});
      }
    }
    r->Send(JsonResponse(http::status::ok,
                         json{{"object", "list"}, {"data", data}}));
    return;
  }
  if (req.method() != http::verb::post ||
      (target != "/v1/chat/completions" && target != "/v1/completions" &&
       target != "/v1/embeddings")) {
    // As OpenAI answers an unknown URL: not a model's 404.
    Reject(Protocol::kOpenAi, r, http::status::not_found,
           "unknown path " + target, "invalid_request_error");
    return;
  }
  OpenAiFields f;
  const bool parsed = ScanOpenAi(req.body(), &f);
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
  std::string model = *f.model;
  std::string session = Session(req);
  if (session.empty() && f.user) session = *f.user;
  if (auto choice = PickRoute(*tenant, model, "", session)) {
    // A public name: the engine serves the version under its deployment's
    // name.
    json body = json::parse(req.body(), nullptr, false);
    if (body.is_object()) {
      if (!(*choice)->shadow.empty()) {
        body["model"] = (*choice)->shadow;
        std::string original = std::move(req.body());
        req.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
        Shadow(Protocol::kOpenAi, req, (*choice)->shadow, target,
               f.stream.value_or(false), max_tokens);
        req.body() = std::move(original);
      }
      body["model"] = (*choice)->deployment;
      req.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    model = (*choice)->deployment;
    if ((*choice)->cell) (*choice)->cell->Add();
  }
  Submit(Protocol::kOpenAi, req, std::move(r), model, target,
         f.stream.value_or(false), max_tokens, *tenant, f.prompt);
}

void Gateway::Shadow(Protocol protocol, const net::HttpRequest& req,
                     const std::string& deployment, std::string engine_target,
                     bool stream, int64_t max_tokens) {
  std::optional<Tenant> shadow;
  {
    absl::MutexLock lock(&mu_);
    shadow = shadow_tenant_;
  }
  net::HttpRequest copy = req;
  // The lowest class, never the client's.
  copy.set("X-Gpusched-Priority", config_.classes.back());
  Submit(protocol, copy, net::Responder::Discarding(), deployment,
         std::move(engine_target), stream, max_tokens, *shadow);
}

std::string Gateway::Session(const net::HttpRequest& req) {
  const auto h = req["X-Gpusched-Session"];
  return std::string(h.data(), std::min<size_t>(h.size(), 256));
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
  const std::optional<Tenant> tenant = Authenticate(
      req, Protocol::kKServe, r, action == "infer" ? kInfer : kGetModel);
  if (!tenant) return;
  // A route's name: its version `version`, else one picked by weight.
  std::string deployment = model;
  std::string shadow;                 // a copy of the request goes there too
  std::vector<std::string> versions;  // set: `model` is a route
  if (auto choice = PickRoute(*tenant, model, version, Session(req))) {
    if (!choice->ok()) {
      Reject(Protocol::kKServe, r, http::status::not_found,
             std::string(choice->status().message()), "not_found_error");
      return;
    }
    deployment = (*choice)->deployment;
    versions = (*choice)->versions;
    if (action == "infer" && (*choice)->cell) (*choice)->cell->Add();
    shadow = (*choice)->shadow;
  }
  const bool routed = !versions.empty();
  std::vector<net::Endpoint> ready;
  {
    absl::MutexLock lock(&mu_);
    if (!Allowed(*tenant, deployment)) {
      Reject(Protocol::kKServe, r, http::status::not_found,
             absl::StrCat("model '", model,
                          "' does not exist or is not yours; your models: ",
                          absl::StrJoin(PublicModels(*tenant), ", ")),
             "not_found_error");
      return;
    }
    ready = models_.at(deployment).ready;
  }
  // The engine serves a version under its deployment's name.
  const std::string engine_target = absl::StrCat(
      "/v2/models/", deployment, version.empty() || routed ? "" : "/versions/",
      routed ? "" : version, action.empty() ? "" : "/", action);
  if (action == "ready") {
    const bool is_ready =
        routed && version.empty() ? RouteReady(model) : !ready.empty();
    net::HttpResponse res = JsonResponse(
        is_ready ? http::status::ok : http::status::service_unavailable,
        json{{"name", model}, {"ready", is_ready}});
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
    cb.on_done = [this, r, body, status, model, versions](absl::Status st) {
      if (!st.ok()) {
        Reject(Protocol::kKServe, r, http::status::bad_gateway,
               absl::StrCat("replica failed: ", st.message()), "server_error");
        return;
      }
      net::HttpResponse res{static_cast<http::status>(*status), 11};
      res.set(http::field::content_type, "application/json");
      json meta = versions.empty() || *status != 200
                      ? json()
                      : json::parse(*body, nullptr, false);
      if (meta.is_object()) {
        // A route's metadata: its public name and versions.
        meta["name"] = model;
        meta["versions"] = versions;
        *body = meta.dump(-1, ' ', false, json::error_handler_t::replace);
      }
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
  if (body.is_discarded()) {
    Reject(Protocol::kKServe, r, http::status::bad_request,
           "the body is not JSON (a KServe v2 inference request)",
           "invalid_request_error");
    return;
  }
  if (absl::Status st = ValidateInferRequest(body); !st.ok()) {
    Reject(Protocol::kKServe, r, http::status::bad_request,
           std::string(st.message()), "invalid_request_error");
    return;
  }
  if (!shadow.empty()) {
    Shadow(Protocol::kKServe, req, shadow,
           absl::StrCat("/v2/models/", shadow, "/infer"), false, 0);
  }
  Submit(Protocol::kKServe, req, std::move(r), deployment, engine_target, false,
         0, *tenant);
}

void Gateway::Submit(Protocol protocol, net::HttpRequest& req,
                     std::shared_ptr<net::Responder> r,
                     const std::string& model, std::string engine_target,
                     bool stream, int64_t max_tokens, const Tenant& tenant,
                     std::string_view prompt) {
  const Micros now = NowMicros();
  serving::Request sr;
  sr.arrival = now;
  if (const std::string session = Session(req); !session.empty()) {
    sr.session = serving::StickyHash(session);
  }
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
  if (stream && protocol == Protocol::kOpenAi && config_.max_migrations > 0) {
    p.resume =
        std::make_shared<StreamResume>(p.target.ends_with("/chat/completions"));
  }
  serving::Verdict v;
  std::vector<std::string> allowed;
  std::vector<Job> jobs;
  bool known = false;
  int64_t hold_limit = 0;  // > 0: rejected, max_held requests already held
  DemandSink demand;       // set: the first request held at zero replicas
  {
    absl::MutexLock lock(&mu_);
    known = Allowed(tenant, model);
    if (!known) allowed = PublicModels(tenant);
    if (known) {
      sr.tenant = tenant.id;
      Model& m = models_.at(model);
      sr.model = m.current;
      p.cells = CellsFor(m, tenant, sr.priority);
      // Prefix routing: the prompt's block hashes (serving/prompt_blocks.h).
      const serving::RouterConfig& rc = m.config.spec.router;
      if (!prompt.empty() && (rc.policy == "prefix-affinity" ||
                              (rc.policy == "session-affinity" &&
                               rc.session_fallback == "prefix-affinity"))) {
        auto blocks = std::make_shared<std::vector<uint64_t>>();
        serving::PromptBlockHashes(prompt, rc.prefix_block_chars, blocks.get());
        sr.prefix_blocks = *blocks;
        p.blocks = std::move(blocks);
      }
      // No ready replica: the request is held until one is (scale from
      // zero), within the deployment's hold bound.
      const bool cold = m.ready.empty();
      const int64_t held = cold ? Queued(m) : 0;
      if (usage_.size() <= tenant.id) usage_.resize(tenant.id + 1);
      ++usage_[tenant.id].requests;
      usage_[tenant.id].tokens += static_cast<int64_t>(sr.input_tokens) +
                                  std::max(0, sr.max_output_tokens);
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
          if (held == 0) {
            demand = demand_sink_;
            m.held_since = now;
          }
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

void Gateway::FailPending(const Pending& p, http::status status,
                          const std::string& message, const std::string& type,
                          Micros retry_after) {
  if (p.resume != nullptr && p.resume->migrations() > 0) {
    EndWithError(p.responder,
                 absl::StrCat("the stream could not continue: ", message));
    NoteMigration(p.deployment, p.tenant, "", false, message);
    return;
  }
  Reject(p.protocol, p.responder, status, message, type, retry_after);
}

void Gateway::EndWithError(const std::shared_ptr<net::Responder>& r,
                           const std::string& why) {
  r->SendChunk(StreamResume::ErrorEvent(why));
  r->EndStream();
}

}  // namespace gpusched::gateway
