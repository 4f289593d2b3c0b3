// AccessControl: the custom roles and role bindings kept in the Store (as
// documents of DocKind kRole / kRoleBinding), and the AccessPolicy built
// from them, rebuilt when the store's desired state moves (on any instance
// of a shared store). Authenticator: a bearer credential (an API key, or a
// JWT when a TokenVerifier is configured) to a Principal.
//
// Thread-safety: thread-safe. Policy() is on every request's path: one
// atomic read of the store's desired_revision() and, while it stays, a
// shared_ptr copy under a mutex. The Store outlives both.
#ifndef GPUSCHED_AUTH_ACCESS_CONTROL_H_
#define GPUSCHED_AUTH_ACCESS_CONTROL_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "auth/access.h"
#include "config/access_manifest.h"
#include "store/store.h"

namespace gpusched::auth {

class TokenVerifier;

class AccessControl {
 public:
  explicit AccessControl(store::Store* store) : store_(store) {}

  // The policy of what the store holds now. A stored set that does not
  // validate (written by another version) keeps the last good policy.
  std::shared_ptr<const AccessPolicy> Policy();

  // Applies roles and bindings: the stored set with these replacing (or
  // adding) their namesakes must validate as a whole (InvalidArgument
  // listing every problem, nothing written). Returns one action per
  // manifest: "created", "configured" or "unchanged".
  struct Applied {
    std::string kind;  // Role | RoleBinding
    std::string name;
    std::string action;
    std::string before_json;  // "" when created
  };
  // With `dry_run`, only validates.
  absl::StatusOr<std::vector<Applied>> Apply(
      const config::AccessManifests& manifests, Micros now,
      bool dry_run = false);
  // Deletes one (NotFound when absent). Deleting a role that a binding
  // names is refused (FailedPrecondition naming the bindings).
  absl::Status Delete(store::DocKind kind, const std::string& name);
  // The stored manifests of `kind` (kRole or kRoleBinding), as JSON.
  absl::StatusOr<std::vector<nlohmann::json>> List(store::DocKind kind);

 private:
  absl::StatusOr<std::shared_ptr<const AccessPolicy>> Load(
      std::vector<config::RoleSpec>* roles,
      std::vector<config::RoleBindingSpec>* bindings);

  store::Store* const store_;
  absl::Mutex mu_;
  int64_t revision_ ABSL_GUARDED_BY(mu_) = -1;
  std::shared_ptr<const AccessPolicy> policy_ ABSL_GUARDED_BY(mu_) =
      AccessPolicy::Empty();
};

// A bearer credential to a Principal: "gs-..." is an API key, checked by
// `keys`; anything else is a JWT, checked by `tokens` when one is configured
// (else Unauthenticated). Messages never contain the credential.
class Authenticator {
 public:
  using KeyCheck =
      std::function<absl::StatusOr<store::KeyInfo>(std::string_view secret)>;
  Authenticator(KeyCheck keys, AccessControl* access,
                TokenVerifier* tokens = nullptr)
      : keys_(std::move(keys)), access_(access), tokens_(tokens) {}

  absl::StatusOr<Principal> Authenticate(std::string_view bearer) const;

 private:
  KeyCheck keys_;
  AccessControl* access_;  // may be null: built-in defaults only
  TokenVerifier* tokens_;  // may be null: keys only
};

// A key check's answer as a Principal with the built-in defaults (no
// bindings): for tests and tools that have keys only.
absl::StatusOr<Principal> KeyOnly(absl::StatusOr<store::KeyInfo> key);

}  // namespace gpusched::auth

#endif  // GPUSCHED_AUTH_ACCESS_CONTROL_H_
