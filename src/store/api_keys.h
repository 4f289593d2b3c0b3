// API key secrets and their hashes, the same in every store: secrets are
// "gs-" + 40 URL-safe base64 characters (240 random bits) whose first 8
// characters after "gs-" are the key id; a store keeps a 16-byte random salt
// and SHA-256(salt || secret), never the secret. Thread-safe (OpenSSL).
#ifndef GPUSCHED_STORE_API_KEYS_H_
#define GPUSCHED_STORE_API_KEYS_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/store.h"

namespace gpusched::store {

inline constexpr std::string_view kKeyPrefix = "gs-";
inline constexpr size_t kSecretChars = 40;
inline constexpr size_t kKeyIdChars = 8;
inline constexpr size_t kSaltBytes = 16;
// A 48-bit key id collides almost never; a store draws again this often.
inline constexpr int kKeyIdAttempts = 4;

// A fresh random secret of the "gs-" form (for `gpusched` to print as a new
// admin key for the config). Internal on a random-source failure.
absl::StatusOr<std::string> GenerateApiKeySecret();

// The key id embedded in a well-formed secret, or nullopt.
std::optional<std::string> KeyIdOf(std::string_view secret);

// `n` random bytes (Internal on a random-source failure).
absl::StatusOr<std::string> RandomBytes(size_t n);

// SHA-256(salt || secret).
absl::StatusOr<std::string> HashSecret(std::string_view salt,
                                       std::string_view secret);

// Whether `secret` hashes to `hash` with `salt`, compared in constant time.
bool SecretMatches(std::string_view salt, std::string_view hash,
                   std::string_view secret);

// InvalidArgument saying what a well-formed secret looks like; `what` names
// the key ("the configured admin key").
absl::Status MalformedKeyError(std::string_view what);

// Unauthenticated("invalid API key"): never says which part was wrong.
absl::Status InvalidKeyError();

// Store::EnsureKey's rules, the same in every store. The key id of
// `secret`, after checking its form and that a tenant key has a tenant;
// `what` names the key in messages ("the configured admin key").
absl::StatusOr<std::string> EnsureKeyId(std::string_view secret,
                                        const std::string& tenant, bool admin,
                                        std::string* what);
// Whether a key already stored under that id (`stored`, `salt`, `hash`) is
// `secret` registered for `tenant` (or as an admin key) and not revoked.
absl::Status CheckEnsuredKey(const KeyInfo& stored, std::string_view salt,
                             std::string_view hash, std::string_view secret,
                             const std::string& tenant, bool admin,
                             const std::string& what);

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_API_KEYS_H_
