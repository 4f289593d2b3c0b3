#include "auth/token.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>

#include <fstream>
#include <iterator>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "net/http_client.h"

namespace gpusched::auth {

using nlohmann::json;

namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

struct JwkKey {
  std::string alg;  // RS256 | ES256
  Pkey key;
};

absl::StatusOr<std::string> B64Url(const json& j, const char* field) {
  if (!j.contains(field) || !j[field].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("'", field, "' missing"));
  }
  std::string out;
  if (!absl::WebSafeBase64Unescape(j[field].get<std::string>(), &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", field, "' is not base64url"));
  }
  return out;
}

struct BnFree {
  void operator()(BIGNUM* b) const { BN_free(b); }
};

absl::StatusOr<Pkey> FromData(const char* type, OSSL_PARAM* params) {
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr), EVP_PKEY_CTX_free);
  EVP_PKEY* key = nullptr;
  if (ctx == nullptr || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &key, EVP_PKEY_PUBLIC_KEY, params) != 1) {
    return absl::InvalidArgumentError("not a valid public key");
  }
  return Pkey(key);
}

absl::StatusOr<JwkKey> ParseJwk(const json& k) {
  const std::string kty = k.value("kty", "");
  std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> bld(
      OSSL_PARAM_BLD_new(), OSSL_PARAM_BLD_free);
  if (bld == nullptr) return absl::InternalError("out of memory");
  JwkKey out;
  const char* type = nullptr;
  std::unique_ptr<BIGNUM, BnFree> n, e;
  std::string point;
  if (kty == "RSA") {
    ASSIGN_OR_RETURN(std::string nb, B64Url(k, "n"));
    ASSIGN_OR_RETURN(std::string eb, B64Url(k, "e"));
    if (nb.size() < 256) {
      return absl::InvalidArgumentError("RSA keys under 2048 bits are refused");
    }
    n.reset(BN_bin2bn(reinterpret_cast<const unsigned char*>(nb.data()),
                      static_cast<int>(nb.size()), nullptr));
    e.reset(BN_bin2bn(reinterpret_cast<const unsigned char*>(eb.data()),
                      static_cast<int>(eb.size()), nullptr));
    OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, n.get());
    OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, e.get());
    out.alg = "RS256";
    type = "RSA";
  } else if (kty == "EC") {
    if (k.value("crv", "") != "P-256") {
      return absl::InvalidArgumentError("only EC curve P-256 (ES256)");
    }
    ASSIGN_OR_RETURN(std::string x, B64Url(k, "x"));
    ASSIGN_OR_RETURN(std::string y, B64Url(k, "y"));
    if (x.size() != 32 || y.size() != 32) {
      return absl::InvalidArgumentError("P-256 x and y are 32 bytes each");
    }
    point = absl::StrCat(std::string(1, '\x04'), x, y);
    OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME,
                                    "prime256v1", 0);
    OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY,
                                     point.data(), point.size());
    out.alg = "ES256";
    type = "EC";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("key type '", kty, "' (RSA or EC only)"));
  }
  if (k.contains("alg") && k["alg"] != out.alg) {
    return absl::InvalidArgumentError(absl::StrCat(
        "alg '", k["alg"].dump(), "' does not fit key type ", kty));
  }
  std::unique_ptr<OSSL_PARAM, decltype(&OSSL_PARAM_free)> params(
      OSSL_PARAM_BLD_to_param(bld.get()), OSSL_PARAM_free);
  ASSIGN_OR_RETURN(out.key, FromData(type, params.get()));
  return out;
}

// ES256's signature is r || s (32 bytes each); libcrypto wants DER.
absl::StatusOr<std::string> EcdsaDer(std::string_view raw) {
  if (raw.size() != 64) {
    return absl::UnauthenticatedError("token: ES256 signature is not 64 bytes");
  }
  ECDSA_SIG* sig = ECDSA_SIG_new();
  BIGNUM* r = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()), 32,
                        nullptr);
  BIGNUM* s = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data() + 32),
                        32, nullptr);
  ECDSA_SIG_set0(sig, r, s);
  unsigned char* der = nullptr;
  const int len = i2d_ECDSA_SIG(sig, &der);
  ECDSA_SIG_free(sig);
  if (len <= 0) return absl::InternalError("token: encoding the signature");
  std::string out(reinterpret_cast<char*>(der), len);
  OPENSSL_free(der);
  return out;
}

bool VerifySignature(EVP_PKEY* key, absl::string_view data,
                     absl::string_view sig) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                              EVP_MD_CTX_free);
  return ctx != nullptr &&
         EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) ==
             1 &&
         EVP_DigestVerify(
             ctx.get(), reinterpret_cast<const unsigned char*>(sig.data()),
             sig.size(), reinterpret_cast<const unsigned char*>(data.data()),
             data.size()) == 1;
}

std::string Time(Micros t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMicros(t),
                          absl::UTCTimeZone());
}

// The strings of a claim (a string or a list of strings; others: none).
std::vector<std::string> Strings(const json& claims, const std::string& name) {
  std::vector<std::string> out;
  auto it = claims.find(name);
  if (it == claims.end()) return out;
  if (it->is_string()) out.push_back(it->get<std::string>());
  if (it->is_array()) {
    for (const json& v : *it) {
      if (v.is_string() && out.size() < kMaxGroups) {
        out.push_back(v.get<std::string>());
      }
    }
  }
  return out;
}

}  // namespace

class Jwks {
 public:
  absl::flat_hash_map<std::string, std::shared_ptr<const JwkKey>> keys;
};

absl::Status ValidateTokenConfig(const TokenConfig& c) {
  std::vector<std::string> problems;
  if (c.issuer.empty()) problems.push_back("oidc.issuer: required");
  if (c.audience.empty()) problems.push_back("oidc.audience: required");
  if (c.jwks_file.empty() == c.jwks_url.empty()) {
    problems.push_back("oidc: give one of jwksFile and jwksUrl");
  }
  if (!c.jwks_url.empty() && !absl::StartsWith(c.jwks_url, "http://") &&
      !absl::StartsWith(c.jwks_url, "https://")) {
    problems.push_back("oidc.jwksUrl: must start with http:// or https://");
  }
  if (c.jwks_refresh < kMicrosPerSecond ||
      c.jwks_refresh > 86400 * kMicrosPerSecond) {
    problems.push_back("oidc.jwksRefreshS: must be in 1..86400");
  }
  if (c.jwks_min_refresh < 0 || c.jwks_min_refresh > c.jwks_refresh) {
    problems.push_back("oidc.jwksMinRefreshS: must be in 0..jwksRefreshS");
  }
  if (c.leeway < 0 || c.leeway > kMaxLeeway) {
    problems.push_back("oidc.leewayS: must be in 0..300");
  }
  if (c.subject_claim.empty()) {
    problems.push_back("oidc.subjectClaim: must not be empty");
  }
  for (size_t i = 0; i < c.claim_roles.size(); ++i) {
    const ClaimRole& m = c.claim_roles[i];
    if (m.claim.empty() || m.value.empty() || m.role.empty()) {
      problems.push_back(absl::StrCat("oidc.claimRoles[", i,
                                      "]: claim, value and role are required"));
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TokenVerifier>> TokenVerifier::Create(
    TokenConfig config, Fetch fetch, std::function<Micros()> now) {
  RETURN_IF_ERROR(ValidateTokenConfig(config));
  return std::unique_ptr<TokenVerifier>(
      new TokenVerifier(std::move(config), std::move(fetch), std::move(now)));
}

TokenVerifier::TokenVerifier(TokenConfig config, Fetch fetch,
                             std::function<Micros()> now)
    : config_(std::move(config)),
      fetch_(std::move(fetch)),
      now_(std::move(now)) {}

TokenVerifier::~TokenVerifier() = default;

int64_t TokenVerifier::jwks_fetches() const {
  absl::MutexLock lock(&mu_);
  return fetches_;
}

absl::StatusOr<std::shared_ptr<const void>> TokenVerifier::Key(
    const std::string& kid, const std::string& alg, Micros now) {
  std::shared_ptr<const Jwks> jwks;
  bool refresh = false;
  {
    absl::MutexLock lock(&mu_);
    jwks = jwks_;
    const bool due =
        jwks_read_ == 0 || now - jwks_read_ >= config_.jwks_refresh;
    const bool unknown = jwks == nullptr || !jwks->keys.contains(kid);
    refresh = due || (unknown && now - jwks_read_ >= config_.jwks_min_refresh);
    if (refresh) {
      jwks_read_ = now;  // one reader at a time; others use what is there
      ++fetches_;
    }
  }
  if (refresh) {
    absl::StatusOr<std::string> text = fetch_();
    absl::Status st = text.status();
    auto fresh = std::make_shared<Jwks>();
    if (st.ok() && text->size() > kMaxJwksBytes) {
      st = absl::InvalidArgumentError(
          absl::StrCat("over ", kMaxJwksBytes, " bytes"));
    }
    if (st.ok()) {
      const json doc = json::parse(*text, nullptr, false);
      if (!doc.is_object() || !doc.contains("keys") ||
          !doc["keys"].is_array() || doc["keys"].size() > kMaxJwksKeys) {
        st = absl::InvalidArgumentError(absl::StrCat(
            "expected {\"keys\": [...]} with at most ", kMaxJwksKeys, " keys"));
      } else {
        for (const json& k : doc["keys"]) {
          if (!k.is_object() || !k.contains("kid") || !k["kid"].is_string()) {
            continue;  // a key without an id cannot be chosen
          }
          if (k.value("use", "sig") != "sig") continue;
          absl::StatusOr<JwkKey> key = ParseJwk(k);
          if (key.ok()) {
            fresh->keys[k["kid"].get<std::string>()] =
                std::make_shared<const JwkKey>(*std::move(key));
          }
        }
      }
    }
    absl::MutexLock lock(&mu_);
    if (st.ok()) {
      jwks_ = fresh;
      jwks = fresh;
    } else if (jwks_ == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("token: the JWKS cannot be read: ", st.message()));
    }
    // Else: keep serving the last good JWKS until the next refresh.
  }
  if (jwks == nullptr || !jwks->keys.contains(kid)) {
    return absl::UnauthenticatedError(
        absl::StrCat("token: key id '", kid, "' is not in the JWKS"));
  }
  auto it = jwks->keys.find(kid);
  const auto* k = static_cast<const JwkKey*>(it->second.get());
  if (k->alg != alg) {
    return absl::UnauthenticatedError(absl::StrCat(
        "token: alg ", alg, " does not fit key '", kid, "' (", k->alg, ")"));
  }
  return std::shared_ptr<const void>(it->second);
}

absl::StatusOr<json> TokenVerifier::Check(std::string_view token_in,
                                          Micros now) {
  const absl::string_view token(token_in.data(), token_in.size());
  if (token.size() > kMaxTokenBytes) {
    return absl::UnauthenticatedError(
        absl::StrCat("token: over ", kMaxTokenBytes, " bytes"));
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(token);
    if (it != cache_.end() && now < it->second.second) return it->second.first;
  }
  std::vector<absl::string_view> parts = absl::StrSplit(token, '.');
  if (parts.size() != 3) {
    return absl::UnauthenticatedError(
        "token: not a JWT (expected header.payload.signature)");
  }
  std::string header_text, payload_text, sig;
  if (!absl::WebSafeBase64Unescape(parts[0], &header_text) ||
      !absl::WebSafeBase64Unescape(parts[1], &payload_text) ||
      !absl::WebSafeBase64Unescape(parts[2], &sig)) {
    return absl::UnauthenticatedError("token: a part is not base64url");
  }
  const json header = json::parse(header_text, nullptr, false);
  const json claims = json::parse(payload_text, nullptr, false);
  if (!header.is_object() || !claims.is_object()) {
    return absl::UnauthenticatedError("token: header or payload is not JSON");
  }
  const std::string alg = header.value("alg", "");
  if (alg != "RS256" && alg != "ES256") {
    return absl::UnauthenticatedError(absl::StrCat(
        "token: alg '", alg.substr(0, 32), "' is refused (RS256 or ES256)"));
  }
  if (!header.contains("kid") || !header["kid"].is_string()) {
    return absl::UnauthenticatedError("token: the header has no kid");
  }
  const std::string kid = header["kid"].get<std::string>().substr(0, 128);
  ASSIGN_OR_RETURN(std::shared_ptr<const void> key, Key(kid, alg, now));
  const auto* k = static_cast<const JwkKey*>(key.get());
  std::string der;
  if (alg == "ES256") {
    ASSIGN_OR_RETURN(der, EcdsaDer(sig));
  } else {
    der = std::move(sig);
  }
  const absl::string_view signed_part =
      token.substr(0, parts[0].size() + 1 + parts[1].size());
  if (!VerifySignature(k->key.get(), signed_part, der)) {
    return absl::UnauthenticatedError(
        absl::StrCat("token: bad signature (key '", kid, "')"));
  }
  if (claims.value("iss", "") != config_.issuer) {
    return absl::UnauthenticatedError(
        absl::StrCat("token: issuer '", claims.value("iss", "").substr(0, 256),
                     "' is not ", config_.issuer));
  }
  const std::vector<std::string> aud = Strings(claims, "aud");
  if (std::find(aud.begin(), aud.end(), config_.audience) == aud.end()) {
    return absl::UnauthenticatedError(
        absl::StrCat("token: audience is not ", config_.audience));
  }
  if (!claims.contains("exp") || !claims["exp"].is_number()) {
    return absl::UnauthenticatedError("token: no exp (expiry) claim");
  }
  const Micros exp =
      static_cast<Micros>(claims["exp"].get<double>() * kMicrosPerSecond);
  if (now >= exp + config_.leeway) {
    return absl::UnauthenticatedError(
        absl::StrCat("token: expired at ", Time(exp)));
  }
  if (claims.contains("nbf")) {
    if (!claims["nbf"].is_number()) {
      return absl::UnauthenticatedError("token: nbf is not a number");
    }
    const Micros nbf =
        static_cast<Micros>(claims["nbf"].get<double>() * kMicrosPerSecond);
    if (now + config_.leeway < nbf) {
      return absl::UnauthenticatedError(
          absl::StrCat("token: not valid before ", Time(nbf)));
    }
  }
  absl::MutexLock lock(&mu_);
  if (cache_.size() >= config_.cache_capacity) cache_.clear();
  cache_[std::string(token)] = {claims, exp + config_.leeway};
  return claims;
}

absl::StatusOr<Principal> TokenVerifier::Map(const json& claims,
                                             const AccessPolicy& policy) const {
  const std::vector<std::string> sub = Strings(claims, config_.subject_claim);
  if (sub.size() != 1 || sub[0].empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "token: claim '", config_.subject_claim, "' (the subject) is missing"));
  }
  Principal p;
  p.subject = absl::StrCat("token:", sub[0].substr(0, 256));
  if (!config_.tenant_claim.empty()) {
    const std::vector<std::string> t = Strings(claims, config_.tenant_claim);
    if (!t.empty()) p.tenant = t[0];
  }
  std::vector<std::string> subjects = {absl::StrCat("user:", sub[0])};
  for (const std::string& g : Strings(claims, config_.groups_claim)) {
    subjects.push_back(absl::StrCat("group:", g));
  }
  policy.GrantsOf(subjects, &p.grants);
  for (const ClaimRole& m : config_.claim_roles) {
    const std::vector<std::string> v = Strings(claims, m.claim);
    if (std::find(v.begin(), v.end(), m.value) == v.end()) continue;
    const Role* role = policy.FindRole(m.role);
    if (role == nullptr) continue;  // a custom role not (yet) applied
    std::string tenant = m.tenant;
    if (tenant.empty() && role->needs_tenant) tenant = p.tenant;
    if (role->needs_tenant && tenant.empty()) continue;
    p.grants.push_back({role, tenant});
  }
  if (p.grants.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "token: ", p.subject,
        " maps to no role (no RoleBinding names it or its groups, and no "
        "oidc.claimRoles entry matches its claims)"));
  }
  if (p.tenant.empty()) {
    for (const Grant& g : p.grants) {
      if (!g.tenant.empty()) {
        p.tenant = g.tenant;
        break;
      }
    }
  }
  return p;
}

absl::StatusOr<Principal> TokenVerifier::Verify(
    std::string_view token, const AccessPolicy& policy,
    std::shared_ptr<const void> keep) {
  ASSIGN_OR_RETURN(json claims, Check(token, now_()));
  ASSIGN_OR_RETURN(Principal p, Map(claims, policy));
  p.keep = std::move(keep);
  return p;
}

TokenVerifier::Fetch JwksSource(const TokenConfig& config) {
  if (!config.jwks_file.empty()) {
    return [path = config.jwks_file]() -> absl::StatusOr<std::string> {
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        return absl::UnavailableError(
            absl::StrCat("cannot read JWKS file ", path));
      }
      std::string text;
      text.resize(kMaxJwksBytes + 1);
      in.read(text.data(), static_cast<std::streamsize>(text.size()));
      text.resize(static_cast<size_t>(in.gcount()));
      return text;
    };
  }
  return [url = config.jwks_url]() -> absl::StatusOr<std::string> {
    const bool tls = absl::StartsWith(url, "https://");
    absl::string_view rest = absl::string_view(url).substr(tls ? 8 : 7);
    const size_t slash = rest.find('/');
    const absl::string_view hostport = rest.substr(0, slash);
    const std::string target = slash == absl::string_view::npos
                                   ? "/"
                                   : std::string(rest.substr(slash));
    net::HttpClientOptions o;
    o.tls = tls;
    o.port = tls ? 443 : 80;
    o.host = std::string(hostport);
    if (const size_t colon = hostport.rfind(':');
        colon != absl::string_view::npos) {
      o.host = std::string(hostport.substr(0, colon));
      uint32_t port = 0;
      if (!absl::SimpleAtoi(hostport.substr(colon + 1), &port) || port == 0 ||
          port > 65535) {
        return absl::InvalidArgumentError("oidc.jwksUrl: bad port");
      }
      o.port = static_cast<uint16_t>(port);
    }
    o.peer = "the JWKS URL";
    ASSIGN_OR_RETURN(std::unique_ptr<net::HttpClient> client,
                     net::HttpClient::Create(o));
    ASSIGN_OR_RETURN(net::HttpClientResponse r, client->Request("GET", target));
    if (r.status != 200) {
      return absl::UnavailableError(
          absl::StrCat("the JWKS URL answered ", r.status));
    }
    return std::move(r.body);
  };
}

}  // namespace gpusched::auth
