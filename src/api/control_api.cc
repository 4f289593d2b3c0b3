#include "api/control_api.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "api/control_forward.h"
#include "api/control_query.h"
#include "config/manifest.h"
#include "nlohmann/json.hpp"

namespace gpusched::api {

using nlohmann::json;

namespace {

// How problems name the posted manifests ("request body:6: ..."); the CLI
// puts the file's name in its place.
constexpr char kBodySource[] = "request body";

net::HttpResponse Json(http::status status, const json& body) {
  net::HttpResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return res;
}

http::status StatusOf(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kNotFound:
      return http::status::not_found;
    case absl::StatusCode::kInvalidArgument:
      return http::status::unprocessable_entity;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      return http::status::conflict;
    case absl::StatusCode::kPermissionDenied:
      return http::status::forbidden;
    case absl::StatusCode::kUnauthenticated:
      return http::status::unauthorized;
    case absl::StatusCode::kUnavailable:
      return http::status::service_unavailable;
    case absl::StatusCode::kAborted:
      return http::status::conflict;
    default:
      return http::status::internal_server_error;
  }
}

// {"error": {"message", "type", "problems"?}}: problems are the lines of a
// multi-line InvalidArgument.
net::HttpResponse Error(http::status status, const std::string& message,
                        const std::string& type = "") {
  json err = {{"message", message},
              {"type", type.empty() ? std::string(http::obsolete_reason(status))
                                    : type}};
  if (status == http::status::unprocessable_entity) {
    std::vector<std::string> problems = absl::StrSplit(message, '\n');
    err["problems"] = problems;
    err["message"] =
        problems.size() == 1
            ? problems.front()
            : absl::StrCat("the manifests are invalid (", problems.size(),
                           " problems); nothing was changed");
  }
  return Json(status, json{{"error", err}});
}

// A tenant key on an admin endpoint, or on another tenant's object.
net::HttpResponse Forbidden() {
  return Error(http::status::forbidden,
               "this endpoint needs an admin key; tenant keys may read their "
               "deployments and their own tenant",
               "permission_error");
}

net::HttpResponse Error(const absl::Status& st) {
  net::HttpResponse res = Error(StatusOf(st), std::string(st.message()));
  // The store is away (or another transient state): retry shortly.
  if (st.code() == absl::StatusCode::kUnavailable) {
    res.set(http::field::retry_after, "1");
  }
  return res;
}

json KeyJson(const store::KeyInfo& k) {
  json j = {{"id", k.key_id},   {"tenant", k.tenant},   {"name", k.name},
            {"admin", k.admin}, {"created", k.created}, {"revoked", nullptr}};
  if (k.revoked) j["revoked"] = *k.revoked;
  return j;
}

json EventJson(const store::Event& e) {
  return {{"id", e.id},
          {"instance", e.instance},
          {"time", IsoTime(e.time)},
          {"timeMicros", e.time},
          {"kind", e.kind},
          {"deployment", e.deployment},
          {"tenant", e.tenant},
          {"message", e.message},
          {"details", e.details}};
}

// InvalidArgument naming the first query parameter of `target` that the
// route (METHOD /api/v1/PATH, reading the space-separated `query`) does not
// read.
absl::Status CheckQuery(http::verb method, absl::string_view path,
                        absl::string_view query, const ControlTarget& target) {
  const std::vector<absl::string_view> known =
      absl::StrSplit(query, ' ', absl::SkipEmpty());
  for (const auto& [name, value] : target.query) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown query parameter '", name.substr(0, 64), "' for ",
        std::string(http::to_string(method)), " /api/v1/", path,
        known.empty()
            ? "; it takes none"
            : absl::StrCat("; it takes ", absl::StrJoin(known, ", "))));
  }
  return absl::OkStatus();
}

// The controller's problems name their object ("ModelRoute/r: spec...");
// each gets its document's line in the body, as the parser's problems have
// theirs ("request body:12: ModelRoute/r: spec...").
absl::Status Located(const absl::Status& st,
                     const std::vector<config::Manifest>& manifests) {
  if (!absl::IsInvalidArgument(st)) return st;
  std::vector<std::string> problems = absl::StrSplit(st.message(), '\n');
  for (std::string& p : problems) {
    for (const config::Manifest& m : manifests) {
      if (m.line > 0 &&
          absl::StartsWith(
              p, absl::StrCat(config::KindName(m.kind), "/", m.name(), ": "))) {
        p = absl::StrCat(kBodySource, ":", m.line, ": ", p);
        break;
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
}

// Parses an optional JSON body {"name": "..."} (the key's name).
std::string KeyName(const std::string& body, const std::string& fallback) {
  json j = json::parse(body.empty() ? "{}" : body, nullptr, false);
  if (j.is_object() && j.contains("name") && j["name"].is_string()) {
    return j["name"].get<std::string>();
  }
  return fallback;
}

json ApplyJson(const ApplyResult& x) {
  return {{"kind", x.kind}, {"name", x.name}, {"action", x.action}};
}

}  // namespace

// One control request being answered.
struct ControlApi::Call {
  net::HttpRequest& req;
  std::shared_ptr<net::Responder>& r;
  ControlTarget target;  // path segments and query, decoded
  store::KeyInfo key;
  // The {name} segment of the route (parts[1]).
  const std::string& name() const { return target.parts.at(1); }
  void Send(http::status s, const json& j) { r->Send(Json(s, j)); }
  void Fail(const absl::Status& st) { r->Send(Error(st)); }
  void Fail(http::status s, const std::string& message) {
    r->Send(Error(s, message));
  }
};

// The route table: method, path under /api/v1 ("{}" is one segment), who
// may call it, and its handler. docs/control-api.md lists the same routes.
const std::vector<ControlApi::Route>& ControlApi::Routes() {
  using V = http::verb;
  static const std::vector<Route> kRoutes = {
      {V::post, "apply", kAdmin, &ControlApi::PostApply},
      {V::post, "delete", kAdmin, &ControlApi::PostDelete},
      {V::get, "deployments", kTenant, &ControlApi::ListDeployments},
      {V::get, "deployments/{}", kTenant, &ControlApi::GetDeployment},
      {V::delete_, "deployments/{}", kAdmin, &ControlApi::DeleteDeployment},
      {V::post, "deployments/{}/scale", kAdmin, &ControlApi::ScaleDeployment},
      {V::get, "deployments/{}/logs", kAdmin, &ControlApi::DeploymentLogs,
       kLeader, "replica stream tail"},
      {V::get, "replicas", kAdmin, &ControlApi::ListReplicas},
      {V::get, "gpus", kAdmin, &ControlApi::ListGpus},
      {V::get, "nodes", kAdmin, &ControlApi::ListNodes},
      {V::get, "pools", kAdmin, &ControlApi::ListPools},
      {V::get, "queues", kAdmin, &ControlApi::ListQueues},
      {V::get, "routes", kAdmin, &ControlApi::ListRoutes},
      {V::get, "routes/{}", kAdmin, &ControlApi::GetRoute},
      {V::delete_, "routes/{}", kAdmin, &ControlApi::DeleteRoute},
      {V::post, "routes/{}/rollout", kAdmin, &ControlApi::PostRollout, kLeader},
      {V::get, "stats", kAdmin, &ControlApi::GetStats},
      {V::get, "cluster", kAdmin, &ControlApi::GetCluster},
      {V::get, "instances", kAdmin, &ControlApi::ListInstances},
      {V::get, "alerts", kAdmin, &ControlApi::ListAlerts},
      {V::get, "events", kAdmin, &ControlApi::ListEvents, kAny,
       "deployment tenant kind since limit"},
      {V::get, "tenants", kAdmin, &ControlApi::ListTenants},
      {V::get, "tenants/{}", kTenant, &ControlApi::GetTenant},
      {V::delete_, "tenants/{}", kAdmin, &ControlApi::DeleteTenant},
      {V::get, "tenants/{}/keys", kAdmin, &ControlApi::ListTenantKeys},
      {V::post, "tenants/{}/keys", kAdmin, &ControlApi::CreateTenantKey},
      {V::get, "keys", kAdmin, &ControlApi::ListAdminKeys},
      {V::post, "keys", kAdmin, &ControlApi::CreateAdminKey},
      {V::delete_, "keys/{}", kAdmin, &ControlApi::RevokeKey},
  };
  return kRoutes;
}

bool ControlApi::Handle(net::HttpRequest& req,
                        std::shared_ptr<net::Responder>& r) {
  const absl::string_view full(req.target().data(), req.target().size());
  if (!IsControlPath(full.substr(0, full.find('?')))) return false;
  if (pool_ == nullptr) {
    Answer(req, r);
    return true;
  }
  if (!pool_->TrySubmit(
          [this, req = std::move(req), r]() mutable { Answer(req, r); })) {
    net::HttpResponse res =
        Error(http::status::service_unavailable,
              absl::StrCat("the control API is busy: ", pool_->max_queued(),
                           " calls are waiting (the bound); retry shortly"),
              "server_error");
    res.set(http::field::retry_after, "1");
    r->Send(std::move(res));
  }
  return true;
}

void ControlApi::Answer(net::HttpRequest& req,
                        std::shared_ptr<net::Responder>& r) {
  const absl::string_view full(req.target().data(), req.target().size());
  const absl::string_view path = full.substr(0, full.find('?'));
  const std::string_view auth(req[http::field::authorization].data(),
                              req[http::field::authorization].size());
  if (!auth.starts_with("Bearer ")) {
    r->Send(Error(http::status::unauthorized,
                  "missing API key: send 'Authorization: Bearer <key>'",
                  "authentication_error"));
    return;
  }
  auto key = keys_->Authenticate(auth.substr(7));
  if (!key.ok()) {
    r->Send(Error(http::status::unauthorized,
                  std::string(key.status().message()), "authentication_error"));
    return;
  }
  auto target = ParseControlTarget(full);
  if (!target.ok()) {
    r->Send(Error(http::status::bad_request,
                  std::string(target.status().message()),
                  "invalid_request_error"));
    return;
  }
  Call call{req, r, *std::move(target), *key};
  std::vector<std::string> allowed;  // methods of the routes of this path
  for (const Route& route : Routes()) {
    if (!MatchesRoute(route.path, call.target.parts)) continue;
    if (route.method != req.method()) {
      allowed.emplace_back(http::to_string(route.method));
      continue;
    }
    if (route.access == kAdmin && !key->admin) break;
    if (absl::Status st =
            CheckQuery(route.method, route.path, route.query, call.target);
        !st.ok()) {
      r->Send(Error(http::status::bad_request, std::string(st.message()),
                    "invalid_request_error"));
      return;
    }
    if (route.where == kLeader && cluster_ != nullptr &&
        !controller_->Leading()) {
      if (std::optional<std::string> leader = cluster_->LeaderAddress()) {
        ForwardToLeader(*leader, cluster_->election->self().id, req, r);
      } else {
        net::HttpResponse res =
            Error(http::status::service_unavailable,
                  "only the leader answers this, and no instance leads right "
                  "now (an election is under way); retry shortly",
                  "server_error");
        res.set(http::field::retry_after, "1");
        r->Send(std::move(res));
      }
      return;
    }
    (this->*route.handler)(call);
    return;
  }
  if (!key->admin) {
    r->Send(Forbidden());
    return;
  }
  if (!allowed.empty()) {
    net::HttpResponse res =
        Error(http::status::method_not_allowed,
              absl::StrCat(
                  std::string(http::to_string(req.method())), " ", path,
                  " is not allowed; allowed: ", absl::StrJoin(allowed, ", ")),
              "invalid_request_error");
    res.set(http::field::allow, absl::StrJoin(allowed, ", "));
    r->Send(std::move(res));
    return;
  }
  r->Send(Error(http::status::not_found,
                absl::StrCat("unknown control endpoint ",
                             std::string(http::to_string(req.method())), " ",
                             path, " (see docs/control-api.md)"),
                "not_found_error"));
}

// --- apply and delete -------------------------------------------------------

void ControlApi::PostApply(Call& c) {
  auto manifests = ParseBody(c);
  if (!manifests.has_value()) return;
  auto results = controller_->Apply(*manifests);
  if (!results.ok()) return c.Fail(Located(results.status(), *manifests));
  json items = json::array();
  for (const ApplyResult& x : *results) items.push_back(ApplyJson(x));
  c.Send(http::status::ok, json{{"items", items}});
}

void ControlApi::PostDelete(Call& c) {
  auto manifests = ParseBody(c);
  if (!manifests.has_value()) return;
  std::vector<std::string> missing;
  for (const config::Manifest& m : *manifests) {
    const bool known = m.kind == config::Manifest::Kind::kTenant
                           ? controller_->HasTenant(m.name())
                       : m.kind == config::Manifest::Kind::kDeployment
                           ? controller_->HasDeployment(m.name())
                           : !controller_->RoutesJson(m.name()).empty();
    if (!known) {
      missing.push_back(absl::StrCat(
          absl::AsciiStrToLower(config::KindName(m.kind)), "/", m.name()));
    }
  }
  if (!missing.empty()) {
    return c.Fail(http::status::not_found,
                  absl::StrCat("not found: ", absl::StrJoin(missing, ", "),
                               "; nothing was deleted"));
  }
  json items = json::array();
  for (const config::Manifest& m : *manifests) {
    auto x = controller_->Delete(m.kind, m.name());
    if (!x.ok()) return c.Fail(x.status());
    items.push_back(ApplyJson(*x));
  }
  c.Send(http::status::ok, json{{"items", items}});
}

std::optional<std::vector<config::Manifest>> ControlApi::ParseBody(Call& c) {
  auto manifests = config::ParseManifests(c.req.body(), kBodySource);
  if (!manifests.ok()) {
    c.Fail(manifests.status());
    return std::nullopt;
  }
  if (manifests->empty()) {
    c.Fail(http::status::unprocessable_entity,
           "the body holds no manifest (expected YAML or JSON documents with "
           "kind Deployment, Tenant or ModelRoute)");
    return std::nullopt;
  }
  return *std::move(manifests);
}

// --- deployments ------------------------------------------------------------

void ControlApi::ListDeployments(Call& c) {
  if (c.key.admin) {
    return c.Send(http::status::ok,
                  json{{"items", controller_->DeploymentsJson()}});
  }
  json items = json::array();
  for (const std::string& m : controller_->TenantModels(c.key.tenant)) {
    for (json& d : controller_->DeploymentsJson(m)) items.push_back(d);
  }
  c.Send(http::status::ok, json{{"items", items}});
}

void ControlApi::GetDeployment(Call& c) {
  if (!c.key.admin) {
    const std::vector<std::string> mine =
        controller_->TenantModels(c.key.tenant);
    if (std::find(mine.begin(), mine.end(), c.name()) == mine.end()) {
      return c.Fail(http::status::not_found,
                    absl::StrCat("deployment '", c.name(),
                                 "' not found among your models"));
    }
  }
  SendOne(c, controller_->DeploymentsJson(c.name()), "deployment");
}

void ControlApi::SendOne(Call& c, const json& items, const char* what) {
  if (items.empty()) {
    return c.Fail(http::status::not_found,
                  absl::StrCat(what, " '", c.name(), "' not found"));
  }
  c.Send(http::status::ok, items.at(0));
}

void ControlApi::DeleteOne(Call& c, config::Manifest::Kind kind) {
  auto x = controller_->Delete(kind, c.name());
  if (!x.ok()) return c.Fail(x.status());
  c.Send(http::status::ok, ApplyJson(*x));
}

void ControlApi::DeleteDeployment(Call& c) {
  DeleteOne(c, config::Manifest::Kind::kDeployment);
}

void ControlApi::ScaleDeployment(Call& c) {
  json body = json::parse(c.req.body(), nullptr, false);
  if (!body.is_object() || !body.contains("replicas") ||
      !body["replicas"].is_number_integer()) {
    return c.Fail(http::status::bad_request,
                  "the body must be {\"replicas\": N}");
  }
  const int64_t n = body["replicas"].get<int64_t>();
  absl::Status st = controller_->Scale(
      c.name(), static_cast<int>(std::clamp<int64_t>(n, -1, 1 << 20)));
  if (!st.ok()) return c.Fail(st);
  c.Send(http::status::ok, json{{"name", c.name()}, {"replicas", n}});
}

void ControlApi::DeploymentLogs(Call& c) {
  auto q = ParseLogsQuery(c.target);
  if (!q.ok()) {
    return c.Fail(http::status::bad_request, std::string(q.status().message()));
  }
  auto text = controller_->Logs(c.name(), q->replica, q->stream, q->tail);
  if (!text.ok()) {
    return c.Fail(text.status().code() == absl::StatusCode::kInvalidArgument
                      ? http::status::bad_request
                      : StatusOf(text.status()),
                  std::string(text.status().message()));
  }
  net::HttpResponse res{http::status::ok, 11};
  res.set(http::field::content_type, "text/plain; charset=utf-8");
  res.body() = *text;
  c.r->Send(std::move(res));
}

// --- cluster views ----------------------------------------------------------

void ControlApi::ListReplicas(Call& c) {
  c.Send(http::status::ok, json{{"items", controller_->ReplicasJson()}});
}
void ControlApi::ListGpus(Call& c) {
  c.Send(http::status::ok, json{{"items", controller_->GpusJson()}});
}
void ControlApi::ListNodes(Call& c) {
  c.Send(http::status::ok, json{{"items", controller_->NodesJson()}});
}

void ControlApi::ListPools(Call& c) {
  c.Send(http::status::ok, json{{"items", controller_->PoolsJson()}});
}
void ControlApi::ListQueues(Call& c) {
  c.Send(http::status::ok, json{{"items", controller_->QueuesJson()}});
}
void ControlApi::GetStats(Call& c) {
  if (stats_ == nullptr) {
    return c.Fail(http::status::not_found, "no request statistics here");
  }
  c.Send(http::status::ok, stats_->Json());
}

void ControlApi::GetCluster(Call& c) {
  if (cluster_ == nullptr) {
    return c.Fail(http::status::not_found, "no cluster view here");
  }
  c.Send(http::status::ok, cluster_->Json());
}

void ControlApi::ListInstances(Call& c) {
  if (cluster_ == nullptr) {
    return c.Fail(http::status::not_found, "no cluster view here");
  }
  c.Send(http::status::ok, json{{"items", cluster_->Json()["instances"]}});
}

// What the configured Prometheus reports firing (deploy/prometheus/ rules);
// 200 with "configured": false when alerts.prometheus_url is not set, 503
// when Prometheus cannot be read (bounded by alerts.timeout_ms).
void ControlApi::ListAlerts(Call& c) {
  if (alerts_ == nullptr) {
    return c.Send(http::status::ok,
                  json{{"configured", false},
                       {"source", ""},
                       {"items", json::array()},
                       {"message",
                        "alerts.prometheus_url is not set in the serve "
                        "config: no alerts to show (docs/runbooks.md)"}});
  }
  auto firing = alerts_->Firing();
  if (!firing.ok()) return c.Fail(firing.status());
  json j = FiringAlertsJson(*firing, alerts_->options().prometheus_url);
  j["configured"] = true;
  c.Send(http::status::ok, j);
}

void ControlApi::ListEvents(Call& c) {
  auto f = ParseEventQuery(c.target);
  if (!f.ok()) {
    return c.Fail(http::status::bad_request, std::string(f.status().message()));
  }
  auto events = controller_->Events(*f);
  if (!events.ok()) return c.Fail(events.status());
  json items = json::array();
  for (const store::Event& e : *events) items.push_back(EventJson(e));
  c.Send(http::status::ok, json{{"items", items}});
}

// --- tenants and keys -------------------------------------------------------

void ControlApi::ListTenants(Call& c) {
  c.Send(http::status::ok, json{{"items", controller_->TenantsJson()}});
}

void ControlApi::GetTenant(Call& c) {
  if (!c.key.admin && c.name() != c.key.tenant) {
    return c.r->Send(Forbidden());
  }
  SendOne(c, controller_->TenantsJson(c.name()), "tenant");
}

void ControlApi::DeleteTenant(Call& c) {
  DeleteOne(c, config::Manifest::Kind::kTenant);
}

// --- routes
// -------------------------------------------------------------------

void ControlApi::ListRoutes(Call& c) {
  c.Send(http::status::ok, json{{"items", controller_->RoutesJson()}});
}

void ControlApi::GetRoute(Call& c) {
  SendOne(c, controller_->RoutesJson(c.name()), "route");
}

void ControlApi::DeleteRoute(Call& c) {
  DeleteOne(c, config::Manifest::Kind::kModelRoute);
}

void ControlApi::PostRollout(Call& c) {
  json body = json::parse(c.req.body(), nullptr, false);
  if (!body.is_object() || !body.contains("action") ||
      !body["action"].is_string()) {
    return c.Fail(http::status::bad_request,
                  "the body must be {\"action\": \"promote\" | "
                  "\"promote-full\" | \"pause\" | \"resume\" | "
                  "\"abort\" | \"retry\", \"reason\": \"...\"}");
  }
  std::string reason;
  if (auto it = body.find("reason"); it != body.end()) {
    if (!it->is_string() || it->get<std::string>().size() > 1024) {
      return c.Fail(http::status::bad_request,
                    "reason: must be a string of at most 1024 bytes");
    }
    reason = it->get<std::string>();
  }
  auto route = controller_->RolloutAction(
      c.name(), body["action"].get<std::string>(), reason);
  if (!route.ok()) return c.Fail(route.status());
  c.Send(http::status::ok, *route);
}

void ControlApi::SendKeys(Call& c, const std::string& tenant) {
  auto keys = controller_->ListKeys(tenant);
  if (!keys.ok()) return c.Fail(keys.status());
  json items = json::array();
  for (const store::KeyInfo& k : *keys) items.push_back(KeyJson(k));
  c.Send(http::status::ok, json{{"items", items}});
}

void ControlApi::ListTenantKeys(Call& c) {
  if (!controller_->HasTenant(c.name())) {
    return c.Fail(http::status::not_found,
                  absl::StrCat("tenant '", c.name(), "' not found"));
  }
  SendKeys(c, c.name());
}

void ControlApi::CreateTenantKey(Call& c) {
  if (!controller_->HasTenant(c.name())) {
    return c.Fail(http::status::not_found,
                  absl::StrCat("tenant '", c.name(), "' not found"));
  }
  auto k = controller_->CreateKey(c.name(), KeyName(c.req.body(), "api"),
                                  /*admin=*/false);
  if (!k.ok()) return c.Fail(k.status());
  c.Send(http::status::created,
         json{{"id", k->key_id}, {"secret", k->secret}, {"tenant", c.name()}});
}

void ControlApi::ListAdminKeys(Call& c) { SendKeys(c, ""); }

void ControlApi::CreateAdminKey(Call& c) {
  auto k = controller_->CreateKey("", KeyName(c.req.body(), "admin"),
                                  /*admin=*/true);
  if (!k.ok()) return c.Fail(k.status());
  c.Send(http::status::created,
         json{{"id", k->key_id}, {"secret", k->secret}, {"admin", true}});
}

void ControlApi::RevokeKey(Call& c) {
  absl::Status st = controller_->RevokeKey(c.name());
  if (!st.ok()) return c.Fail(st);
  c.Send(http::status::ok, json{{"id", c.name()}, {"action", "revoked"}});
}

}  // namespace gpusched::api
