// Test and benchmark support: keys made with libcrypto, their JWKs, and
// JWTs signed with them (RS256, ES256), as an identity provider would.
// Header-only; not for production code. Thread-compatible.
#ifndef GPUSCHED_AUTH_JWT_TESTING_H_
#define GPUSCHED_AUTH_JWT_TESTING_H_

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>

#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gpusched::auth::testing {

inline std::string B64(const std::string& s) {
  return absl::WebSafeBase64Escape(s);
}

// A signing key: RS256 (RSA 2048) or ES256 (P-256), with its key id.
struct SigningKey {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey{nullptr,
                                                           EVP_PKEY_free};
  std::string alg;
  std::string kid;

  static SigningKey Make(const std::string& alg, std::string kid) {
    SigningKey k;
    k.pkey.reset(alg == "RS256"
                     ? EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", size_t{2048})
                     : EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
    k.alg = alg;
    k.kid = std::move(kid);
    return k;
  }

  // The public key as a JWK.
  nlohmann::json Jwk() const {
    if (alg == "RS256") {
      BIGNUM *n = nullptr, *e = nullptr;
      EVP_PKEY_get_bn_param(pkey.get(), OSSL_PKEY_PARAM_RSA_N, &n);
      EVP_PKEY_get_bn_param(pkey.get(), OSSL_PKEY_PARAM_RSA_E, &e);
      auto bytes = [](BIGNUM* b) {
        std::string s(BN_num_bytes(b), '\0');
        BN_bn2bin(b, reinterpret_cast<unsigned char*>(s.data()));
        BN_free(b);
        return s;
      };
      return {{"kty", "RSA"}, {"kid", kid},         {"alg", "RS256"},
              {"use", "sig"}, {"n", B64(bytes(n))}, {"e", B64(bytes(e))}};
    }
    unsigned char point[65];
    size_t len = 0;
    EVP_PKEY_get_octet_string_param(pkey.get(), OSSL_PKEY_PARAM_PUB_KEY, point,
                                    sizeof(point), &len);
    const std::string p(reinterpret_cast<char*>(point), len);
    return {{"kty", "EC"},
            {"kid", kid},
            {"crv", "P-256"},
            {"x", B64(p.substr(1, 32))},
            {"y", B64(p.substr(33, 32))}};
  }

  // The JWS signature of `data` (ES256: r || s, as JWTs carry it).
  std::string Sign(const std::string& data) const {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(
        EVP_MD_CTX_new(), EVP_MD_CTX_free);
    EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, pkey.get());
    size_t len = 0;
    EVP_DigestSign(ctx.get(), nullptr, &len,
                   reinterpret_cast<const unsigned char*>(data.data()),
                   data.size());
    std::string sig(len, '\0');
    EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()),
                   &len, reinterpret_cast<const unsigned char*>(data.data()),
                   data.size());
    sig.resize(len);
    if (alg == "RS256") return sig;
    const unsigned char* p = reinterpret_cast<const unsigned char*>(sig.data());
    ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(sig.size()));
    std::string raw(64, '\0');
    BN_bn2binpad(ECDSA_SIG_get0_r(es),
                 reinterpret_cast<unsigned char*>(raw.data()), 32);
    BN_bn2binpad(ECDSA_SIG_get0_s(es),
                 reinterpret_cast<unsigned char*>(raw.data() + 32), 32);
    ECDSA_SIG_free(es);
    return raw;
  }

  // A JWT of `claims`; `header` null: {"alg": alg, "kid": kid}.
  std::string Mint(const nlohmann::json& claims,
                   nlohmann::json header = nullptr) const {
    if (header.is_null()) header = {{"alg", alg}, {"kid", kid}};
    const std::string data =
        absl::StrCat(B64(header.dump()), ".", B64(claims.dump()));
    return absl::StrCat(data, ".", B64(Sign(data)));
  }
};

}  // namespace gpusched::auth::testing

#endif  // GPUSCHED_AUTH_JWT_TESTING_H_
