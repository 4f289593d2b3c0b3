// What authorization and token checks add to a data-plane request
// (docs/access.md, "Cost"). Each request's gateway calls its Authenticator
// once and checks one permission; this runs that code in the same process,
// same run, for:
//   keys (before)   : the key cache alone (what the data plane did before
//                     roles: KeyCache::Authenticate)
//   keys + roles    : Authenticator over the same cache, with a policy of
//                     100 bindings, then Allows(models.infer)
//   token (cached)  : a verified RS256 token again (the common case: a
//                     client reuses its token), claims mapped, Allows
//   token (first)   : RS256 / ES256 signature checks of a new token
// and prints the p50 and p99 of each call in microseconds, and the p50
// difference against "keys (before)". Usage: auth_bench [ITERATIONS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auth/access_control.h"
#include "auth/jwt_testing.h"
#include "auth/token.h"
#include "config/manifest.h"
#include "gateway/key_cache.h"
#include "nlohmann/json.hpp"
#include "store/sqlite_store.h"

namespace gpusched {
namespace {

using nlohmann::json;

struct Stats {
  double p50, p99;
};

Stats Measure(int n, const std::function<void()>& f) {
  std::vector<double> us(n);
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    us[i] = std::chrono::duration<double, std::micro>(
                std::chrono::steady_clock::now() - t0)
                .count();
  }
  std::sort(us.begin(), us.end());
  return {us[n / 2], us[std::min(n - 1, n * 99 / 100)]};
}

int Main(int argc, char** argv) {
  const int n = argc > 1 ? std::max(100, std::atoi(argv[1])) : 200000;
  auto opened = store::SqliteStore::Open(":memory:");
  if (!opened.ok()) return 1;
  store::Store* st = opened->get();
  (void)st->PutTenant("team-a", "{}", 1, 0);
  const std::string secret = st->CreateApiKey("team-a", "bench", 0)->secret;
  // A policy of 100 bindings, none naming this key (its default role).
  std::string yaml;
  for (int i = 0; i < 100; ++i) {
    absl::StrAppend(&yaml,
                    "---\napiVersion: gpusched.io/v1\nkind: RoleBinding\n"
                    "metadata: {name: b",
                    i,
                    "}\nspec:\n  role: viewer\n"
                    "  subjects: [{kind: User, name: user",
                    i, "}]\n");
  }
  config::AccessManifests access_manifests;
  (void)config::ParseManifests(yaml, "bench", &access_manifests);
  auth::AccessControl access(st);
  if (!access.Apply(access_manifests, 1).ok()) return 1;

  gateway::KeyCache keys(st);
  const auto rsa = auth::testing::SigningKey::Make("RS256", "r");
  const auto ec = auth::testing::SigningKey::Make("ES256", "e");
  const json jwks = {{"keys", {rsa.Jwk(), ec.Jwk()}}};
  auth::TokenConfig tc;
  tc.issuer = "https://idp.bench";
  tc.audience = "gpusched";
  tc.jwks_file = "unused";
  tc.tenant_claim = "team";
  tc.claim_roles = {{"groups", "ml", "tenant-user", ""}};
  const auto now = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  auto verifier = auth::TokenVerifier::Create(
      tc, [&]() -> absl::StatusOr<std::string> { return jwks.dump(); }, now);
  if (!verifier.ok()) return 1;
  const auth::Authenticator authn(
      [&keys](std::string_view s) { return keys.Authenticate(s); }, &access,
      verifier->get());
  const int64_t exp = now() / 1000000 + 3600;
  const json claims = {{"iss", tc.issuer}, {"aud", tc.audience},
                       {"sub", "alice"},   {"groups", {"ml"}},
                       {"team", "team-a"}, {"exp", exp}};
  const std::string token = rsa.Mint(claims);
  const auth::Permission infer{auth::Resource::kModels, auth::Verb::kInfer};
  const std::string tenant = "team-a";
  bool sink = false;

  const Stats before =
      Measure(n, [&] { sink ^= keys.Authenticate(secret).ok(); });
  const Stats with_roles = Measure(n, [&] {
    auto p = authn.Authenticate(secret);
    sink ^= p.ok() && auth::Allows(*p, infer, {&tenant, 1});
  });
  const Stats token_cached = Measure(n, [&] {
    auto p = authn.Authenticate(token);
    sink ^= p.ok() && auth::Allows(*p, infer, {&tenant, 1});
  });
  // First sight of a token: a new one each call (minted outside the timing).
  const int fresh_n = std::min(n, 2000);
  std::vector<std::string> rs_tokens, es_tokens;
  for (int i = 0; i < fresh_n; ++i) {
    json c = claims;
    c["jti"] = i;
    rs_tokens.push_back(rsa.Mint(c));
    es_tokens.push_back(ec.Mint(c));
  }
  int i = 0;
  const Stats rs_first = Measure(
      fresh_n, [&] { sink ^= authn.Authenticate(rs_tokens[i++]).ok(); });
  i = 0;
  const Stats es_first = Measure(
      fresh_n, [&] { sink ^= authn.Authenticate(es_tokens[i++]).ok(); });
  std::printf("auth_bench: %d calls each (first-sight tokens: %d)\n", n,
              fresh_n);
  std::printf("%-28s %9s %9s %14s\n", "path", "p50_us", "p99_us",
              "p50_added_us");
  auto row = [&](const char* name, Stats s) {
    std::printf("%-28s %9.3f %9.3f %14.3f\n", name, s.p50, s.p99,
                s.p50 - before.p50);
  };
  row("keys (before)", before);
  row("keys + roles + permission", with_roles);
  row("token cached + permission", token_cached);
  row("token RS256 first sight", rs_first);
  row("token ES256 first sight", es_first);
  return sink ? 0 : 0;
}

}  // namespace
}  // namespace gpusched

int main(int argc, char** argv) { return gpusched::Main(argc, argv); }
