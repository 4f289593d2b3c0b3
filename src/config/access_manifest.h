// Access manifests (docs/access.md): `kind: Role` (verbs on resources) and
// `kind: RoleBinding` (a role granted to subjects, cluster-wide or within
// one tenant), applied like other manifests through ParseManifests' access
// output. This parses their shape; auth::AccessPolicy checks the verb and
// resource names and the roles a binding names.
//
//   apiVersion: gpusched.io/v1
//   kind: Role
//   metadata: {name: deployer}
//   spec:
//     rules:                         # 1..64 rules
//     - verbs: [get, list, apply, scale]       # or ["*"]
//       resources: [deployments, routes]       # or ["*"]
//
//   apiVersion: gpusched.io/v1
//   kind: RoleBinding
//   metadata: {name: team-a-leads}
//   spec:
//     role: tenant-admin             # a built-in or custom role
//     tenant: team-a                 # "" (default): cluster-wide
//     subjects:                      # 1..256
//     - {kind: Key, name: ab12cd34}  # an API key id
//     - {kind: User, name: alice@example.com}  # a token's subject
//     - {kind: Group, name: sre}     # a token's group claim
//
// Plain values; thread-compatible.
#ifndef GPUSCHED_CONFIG_ACCESS_MANIFEST_H_
#define GPUSCHED_CONFIG_ACCESS_MANIFEST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config/manifest.h"
#include "nlohmann/json.hpp"

namespace gpusched::config {

inline constexpr int kMaxRoleRules = 64;
inline constexpr int kMaxBindingSubjects = 256;

struct RoleRule {
  std::vector<std::string> verbs;
  std::vector<std::string> resources;
  bool operator==(const RoleRule&) const = default;
};

struct RoleSpec {
  std::string name;
  std::vector<RoleRule> rules;
  bool operator==(const RoleSpec&) const = default;
};

struct Subject {
  std::string kind;  // Key | User | Group
  std::string name;
  bool operator==(const Subject&) const = default;
};

struct RoleBindingSpec {
  std::string name;
  std::string role;
  std::string tenant;  // empty: cluster-wide
  std::vector<Subject> subjects;
  bool operator==(const RoleBindingSpec&) const = default;
};

// What ParseManifests found of kind Role and RoleBinding.
struct AccessManifests {
  std::vector<RoleSpec> roles;
  std::vector<RoleBindingSpec> bindings;
  bool empty() const { return roles.empty() && bindings.empty(); }
};

// ParseManifests (config/manifest.h) that also reads `kind: Role` and
// `kind: RoleBinding` documents into `access` instead of refusing them.
absl::StatusOr<std::vector<Manifest>> ParseManifests(absl::string_view text,
                                                     std::string source,
                                                     AccessManifests* access);

// The canonical JSON manifests (as the store keeps them) and back.
nlohmann::json RoleJson(const RoleSpec& r);
nlohmann::json RoleBindingJson(const RoleBindingSpec& b);

}  // namespace gpusched::config

#endif  // GPUSCHED_CONFIG_ACCESS_MANIFEST_H_
