#include "store/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace gpusched::store {
namespace {

constexpr size_t kSecretRandomBytes = 30;  // 40 base64url characters

absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

bool IsUrlSafe(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '_';
}

}  // namespace

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()),
                 static_cast<int>(n)) != 1) {
    return absl::InternalError("store: RAND_bytes failed");
  }
  return out;
}

absl::StatusOr<std::string> HashSecret(std::string_view salt,
                                       std::string_view secret) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                              EVP_MD_CTX_free);
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest;
  unsigned int len = 0;
  if (ctx == nullptr ||
      EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), salt.data(), salt.size()) != 1 ||
      EVP_DigestUpdate(ctx.get(), secret.data(), secret.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest.data(), &len) != 1) {
    return absl::InternalError("store: SHA-256 of an API key failed");
  }
  return std::string(reinterpret_cast<const char*>(digest.data()), len);
}

bool SecretMatches(std::string_view salt, std::string_view hash,
                   std::string_view secret) {
  absl::StatusOr<std::string> computed = HashSecret(salt, secret);
  return computed.ok() && computed->size() == hash.size() &&
         CRYPTO_memcmp(computed->data(), hash.data(), hash.size()) == 0;
}

std::optional<std::string> KeyIdOf(std::string_view secret) {
  if (secret.size() != kKeyPrefix.size() + kSecretChars ||
      secret.substr(0, kKeyPrefix.size()) != kKeyPrefix) {
    return std::nullopt;
  }
  for (char c : secret.substr(kKeyPrefix.size())) {
    if (!IsUrlSafe(c)) return std::nullopt;
  }
  return std::string(secret.substr(kKeyPrefix.size(), kKeyIdChars));
}

absl::StatusOr<std::string> GenerateApiKeySecret() {
  ASSIGN_OR_RETURN(std::string raw, RandomBytes(kSecretRandomBytes));
  std::string secret =
      absl::StrCat(AbslView(kKeyPrefix), absl::WebSafeBase64Escape(raw));
  OPENSSL_cleanse(raw.data(), raw.size());
  if (!KeyIdOf(secret).has_value()) {
    return absl::InternalError("store: generated API key is malformed");
  }
  return secret;
}

absl::Status MalformedKeyError(std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("store: ", AbslView(what), " is not of the form '",
                   AbslView(kKeyPrefix), "' followed by ", kSecretChars,
                   " URL-safe base64 characters (generate one with gpusched)"));
}

absl::Status InvalidKeyError() {
  return absl::UnauthenticatedError("invalid API key");
}

absl::StatusOr<std::string> EnsureKeyId(std::string_view secret,
                                        const std::string& tenant, bool admin,
                                        std::string* what) {
  *what = admin ? "the configured admin key"
                : absl::StrCat("the key of tenant ", tenant);
  const std::optional<std::string> key_id = KeyIdOf(secret);
  if (!key_id.has_value()) return MalformedKeyError(*what);
  if (!admin && tenant.empty()) {
    return absl::InvalidArgumentError("store: a tenant key needs a tenant");
  }
  return *key_id;
}

absl::Status CheckEnsuredKey(const KeyInfo& stored, std::string_view salt,
                             std::string_view hash, std::string_view secret,
                             const std::string& tenant, bool admin,
                             const std::string& what) {
  if (!SecretMatches(salt, hash, secret)) {
    return absl::AlreadyExistsError(
        absl::StrCat("store: key id ", stored.key_id, " of ", what,
                     " belongs to another key; generate a new key"));
  }
  if (stored.admin != admin || stored.tenant != tenant) {
    return absl::FailedPreconditionError(absl::StrCat(
        "store: ", what, " (", stored.key_id, ") is registered as ",
        stored.admin ? "an admin key"
                     : absl::StrCat("a key of tenant ", stored.tenant)));
  }
  if (stored.revoked.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("store: ", what, " ", stored.key_id,
                     " was revoked; configure a new one"));
  }
  return absl::OkStatus();
}

}  // namespace gpusched::store
