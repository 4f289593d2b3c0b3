// The route-permission test (docs/access.md): every control and data-plane
// route states a permission, and each built-in role is allowed exactly what
// the table in docs/access.md says. The table is computed here from the
// route tables and the roles, and compared with the doc's, row by row: a
// route added without a row, or a role changed without the doc, fails.
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/control_api.h"
#include "auth/access.h"
#include "gateway/gateway.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::api {
namespace {

constexpr const char* kTenant = "team-a";

// What a role may do on a route: "all" (anything the route reaches), "own"
// (its tenant's objects), "" (nothing).
std::string Cell(const auth::Role& role, auth::Permission perm,
                 RouteScope scope) {
  auth::Principal p;
  p.subject = "test";
  p.grants.push_back({&role, role.needs_tenant ? kTenant : ""});
  const std::string tenant = kTenant;
  if (auth::Allows(p, perm)) return "all";
  const bool tenant_object = scope != RouteScope::kCluster;
  if (tenant_object && auth::Allows(p, perm, {&tenant, 1})) return "own";
  return "";
}

std::string Row(const std::string& method, const std::string& path,
                const std::string& perm,
                const std::vector<std::string>& cells) {
  return absl::StrCat("| ", method, " | `", path, "` | `", perm, "` | ",
                      absl::StrJoin(cells, " | "), " |");
}

std::vector<std::string> ComputedRows() {
  std::vector<std::string> rows;
  auto cells = [](auth::Permission perm, RouteScope scope) {
    std::vector<std::string> out;
    for (const auth::Role& r : auth::BuiltinRoles()) {
      out.push_back(Cell(r, perm, scope));
    }
    return out;
  };
  for (const RouteInfo& r : ControlApi::RouteTable()) {
    const std::string path = absl::StrCat("/api/v1/", r.path);
    if (r.scope == RouteScope::kBody) {
      // Each manifest's kind asks its own resource.
      const std::pair<const char*, auth::Resource> kinds[] = {
          {"Deployment", auth::Resource::kDeployments},
          {"Tenant", auth::Resource::kTenants},
          {"ModelRoute", auth::Resource::kRoutes},
          {"Role", auth::Resource::kRoles},
          {"RoleBinding", auth::Resource::kRoleBindings}};
      for (const auto& [kind, resource] : kinds) {
        const auth::Permission perm{resource, r.permission.verb};
        // Roles and bindings are cluster-wide objects.
        const RouteScope scope =
            resource == auth::Resource::kRoles ||
                    resource == auth::Resource::kRoleBindings
                ? RouteScope::kCluster
                : RouteScope::kBody;
        rows.push_back(Row(r.method, absl::StrCat(path, " (", kind, ")"),
                           perm.Name(), cells(perm, scope)));
      }
      continue;
    }
    rows.push_back(
        Row(r.method, path, r.permission.Name(), cells(r.permission, r.scope)));
  }
  for (const gateway::DataPlaneRoute& r : gateway::DataPlaneRoutes()) {
    if (!r.permission) {
      rows.push_back(
          Row(r.method, r.path, "public",
              std::vector<std::string>(auth::BuiltinRoles().size(), "all")));
      continue;
    }
    rows.push_back(Row(r.method, r.path, r.permission->Name(),
                       cells(*r.permission, RouteScope::kTenant)));
  }
  return rows;
}

std::vector<std::string> DocRows() {
  std::ifstream in(std::string(GPUSCHED_SOURCE_DIR) + "/docs/access.md");
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> rows;
  bool inside = false;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    if (line == "<!-- route-permissions -->") {
      inside = true;
      continue;
    }
    if (line == "<!-- /route-permissions -->") break;
    // The table's body: rows, not its header or separator.
    if (inside && absl::StartsWith(line, "| ") &&
        !absl::StartsWith(line, "| method") &&
        !absl::StartsWith(line, "|---")) {
      rows.emplace_back(line);
    }
  }
  return rows;
}

TEST(AccessRoutesTest, EveryRouteStatesAPermission) {
  std::set<std::string> seen;
  for (const RouteInfo& r : ControlApi::RouteTable()) {
    EXPECT_TRUE(seen.insert(absl::StrCat(r.method, " ", r.path)).second)
        << r.path << " twice";
    // A permission is a known verb on a known resource.
    EXPECT_NE(std::string(auth::ResourceName(r.permission.resource)), "")
        << r.path;
  }
  EXPECT_GE(ControlApi::RouteTable().size(), 30u);
  int public_routes = 0;
  for (const gateway::DataPlaneRoute& r : gateway::DataPlaneRoutes()) {
    if (!r.permission) {
      ++public_routes;
      // Only health and server metadata answer without a credential.
      EXPECT_TRUE(absl::StrContains(r.path, "health") ||
                  std::string(r.path) == "/v2")
          << r.path;
    }
  }
  EXPECT_EQ(public_routes, 4);
}

TEST(AccessRoutesTest, EachRoleIsAllowedExactlyWhatDocsAccessMdSays) {
  const std::vector<std::string> computed = ComputedRows();
  const std::vector<std::string> doc = DocRows();
  EXPECT_EQ(doc, computed)
      << "docs/access.md's route table differs from the code; the table "
         "the code gives is:\n"
      << absl::StrJoin(computed, "\n");
}

// The roles' shape, stated once more in words (docs/access.md).
TEST(AccessRoutesTest, BuiltinRolesKeepTheirPromises) {
  auto role = [](std::string_view n) { return *auth::FindBuiltinRole(n); };
  using R = auth::Resource;
  using V = auth::Verb;
  // The operator changes every deployment but no key or tenant.
  EXPECT_TRUE(
      role(auth::kOperator).permissions.Has({R::kDeployments, V::kScale}));
  for (V v : {V::kGet, V::kList, V::kApply, V::kDelete}) {
    EXPECT_FALSE(role(auth::kOperator).permissions.Has({R::kKeys, v}));
    EXPECT_FALSE(role(auth::kOperator).permissions.Has({R::kTenants, v}));
  }
  // The viewer changes nothing.
  for (int r = 0; r < auth::kResourceCount; ++r) {
    for (V v : {V::kApply, V::kDelete, V::kScale, V::kRollout, V::kInfer}) {
      EXPECT_FALSE(role(auth::kViewer).permissions.Has({static_cast<R>(r), v}));
    }
  }
  // Reading the audit log is a permission of its own: only the cluster
  // admin holds it among the built-in roles.
  for (const auth::Role& r : auth::BuiltinRoles()) {
    EXPECT_EQ(r.permissions.Has({R::kAudit, V::kList}),
              r.name == auth::kClusterAdmin)
        << r.name;
  }
  // The tenant user infers and reads, nothing else.
  EXPECT_TRUE(role(auth::kTenantUser).permissions.Has({R::kModels, V::kInfer}));
  EXPECT_FALSE(
      role(auth::kTenantUser).permissions.Has({R::kDeployments, V::kApply}));
}

}  // namespace
}  // namespace gpusched::api
