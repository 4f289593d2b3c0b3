#include "auth/access.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auth/access_control.h"
#include "config/manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/sqlite_store.h"

namespace gpusched::auth {
namespace {

using ::testing::HasSubstr;
using R = Resource;
using V = Verb;

TEST(AccessTest, PermissionNamesRoundTrip) {
  for (int r = 0; r < kResourceCount; ++r) {
    for (int v = 0; v < kVerbCount; ++v) {
      const Permission p{static_cast<R>(r), static_cast<V>(v)};
      EXPECT_EQ(ParseResource(ResourceName(p.resource)), p.resource);
      EXPECT_EQ(ParseVerb(VerbName(p.verb)), p.verb);
    }
  }
  EXPECT_EQ((Permission{R::kDeployments, V::kScale}).Name(),
            "deployments.scale");
  EXPECT_FALSE(ParseVerb("scal").has_value());
}

TEST(AccessTest, TenantGrantsReachOnlyTheirTenant) {
  const Principal p =
      KeyPrincipal(nullptr, "abcdefgh", /*admin=*/false, "team-a");
  EXPECT_EQ(p.subject, "key:abcdefgh");
  EXPECT_EQ(p.RoleNames(), "tenant-user@team-a");
  const Permission infer{R::kModels, V::kInfer};
  const std::string a = "team-a", b = "team-b";
  EXPECT_TRUE(Allows(p, infer, {&a, 1}));
  EXPECT_FALSE(Allows(p, infer, {&b, 1}));
  EXPECT_FALSE(Allows(p, infer));  // a cluster-wide object
  absl::Status st =
      Check(p, {R::kDeployments, V::kScale}, {&a, 1}, "deployment/chat");
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(st.message(),
            "permission denied: key:abcdefgh (tenant-user@team-a) lacks "
            "'deployments.scale' on deployment/chat");
  // The admin key is the cluster admin.
  const Principal admin = KeyPrincipal(nullptr, "zzzzzzzz", true, "");
  EXPECT_TRUE(Allows(admin, {R::kAudit, V::kList}));
}

absl::StatusOr<config::AccessManifests> Parse(const std::string& text) {
  config::AccessManifests access;
  auto m = config::ParseManifests(text, "f.yaml", &access);
  if (!m.ok()) return m.status();
  return access;
}

TEST(AccessTest, BindingsReplaceTheDefaultsOfTheKeysTheyName) {
  auto access = Parse(R"(apiVersion: gpusched.io/v1
kind: Role
metadata: {name: scaler}
spec:
  rules:
  - {verbs: [get, list, scale], resources: [deployments]}
---
apiVersion: gpusched.io/v1
kind: RoleBinding
metadata: {name: oncall}
spec:
  role: scaler
  subjects: [{kind: Key, name: abcdefgh}, {kind: Group, name: sre}]
---
apiVersion: gpusched.io/v1
kind: RoleBinding
metadata: {name: lead}
spec:
  role: tenant-admin
  tenant: team-a
  subjects: [{kind: User, name: alice}]
)");
  ASSERT_TRUE(access.ok()) << access.status();
  auto policy = AccessPolicy::Create(access->roles, access->bindings);
  ASSERT_TRUE(policy.ok()) << policy.status();
  const Principal bound = KeyPrincipal(*policy, "abcdefgh", false, "team-a");
  EXPECT_EQ(bound.RoleNames(), "scaler");
  EXPECT_TRUE(Allows(bound, {R::kDeployments, V::kScale}));
  EXPECT_FALSE(Allows(bound, {R::kModels, V::kInfer}, {&bound.tenant, 1}));
  // Another key keeps its default.
  EXPECT_EQ(KeyPrincipal(*policy, "other123", false, "team-a").RoleNames(),
            "tenant-user@team-a");
  std::vector<Grant> grants;
  const std::vector<std::string> subjects = {"user:alice", "group:sre"};
  EXPECT_TRUE((*policy)->GrantsOf(subjects, &grants));
  ASSERT_EQ(grants.size(), 2u);
}

TEST(AccessTest, InvalidRolesAndBindingsNameTheField) {
  struct Case {
    const char* yaml;
    const char* expect;
  };
  const Case cases[] = {
      {"kind: Role\nmetadata: {name: r}\nspec:\n  rules:\n  - {verbs: "
       "[scal], resources: [deployments]}\n",
       "Role/r: spec.rules[0].verbs[0]: unknown verb 'scal'"},
      {"kind: Role\nmetadata: {name: r}\nspec:\n  rules:\n  - {verbs: [get], "
       "resources: [pods]}\n",
       "Role/r: spec.rules[0].resources[0]: unknown resource 'pods'"},
      {"kind: Role\nmetadata: {name: viewer}\nspec:\n  rules:\n  - {verbs: "
       "[get], resources: [gpus]}\n",
       "'viewer' is a built-in role"},
      {"kind: RoleBinding\nmetadata: {name: b}\nspec:\n  role: nobody\n  "
       "subjects: [{kind: Key, name: abcdefgh}]\n",
       "RoleBinding/b: spec.role: unknown role 'nobody'"},
      {"kind: RoleBinding\nmetadata: {name: b}\nspec:\n  role: tenant-admin\n  "
       "subjects: [{kind: Key, name: abcdefgh}]\n",
       "RoleBinding/b: spec.tenant: the role tenant-admin is held within one "
       "tenant"},
      {"kind: RoleBinding\nmetadata: {name: b}\nspec:\n  role: viewer\n  "
       "subjects: [{kind: Robot, name: x}]\n",
       "spec.subjects[0].kind: must be Key, User or Group, got 'Robot'"},
      {"kind: RoleBinding\nmetadata: {name: b}\nspec:\n  role: viewer\n  "
       "subjects: []\n",
       "spec.subjects: must be a list of 1..256 subjects"},
      {"kind: Role\nmetadata: {name: r}\nspec: {}\n",
       "spec.rules: must be a list of 1..64 rules"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    auto access = Parse(absl::StrCat("apiVersion: gpusched.io/v1\n", c.yaml));
    absl::Status st = access.status();
    if (st.ok()) {
      st = AccessPolicy::Create(access->roles, access->bindings).status();
    }
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr(c.expect));
  }
  // Without an access output, Role stays an unknown kind.
  EXPECT_THAT(config::ParseManifests("apiVersion: gpusched.io/v1\nkind: "
                                     "Role\nmetadata: {name: r}\n",
                                     "f.yaml")
                  .status()
                  .message(),
              HasSubstr("must be Deployment, Tenant or ModelRoute"));
}

TEST(AccessTest, AccessControlKeepsThePolicyInTheStore) {
  auto store = store::SqliteStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  AccessControl access(store->get());
  EXPECT_EQ(access.Policy()->bindings(), 0u);
  auto parsed = Parse(R"(apiVersion: gpusched.io/v1
kind: RoleBinding
metadata: {name: oncall}
spec:
  role: viewer
  subjects: [{kind: Key, name: abcdefgh}]
)");
  ASSERT_TRUE(parsed.ok());
  auto dry = access.Apply(*parsed, 1, /*dry_run=*/true);
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(access.Policy()->bindings(), 0u);  // nothing written
  auto applied = access.Apply(*parsed, 1);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(applied->at(0).action, "created");
  EXPECT_EQ(access.Policy()->bindings(), 1u);
  EXPECT_EQ(access.Apply(*parsed, 2)->at(0).action, "unchanged");
  const Authenticator authn(
      [](std::string_view) -> absl::StatusOr<store::KeyInfo> {
        return store::KeyInfo{"abcdefgh", "team-a", "k", false, 0, {}};
      },
      &access);
  auto p = authn.Authenticate("gs-whatever");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->RoleNames(), "viewer");
  // Without its binding the key is back to its default.
  ASSERT_TRUE(access.Delete(store::DocKind::kRoleBinding, "oncall").ok());
  EXPECT_EQ(authn.Authenticate("gs-whatever")->RoleNames(),
            "tenant-user@team-a");
}

}  // namespace
}  // namespace gpusched::auth
