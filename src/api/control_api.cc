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
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/control_forward.h"
#include "api/control_internal.h"
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

net::HttpResponse Error(const absl::Status& st) {
  net::HttpResponse res = Error(StatusOf(st), std::string(st.message()),
                                st.code() == absl::StatusCode::kPermissionDenied
                                    ? "permission_error"
                                    : "");
  // The store is away (or another transient state): retry shortly.
  if (st.code() == absl::StatusCode::kUnavailable) {
    res.set(http::field::retry_after, "1");
  }
  return res;
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

json ApplyJson(const ApplyResult& x) {
  return {{"kind", x.kind}, {"name", x.name}, {"action", x.action}};
}

}  // namespace

net::HttpResponse ControlJson(http::status status, const json& body) {
  return Json(status, body);
}
net::HttpResponse ControlError(const absl::Status& st) { return Error(st); }
net::HttpResponse ControlError(http::status status,
                               const std::string& message) {
  return Error(status, message);
}

// The route table: method, path under /api/v1 ("{}" is one segment), the
// permission it needs and on what, and its handler. docs/control-api.md
// lists the same routes; docs/access.md their permissions (checked by
// access_routes_test.cc).
const std::vector<ControlApi::Route>& ControlApi::Routes() {
  using V = http::verb;
  using R = auth::Resource;
  using A = auth::Verb;
  using S = RouteScope;
  static const std::vector<Route> kRoutes = {
      {V::post,
       "apply",
       {R::kDeployments, A::kApply},
       S::kBody,
       &ControlApi::PostApply},
      {V::post,
       "delete",
       {R::kDeployments, A::kDelete},
       S::kBody,
       &ControlApi::PostDelete},
      {V::get,
       "deployments",
       {R::kDeployments, A::kList},
       S::kListing,
       &ControlApi::ListDeployments},
      {V::get,
       "deployments/{}",
       {R::kDeployments, A::kGet},
       S::kDeployment,
       &ControlApi::GetDeployment},
      {V::delete_,
       "deployments/{}",
       {R::kDeployments, A::kDelete},
       S::kDeployment,
       &ControlApi::DeleteDeployment},
      {V::post,
       "deployments/{}/scale",
       {R::kDeployments, A::kScale},
       S::kDeployment,
       &ControlApi::ScaleDeployment},
      {V::get,
       "deployments/{}/logs",
       {R::kDeployments, A::kLogs},
       S::kDeployment,
       &ControlApi::DeploymentLogs,
       kLeader,
       "replica stream tail"},
      {V::get,
       "replicas",
       {R::kReplicas, A::kList},
       S::kCluster,
       &ControlApi::ListReplicas},
      {V::get,
       "gpus",
       {R::kGpus, A::kList},
       S::kCluster,
       &ControlApi::ListGpus},
      {V::get,
       "nodes",
       {R::kNodes, A::kList},
       S::kCluster,
       &ControlApi::ListNodes},
      {V::get,
       "pools",
       {R::kPools, A::kList},
       S::kCluster,
       &ControlApi::ListPools},
      {V::get,
       "queues",
       {R::kQueues, A::kList},
       S::kCluster,
       &ControlApi::ListQueues},
      {V::get,
       "routes",
       {R::kRoutes, A::kList},
       S::kListing,
       &ControlApi::ListRoutes},
      {V::get,
       "routes/{}",
       {R::kRoutes, A::kGet},
       S::kRoute,
       &ControlApi::GetRoute},
      {V::delete_,
       "routes/{}",
       {R::kRoutes, A::kDelete},
       S::kRoute,
       &ControlApi::DeleteRoute},
      {V::post,
       "routes/{}/rollout",
       {R::kRoutes, A::kRollout},
       S::kRoute,
       &ControlApi::PostRollout,
       kLeader},
      {V::get,
       "stats",
       {R::kStats, A::kGet},
       S::kCluster,
       &ControlApi::GetStats},
      {V::get,
       "cluster",
       {R::kCluster, A::kGet},
       S::kCluster,
       &ControlApi::GetCluster},
      {V::get,
       "instances",
       {R::kInstances, A::kList},
       S::kCluster,
       &ControlApi::ListInstances},
      {V::get,
       "alerts",
       {R::kAlerts, A::kList},
       S::kCluster,
       &ControlApi::ListAlerts},
      {V::get,
       "events",
       {R::kEvents, A::kList},
       S::kCluster,
       &ControlApi::ListEvents,
       kAny,
       "deployment tenant kind since limit"},
      {V::get,
       "tenants",
       {R::kTenants, A::kList},
       S::kListing,
       &ControlApi::ListTenants},
      {V::get,
       "tenants/{}",
       {R::kTenants, A::kGet},
       S::kTenant,
       &ControlApi::GetTenant},
      {V::delete_,
       "tenants/{}",
       {R::kTenants, A::kDelete},
       S::kTenant,
       &ControlApi::DeleteTenant},
      {V::get,
       "tenants/{}/keys",
       {R::kKeys, A::kList},
       S::kTenant,
       &ControlApi::ListTenantKeys},
      {V::post,
       "tenants/{}/keys",
       {R::kKeys, A::kApply},
       S::kTenant,
       &ControlApi::CreateTenantKey},
      {V::get,
       "keys",
       {R::kKeys, A::kList},
       S::kCluster,
       &ControlApi::ListAdminKeys},
      {V::post,
       "keys",
       {R::kKeys, A::kApply},
       S::kCluster,
       &ControlApi::CreateAdminKey},
      {V::delete_,
       "keys/{}",
       {R::kKeys, A::kDelete},
       S::kKey,
       &ControlApi::RevokeKey},
      {V::get,
       "roles",
       {R::kRoles, A::kList},
       S::kCluster,
       &ControlApi::ListRoles},
      {V::get,
       "roles/{}",
       {R::kRoles, A::kGet},
       S::kCluster,
       &ControlApi::GetRole},
      {V::delete_,
       "roles/{}",
       {R::kRoles, A::kDelete},
       S::kCluster,
       &ControlApi::DeleteRole},
      {V::get,
       "rolebindings",
       {R::kRoleBindings, A::kList},
       S::kCluster,
       &ControlApi::ListRoleBindings},
      {V::get,
       "rolebindings/{}",
       {R::kRoleBindings, A::kGet},
       S::kCluster,
       &ControlApi::GetRoleBinding},
      {V::delete_,
       "rolebindings/{}",
       {R::kRoleBindings, A::kDelete},
       S::kCluster,
       &ControlApi::DeleteRoleBinding},
      {V::get,
       "audit",
       {R::kAudit, A::kList},
       S::kCluster,
       &ControlApi::ListAudit,
       kAny,
       "since until who resource verb outcome limit after order"},
      {V::get,
       "audit/verify",
       {R::kAudit, A::kGet},
       S::kCluster,
       &ControlApi::VerifyAudit},
  };
  return kRoutes;
}

std::vector<RouteInfo> ControlApi::RouteTable() {
  std::vector<RouteInfo> out;
  for (const Route& r : Routes()) {
    out.push_back({std::string(http::to_string(r.method)), r.path, r.permission,
                   r.scope});
  }
  return out;
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
                  "missing API key or token: send 'Authorization: Bearer "
                  "<key or token>'",
                  "authentication_error"));
    return;
  }
  auto who = access_.authenticator->Authenticate(auth.substr(7));
  if (!who.ok()) {
    const bool denied =
        who.status().code() == absl::StatusCode::kPermissionDenied;
    r->Send(Error(denied ? http::status::forbidden : http::status::unauthorized,
                  std::string(who.status().message()),
                  denied ? "permission_error" : "authentication_error"));
    // A refused attempt at a change is recorded (reads are not: a wrong
    // key polling must not fill the log).
    if (access_.audit != nullptr && req.method() != http::verb::get) {
      store::AuditRecord a;
      a.time = absl::ToUnixMicros(absl::Now());
      a.who = "unauthenticated";
      a.verb = std::string(http::to_string(req.method()));
      a.resource = std::string(path);
      a.peer = r->peer();
      a.outcome = "denied";
      a.status = denied ? 403 : 401;
      a.message = std::string(who.status().message());
      (void)access_.audit->Record(std::move(a));
    }
    return;
  }
  auto target = ParseControlTarget(full);
  if (!target.ok()) {
    r->Send(Error(http::status::bad_request,
                  std::string(target.status().message()),
                  "invalid_request_error"));
    return;
  }
  Call call{req, r, *std::move(target), *std::move(who)};
  std::vector<std::string> allowed;  // methods of the routes of this path
  for (const Route& route : Routes()) {
    if (!MatchesRoute(route.path, call.target.parts)) continue;
    if (route.method != req.method()) {
      allowed.emplace_back(http::to_string(route.method));
      continue;
    }
    if (absl::Status st = Authorize(call, route); !st.ok()) {
      Audit(call, std::string(auth::VerbName(route.permission.verb)),
            std::string(path), st);
      r->Send(Error(st));
      return;
    }
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

namespace {

store::DocKind DocKindOf(config::Manifest::Kind kind) {
  switch (kind) {
    case config::Manifest::Kind::kDeployment:
      return store::DocKind::kDeployment;
    case config::Manifest::Kind::kTenant:
      return store::DocKind::kTenant;
    case config::Manifest::Kind::kModelRoute:
      return store::DocKind::kRoute;
  }
  return store::DocKind::kDeployment;
}

std::string ObjectName(config::Manifest::Kind kind, const std::string& name) {
  return absl::StrCat(store::DocKindName(DocKindOf(kind)), "/", name);
}

Micros WallNow() { return absl::ToUnixMicros(absl::Now()); }

}  // namespace

void ControlApi::PostApply(Call& c) {
  config::AccessManifests access;
  auto manifests = ParseBody(c, &access);
  if (!manifests.has_value()) return;
  if (absl::Status st =
          AuthorizeBody(c, *manifests, access, auth::Verb::kApply);
      !st.ok()) {
    Audit(c, "apply", "manifests", st);
    return c.Fail(st);
  }
  // Everything is validated before anything changes: the access manifests
  // as a whole with the stored ones, then the rest by the controller.
  if (!access.empty()) {
    if (absl::Status st =
            access_.access->Apply(access, WallNow(), /*dry_run=*/true).status();
        !st.ok()) {
      return c.Fail(st);
    }
  }
  std::vector<json> before;
  for (const config::Manifest& m : *manifests) {
    before.push_back(StoredManifest(DocKindOf(m.kind), m.name()));
  }
  json items = json::array();
  if (!manifests->empty()) {
    auto results = controller_->Apply(*manifests);
    if (!results.ok()) {
      if (results.status().code() != absl::StatusCode::kInvalidArgument) {
        Audit(c, "apply", "manifests", results.status());
      }
      return c.Fail(Located(results.status(), *manifests));
    }
    for (const ApplyResult& x : *results) {
      items.push_back(ApplyJson(x));
      if (x.action == "unchanged") continue;
      for (size_t i = 0; i < manifests->size(); ++i) {
        const config::Manifest& m = (*manifests)[i];
        if (config::KindName(m.kind) != x.kind || m.name() != x.name) continue;
        Audit(c, "apply", ObjectName(m.kind, m.name()), absl::OkStatus(),
              auth::ManifestDiff(before[i],
                                 StoredManifest(DocKindOf(m.kind), m.name())));
      }
    }
  }
  if (!access.empty()) {
    auto applied = access_.access->Apply(access, WallNow());
    if (!applied.ok()) {
      Audit(c, "apply", "roles", applied.status());
      return c.Fail(applied.status());
    }
    for (const auth::AccessControl::Applied& a : *applied) {
      items.push_back(
          {{"kind", a.kind}, {"name", a.name}, {"action", a.action}});
      if (a.action == "unchanged") continue;
      const store::DocKind kind = a.kind == "Role"
                                      ? store::DocKind::kRole
                                      : store::DocKind::kRoleBinding;
      Audit(c, "apply", absl::StrCat(store::DocKindName(kind), "/", a.name),
            absl::OkStatus(),
            auth::ManifestDiff(a.before_json.empty()
                                   ? json()
                                   : json::parse(a.before_json, nullptr, false),
                               StoredManifest(kind, a.name)));
    }
  }
  c.Send(http::status::ok, json{{"items", items}});
}

void ControlApi::PostDelete(Call& c) {
  config::AccessManifests access;
  auto manifests = ParseBody(c, &access);
  if (!manifests.has_value()) return;
  if (absl::Status st =
          AuthorizeBody(c, *manifests, access, auth::Verb::kDelete);
      !st.ok()) {
    Audit(c, "delete", "manifests", st);
    return c.Fail(st);
  }
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
  std::vector<std::pair<store::DocKind, std::string>> access_docs;
  for (const config::RoleSpec& r : access.roles) {
    access_docs.emplace_back(store::DocKind::kRole, r.name);
  }
  for (const config::RoleBindingSpec& b : access.bindings) {
    access_docs.emplace_back(store::DocKind::kRoleBinding, b.name);
  }
  for (const auto& [kind, name] : access_docs) {
    if (StoredManifest(kind, name).is_null()) {
      missing.push_back(absl::StrCat(store::DocKindName(kind), "/", name));
    }
  }
  if (!missing.empty()) {
    return c.Fail(http::status::not_found,
                  absl::StrCat("not found: ", absl::StrJoin(missing, ", "),
                               "; nothing was deleted"));
  }
  json items = json::array();
  // Bindings before the roles they name.
  std::reverse(access_docs.begin(), access_docs.end());
  for (const auto& [kind, name] : access_docs) {
    const json before = StoredManifest(kind, name);
    const std::string object =
        absl::StrCat(store::DocKindName(kind), "/", name);
    absl::Status st = access_.access->Delete(kind, name);
    Audit(c, "delete", object, st, auth::ManifestDiff(before, json()));
    if (!st.ok()) return c.Fail(st);
    items.push_back(
        {{"kind", kind == store::DocKind::kRole ? "Role" : "RoleBinding"},
         {"name", name},
         {"action", "deleted"}});
  }
  for (const config::Manifest& m : *manifests) {
    const json before = StoredManifest(DocKindOf(m.kind), m.name());
    auto x = controller_->Delete(m.kind, m.name());
    Audit(c, "delete", ObjectName(m.kind, m.name()), x.status(),
          auth::ManifestDiff(before, json()));
    if (!x.ok()) return c.Fail(x.status());
    items.push_back(ApplyJson(*x));
  }
  c.Send(http::status::ok, json{{"items", items}});
}

std::optional<std::vector<config::Manifest>> ControlApi::ParseBody(
    Call& c, config::AccessManifests* access) {
  auto manifests = config::ParseManifests(c.req.body(), kBodySource, access);
  if (!manifests.ok()) {
    c.Fail(manifests.status());
    return std::nullopt;
  }
  if (manifests->empty() && access->empty()) {
    c.Fail(http::status::unprocessable_entity,
           "the body holds no manifest (expected YAML or JSON documents with "
           "kind Deployment, Tenant, ModelRoute, Role or RoleBinding)");
    return std::nullopt;
  }
  return *std::move(manifests);
}

// --- deployments ------------------------------------------------------------

void ControlApi::ListDeployments(Call& c) {
  const auth::Permission list{auth::Resource::kDeployments, auth::Verb::kList};
  json all = controller_->DeploymentsJson();
  if (auth::Allows(c.who, list)) {
    return c.Send(http::status::ok, json{{"items", all}});
  }
  json items = json::array();
  for (json& d : all) {
    const std::string name = ListedName(d);
    const bool mine = auth::Allows(c.who, list, [&](const std::string& t) {
      return DeploymentIn(name, t, /*read=*/true);
    });
    if (mine) items.push_back(std::move(d));
  }
  c.Send(http::status::ok, json{{"items", items}});
}

void ControlApi::GetDeployment(Call& c) {
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
  const json before = StoredManifest(DocKindOf(kind), c.name());
  auto x = controller_->Delete(kind, c.name());
  if (x.status().code() != absl::StatusCode::kNotFound) {
    Audit(c, "delete", ObjectName(kind, c.name()), x.status(),
          auth::ManifestDiff(before, json()));
  }
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
  Audit(c, "scale", absl::StrCat("deployment/", c.name()), st,
        json{{"replicas", n}});
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

// --- routes ---------------------------------------------------------------

void ControlApi::ListRoutes(Call& c) {
  const auth::Permission list{auth::Resource::kRoutes, auth::Verb::kList};
  json items = json::array();
  for (json& r : controller_->RoutesJson()) {
    const std::string name = ListedName(r);
    const bool mine = auth::Allows(
        c.who, list, [&](const std::string& t) { return RouteIn(name, t); });
    if (mine) items.push_back(std::move(r));
  }
  c.Send(http::status::ok, json{{"items", items}});
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
  Audit(c, "rollout", absl::StrCat("route/", c.name()), route.status(),
        json{{"action", body["action"]}, {"reason", reason}});
  if (!route.ok()) return c.Fail(route.status());
  c.Send(http::status::ok, *route);
}

}  // namespace gpusched::api
