// Store: the persistent state of `gpusched serve` in one SQLite database.
//
// It holds the desired state (deployments and tenants as JSON documents,
// hashed API keys) and the event log, so that a `kill -9` and a restart lose
// nothing the store accepted: every mutating call returns only after its
// transaction committed to the write-ahead log (journal_mode=WAL,
// synchronous=NORMAL). NORMAL survives a process crash; a power loss or OS
// crash may roll back the last few commits (see docs/state-store.md).
//
// Ownership: the runtime owns one Store; the controller, the control API and
// the gateway's key cache share it.
// Thread-safety: thread-safe. One mutex serializes the calls (the
// prepared-statement cache and the open transaction belong to the one
// connection); no call waits on anything but SQLite. Another process may
// open the same file (SQLite's locks and the busy timeout serialize
// writers), but gpusched does not do so itself.
//
// Time: nothing here reads a clock; every timestamp is a Micros passed in.
// Errors: every SQLite failure becomes an absl::Status naming what the store
// was doing plus sqlite3_errmsg; nothing throws.
#ifndef GPUSCHED_STORE_STORE_H_
#define GPUSCHED_STORE_STORE_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace gpusched::store {

// The schema version this build reads and writes. A database with a newer
// version is refused at Open (never downgraded or partially read).
inline constexpr int kStoreSchemaVersion = 2;

// A deployment or tenant: the validated manifest as JSON text plus
// bookkeeping. `generation` only grows (see Store::PutDeployment).
struct Document {
  std::string name;
  std::string manifest_json;
  int64_t generation = 0;
  Micros created = 0;  // first Put
  Micros updated = 0;  // last successful Put
};

// A newly created API key. `secret` is shown once and never stored.
struct NewApiKey {
  std::string key_id;
  std::string secret;
};

// What an API key grants; never carries the secret, salt or hash.
struct KeyInfo {
  std::string key_id;
  std::string tenant;  // empty for admin keys not bound to a tenant
  std::string name;
  bool admin = false;
  Micros created = 0;
  std::optional<Micros> revoked;  // set once revoked
};

struct Event {
  int64_t id = 0;  // assigned by AppendEvent; ignored on input
  Micros time = 0;
  std::string kind;        // e.g. "deployment.applied"; required
  std::string deployment;  // empty: not about one deployment
  std::string tenant;      // empty: not about one tenant
  std::string message;
  nlohmann::json details = nlohmann::json::object();
};

// Filters AND together; an empty field does not filter.
struct EventFilter {
  std::vector<std::string> kinds;  // any of these kinds
  std::string deployment;
  std::string tenant;
  Micros since = std::numeric_limits<Micros>::min();  // time >= since
  Micros until = kNever;                              // time < until
  // At most this many events; <= 0 means no limit.
  int64_t limit = 100;
  // Cursor: continue after this event id in the chosen order (ids greater
  // than it when oldest_first, smaller otherwise). 0: from the start.
  int64_t after_id = 0;
  // Order is append order (event id), which is time order when events are
  // appended with a non-decreasing clock. Default newest first.
  bool oldest_first = false;
};

class Store {
 public:
  // Opens (creating if absent) the database at `path`; ":memory:" gives a
  // private in-memory database for tests. Creates the schema when the file
  // has none, refuses a newer schema version (FailedPrecondition), enables
  // WAL, synchronous=NORMAL, foreign keys and a busy timeout.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);

  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // --- Deployments and tenants -------------------------------------------
  // Put contract (optimistic concurrency): the caller reads a document, bumps
  // its generation and writes it back. A Put whose `generation` is less than
  // the stored one fails with FailedPrecondition and changes nothing (someone
  // else wrote a newer version: re-read and retry). An equal generation is an
  // idempotent re-apply and overwrites (a runtime replaying its last write
  // after a crash). A first Put sets `created`; every Put sets `updated` to
  // `now`. `manifest_json` must be valid JSON (InvalidArgument otherwise);
  // `name` non-empty; `generation` >= 0.
  absl::Status PutDeployment(const std::string& name,
                             const std::string& manifest_json,
                             int64_t generation, Micros now);
  absl::StatusOr<Document> GetDeployment(const std::string& name);
  // Sorted by name.
  absl::StatusOr<std::vector<Document>> ListDeployments();
  // NotFound when absent.
  absl::Status DeleteDeployment(const std::string& name);

  // Same contract as deployments. Deleting a tenant deletes its API keys.
  absl::Status PutTenant(const std::string& name,
                         const std::string& manifest_json, int64_t generation,
                         Micros now);
  absl::StatusOr<Document> GetTenant(const std::string& name);
  absl::StatusOr<std::vector<Document>> ListTenants();
  absl::Status DeleteTenant(const std::string& name);

  // ModelRoutes, same contract; a route's rollout state (JSON,
  // control::Rollout::State) is kept beside it and goes with it.
  absl::Status PutRoute(const std::string& name,
                        const std::string& manifest_json, int64_t generation,
                        Micros now);
  absl::StatusOr<Document> GetRoute(const std::string& name);
  absl::StatusOr<std::vector<Document>> ListRoutes();
  absl::Status DeleteRoute(const std::string& name);
  // FailedPrecondition-like error when the route is not stored.
  absl::Status PutRouteState(const std::string& name,
                             const std::string& state_json, Micros now);
  // NotFound when none was put.
  absl::StatusOr<std::string> GetRouteState(const std::string& name);

  // --- API keys ------------------------------------------------------------
  // Secrets look like "gs-" + 40 URL-safe base64 characters (240 random
  // bits). The first 8 characters after "gs-" are the key id: not secret,
  // shown in listings and used to find the row. The store keeps a 16-byte
  // random salt and SHA-256(salt || secret), never the secret.

  // Creates a key for `tenant` (which must exist: NotFound otherwise). An
  // admin key may have an empty tenant; a tenant key may not.
  absl::StatusOr<NewApiKey> CreateApiKey(const std::string& tenant,
                                         const std::string& name, Micros now,
                                         bool admin = false);
  // Unauthenticated on a malformed secret, an unknown key id, a hash
  // mismatch (compared in constant time) or a revoked key. Messages never
  // contain the secret.
  absl::StatusOr<KeyInfo> AuthenticateKey(std::string_view secret);
  // Marks the key revoked at `now` (kept for the audit trail). Revoking a
  // revoked key is a no-op. NotFound when absent.
  absl::Status RevokeApiKey(const std::string& key_id, Micros now);
  // Keys of `tenant` (all keys when empty), by key id; no hashes.
  absl::StatusOr<std::vector<KeyInfo>> ListApiKeys(const std::string& tenant);
  // Registers the admin key from the server config, idempotently: a no-op
  // when the same secret is already registered. InvalidArgument when the
  // secret is not of the "gs-" form; AlreadyExists when another secret holds
  // its key id; FailedPrecondition when it was revoked (an operator revoked
  // it through the API; a restart does not silently re-enable it).
  absl::StatusOr<KeyInfo> EnsureAdminKey(std::string_view secret, Micros now);
  // The same for any key: registers `secret` for `tenant` (or as an admin
  // key), idempotently; FailedPrecondition when the key id is registered
  // for another tenant or role, or was revoked.
  absl::StatusOr<KeyInfo> EnsureKey(std::string_view secret,
                                    const std::string& tenant,
                                    const std::string& name, bool admin,
                                    Micros now);
  // Grows whenever a key that authenticated may stop doing so (a revoke, a
  // tenant deleted with its keys): a cache of AuthenticateKey answers taken
  // at an older version must be dropped.
  int64_t keys_version() const {
    return keys_version_.load(std::memory_order_acquire);
  }

  // --- Event log -----------------------------------------------------------
  // Appends and returns the new id (ids grow and are never reused, even
  // after pruning). InvalidArgument when `kind` is empty.
  absl::StatusOr<int64_t> AppendEvent(const Event& event);
  absl::StatusOr<std::vector<Event>> QueryEvents(const EventFilter& filter);
  // Bounded retention: deletes events older than `older_than` (time <
  // older_than; pass std::numeric_limits<Micros>::min() to skip) and then all
  // but the newest `max_rows` (pass a negative value to skip). Returns the
  // number of rows deleted.
  absl::StatusOr<int64_t> PruneEvents(int64_t max_rows, Micros older_than);

 private:
  class Query;
  enum class DocKind { kDeployment, kTenant, kRoute };
  static const char* Table(DocKind kind);  // its table
  static const char* What(DocKind kind);   // for messages
  struct StmtDeleter {
    void operator()(sqlite3_stmt* stmt) const;
  };

  explicit Store(sqlite3* db) : db_(db) {}
  absl::Status Configure(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InitSchema() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The cached prepared statement for `sql`, reset and unbound.
  absl::StatusOr<sqlite3_stmt*> Prepare(const std::string& sql,
                                        std::string_view purpose)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Exec(const std::string& sql, std::string_view purpose)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT; rolls back on error.
  template <typename Body>
  absl::Status Transaction(std::string_view purpose, Body body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Error(int rc, std::string_view purpose) const;

  absl::Status PutDocument(DocKind kind, const std::string& name,
                           const std::string& manifest_json, int64_t generation,
                           Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Document> GetDocument(DocKind kind, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<Document>> ListDocuments(DocKind kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DeleteDocument(DocKind kind, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InsertKey(const std::string& key_id, std::string_view secret,
                         const std::string& tenant, const std::string& name,
                         bool admin, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::optional<KeyInfo>> FindKey(const std::string& key_id,
                                                 std::string* salt,
                                                 std::string* hash)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<KeyInfo> EnsureKeyLocked(std::string_view secret,
                                          const std::string& tenant,
                                          const std::string& name, bool admin,
                                          Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* db_;  // the connection: used with mu_ held (or before sharing)
  std::map<std::string, std::unique_ptr<sqlite3_stmt, StmtDeleter>, std::less<>>
      statements_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> keys_version_{0};
};

// A fresh random secret of the "gs-" form (for `gpusched` to print as a new
// admin key for the config). Internal on a random-source failure.
absl::StatusOr<std::string> GenerateApiKeySecret();

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_STORE_H_
