// EtcdStore: the Store (store.h) of an HA installation, in an etcd cluster
// (etcd 3.4's v3 API through its JSON gateway, etcd_client.h) shared by
// every gpusched instance. docs/ha.md has the key layout and the reasons.
//
// Reads come from a copy of everything under the prefix, kept current by a
// watch (the pattern of Kubernetes' informers): listed once, then watched
// from the list's revision; a watch canceled for a compacted revision lists
// again, and one that breaks resumes from the last revision seen. So reads
// cost no round trip, and an instance cut off from etcd keeps answering
// from its last copy (fail-static) while Health() says it is unreachable.
//
// Writes are transactions: documents compare their key's mod revision
// (the generation rules of store.h are checked against the stored value,
// read again from etcd when the compare fails), fenced writes also compare
// the election key's create revision with the Fence's. A write returns once
// the watch has brought it into the copy (read-your-writes on this
// instance), or after the request timeout if the watch lags (counted in
// Health and metrics; the write stands).
//
// Bounds: the event log keeps at most `max_events` events and none older
// than `max_event_age` (PruneEvents, called by the leader); a status
// document at most 1 MiB; etcd's own request limit (1.5 MiB by default)
// bounds a manifest.
//
// Thread-safety: thread-safe; one thread of its own runs the watch and
// calls the change callback (never with the copy's lock held).
#ifndef GPUSCHED_STORE_ETCD_STORE_H_
#define GPUSCHED_STORE_ETCD_STORE_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "store/change_notifier.h"
#include "store/etcd_client.h"
#include "store/store.h"

namespace gpusched::store {

struct EtcdStoreOptions {
  EtcdOptions etcd;
  // Names this instance in the events it records.
  std::string instance;
  // Open() waits this long for a first complete list of the prefix.
  Micros connect_timeout = 10 * kMicrosPerSecond;
  // A watch with nothing to say for this long is opened again (a member
  // that vanished without closing the connection).
  Micros watch_idle = 30 * kMicrosPerSecond;
};

struct EtcdCopy;  // the copy and its indexes (etcd_store_internal.h)

// One key of the copy, as etcd has it.
struct EtcdKv {
  std::string key;  // relative to the prefix
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

class EtcdStore final : public Store {
 public:
  // Connects, lists the prefix and starts the watch; FailedPrecondition-
  // like errors for bad options, Unavailable when no endpoint answered a
  // list within connect_timeout.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Open(
      EtcdStoreOptions options);
  ~EtcdStore() override;  // stops the watch
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  const char* kind() const override { return "etcd"; }
  bool shared() const override { return true; }

  absl::Status Put(DocKind kind, const std::string& name,
                   const std::string& manifest_json, int64_t generation,
                   Micros now) override;
  absl::StatusOr<Document> Get(DocKind kind, const std::string& name) override;
  absl::StatusOr<std::vector<Document>> List(DocKind kind) override;
  absl::Status Delete(DocKind kind, const std::string& name) override;

  absl::Status PutRouteState(const std::string& name,
                             const std::string& state_json, Micros now,
                             const Fence* fence = nullptr) override;
  absl::StatusOr<std::string> GetRouteState(const std::string& name) override;
  absl::Status PutDesiredReplicas(const std::string& deployment, int replicas,
                                  Micros now,
                                  const Fence* fence = nullptr) override;
  absl::StatusOr<std::map<std::string, int>> ListDesiredReplicas() override;

  absl::StatusOr<NewApiKey> CreateApiKey(const std::string& tenant,
                                         const std::string& name, Micros now,
                                         bool admin = false) override;
  absl::StatusOr<KeyInfo> AuthenticateKey(std::string_view secret) override;
  absl::Status RevokeApiKey(const std::string& key_id, Micros now) override;
  absl::StatusOr<std::vector<KeyInfo>> ListApiKeys(
      const std::string& tenant) override;
  absl::StatusOr<KeyInfo> EnsureKey(std::string_view secret,
                                    const std::string& tenant,
                                    const std::string& name, bool admin,
                                    Micros now) override;
  int64_t keys_version() const override {
    return keys_version_.load(std::memory_order_acquire);
  }

  absl::StatusOr<int64_t> AppendEvent(const Event& event,
                                      const Fence* fence = nullptr) override;
  absl::StatusOr<std::vector<Event>> QueryEvents(
      const EventFilter& filter) override;
  absl::StatusOr<int64_t> PruneEvents(int64_t max_rows,
                                      Micros older_than) override;
  absl::StatusOr<AuditRecord> AppendAudit(const AuditRecord& record) override;
  absl::StatusOr<std::vector<AuditRecord>> QueryAudit(
      const AuditFilter& filter) override;
  absl::StatusOr<AuditEnds> GetAuditEnds() override;
  absl::StatusOr<int64_t> PruneAudit(int64_t max_rows,
                                     Micros older_than) override;

  absl::Status PutStatus(const std::string& name, const std::string& json,
                         const Fence* fence = nullptr) override;
  absl::Status DeleteStatus(const std::string& name,
                            const Fence* fence = nullptr) override;
  absl::StatusOr<std::map<std::string, std::string>> ListStatus(
      const std::string& prefix) override;

  int64_t revision() const override {
    return revision_.load(std::memory_order_acquire);
  }
  int64_t desired_revision() const override {
    return desired_revision_.load(std::memory_order_acquire);
  }
  void SetChangeCallback(std::function<void()> callback) override;
  StoreHealth Health() const override;
  void SetRoundTripObserver(RoundTripObserver observer) override;

  // --- For the election (etcd_election.h) over the same etcd -------------
  // The full key of `relative` under the prefix.
  std::string Key(std::string_view relative) const;
  // One call, counted in health and round trips like the store's own;
  // through `via` (a client of the caller's, e.g. with shorter timeouts)
  // when given.
  absl::StatusOr<nlohmann::json> Call(std::string_view method,
                                      const nlohmann::json& body,
                                      EtcdClient* via = nullptr);
  // The copy's keys under `relative_prefix`, by key.
  std::vector<EtcdKv> Range(const std::string& relative_prefix) const;
  // Blocks until the copy has seen `revision` or `timeout` passes; false on
  // timeout.
  bool AwaitRevision(int64_t revision, Micros timeout);
  const EtcdStoreOptions& options() const { return options_; }
  // Seconds the last write waited for the watch to bring it back.
  double last_watch_lag_s() const;

 private:
  explicit EtcdStore(EtcdStoreOptions options);
  void WatchLoop();
  // Lists the prefix into a fresh copy; the list's revision.
  absl::StatusOr<int64_t> List();
  // Applies one watch response's events.
  void Apply(const nlohmann::json& events, int64_t header_revision);
  void Notify();  // wakes waiters and calls the callback (no lock held)
  // A transaction; its answer. Counts a failure against health.
  absl::StatusOr<nlohmann::json> Txn(const nlohmann::json& compare,
                                     const nlohmann::json& success,
                                     const nlohmann::json& failure = nullptr);
  // The write at `revision` is visible to reads here (waits for the watch).
  void Visible(int64_t revision);
  nlohmann::json FenceCompare(const Fence& fence) const;
  // Unavailable while etcd is known not to answer (kFailFastFor).
  absl::Status FailFast() const;
  absl::Status PutKey(const std::string& relative, const std::string& value,
                      const Fence* fence, const std::string& must_exist,
                      std::string_view what);
  absl::StatusOr<std::optional<EtcdKv>> Fresh(const std::string& relative);
  std::optional<EtcdKv> Cached(const std::string& relative) const;
  absl::StatusOr<KeyInfo> EnsureKeyOnce(std::string_view secret,
                                        const std::string& key_id,
                                        const std::string& tenant,
                                        const std::string& name, bool admin,
                                        Micros now, const std::string& what,
                                        bool* retry);
  // Puts the key `info` of `secret` if its id is free and its tenant (if
  // any) is stored: true when put, false when the id is taken; NotFound
  // when the tenant is not stored.
  absl::StatusOr<bool> InsertKey(std::string_view secret, const KeyInfo& info);
  void Observe(std::string_view op, Micros start, bool ok);

  const EtcdStoreOptions options_;
  std::unique_ptr<EtcdClient> client_;  // calls
  // The watch's client, one per connection (cancelled to stop or restart
  // it).
  absl::Mutex watch_mu_;
  std::shared_ptr<EtcdClient> watch_ ABSL_GUARDED_BY(watch_mu_);

  mutable absl::Mutex mu_;
  std::unique_ptr<EtcdCopy> copy_ ABSL_GUARDED_BY(mu_);
  int64_t copy_revision_ ABSL_GUARDED_BY(mu_) = 0;
  // The copy's revision once the change callback has run for it.
  int64_t notified_revision_ ABSL_GUARDED_BY(mu_) = 0;
  bool listed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool resyncing_ ABSL_GUARDED_BY(mu_) = false;
  // Health: the last answer and the last failure (steady clock).
  Micros last_ok_ ABSL_GUARDED_BY(mu_) = 0;
  Micros last_error_at_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  double watch_lag_s_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t event_seq_ ABSL_GUARDED_BY(mu_) = 0;

  std::atomic<int64_t> revision_{0};
  std::atomic<int64_t> desired_revision_{0};
  std::atomic<int64_t> keys_version_{0};
  // Called from the watch thread only; clearing it waits for a call.
  ChangeNotifier on_change_;
  // The observer, under a lock of its own (a leaf: nothing is taken while
  // it is held but to copy it).
  mutable absl::Mutex callbacks_mu_;
  RoundTripObserver observer_ ABSL_GUARDED_BY(callbacks_mu_);
  std::thread watcher_;
};

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_ETCD_STORE_H_
