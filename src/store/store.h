// Store: everything that must survive a gpusched instance, behind one
// interface with two implementations (docs/state-store.md, docs/ha.md):
//   - SqliteStore (sqlite_store.h): one file, one instance; the embedded
//     default of `make run`;
//   - EtcdStore (etcd_store.h): an etcd cluster shared by several
//     instances, of which one leads (election.h).
// Both pass the same conformance suite (store_conformance_test.cc).
//
// What is kept: deployments, tenants and ModelRoutes (validated manifests as
// JSON with a generation), each route's rollout state, the desired replica
// count each deployment last had, API keys as salted hashes, the event log;
// and, for instances that do not lead, what the leader publishes of the
// cluster it runs (status documents: replica states, GPUs, nodes).
//
// Writes a user makes (apply, delete, scale, keys) are accepted on every
// instance, under the documents' generations (optimistic concurrency).
// Writes the leader makes of its own decisions (rollout progress, desired
// counts, status, its events) carry its Fence: a store shared by several
// instances refuses them (FailedPrecondition, "not the leader") once another
// instance leads, in the same transaction as the write.
//
// Reads are answered from what the store has seen: SQLite from its file,
// etcd from a copy kept current by a watch (fail-static: an instance cut off
// from etcd keeps answering from its last known state, and says so in
// Health()). Every write returns once it is durable and visible to reads on
// this instance.
//
// Thread-safety: every implementation is thread-safe.
// Time: nothing here reads a clock for its data; timestamps are passed in.
// Errors: absl::Status naming what the store was doing; Unavailable when
// the store cannot be reached (the control API answers 503); nothing throws.
#ifndef GPUSCHED_STORE_STORE_H_
#define GPUSCHED_STORE_STORE_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"
#include "store/audit.h"

namespace gpusched::store {

// A deployment, tenant or ModelRoute: the validated manifest as JSON text
// plus bookkeeping.
struct Document {
  std::string name;
  std::string manifest_json;
  int64_t generation = 0;
  Micros created = 0;  // first Put
  Micros updated = 0;  // last successful Put
};

// Roles and RoleBindings are the custom access manifests (docs/access.md).
enum class DocKind { kDeployment, kTenant, kRoute, kRole, kRoleBinding };
// "deployment", "tenant", "route", "role", "rolebinding"
const char* DocKindName(DocKind kind);

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
  // Assigned by AppendEvent, ignored on input: ids grow in the order the
  // store committed the events (across every instance of a shared store)
  // and are never reused.
  int64_t id = 0;
  Micros time = 0;
  std::string kind;        // e.g. "deployment.applied"; required
  std::string deployment;  // empty: not about one deployment
  std::string tenant;      // empty: not about one tenant
  std::string message;
  nlohmann::json details = nlohmann::json::object();
  // The instance that recorded it (a shared store; empty otherwise).
  std::string instance;
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
  // Order is commit order (event id). Default newest first.
  bool oldest_first = false;
};

// Proof of leadership (election.h): the election key and the revision at
// which its holder created it. A fenced write happens only while that key
// still exists with that revision.
struct Fence {
  std::string key;
  int64_t revision = 0;
};

// Whether the store answers, for /readyz, /api/v1/cluster and metrics.
struct StoreHealth {
  std::string kind;   // "sqlite" | "etcd"
  std::string where;  // the file, or the endpoints
  bool reachable = true;
  std::string error;     // the last failure while unreachable
  Micros last_ok = 0;    // steady clock: the last call that got an answer
  int64_t revision = 0;  // what reads are answered from (etcd: the copy's)
  // etcd: the copy is being rebuilt from a list (after a compaction or a
  // long partition); reads answer the last complete copy meanwhile.
  bool resyncing = false;
};

class Store {
 public:
  virtual ~Store() = default;

  virtual const char* kind() const = 0;  // "sqlite" | "etcd"
  // Whether several instances may share this store (each sees the others'
  // writes through revision() and the change callback).
  virtual bool shared() const = 0;

  // --- Deployments, tenants and routes --------------------------------------
  // Put contract (optimistic concurrency): the caller reads a document,
  // bumps its generation and writes it back. A Put fails with
  // FailedPrecondition and changes nothing when the stored generation is
  // greater, or equal with another manifest (someone else wrote meanwhile:
  // re-read and retry). An equal generation with the same manifest is an
  // idempotent re-apply (updated moves). A first Put sets `created`; every
  // Put sets `updated` to `now`. `manifest_json` must be valid JSON
  // (InvalidArgument otherwise); `name` non-empty; `generation` >= 0.
  virtual absl::Status Put(DocKind kind, const std::string& name,
                           const std::string& manifest_json, int64_t generation,
                           Micros now) = 0;
  // NotFound when absent.
  virtual absl::StatusOr<Document> Get(DocKind kind,
                                       const std::string& name) = 0;
  // Sorted by name.
  virtual absl::StatusOr<std::vector<Document>> List(DocKind kind) = 0;
  // NotFound when absent. A tenant goes with its API keys; a deployment
  // with its desired count; a route with its rollout state.
  virtual absl::Status Delete(DocKind kind, const std::string& name) = 0;

  absl::Status PutDeployment(const std::string& name, const std::string& json,
                             int64_t generation, Micros now) {
    return Put(DocKind::kDeployment, name, json, generation, now);
  }
  absl::StatusOr<Document> GetDeployment(const std::string& name) {
    return Get(DocKind::kDeployment, name);
  }
  absl::StatusOr<std::vector<Document>> ListDeployments() {
    return List(DocKind::kDeployment);
  }
  absl::Status DeleteDeployment(const std::string& name) {
    return Delete(DocKind::kDeployment, name);
  }
  absl::Status PutTenant(const std::string& name, const std::string& json,
                         int64_t generation, Micros now) {
    return Put(DocKind::kTenant, name, json, generation, now);
  }
  absl::StatusOr<Document> GetTenant(const std::string& name) {
    return Get(DocKind::kTenant, name);
  }
  absl::StatusOr<std::vector<Document>> ListTenants() {
    return List(DocKind::kTenant);
  }
  absl::Status DeleteTenant(const std::string& name) {
    return Delete(DocKind::kTenant, name);
  }
  absl::Status PutRoute(const std::string& name, const std::string& json,
                        int64_t generation, Micros now) {
    return Put(DocKind::kRoute, name, json, generation, now);
  }
  absl::StatusOr<Document> GetRoute(const std::string& name) {
    return Get(DocKind::kRoute, name);
  }
  absl::StatusOr<std::vector<Document>> ListRoutes() {
    return List(DocKind::kRoute);
  }
  absl::Status DeleteRoute(const std::string& name) {
    return Delete(DocKind::kRoute, name);
  }

  // A route's rollout state (JSON, control::Rollout::State), kept beside
  // it. FailedPrecondition when the route is not stored (or, fenced, when
  // the fence no longer holds).
  virtual absl::Status PutRouteState(const std::string& name,
                                     const std::string& state_json, Micros now,
                                     const Fence* fence = nullptr) = 0;
  // NotFound when none was put.
  virtual absl::StatusOr<std::string> GetRouteState(
      const std::string& name) = 0;

  // The replica count a deployment last had (the autoscaler's decision or
  // an eviction), so that a restart or a new leader resumes from it.
  // FailedPrecondition when the deployment is not stored (or the fence
  // fails); `replicas` >= 0.
  virtual absl::Status PutDesiredReplicas(const std::string& deployment,
                                          int replicas, Micros now,
                                          const Fence* fence = nullptr) = 0;
  virtual absl::StatusOr<std::map<std::string, int>> ListDesiredReplicas() = 0;

  // --- API keys
  // --------------------------------------------------------------- Secrets
  // look like "gs-" + 40 URL-safe base64 characters (240 random bits). The
  // first 8 characters after "gs-" are the key id: not secret, shown in
  // listings and used to find the key. The store keeps a 16-byte random salt
  // and SHA-256(salt || secret), never the secret.

  // Creates a key for `tenant` (which must exist: NotFound otherwise). An
  // admin key may have an empty tenant; a tenant key may not.
  virtual absl::StatusOr<NewApiKey> CreateApiKey(const std::string& tenant,
                                                 const std::string& name,
                                                 Micros now,
                                                 bool admin = false) = 0;
  // Unauthenticated on a malformed secret, an unknown key id, a hash
  // mismatch (compared in constant time) or a revoked key. Messages never
  // contain the secret.
  virtual absl::StatusOr<KeyInfo> AuthenticateKey(std::string_view secret) = 0;
  // Marks the key revoked at `now` (kept for the audit trail). Revoking a
  // revoked key is a no-op. NotFound when absent.
  virtual absl::Status RevokeApiKey(const std::string& key_id, Micros now) = 0;
  // Keys of `tenant` (all keys when empty), by key id; no hashes.
  virtual absl::StatusOr<std::vector<KeyInfo>> ListApiKeys(
      const std::string& tenant) = 0;
  // Registers `secret` for `tenant` (or as an admin key), idempotently:
  // InvalidArgument when the secret is not of the "gs-" form;
  // AlreadyExists when another secret holds its key id; FailedPrecondition
  // when the key id is registered for another tenant or role, or was
  // revoked (an operator revoked it through the API; a restart does not
  // silently re-enable it).
  virtual absl::StatusOr<KeyInfo> EnsureKey(std::string_view secret,
                                            const std::string& tenant,
                                            const std::string& name, bool admin,
                                            Micros now) = 0;
  absl::StatusOr<KeyInfo> EnsureAdminKey(std::string_view secret, Micros now) {
    return EnsureKey(secret, "", "admin (config)", /*admin=*/true, now);
  }
  // Grows whenever a key that authenticated may stop doing so (a revoke, a
  // tenant deleted with its keys, on any instance): a cache of
  // AuthenticateKey answers taken at an older version must be dropped.
  virtual int64_t keys_version() const = 0;

  // --- Event log
  // -------------------------------------------------------------- Appends and
  // returns the new id. InvalidArgument when `kind` is empty.
  virtual absl::StatusOr<int64_t> AppendEvent(const Event& event,
                                              const Fence* fence = nullptr) = 0;
  virtual absl::StatusOr<std::vector<Event>> QueryEvents(
      const EventFilter& filter) = 0;
  // Bounded retention: deletes events older than `older_than` (time <
  // older_than; pass std::numeric_limits<Micros>::min() to skip) and then
  // all but the newest `max_rows` (pass a negative value to skip). Returns
  // how many were deleted.
  virtual absl::StatusOr<int64_t> PruneEvents(int64_t max_rows,
                                              Micros older_than) = 0;

  // --- Audit log (store/audit.h) -------------------------------------------
  // Appends `record` after the newest record, atomically across every
  // instance of a shared store: assigns its seq, prev_hash and hash (the
  // fields given are ignored) and moves the head. Returns it as stored.
  // InvalidArgument when `verb` or `who` is empty.
  virtual absl::StatusOr<AuditRecord> AppendAudit(
      const AuditRecord& record) = 0;
  // Records passing `filter`, in seq order (newest first by default).
  virtual absl::StatusOr<std::vector<AuditRecord>> QueryAudit(
      const AuditFilter& filter) = 0;
  // The chain's anchor and head, read together.
  virtual absl::StatusOr<AuditEnds> GetAuditEnds() = 0;
  // Bounded retention: removes the records older than `older_than` (pass
  // std::numeric_limits<Micros>::min() to skip) and then all but the newest
  // `max_rows` (negative: skip), oldest first, and moves the anchor to the
  // last one removed. Returns how many were removed.
  virtual absl::StatusOr<int64_t> PruneAudit(int64_t max_rows,
                                             Micros older_than) = 0;

  // --- Status: what the leader publishes for the other instances ------------
  // JSON documents by name ("deployments/chat", "cluster/gpus"). Not part of
  // the desired state: a single-instance store keeps them in memory only.
  virtual absl::Status PutStatus(const std::string& name,
                                 const std::string& json,
                                 const Fence* fence = nullptr) = 0;
  // NotFound when absent.
  virtual absl::Status DeleteStatus(const std::string& name,
                                    const Fence* fence = nullptr) = 0;
  // Those whose name starts with `prefix`, by name.
  virtual absl::StatusOr<std::map<std::string, std::string>> ListStatus(
      const std::string& prefix) = 0;

  // --- Changes and health
  // ----------------------------------------------------- Grows with every
  // change this store has seen, from any instance: a reader that saw revision R
  // has nothing new to read while it stays R.
  virtual int64_t revision() const = 0;
  // The same for deployments, tenants and routes only: a reader of the
  // desired state has nothing new to read while it stays the same.
  virtual int64_t desired_revision() const = 0;
  // Called (on a thread of the store's, or the writer's) after each change
  // that revision() counts, with no lock of the store held; it must not
  // block (a writer may be waiting for it): it should only note the change
  // and wake its owner. Null clears it. Once it returns, the previous
  // callback is neither running nor called again.
  virtual void SetChangeCallback(std::function<void()> callback) = 0;
  virtual StoreHealth Health() const = 0;
  // Every round trip to the store: what (e.g. "txn"), seconds, success.
  // For metrics; null clears it.
  using RoundTripObserver =
      std::function<void(std::string_view op, double seconds, bool ok)>;
  virtual void SetRoundTripObserver(RoundTripObserver observer) = 0;
};

// The store's answer to a fenced write whose fence no longer holds.
absl::Status NotLeaderError(const Fence& fence, std::string_view what);

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_STORE_H_
