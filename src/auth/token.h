// TokenVerifier: single sign-on bearer tokens (docs/access.md, "Tokens"):
// JWTs from an OIDC provider, signed RS256 or ES256 (OpenSSL libcrypto),
// checked against the provider's JWKS (from a file or a URL, cached and
// refreshed: every `jwks_refresh`, and on a key id it does not know at most
// once per `jwks_min_refresh`), its issuer, audience, and exp / nbf with a
// bounded leeway. `alg: none` and every other algorithm are refused. The
// claims map to roles and a tenant: RoleBindings naming the subject
// ("User") or one of its groups ("Group"), and the configured claim
// mappings. A token that maps to no role is refused (PermissionDenied).
// A token that verified is cached until it expires (bounded), so that the
// signature is checked once, not per request.
//
// Messages name what is wrong ("token: expired at 2026-...", "token: key
// id 'k9' is not in the JWKS") and never contain the token.
//
// Thread-safety: thread-safe (one mutex for the caches; the signature check
// runs outside it).
#ifndef GPUSCHED_AUTH_TOKEN_H_
#define GPUSCHED_AUTH_TOKEN_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "auth/access.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace gpusched::auth {

// Bounds on what comes from outside.
inline constexpr size_t kMaxTokenBytes = 16 * 1024;
inline constexpr size_t kMaxJwksBytes = 1 << 20;
inline constexpr size_t kMaxJwksKeys = 100;
inline constexpr size_t kMaxGroups = 256;
inline constexpr Micros kMaxLeeway = 300 * kMicrosPerSecond;

// A claim value that grants a role: when `claim` (a string, or a list of
// strings) holds `value`, the token holds `role`, cluster-wide or in
// `tenant` ("" with a tenant role: the token's tenant claim).
struct ClaimRole {
  std::string claim;
  std::string value;
  std::string role;
  std::string tenant;
};

struct TokenConfig {
  std::string issuer;     // required: the `iss` every token must carry
  std::string audience;   // required: one of `aud`
  std::string jwks_file;  // one of jwks_file and jwks_url
  std::string jwks_url;   // http(s)://host[:port]/path
  Micros jwks_refresh = 300 * kMicrosPerSecond;     // re-read this often
  Micros jwks_min_refresh = 10 * kMicrosPerSecond;  // at most this often
  Micros leeway = 30 * kMicrosPerSecond;  // on exp and nbf; <= kMaxLeeway
  std::string subject_claim = "sub";
  std::string groups_claim = "groups";
  std::string tenant_claim;  // "": tokens act for no tenant by default
  std::vector<ClaimRole> claim_roles;
  size_t cache_capacity = 10000;  // verified tokens kept
};

// InvalidArgument naming each field that is wrong.
absl::Status ValidateTokenConfig(const TokenConfig& c);

// Reads the JWKS document: its RS256 / ES256 keys by kid.
class Jwks;

class TokenVerifier {
 public:
  // `fetch` reads the JWKS (tests and the file source pass their own;
  // FetchJwks below reads the configured file or URL). `now` is the wall
  // clock.
  using Fetch = std::function<absl::StatusOr<std::string>()>;
  static absl::StatusOr<std::unique_ptr<TokenVerifier>> Create(
      TokenConfig config, Fetch fetch, std::function<Micros()> now);
  ~TokenVerifier();

  // The token's Principal ("token:<subject>"), its grants from `policy`'s
  // bindings and the claim mappings. Unauthenticated for a token that is
  // malformed, badly signed, expired, not yet valid, for another issuer or
  // audience, or signed by a key not in the JWKS; PermissionDenied for one
  // that maps to no role. `keep` keeps `policy`'s roles alive in it.
  absl::StatusOr<Principal> Verify(std::string_view token,
                                   const AccessPolicy& policy,
                                   std::shared_ptr<const void> keep = nullptr);

  // JWKS reads so far (for tests and metrics).
  int64_t jwks_fetches() const;

 private:
  TokenVerifier(TokenConfig config, Fetch fetch, std::function<Micros()> now);
  // The key for `kid`, refreshing the JWKS when due or when it lacks it.
  absl::StatusOr<std::shared_ptr<const void>> Key(const std::string& kid,
                                                  const std::string& alg,
                                                  Micros now);
  absl::StatusOr<nlohmann::json> Check(std::string_view token, Micros now);
  absl::StatusOr<Principal> Map(const nlohmann::json& claims,
                                const AccessPolicy& policy) const;

  const TokenConfig config_;
  const Fetch fetch_;
  const std::function<Micros()> now_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Jwks> jwks_ ABSL_GUARDED_BY(mu_);
  Micros jwks_read_ ABSL_GUARDED_BY(mu_) = 0;  // when last read (0: never)
  int64_t fetches_ ABSL_GUARDED_BY(mu_) = 0;
  // Verified tokens' claims by token, until their exp.
  absl::flat_hash_map<std::string, std::pair<nlohmann::json, Micros>> cache_
      ABSL_GUARDED_BY(mu_);
};

// Reads the JWKS of `config`: its file, or its URL (GET, 10 s timeout).
TokenVerifier::Fetch JwksSource(const TokenConfig& config);

}  // namespace gpusched::auth

#endif  // GPUSCHED_AUTH_TOKEN_H_
