// The control API's access checks (docs/access.md): what each route's
// permission is asked on, the tenants objects belong to, the audit records
// of actions and refusals, and the routes of roles, bindings and the audit
// log.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/control_api.h"
#include "api/control_internal.h"
#include "nlohmann/json.hpp"

namespace gpusched::api {

using nlohmann::json;

namespace {

json ParseJson(const std::string& text) {
  return json::parse(text, nullptr, false);
}

std::string TenantOf(const json& manifest) {
  if (!manifest.is_object() || !manifest.contains("spec") ||
      !manifest["spec"].is_object()) {
    return "";
  }
  return manifest["spec"].value("tenant", "");
}

// Bounds on an audit query (?limit=).
constexpr int64_t kMaxAuditPage = 10000;

}  // namespace

json ControlApi::StoredManifest(store::DocKind kind, const std::string& name) {
  auto doc = access_.store->Get(kind, name);
  if (!doc.ok()) return json();
  json j = ParseJson(doc->manifest_json);
  return j.is_discarded() ? json() : j;
}

bool ControlApi::DeploymentIn(const std::string& name,
                              const std::string& tenant, bool read) {
  if (TenantOf(StoredManifest(store::DocKind::kDeployment, name)) == tenant) {
    return true;
  }
  if (!read) return false;
  // A tenant may read the deployments it may use.
  const std::vector<std::string> models = controller_->TenantModels(tenant);
  return std::find(models.begin(), models.end(), name) != models.end();
}

bool ControlApi::RouteIn(const std::string& name, const std::string& tenant) {
  const json route = StoredManifest(store::DocKind::kRoute, name);
  if (!route.is_object() || !route.contains("spec")) return false;
  const json& targets = route["spec"].value("targets", json::array());
  if (!targets.is_array() || targets.empty()) return false;
  for (const json& t : targets) {
    if (!t.is_object() ||
        !DeploymentIn(t.value("deployment", ""), tenant, /*read=*/false)) {
      return false;
    }
  }
  return true;
}

std::string ControlApi::KeyTenant(const std::string& key_id) {
  auto keys = access_.store->ListApiKeys("");
  if (!keys.ok()) return "";
  for (const store::KeyInfo& k : *keys) {
    if (k.key_id == key_id) return k.tenant;
  }
  return "";
}

absl::Status ControlApi::Authorize(Call& c, const Route& route) {
  const auth::Permission perm = route.permission;
  switch (route.scope) {
    case RouteScope::kCluster:
      return auth::Check(c.who, perm);
    case RouteScope::kBody:  // each manifest, once the body is read
      return absl::OkStatus();
    case RouteScope::kListing:
      if (auth::AllowsSome(c.who, perm)) return absl::OkStatus();
      return auth::DeniedError(c.who, perm, "");
    case RouteScope::kDeployment: {
      const bool read = perm.verb == auth::Verb::kGet;
      if (auth::Allows(c.who, perm, [&](const std::string& t) {
            return DeploymentIn(c.name(), t, read);
          })) {
        return absl::OkStatus();
      }
      return auth::DeniedError(c.who, perm, "deployment/" + c.name());
    }
    case RouteScope::kRoute:
      if (auth::Allows(c.who, perm, [&](const std::string& t) {
            return RouteIn(c.name(), t);
          })) {
        return absl::OkStatus();
      }
      return auth::DeniedError(c.who, perm, "route/" + c.name());
    case RouteScope::kTenant:
      return auth::Check(c.who, perm, {&c.name(), 1}, "tenant/" + c.name());
    case RouteScope::kKey: {
      const std::string tenant = KeyTenant(c.name());
      if (!tenant.empty() && auth::Allows(c.who, perm, {&tenant, 1})) {
        return absl::OkStatus();
      }
      return auth::Check(c.who, perm, {}, "key/" + c.name());
    }
  }
  return auth::DeniedError(c.who, perm, "");
}

absl::Status ControlApi::AuthorizeBody(Call& c,
                                       const std::vector<config::Manifest>& ms,
                                       const config::AccessManifests& access,
                                       auth::Verb verb) {
  std::vector<std::string> denied;
  auto check = [&](auth::Resource resource, const std::string& object,
                   absl::FunctionRef<bool(const std::string&)> in) {
    const auth::Permission perm{resource, verb};
    if (!auth::Allows(c.who, perm, in)) {
      denied.push_back(absl::StrCat("'", perm.Name(), "' on ", object));
    }
  };
  for (const config::Manifest& m : ms) {
    switch (m.kind) {
      case config::Manifest::Kind::kDeployment:
        // Its tenant now and after: a tenant cannot take another's.
        check(
            auth::Resource::kDeployments, "deployment/" + m.name(),
            [&](const std::string& t) {
              const json stored =
                  StoredManifest(store::DocKind::kDeployment, m.name());
              return (stored.is_null() || TenantOf(stored) == t) &&
                     (verb == auth::Verb::kDelete || m.deployment.tenant == t);
            });
        break;
      case config::Manifest::Kind::kTenant:
        check(auth::Resource::kTenants, "tenant/" + m.name(),
              [&](const std::string& t) { return m.name() == t; });
        break;
      case config::Manifest::Kind::kModelRoute:
        check(auth::Resource::kRoutes, "route/" + m.name(),
              [&](const std::string& t) {
                if (verb == auth::Verb::kDelete) return RouteIn(m.name(), t);
                const json stored =
                    StoredManifest(store::DocKind::kRoute, m.name());
                if (!stored.is_null() && !RouteIn(m.name(), t)) return false;
                for (const config::RouteTargetSpec& x : m.route.targets) {
                  // A target applied in the same body counts as its spec
                  // says.
                  auto same = std::find_if(
                      ms.begin(), ms.end(), [&](const config::Manifest& o) {
                        return o.kind == config::Manifest::Kind::kDeployment &&
                               o.name() == x.deployment;
                      });
                  const bool ok = same != ms.end()
                                      ? same->deployment.tenant == t
                                      : DeploymentIn(x.deployment, t, false);
                  if (!ok) return false;
                }
                return true;
              });
        break;
    }
  }
  auto cluster_only = [](const std::string&) { return false; };
  for (const config::RoleSpec& r : access.roles) {
    check(auth::Resource::kRoles, "role/" + r.name, cluster_only);
  }
  for (const config::RoleBindingSpec& b : access.bindings) {
    check(auth::Resource::kRoleBindings, "rolebinding/" + b.name, cluster_only);
  }
  if (denied.empty()) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("permission denied: ", c.who.subject, " (",
                   c.who.RoleNames(), ") lacks ", absl::StrJoin(denied, ", ")));
}

void ControlApi::Audit(Call& c, std::string verb, std::string resource,
                       const absl::Status& outcome, json diff) {
  if (access_.audit == nullptr) return;
  store::AuditRecord a;
  a.time = absl::ToUnixMicros(absl::Now());
  a.who = c.who.subject;
  a.role = c.who.RoleNames();
  a.verb = std::move(verb);
  a.resource = std::move(resource);
  a.peer = c.r->peer();
  const bool denied = outcome.code() == absl::StatusCode::kPermissionDenied;
  a.outcome = outcome.ok() ? "ok" : denied ? "denied" : "error";
  a.status = outcome.ok() ? 200 : denied ? 403 : 0;
  a.message = std::string(outcome.message());
  a.diff = std::move(diff);
  (void)access_.audit->Record(std::move(a));
}

// --- roles and bindings -----------------------------------------------------

namespace {

void SendDocs(ControlApi::Call& c,
              const absl::StatusOr<std::vector<json>>& docs) {
  if (!docs.ok()) return c.Fail(docs.status());
  c.Send(http::status::ok, json{{"items", *docs}});
}

}  // namespace

void ControlApi::ListRoles(Call& c) {
  // The built-in roles first, as rules of what they hold.
  json items = json::array();
  for (const auth::Role& r : auth::BuiltinRoles()) {
    json rules = json::array();
    for (int res = 0; res < auth::kResourceCount; ++res) {
      json verbs = json::array();
      for (int v = 0; v < auth::kVerbCount; ++v) {
        const auth::Permission p{static_cast<auth::Resource>(res),
                                 static_cast<auth::Verb>(v)};
        if (r.permissions.Has(p)) verbs.push_back(auth::VerbName(p.verb));
      }
      if (!verbs.empty()) {
        rules.push_back({{"resources", json::array({auth::ResourceName(
                                           static_cast<auth::Resource>(res))})},
                         {"verbs", verbs}});
      }
    }
    items.push_back({{"kind", "Role"},
                     {"metadata", {{"name", r.name}, {"builtin", true}}},
                     {"spec", {{"rules", rules}}}});
  }
  auto custom = access_.access->List(store::DocKind::kRole);
  if (!custom.ok()) return c.Fail(custom.status());
  for (json& j : *custom) items.push_back(std::move(j));
  c.Send(http::status::ok, json{{"items", items}});
}

void ControlApi::ListRoleBindings(Call& c) {
  SendDocs(c, access_.access->List(store::DocKind::kRoleBinding));
}

void ControlApi::GetRole(Call& c) {
  json j = StoredManifest(store::DocKind::kRole, c.name());
  if (j.is_null()) {
    return c.Fail(http::status::not_found,
                  absl::StrCat("role '", c.name(), "' not found"));
  }
  c.Send(http::status::ok, j);
}

void ControlApi::GetRoleBinding(Call& c) {
  json j = StoredManifest(store::DocKind::kRoleBinding, c.name());
  if (j.is_null()) {
    return c.Fail(http::status::not_found,
                  absl::StrCat("rolebinding '", c.name(), "' not found"));
  }
  c.Send(http::status::ok, j);
}

void ControlApi::DeleteRole(Call& c) {
  const json before = StoredManifest(store::DocKind::kRole, c.name());
  absl::Status st = access_.access->Delete(store::DocKind::kRole, c.name());
  if (st.code() != absl::StatusCode::kNotFound) {
    Audit(c, "delete", "role/" + c.name(), st,
          auth::ManifestDiff(before, json()));
  }
  if (!st.ok()) return c.Fail(st);
  c.Send(http::status::ok,
         json{{"kind", "Role"}, {"name", c.name()}, {"action", "deleted"}});
}

void ControlApi::DeleteRoleBinding(Call& c) {
  const json before = StoredManifest(store::DocKind::kRoleBinding, c.name());
  absl::Status st =
      access_.access->Delete(store::DocKind::kRoleBinding, c.name());
  if (st.code() != absl::StatusCode::kNotFound) {
    Audit(c, "delete", "rolebinding/" + c.name(), st,
          auth::ManifestDiff(before, json()));
  }
  if (!st.ok()) return c.Fail(st);
  c.Send(
      http::status::ok,
      json{{"kind", "RoleBinding"}, {"name", c.name()}, {"action", "deleted"}});
}

// --- the audit log ----------------------------------------------------------

namespace {

// ?since=&until= (RFC 3339 or unix seconds), who=, resource=, verb=,
// outcome=, limit= (1..10000, default 100), after= (a seq), order=asc|desc.
absl::StatusOr<store::AuditFilter> ParseAuditQuery(const ControlTarget& t) {
  store::AuditFilter f;
  for (const auto& [key, value] : t.query) {
    if (key == "since" || key == "until") {
      absl::Time when;
      std::string err;
      double seconds = 0;
      Micros us = 0;
      if (absl::SimpleAtod(value, &seconds)) {
        us = static_cast<Micros>(seconds * kMicrosPerSecond);
      } else if (absl::ParseTime(absl::RFC3339_full, value, &when, &err)) {
        us = absl::ToUnixMicros(when);
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            key, ": '", value.substr(0, 64),
            "' is not a time (RFC 3339, e.g. 2026-01-02T15:04:05Z, or unix "
            "seconds)"));
      }
      (key == "since" ? f.since : f.until) = us;
    } else if (key == "who") {
      f.who = value;
    } else if (key == "resource") {
      f.resource = value;
    } else if (key == "verb") {
      f.verb = value;
    } else if (key == "outcome") {
      f.outcome = value;
    } else if (key == "limit") {
      if (!absl::SimpleAtoi(value, &f.limit) || f.limit < 1 ||
          f.limit > kMaxAuditPage) {
        return absl::InvalidArgumentError(
            absl::StrCat("limit: must be an integer in 1..", kMaxAuditPage));
      }
    } else if (key == "after") {
      if (!absl::SimpleAtoi(value, &f.after_seq) || f.after_seq < 0) {
        return absl::InvalidArgumentError("after: must be a record's seq");
      }
    } else if (key == "order") {
      if (value != "asc" && value != "desc") {
        return absl::InvalidArgumentError("order: must be asc or desc");
      }
      f.oldest_first = value == "asc";
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown query parameter '", key.substr(0, 64),
          "' (since, until, who, resource, verb, outcome, limit, after, "
          "order)"));
    }
  }
  return f;
}

}  // namespace

void ControlApi::ListAudit(Call& c) {
  auto f = ParseAuditQuery(c.target);
  if (!f.ok()) {
    return c.Fail(http::status::bad_request, std::string(f.status().message()));
  }
  auto records = access_.store->QueryAudit(*f);
  if (!records.ok()) return c.Fail(records.status());
  json items = json::array();
  for (const store::AuditRecord& r : *records) {
    json j = store::AuditJson(r);
    j["timeIso"] = IsoTime(r.time);
    items.push_back(std::move(j));
  }
  c.Send(http::status::ok, json{{"items", items}});
}

void ControlApi::VerifyAudit(Call& c) {
  auto ends = access_.store->GetAuditEnds();
  if (!ends.ok()) return c.Fail(ends.status());
  store::AuditFilter all;
  all.limit = 0;
  all.oldest_first = true;
  auto records = access_.store->QueryAudit(all);
  if (!records.ok()) return c.Fail(records.status());
  const absl::Status st = store::VerifyAuditChain(*ends, *records);
  c.Send(http::status::ok,
         json{{"ok", st.ok()},
              {"records", records->size()},
              {"firstSeq", records->empty() ? 0 : records->front().seq},
              {"headSeq", ends->head_seq},
              {"anchorSeq", ends->anchor_seq},
              {"problem", st.ok() ? "" : std::string(st.message())}});
}

}  // namespace gpusched::api
