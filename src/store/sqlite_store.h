// SqliteStore: the Store (store.h) of a single gpusched instance, in one
// SQLite database file: the embedded default of `make run`.
//
// Every mutating call returns only after its transaction committed to the
// write-ahead log (journal_mode=WAL, synchronous=NORMAL): NORMAL survives a
// process crash; a power loss or OS crash may roll back the last few
// commits (docs/state-store.md). Status documents are kept in memory: one
// instance has no one to publish them to.
//
// Not shared: another process may open the same file (SQLite's locks and
// the busy timeout serialize writers), but it sees no change callback, and
// gpusched never does so. A Fence is accepted as given: one instance always
// leads (LocalElection, election.h).
//
// Thread-safety: thread-safe. One mutex serializes the calls (the
// prepared-statement cache and the open transaction belong to the one
// connection); no call waits on anything but SQLite.
#ifndef GPUSCHED_STORE_SQLITE_STORE_H_
#define GPUSCHED_STORE_SQLITE_STORE_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "store/change_notifier.h"
#include "store/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace gpusched::store {

// The schema version this build reads and writes. A database with a newer
// version is refused at Open (never downgraded or partially read); older
// ones are upgraded in place.
inline constexpr int kStoreSchemaVersion = 4;

class SqliteStore final : public Store {
 public:
  // Opens (creating if absent) the database at `path`; ":memory:" gives a
  // private in-memory database for tests. Creates the schema when the file
  // has none, refuses a newer schema version (FailedPrecondition), enables
  // WAL, synchronous=NORMAL, foreign keys and a busy timeout.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(
      const std::string& path);

  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  const char* kind() const override { return "sqlite"; }
  bool shared() const override { return false; }

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
  // Only failures are reported (op "sqlite", ok false): a local database
  // has no round trip worth timing, but its errors (I/O, disk full,
  // corruption, busy) are what an operator must hear of. Constraint
  // violations are answers, not failures.
  void SetRoundTripObserver(RoundTripObserver observer) override;

 private:
  class Query;
  friend class Query;
  struct StmtDeleter {
    void operator()(sqlite3_stmt* stmt) const;
  };
  static const char* Table(DocKind kind);  // its table

  SqliteStore(sqlite3* db, std::string path)
      : db_(db), path_(std::move(path)) {}
  absl::Status Configure() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  // A change was committed: revision() grows, the callback runs (after
  // mu_ is let go: call without it).
  void Changed() ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<Document> GetLocked(DocKind kind, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<AuditEnds> ReadAuditEndsLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InsertKey(const std::string& key_id, std::string_view secret,
                         const std::string& tenant, const std::string& name,
                         bool admin, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::optional<KeyInfo>> FindKey(const std::string& key_id,
                                                 std::string* salt,
                                                 std::string* hash)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  sqlite3* db_;  // the connection: used with mu_ held (or before sharing)
  const std::string path_;
  std::map<std::string, std::unique_ptr<sqlite3_stmt, StmtDeleter>, std::less<>>
      statements_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> status_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> keys_version_{0};
  std::atomic<int64_t> revision_{0};
  std::atomic<int64_t> desired_revision_{0};
  // Called by writers; clearing it waits for a call to end.
  ChangeNotifier on_change_;
  // Under a lock of its own (a leaf), called without any lock.
  mutable absl::Mutex callback_mu_;
  RoundTripObserver observer_ ABSL_GUARDED_BY(callback_mu_);
};

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_SQLITE_STORE_H_
