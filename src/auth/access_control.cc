#include "auth/access_control.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auth/token.h"
#include "common/status.h"
#include "config/manifest.h"

namespace gpusched::auth {

using nlohmann::json;
using store::DocKind;

namespace {

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const AccessPolicy>> AccessControl::Load(
    std::vector<config::RoleSpec>* roles,
    std::vector<config::RoleBindingSpec>* bindings) {
  config::AccessManifests access;
  for (DocKind kind : {DocKind::kRole, DocKind::kRoleBinding}) {
    ASSIGN_OR_RETURN(std::vector<store::Document> docs, store_->List(kind));
    for (const store::Document& d : docs) {
      RETURN_IF_ERROR(config::ParseManifests(
                          d.manifest_json,
                          absl::StrCat("stored ", store::DocKindName(kind),
                                       " '", d.name, "'"),
                          &access)
                          .status());
    }
  }
  *roles = std::move(access.roles);
  *bindings = std::move(access.bindings);
  return AccessPolicy::Create(*roles, *bindings);
}

std::shared_ptr<const AccessPolicy> AccessControl::Policy() {
  const int64_t revision = store_->desired_revision();
  {
    absl::MutexLock lock(&mu_);
    if (revision == revision_) return policy_;
  }
  std::vector<config::RoleSpec> roles;
  std::vector<config::RoleBindingSpec> bindings;
  absl::StatusOr<std::shared_ptr<const AccessPolicy>> loaded =
      Load(&roles, &bindings);
  absl::MutexLock lock(&mu_);
  if (loaded.ok()) {
    policy_ = *std::move(loaded);
    revision_ = revision;
  }
  return policy_;
}

absl::StatusOr<std::vector<AccessControl::Applied>> AccessControl::Apply(
    const config::AccessManifests& manifests, Micros now, bool dry_run) {
  std::vector<config::RoleSpec> roles;
  std::vector<config::RoleBindingSpec> bindings;
  RETURN_IF_ERROR(Load(&roles, &bindings).status());
  std::vector<Applied> out;
  // The whole set as it will be, validated together.
  for (const config::RoleSpec& r : manifests.roles) {
    auto it = std::find_if(roles.begin(), roles.end(),
                           [&](const auto& o) { return o.name == r.name; });
    Applied a{"Role", r.name, "created", ""};
    if (it != roles.end()) {
      a.before_json = Dump(config::RoleJson(*it));
      a.action = *it == r ? "unchanged" : "configured";
      *it = r;
    } else {
      roles.push_back(r);
    }
    out.push_back(std::move(a));
  }
  for (const config::RoleBindingSpec& b : manifests.bindings) {
    auto it = std::find_if(bindings.begin(), bindings.end(),
                           [&](const auto& o) { return o.name == b.name; });
    Applied a{"RoleBinding", b.name, "created", ""};
    if (it != bindings.end()) {
      a.before_json = Dump(config::RoleBindingJson(*it));
      a.action = *it == b ? "unchanged" : "configured";
      *it = b;
    } else {
      bindings.push_back(b);
    }
    out.push_back(std::move(a));
  }
  RETURN_IF_ERROR(AccessPolicy::Create(roles, bindings).status());
  if (dry_run) return out;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].action == "unchanged") continue;
    const bool role = out[i].kind == "Role";
    const DocKind kind = role ? DocKind::kRole : DocKind::kRoleBinding;
    const std::string text =
        role ? Dump(config::RoleJson(manifests.roles[i]))
             : Dump(config::RoleBindingJson(
                   manifests.bindings[i - manifests.roles.size()]));
    int64_t generation = 1;
    if (auto d = store_->Get(kind, out[i].name); d.ok()) {
      generation = d->generation + 1;
    }
    RETURN_IF_ERROR(store_->Put(kind, out[i].name, text, generation, now));
  }
  return out;
}

absl::Status AccessControl::Delete(DocKind kind, const std::string& name) {
  if (kind == DocKind::kRole) {
    std::vector<config::RoleSpec> roles;
    std::vector<config::RoleBindingSpec> bindings;
    RETURN_IF_ERROR(Load(&roles, &bindings).status());
    std::vector<std::string> users;
    for (const auto& b : bindings) {
      if (b.role == name) users.push_back(b.name);
    }
    if (!users.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("role '", name, "' is bound by RoleBinding ",
                       absl::StrJoin(users, ", "), "; delete those first"));
    }
  }
  return store_->Delete(kind, name);
}

absl::StatusOr<std::vector<json>> AccessControl::List(DocKind kind) {
  ASSIGN_OR_RETURN(std::vector<store::Document> docs, store_->List(kind));
  std::vector<json> out;
  for (const store::Document& d : docs) {
    json j = json::parse(d.manifest_json, nullptr, false);
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

absl::StatusOr<Principal> Authenticator::Authenticate(
    std::string_view bearer) const {
  std::shared_ptr<const AccessPolicy> policy =
      access_ != nullptr ? access_->Policy() : AccessPolicy::Empty();
  if (bearer.starts_with("gs-") || tokens_ == nullptr) {
    ASSIGN_OR_RETURN(store::KeyInfo key, keys_(bearer));
    return KeyPrincipal(policy, key.key_id, key.admin, key.tenant);
  }
  return tokens_->Verify(bearer, *policy, policy);
}

absl::StatusOr<Principal> KeyOnly(absl::StatusOr<store::KeyInfo> key) {
  if (!key.ok()) return key.status();
  return KeyPrincipal(nullptr, key->key_id, key->admin, key->tenant);
}

}  // namespace gpusched::auth
