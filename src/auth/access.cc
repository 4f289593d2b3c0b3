#include "auth/access.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpusched::auth {

namespace {

constexpr const char* kResourceNames[kResourceCount] = {
    "deployments", "replicas",     "routes",    "gpus",   "nodes",   "queues",
    "stats",       "cluster",      "instances", "events", "tenants", "keys",
    "roles",       "rolebindings", "audit",     "models", "pools",   "alerts"};
constexpr const char* kVerbNames[kVerbCount] = {
    "get", "list", "apply", "delete", "scale", "rollout", "logs", "infer"};

constexpr Verb kRead[] = {Verb::kGet, Verb::kList};

void AddAll(PermissionSet* s, std::initializer_list<Resource> resources,
            std::initializer_list<Verb> verbs) {
  for (Resource r : resources) {
    for (Verb v : verbs) s->Add({r, v});
  }
}

std::vector<Role> MakeBuiltinRoles() {
  using R = Resource;
  using V = Verb;
  std::vector<Role> roles;
  roles.push_back({std::string(kClusterAdmin), PermissionSet::All(), true});
  // Every deployment and route, the cluster's views; no keys, tenants,
  // roles or audit.
  Role op{std::string(kOperator), {}, true};
  AddAll(&op.permissions, {R::kDeployments},
         {V::kGet, V::kList, V::kApply, V::kDelete, V::kScale, V::kLogs});
  AddAll(&op.permissions, {R::kRoutes},
         {V::kGet, V::kList, V::kApply, V::kDelete, V::kRollout});
  AddAll(&op.permissions,
         {R::kReplicas, R::kGpus, R::kNodes, R::kQueues, R::kStats, R::kCluster,
          R::kInstances, R::kEvents, R::kModels, R::kPools, R::kAlerts},
         {V::kGet, V::kList});
  roles.push_back(std::move(op));
  // Read-only everywhere, except the audit log (a permission of its own)
  // and engine logs (what an engine prints is not the scheduler's to show).
  Role viewer{std::string(kViewer), {}, true};
  for (int r = 0; r < kResourceCount; ++r) {
    if (static_cast<R>(r) == R::kAudit) continue;
    for (V v : kRead) viewer.permissions.Add({static_cast<R>(r), v});
  }
  roles.push_back(std::move(viewer));
  // One tenant's deployments, routes and keys, and its inference.
  Role ta{std::string(kTenantAdmin), {}, true, /*needs_tenant=*/true};
  AddAll(&ta.permissions, {R::kDeployments},
         {V::kGet, V::kList, V::kApply, V::kDelete, V::kScale, V::kLogs});
  AddAll(&ta.permissions, {R::kRoutes},
         {V::kGet, V::kList, V::kApply, V::kDelete, V::kRollout});
  AddAll(&ta.permissions, {R::kKeys},
         {V::kGet, V::kList, V::kApply, V::kDelete});
  AddAll(&ta.permissions, {R::kTenants}, {V::kGet});
  AddAll(&ta.permissions, {R::kModels}, {V::kGet, V::kList, V::kInfer});
  roles.push_back(std::move(ta));
  // Inference, and reading what it may use.
  Role tu{std::string(kTenantUser), {}, true, /*needs_tenant=*/true};
  AddAll(&tu.permissions, {R::kDeployments}, {V::kGet, V::kList});
  AddAll(&tu.permissions, {R::kTenants}, {V::kGet});
  AddAll(&tu.permissions, {R::kModels}, {V::kGet, V::kList, V::kInfer});
  roles.push_back(std::move(tu));
  return roles;
}

bool GrantReaches(const Grant& g, absl::Span<const std::string> tenants) {
  if (g.tenant.empty()) return true;
  return std::find(tenants.begin(), tenants.end(), g.tenant) != tenants.end();
}

}  // namespace

const char* ResourceName(Resource r) {
  return kResourceNames[static_cast<int>(r)];
}
const char* VerbName(Verb v) { return kVerbNames[static_cast<int>(v)]; }

std::optional<Resource> ParseResource(std::string_view name) {
  for (int i = 0; i < kResourceCount; ++i) {
    if (name == kResourceNames[i]) return static_cast<Resource>(i);
  }
  return std::nullopt;
}

std::optional<Verb> ParseVerb(std::string_view name) {
  for (int i = 0; i < kVerbCount; ++i) {
    if (name == kVerbNames[i]) return static_cast<Verb>(i);
  }
  return std::nullopt;
}

std::string Permission::Name() const {
  return absl::StrCat(ResourceName(resource), ".", VerbName(verb));
}

PermissionSet PermissionSet::All() {
  PermissionSet s;
  s.bits_.fill(static_cast<uint8_t>((1u << kVerbCount) - 1));
  return s;
}

const std::vector<Role>& BuiltinRoles() {
  static const std::vector<Role>* const kRoles =
      new std::vector<Role>(MakeBuiltinRoles());
  return *kRoles;
}

const Role* FindBuiltinRole(std::string_view name) {
  for (const Role& r : BuiltinRoles()) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string Principal::RoleNames() const {
  std::vector<std::string> names;
  for (const Grant& g : grants) {
    names.push_back(g.tenant.empty()
                        ? g.role->name
                        : absl::StrCat(g.role->name, "@", g.tenant));
  }
  return names.empty() ? "no role" : absl::StrJoin(names, ", ");
}

bool Allows(const Principal& p, Permission perm,
            absl::Span<const std::string> tenants) {
  for (const Grant& g : p.grants) {
    if (g.role->permissions.Has(perm) && GrantReaches(g, tenants)) return true;
  }
  return false;
}

bool Allows(const Principal& p, Permission perm,
            absl::FunctionRef<bool(const std::string& tenant)> in_tenant) {
  for (const Grant& g : p.grants) {
    if (!g.role->permissions.Has(perm)) continue;
    if (g.tenant.empty() || in_tenant(g.tenant)) return true;
  }
  return false;
}

bool AllowsSome(const Principal& p, Permission perm) {
  for (const Grant& g : p.grants) {
    if (g.role->permissions.Has(perm)) return true;
  }
  return false;
}

absl::Status DeniedError(const Principal& p, Permission perm,
                         std::string_view object) {
  return absl::PermissionDeniedError(
      absl::StrCat("permission denied: ", p.subject, " (", p.RoleNames(),
                   ") lacks '", perm.Name(), "'", object.empty() ? "" : " on ",
                   absl::string_view(object.data(), object.size())));
}

absl::Status Check(const Principal& p, Permission perm,
                   absl::Span<const std::string> tenants,
                   std::string_view object) {
  if (Allows(p, perm, tenants)) return absl::OkStatus();
  return DeniedError(p, perm, object);
}

absl::StatusOr<std::shared_ptr<const AccessPolicy>> AccessPolicy::Create(
    const std::vector<config::RoleSpec>& roles,
    const std::vector<config::RoleBindingSpec>& bindings) {
  auto policy = std::shared_ptr<AccessPolicy>(new AccessPolicy());
  std::vector<std::string> problems;
  std::set<std::string> seen;
  for (const config::RoleSpec& spec : roles) {
    const std::string where = absl::StrCat("Role/", spec.name);
    if (FindBuiltinRole(spec.name) != nullptr) {
      problems.push_back(absl::StrCat(
          where, ": metadata.name: '", spec.name,
          "' is a built-in role; give the custom role another name"));
      continue;
    }
    if (!seen.insert(spec.name).second) {
      problems.push_back(absl::StrCat(where, ": declared twice"));
      continue;
    }
    auto role = std::make_unique<Role>();
    role->name = spec.name;
    for (size_t i = 0; i < spec.rules.size(); ++i) {
      const config::RoleRule& rule = spec.rules[i];
      std::vector<Resource> rs;
      std::vector<Verb> vs;
      for (size_t j = 0; j < rule.resources.size(); ++j) {
        const std::string& name = rule.resources[j];
        if (name == "*") {
          for (int r = 0; r < kResourceCount; ++r) {
            rs.push_back(static_cast<Resource>(r));
          }
        } else if (auto r = ParseResource(name)) {
          rs.push_back(*r);
        } else {
          problems.push_back(
              absl::StrCat(where, ": spec.rules[", i, "].resources[", j,
                           "]: unknown resource '", name, "'; known: *, ",
                           absl::StrJoin(kResourceNames, ", ")));
        }
      }
      for (size_t j = 0; j < rule.verbs.size(); ++j) {
        const std::string& name = rule.verbs[j];
        if (name == "*") {
          for (int v = 0; v < kVerbCount; ++v)
            vs.push_back(static_cast<Verb>(v));
        } else if (auto v = ParseVerb(name)) {
          vs.push_back(*v);
        } else {
          problems.push_back(absl::StrCat(
              where, ": spec.rules[", i, "].verbs[", j, "]: unknown verb '",
              name, "'; known: *, ", absl::StrJoin(kVerbNames, ", ")));
        }
      }
      for (Resource r : rs) {
        for (Verb v : vs) role->permissions.Add({r, v});
      }
    }
    policy->roles_.push_back(std::move(role));
  }
  for (const config::RoleBindingSpec& b : bindings) {
    const std::string where = absl::StrCat("RoleBinding/", b.name);
    const Role* role = policy->FindRole(b.role);
    if (role == nullptr) {
      std::vector<std::string> known;
      for (const Role& r : BuiltinRoles()) known.push_back(r.name);
      for (const auto& r : policy->roles_) known.push_back(r->name);
      problems.push_back(
          absl::StrCat(where, ": spec.role: unknown role '", b.role,
                       "'; known: ", absl::StrJoin(known, ", ")));
      continue;
    }
    if (role->needs_tenant && b.tenant.empty()) {
      problems.push_back(
          absl::StrCat(where, ": spec.tenant: the role ", role->name,
                       " is held within one tenant; name it (spec.tenant)"));
      continue;
    }
    for (const config::Subject& s : b.subjects) {
      const std::string key = absl::StrCat(s.kind == "Key"    ? "key:"
                                           : s.kind == "User" ? "user:"
                                                              : "group:",
                                           s.name);
      policy->by_subject_[key].push_back(Grant{role, b.tenant});
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  }
  return std::shared_ptr<const AccessPolicy>(std::move(policy));
}

std::shared_ptr<const AccessPolicy> AccessPolicy::Empty() {
  static const std::shared_ptr<const AccessPolicy> kEmpty(new AccessPolicy());
  return kEmpty;
}

const Role* AccessPolicy::FindRole(std::string_view name) const {
  if (const Role* r = FindBuiltinRole(name)) return r;
  for (const auto& r : roles_) {
    if (r->name == name) return r.get();
  }
  return nullptr;
}

bool AccessPolicy::GrantsOf(absl::Span<const std::string> subjects,
                            std::vector<Grant>* out) const {
  bool found = false;
  for (const std::string& s : subjects) {
    auto it = by_subject_.find(s);
    if (it == by_subject_.end()) continue;
    found = true;
    out->insert(out->end(), it->second.begin(), it->second.end());
  }
  return found;
}

Principal KeyPrincipal(const std::shared_ptr<const AccessPolicy>& policy,
                       const std::string& key_id, bool admin,
                       const std::string& tenant) {
  Principal p;
  p.subject = absl::StrCat("key:", key_id);
  p.tenant = tenant;
  if (policy != nullptr && policy->bindings() > 0 &&
      policy->GrantsOf({&p.subject, 1}, &p.grants)) {
    p.keep = policy;
    return p;
  }
  if (admin) {
    p.grants.push_back({FindBuiltinRole(kClusterAdmin), ""});
  } else if (!tenant.empty()) {
    p.grants.push_back({FindBuiltinRole(kTenantUser), tenant});
  }
  return p;
}

}  // namespace gpusched::auth
