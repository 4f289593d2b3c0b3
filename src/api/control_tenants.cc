// The control API's tenants and keys (docs/control-api.md): listings
// filtered by what the caller may see, key creation and revocation, each
// change recorded in the audit log.
#include <string>

#include "absl/strings/str_cat.h"
#include "api/control_api.h"
#include "api/control_internal.h"
#include "nlohmann/json.hpp"

namespace gpusched::api {

using nlohmann::json;

namespace {

json KeyJson(const store::KeyInfo& k) {
  json j = {{"id", k.key_id},   {"tenant", k.tenant},   {"name", k.name},
            {"admin", k.admin}, {"created", k.created}, {"revoked", nullptr}};
  if (k.revoked) j["revoked"] = *k.revoked;
  return j;
}

// Parses an optional JSON body {"name": "..."} (the key's name).
std::string KeyName(const std::string& body, const std::string& fallback) {
  json j = json::parse(body.empty() ? "{}" : body, nullptr, false);
  if (j.is_object() && j.contains("name") && j["name"].is_string()) {
    return j["name"].get<std::string>();
  }
  return fallback;
}

}  // namespace

void ControlApi::ListTenants(Call& c) {
  const auth::Permission list{auth::Resource::kTenants, auth::Verb::kList};
  json items = json::array();
  for (json& t : controller_->TenantsJson()) {
    const std::string name = ListedName(t);
    if (auth::Allows(c.who, list, {&name, 1})) items.push_back(std::move(t));
  }
  c.Send(http::status::ok, json{{"items", items}});
}

void ControlApi::GetTenant(Call& c) {
  SendOne(c, controller_->TenantsJson(c.name()), "tenant");
}

void ControlApi::DeleteTenant(Call& c) {
  DeleteOne(c, config::Manifest::Kind::kTenant);
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
  const std::string key_name = KeyName(c.req.body(), "api");
  auto k = controller_->CreateKey(c.name(), key_name, /*admin=*/false);
  Audit(c, "create",
        absl::StrCat("key/", k.ok() ? k->key_id : std::string("?")), k.status(),
        json{{"tenant", c.name()}, {"name", key_name}});
  if (!k.ok()) return c.Fail(k.status());
  c.Send(http::status::created,
         json{{"id", k->key_id}, {"secret", k->secret}, {"tenant", c.name()}});
}

void ControlApi::ListAdminKeys(Call& c) { SendKeys(c, ""); }

void ControlApi::CreateAdminKey(Call& c) {
  const std::string key_name = KeyName(c.req.body(), "admin");
  auto k = controller_->CreateKey("", key_name, /*admin=*/true);
  Audit(c, "create",
        absl::StrCat("key/", k.ok() ? k->key_id : std::string("?")), k.status(),
        json{{"admin", true}, {"name", key_name}});
  if (!k.ok()) return c.Fail(k.status());
  c.Send(http::status::created,
         json{{"id", k->key_id}, {"secret", k->secret}, {"admin", true}});
}

void ControlApi::RevokeKey(Call& c) {
  absl::Status st = controller_->RevokeKey(c.name());
  Audit(c, "revoke", absl::StrCat("key/", c.name()), st);
  if (!st.ok()) return c.Fail(st);
  c.Send(http::status::ok, json{{"id", c.name()}, {"action", "revoked"}});
}

}  // namespace gpusched::api
