// Access: who may do what (docs/access.md). A Permission is a verb on a
// resource ("deployments.scale"); a Role is a set of them; a Principal (a
// key or a token's subject) holds Grants, each a role either cluster-wide or
// within one tenant. The built-in roles are fixed here; custom roles and
// bindings come from `kind: Role` / `kind: RoleBinding` manifests
// (config/access_manifest.h) through AccessPolicy.
//
// Every control route and data-plane route states the Permission it needs in
// its route table (api/control_api.cc, gateway/gateway_http.cc); a refusal is
// a 403 whose message names the missing permission (Check).
//
// Plain values, no I/O; thread-compatible. AccessPolicy is immutable once
// built and shared between threads as shared_ptr<const AccessPolicy>.
#ifndef GPUSCHED_AUTH_ACCESS_H_
#define GPUSCHED_AUTH_ACCESS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "config/access_manifest.h"

namespace gpusched::auth {

enum class Resource : uint8_t {
  kDeployments,
  kReplicas,
  kRoutes,
  kGpus,
  kNodes,
  kQueues,
  kStats,
  kCluster,
  kInstances,
  kEvents,
  kTenants,
  kKeys,
  kRoles,
  kRoleBindings,
  kAudit,
  kModels,  // the data plane: model listings and inference
  kPools,   // node pools (capacity on demand)
  kAlerts,  // the alerts Prometheus reports firing
};
inline constexpr int kResourceCount = 18;

enum class Verb : uint8_t {
  kGet,
  kList,
  kApply,  // create or update (apply, key creation)
  kDelete,
  kScale,
  kRollout,
  kLogs,
  kInfer,
};
inline constexpr int kVerbCount = 8;

const char* ResourceName(Resource r);  // "deployments"
const char* VerbName(Verb v);          // "scale"
std::optional<Resource> ParseResource(std::string_view name);
std::optional<Verb> ParseVerb(std::string_view name);

struct Permission {
  Resource resource;
  Verb verb;
  std::string Name() const;  // "deployments.scale"
  bool operator==(const Permission&) const = default;
};

// A set of permissions (a bit per verb, per resource).
class PermissionSet {
 public:
  void Add(Permission p) {
    bits_[static_cast<int>(p.resource)] |= 1u << static_cast<int>(p.verb);
  }
  bool Has(Permission p) const {
    return (bits_[static_cast<int>(p.resource)] >> static_cast<int>(p.verb)) &
           1u;
  }
  static PermissionSet All();

 private:
  std::array<uint8_t, kResourceCount> bits_{};
};

struct Role {
  std::string name;
  PermissionSet permissions;
  bool builtin = false;
  // Built-in tenant roles only make sense bound to one tenant.
  bool needs_tenant = false;
};

// The built-in role names.
inline constexpr std::string_view kClusterAdmin = "cluster-admin";
inline constexpr std::string_view kOperator = "operator";
inline constexpr std::string_view kViewer = "viewer";
inline constexpr std::string_view kTenantAdmin = "tenant-admin";
inline constexpr std::string_view kTenantUser = "tenant-user";

// The five built-in roles, in the order of docs/access.md.
const std::vector<Role>& BuiltinRoles();
const Role* FindBuiltinRole(std::string_view name);

// A role held cluster-wide (tenant empty) or within one tenant.
struct Grant {
  const Role* role = nullptr;  // owned by BuiltinRoles() or an AccessPolicy
  std::string tenant;
};

// Who is calling: a key ("key:ab12cd34") or a token's subject
// ("token:alice@example.com"), and what it holds.
struct Principal {
  std::string subject;
  std::vector<Grant> grants;
  // The tenant whose models its inference uses (the data plane); empty when
  // it acts for none (an admin key, a token without a tenant claim).
  std::string tenant;
  // Keeps the roles of `grants` alive (custom roles).
  std::shared_ptr<const void> keep;

  // "tenant-admin@team-a, viewer"
  std::string RoleNames() const;
};

// Whether `p` may do `perm` on an object that belongs to any of `tenants`
// (empty: a cluster-wide object, which only cluster-wide grants reach).
bool Allows(const Principal& p, Permission perm,
            absl::Span<const std::string> tenants = {});
// The same, where `in_tenant(t)` says whether the object belongs to tenant
// `t` (asked only for the tenants of grants that hold `perm`).
bool Allows(const Principal& p, Permission perm,
            absl::FunctionRef<bool(const std::string& tenant)> in_tenant);
// Whether `p` may do `perm` on anything at all (cluster-wide or in some
// tenant): a listing, whose items are then filtered with Allows.
bool AllowsSome(const Principal& p, Permission perm);
// OK, or PermissionDenied naming the missing permission and what it was
// asked on: "permission denied: key:ab12cd34 (tenant-user@a) lacks
// 'deployments.scale' on deployment 'chat'".
absl::Status Check(const Principal& p, Permission perm,
                   absl::Span<const std::string> tenants = {},
                   std::string_view object = "");
absl::Status DeniedError(const Principal& p, Permission perm,
                         std::string_view object);

// The custom roles and the bindings: the built-in defaults apply to a key
// that no binding names (an admin key is cluster-admin, a tenant key
// tenant-user of its tenant); a key or token subject/group that a binding
// names holds what its bindings grant instead.
class AccessPolicy {
 public:
  // Validates every role and binding together (a binding naming an unknown
  // role, a tenant role bound cluster-wide, a custom role shadowing a
  // built-in): InvalidArgument listing each problem.
  static absl::StatusOr<std::shared_ptr<const AccessPolicy>> Create(
      const std::vector<config::RoleSpec>& roles,
      const std::vector<config::RoleBindingSpec>& bindings);
  static std::shared_ptr<const AccessPolicy> Empty();

  const Role* FindRole(std::string_view name) const;
  // The grants of every binding naming one of `subjects` (each "key:ID",
  // "user:SUB" or "group:NAME"); false when none does.
  bool GrantsOf(absl::Span<const std::string> subjects,
                std::vector<Grant>* out) const;
  size_t bindings() const { return by_subject_.size(); }

 private:
  std::vector<std::unique_ptr<Role>> roles_;
  absl::flat_hash_map<std::string, std::vector<Grant>> by_subject_;
};

// A Principal for an API key: `admin` and `tenant` are what the key was made
// as; bindings naming "key:<key_id>" replace those defaults.
Principal KeyPrincipal(const std::shared_ptr<const AccessPolicy>& policy,
                       const std::string& key_id, bool admin,
                       const std::string& tenant);

}  // namespace gpusched::auth

#endif  // GPUSCHED_AUTH_ACCESS_H_
