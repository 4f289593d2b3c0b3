#include "store/sqlite_store.h"

#include <sqlite3.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "store/api_keys.h"
#include "store/sqlite_internal.h"
#include "store/store_internal.h"

namespace gpusched::store {
namespace {

constexpr int kBusyTimeoutMs = 5000;

absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

// Schema version 1. Timestamps are Micros (column suffix _us). STRICT
// tables reject values of the wrong type instead of coercing them.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE schema_version (version INTEGER NOT NULL) STRICT;
CREATE TABLE deployments (
  name TEXT PRIMARY KEY,
  manifest TEXT NOT NULL,
  generation INTEGER NOT NULL,
  created_us INTEGER NOT NULL,
  updated_us INTEGER NOT NULL
) STRICT;
CREATE TABLE tenants (
  name TEXT PRIMARY KEY,
  manifest TEXT NOT NULL,
  generation INTEGER NOT NULL,
  created_us INTEGER NOT NULL,
  updated_us INTEGER NOT NULL
) STRICT;
CREATE TABLE api_keys (
  key_id TEXT PRIMARY KEY,
  tenant TEXT REFERENCES tenants(name) ON DELETE CASCADE,
  name TEXT NOT NULL,
  admin INTEGER NOT NULL,
  salt BLOB NOT NULL,
  hash BLOB NOT NULL,
  created_us INTEGER NOT NULL,
  revoked_us INTEGER
) STRICT;
CREATE INDEX api_keys_tenant ON api_keys(tenant);
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  time_us INTEGER NOT NULL,
  kind TEXT NOT NULL,
  deployment TEXT NOT NULL,
  tenant TEXT NOT NULL,
  message TEXT NOT NULL,
  details TEXT NOT NULL
) STRICT;
CREATE INDEX events_time ON events(time_us);
CREATE INDEX events_deployment_time ON events(deployment, time_us);
CREATE INDEX events_tenant_time ON events(tenant, time_us);
CREATE INDEX events_kind_time ON events(kind, time_us);
)sql";

// Schema version 2: ModelRoutes (config/model_route.h) and their rollouts'
// state, added to a version-1 database in place.
constexpr const char* kSchemaV2 = R"sql(
CREATE TABLE routes (
  name TEXT PRIMARY KEY,
  manifest TEXT NOT NULL,
  generation INTEGER NOT NULL,
  created_us INTEGER NOT NULL,
  updated_us INTEGER NOT NULL
) STRICT;
CREATE TABLE route_states (
  name TEXT PRIMARY KEY REFERENCES routes(name) ON DELETE CASCADE,
  state TEXT NOT NULL,
  updated_us INTEGER NOT NULL
) STRICT;
)sql";

// Schema version 3: the desired replica count each deployment last had,
// and the instance that recorded each event (a shared store's; empty here).
constexpr const char* kSchemaV3 = R"sql(
CREATE TABLE desired_replicas (
  name TEXT PRIMARY KEY REFERENCES deployments(name) ON DELETE CASCADE,
  replicas INTEGER NOT NULL,
  updated_us INTEGER NOT NULL
) STRICT;
ALTER TABLE events ADD COLUMN instance TEXT NOT NULL DEFAULT '';
)sql";

// Schema version 4: custom roles and role bindings (docs/access.md) and the
// hash-chained audit log with its anchor and head (store/audit.h).
constexpr const char* kSchemaV4 = R"sql(
CREATE TABLE roles (
  name TEXT PRIMARY KEY,
  manifest TEXT NOT NULL,
  generation INTEGER NOT NULL,
  created_us INTEGER NOT NULL,
  updated_us INTEGER NOT NULL
) STRICT;
CREATE TABLE rolebindings (
  name TEXT PRIMARY KEY,
  manifest TEXT NOT NULL,
  generation INTEGER NOT NULL,
  created_us INTEGER NOT NULL,
  updated_us INTEGER NOT NULL
) STRICT;
CREATE TABLE audit (
  seq INTEGER PRIMARY KEY,
  time_us INTEGER NOT NULL,
  record TEXT NOT NULL
) STRICT;
CREATE TABLE audit_ends (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  anchor_seq INTEGER NOT NULL,
  anchor_hash TEXT NOT NULL,
  head_seq INTEGER NOT NULL,
  head_hash TEXT NOT NULL
) STRICT;
INSERT INTO audit_ends VALUES (1, 0, '', 0, '');
)sql";

}  // namespace

void SqliteStore::StmtDeleter::operator()(sqlite3_stmt* stmt) const {
  sqlite3_finalize(stmt);
}

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = absl::UnavailableError(absl::StrCat(
        "store: opening '", path,
        "': ", db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close_v2(db);
    return status;
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(db, path));
  {
    absl::MutexLock lock(&store->mu_);  // not shared yet; for the analysis
    RETURN_IF_ERROR(store->Configure());
    RETURN_IF_ERROR(store->InitSchema());
  }
  return store;
}

SqliteStore::~SqliteStore() {
  absl::MutexLock lock(&mu_);
  statements_.clear();  // finalize before closing
  sqlite3_close_v2(db_);
}

absl::Status SqliteStore::Error(int rc, std::string_view purpose) const {
  if ((rc & 0xff) != SQLITE_CONSTRAINT) {
    RoundTripObserver observer;
    {
      absl::MutexLock l(&callback_mu_);
      observer = observer_;
    }
    if (observer) observer("sqlite", 0, false);
  }
  const std::string msg =
      absl::StrCat("store: ", AbslView(purpose), ": ", sqlite3_errmsg(db_),
                   " (sqlite code ", rc, ")");
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(msg);
    case SQLITE_CONSTRAINT:
      return absl::FailedPreconditionError(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(msg);
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(msg);
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_READONLY:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::StatusOr<sqlite3_stmt*> SqliteStore::Prepare(const std::string& sql,
                                                   std::string_view purpose) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) return it->second.get();
  sqlite3_stmt* stmt = nullptr;
  const int rc =
      sqlite3_prepare_v3(db_, sql.c_str(), static_cast<int>(sql.size() + 1),
                         SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Error(rc, absl::StrCat("preparing ", AbslView(purpose)));
  }
  statements_.emplace(sql, std::unique_ptr<sqlite3_stmt, StmtDeleter>(stmt));
  return stmt;
}

absl::Status SqliteStore::Exec(const std::string& sql,
                               std::string_view purpose) {
  ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql, purpose));
  Query q(this, stmt, purpose);
  while (true) {
    ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) return absl::OkStatus();
  }
}

absl::Status SqliteStore::Configure() {
  const std::string& path = path_;
  sqlite3_extended_result_codes(db_, 1);
  const int rc = sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  if (rc != SQLITE_OK) return Error(rc, "setting busy timeout");
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare("PRAGMA journal_mode=WAL",
                                                  "enabling WAL journal mode"));
    Query q(this, stmt, "enabling WAL journal mode");
    ASSIGN_OR_RETURN(const bool row, q.Step());
    const std::string mode = row ? q.ColText(0) : "";
    // An in-memory database has no file to log to and reports "memory".
    if (mode != "wal" && !(path == ":memory:" && mode == "memory")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "store: '", path, "' cannot use WAL journal mode (got '", mode,
          "'); is it on a filesystem without shared memory support?"));
    }
  }
  RETURN_IF_ERROR(Exec("PRAGMA synchronous=NORMAL", "setting synchronous"));
  RETURN_IF_ERROR(Exec("PRAGMA foreign_keys=ON", "enabling foreign keys"));
  return absl::OkStatus();
}

absl::Status SqliteStore::InitSchema() {
  return Transaction(
      "schema setup", [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
        bool exists = false;
        {
          ASSIGN_OR_RETURN(
              sqlite3_stmt * stmt,
              Prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND "
                      "name = 'schema_version'",
                      "looking up schema_version"));
          Query q(this, stmt, "looking up schema_version");
          ASSIGN_OR_RETURN(exists, q.Step());
        }
        // sqlite3_exec runs a multi-statement script; no statement is
        // cached.
        auto script = [&](const char* sql, const char* what)
                          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
          char* err = nullptr;
          const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
          sqlite3_free(err);
          return rc == SQLITE_OK ? absl::OkStatus() : Error(rc, what);
        };
        if (!exists) {
          RETURN_IF_ERROR(script(kSchemaV1, "creating schema version 1"));
          RETURN_IF_ERROR(script(kSchemaV2, "creating schema version 2"));
          RETURN_IF_ERROR(script(kSchemaV3, "creating schema version 3"));
          RETURN_IF_ERROR(script(kSchemaV4, "creating schema version 4"));
          ASSIGN_OR_RETURN(
              sqlite3_stmt * stmt,
              Prepare("INSERT INTO schema_version(version) VALUES (?)",
                      "recording schema version"));
          return Query(this, stmt, "recording schema version")
              .Int(kStoreSchemaVersion)
              .Run();
        }
        ASSIGN_OR_RETURN(sqlite3_stmt * stmt,
                         Prepare("SELECT MAX(version) FROM schema_version",
                                 "reading schema version"));
        Query q(this, stmt, "reading schema version");
        ASSIGN_OR_RETURN(const bool row, q.Step());
        if (!row || q.ColNull(0)) {
          return absl::DataLossError(
              "store: schema_version table is empty; the database is damaged");
        }
        const int64_t version = q.ColInt(0);
        if (version > kStoreSchemaVersion) {
          return absl::FailedPreconditionError(absl::StrCat(
              "store: database schema version ", version,
              " is newer than this gpusched supports (", kStoreSchemaVersion,
              "); run a newer gpusched or point it at another state file"));
        }
        if (version == 1) {
          RETURN_IF_ERROR(script(kSchemaV2, "upgrading to schema version 2"));
        }
        if (version <= 3) {
          if (version <= 2) {
            RETURN_IF_ERROR(script(kSchemaV3, "upgrading to schema version 3"));
          }
          RETURN_IF_ERROR(script(kSchemaV4, "upgrading to schema version 4"));
          ASSIGN_OR_RETURN(
              sqlite3_stmt * up,
              Prepare("INSERT INTO schema_version(version) VALUES (?)",
                      "recording schema version"));
          return Query(this, up, "recording schema version")
              .Int(kStoreSchemaVersion)
              .Run();
        }
        if (version < kStoreSchemaVersion) {
          return absl::DataLossError(absl::StrCat(
              "store: database schema version ", version, " is unknown"));
        }
        return absl::OkStatus();
      });
}

// --- API keys ---------------------------------------------------------------

namespace {
constexpr const char* kKeyColumns =
    "key_id, tenant, name, admin, created_us, revoked_us";

KeyInfo ReadKeyInfo(sqlite3_stmt* stmt) {
  KeyInfo info;
  auto text = [&](int i) {
    const auto* p = sqlite3_column_text(stmt, i);
    return p == nullptr ? std::string()
                        : std::string(reinterpret_cast<const char*>(p),
                                      sqlite3_column_bytes(stmt, i));
  };
  info.key_id = text(0);
  info.tenant = text(1);
  info.name = text(2);
  info.admin = sqlite3_column_int64(stmt, 3) != 0;
  info.created = sqlite3_column_int64(stmt, 4);
  if (sqlite3_column_type(stmt, 5) != SQLITE_NULL) {
    info.revoked = sqlite3_column_int64(stmt, 5);
  }
  return info;
}
}  // namespace

absl::StatusOr<std::optional<KeyInfo>> SqliteStore::FindKey(
    const std::string& key_id, std::string* salt, std::string* hash) {
  constexpr std::string_view kPurpose = "looking up an API key";
  ASSIGN_OR_RETURN(sqlite3_stmt * stmt,
                   Prepare(absl::StrCat("SELECT ", kKeyColumns,
                                        ", salt, hash FROM api_keys "
                                        "WHERE key_id = ?"),
                           kPurpose));
  Query q(this, stmt, kPurpose);
  q.Text(key_id);
  ASSIGN_OR_RETURN(const bool row, q.Step());
  if (!row) return std::optional<KeyInfo>();
  *salt = q.ColBlob(6);
  *hash = q.ColBlob(7);
  return std::optional<KeyInfo>(ReadKeyInfo(stmt));
}

absl::Status SqliteStore::InsertKey(const std::string& key_id,
                                    std::string_view secret,
                                    const std::string& tenant,
                                    const std::string& name, bool admin,
                                    Micros now) {
  constexpr std::string_view kPurpose = "storing an API key";
  ASSIGN_OR_RETURN(const std::string salt, RandomBytes(kSaltBytes));
  ASSIGN_OR_RETURN(const std::string hash, HashSecret(salt, secret));
  ASSIGN_OR_RETURN(
      sqlite3_stmt * stmt,
      Prepare("INSERT INTO api_keys(key_id, tenant, name, admin, salt, hash, "
              "created_us, revoked_us) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
              kPurpose));
  Query q(this, stmt, kPurpose);
  q.Text(key_id);
  if (tenant.empty()) {
    q.Null();
  } else {
    q.Text(tenant);
  }
  return q.Text(name).Int(admin ? 1 : 0).Blob(salt).Blob(hash).Int(now).Run();
}

absl::StatusOr<NewApiKey> SqliteStore::CreateApiKey(const std::string& tenant,
                                                    const std::string& name,
                                                    Micros now, bool admin) {
  absl::ReleasableMutexLock lock(&mu_);
  if (tenant.empty() && !admin) {
    return absl::InvalidArgumentError(
        "store: an API key that is not an admin key needs a tenant");
  }
  NewApiKey key;
  absl::Status status = Transaction(
      "creating an API key",
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
        if (!tenant.empty()) {
          absl::StatusOr<Document> t = GetLocked(DocKind::kTenant, tenant);
          if (!t.ok()) return t.status();
        }
        // A 48-bit key id collides almost never; draw again if it does.
        for (int attempt = 0; attempt < kKeyIdAttempts; ++attempt) {
          ASSIGN_OR_RETURN(std::string secret, GenerateApiKeySecret());
          std::string key_id = *KeyIdOf(secret);
          std::string salt, hash;
          ASSIGN_OR_RETURN(std::optional<KeyInfo> existing,
                           FindKey(key_id, &salt, &hash));
          if (existing.has_value()) continue;
          RETURN_IF_ERROR(InsertKey(key_id, secret, tenant, name, admin, now));
          key.key_id = std::move(key_id);
          key.secret = std::move(secret);
          return absl::OkStatus();
        }
        return absl::InternalError(
            "store: could not draw an unused API key id");
      });
  lock.Release();
  if (!status.ok()) return status;
  Changed();
  return key;
}

absl::StatusOr<KeyInfo> SqliteStore::AuthenticateKey(std::string_view secret) {
  absl::MutexLock lock(&mu_);
  const std::optional<std::string> key_id = KeyIdOf(secret);
  if (!key_id.has_value()) return InvalidKeyError();
  std::string salt, hash;
  ASSIGN_OR_RETURN(std::optional<KeyInfo> info, FindKey(*key_id, &salt, &hash));
  if (!info.has_value() || !SecretMatches(salt, hash, secret)) {
    return InvalidKeyError();
  }
  // Only the holder of the real secret learns that it was revoked.
  if (info->revoked.has_value()) {
    return absl::UnauthenticatedError(
        absl::StrCat("API key ", info->key_id, " has been revoked"));
  }
  return *std::move(info);
}

absl::Status SqliteStore::RevokeApiKey(const std::string& key_id, Micros now) {
  {
    absl::MutexLock lock(&mu_);
    const std::string purpose = absl::StrCat("revoking API key ", key_id);
    ASSIGN_OR_RETURN(
        sqlite3_stmt * stmt,
        Prepare("UPDATE api_keys SET revoked_us = COALESCE(revoked_us, ?) "
                "WHERE key_id = ?",
                purpose));
    RETURN_IF_ERROR(Query(this, stmt, purpose).Int(now).Text(key_id).Run());
    if (sqlite3_changes(db_) == 0) {
      return absl::NotFoundError(
          absl::StrCat("API key ", key_id, " not found"));
    }
    keys_version_.fetch_add(1, std::memory_order_release);
  }
  Changed();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<KeyInfo>> SqliteStore::ListApiKeys(
    const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  constexpr std::string_view kPurpose = "listing API keys";
  const std::string sql =
      tenant.empty()
          ? absl::StrCat("SELECT ", kKeyColumns,
                         " FROM api_keys ORDER BY key_id")
          : absl::StrCat("SELECT ", kKeyColumns,
                         " FROM api_keys WHERE tenant = ? ORDER BY key_id");
  ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql, kPurpose));
  Query q(this, stmt, kPurpose);
  if (!tenant.empty()) q.Text(tenant);
  std::vector<KeyInfo> out;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) break;
    out.push_back(ReadKeyInfo(stmt));
  }
  return out;
}

absl::StatusOr<KeyInfo> SqliteStore::EnsureKey(std::string_view secret,
                                               const std::string& tenant,
                                               const std::string& name,
                                               bool admin, Micros now) {
  std::string what;
  ASSIGN_OR_RETURN(const std::string id,
                   EnsureKeyId(secret, tenant, admin, &what));
  const std::optional<std::string> key_id = id;
  KeyInfo result;
  bool inserted = false;
  absl::ReleasableMutexLock lock(&mu_);
  absl::Status status = Transaction(
      "registering a configured key",
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
        std::string salt, hash;
        ASSIGN_OR_RETURN(std::optional<KeyInfo> info,
                         FindKey(*key_id, &salt, &hash));
        if (!info.has_value()) {
          RETURN_IF_ERROR(InsertKey(*key_id, secret, tenant, name, admin, now));
          inserted = true;
          ASSIGN_OR_RETURN(info, FindKey(*key_id, &salt, &hash));
          if (!info.has_value()) {
            return absl::InternalError("store: key vanished on insert");
          }
          result = *std::move(info);
          return absl::OkStatus();
        }
        RETURN_IF_ERROR(
            CheckEnsuredKey(*info, salt, hash, secret, tenant, admin, what));
        result = *std::move(info);
        return absl::OkStatus();
      });
  lock.Release();
  if (!status.ok()) return status;
  if (inserted) Changed();
  return result;
}

// --- Event log --------------------------------------------------------------

absl::StatusOr<int64_t> SqliteStore::AppendEvent(const Event& event,
                                                 const Fence* fence) {
  int64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (event.kind.empty()) {
      return absl::InvalidArgumentError("store: event kind is empty");
    }
    constexpr std::string_view kPurpose = "appending an event";
    // `replace` keeps dump() from throwing on invalid UTF-8.
    const std::string details = event.details.dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
    ASSIGN_OR_RETURN(
        sqlite3_stmt * stmt,
        Prepare(
            "INSERT INTO events(time_us, kind, deployment, tenant, message, "
            "details, instance) VALUES (?, ?, ?, ?, ?, ?, ?)",
            kPurpose));
    RETURN_IF_ERROR(Query(this, stmt, kPurpose)
                        .Int(event.time)
                        .Text(event.kind)
                        .Text(event.deployment)
                        .Text(event.tenant)
                        .Text(event.message)
                        .Text(details)
                        .Text(event.instance)
                        .Run());
    id = sqlite3_last_insert_rowid(db_);
  }
  Changed();
  return id;
}

absl::StatusOr<std::vector<Event>> SqliteStore::QueryEvents(
    const EventFilter& filter) {
  absl::MutexLock lock(&mu_);
  constexpr std::string_view kPurpose = "querying events";
  // One cached statement per combination of present filters; kinds travel as
  // one JSON array so their number does not multiply the shapes.
  std::string sql =
      "SELECT id, time_us, kind, deployment, tenant, message, details, "
      "instance FROM events WHERE time_us >= ? AND time_us < ?";
  if (!filter.kinds.empty()) {
    sql += " AND kind IN (SELECT value FROM json_each(?))";
  }
  if (!filter.deployment.empty()) sql += " AND deployment = ?";
  if (!filter.tenant.empty()) sql += " AND tenant = ?";
  if (filter.after_id != 0) {
    sql += filter.oldest_first ? " AND id > ?" : " AND id < ?";
  }
  sql += filter.oldest_first ? " ORDER BY id ASC" : " ORDER BY id DESC";
  sql += " LIMIT ?";
  ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql, kPurpose));
  Query q(this, stmt, kPurpose);
  q.Int(filter.since).Int(filter.until);
  if (!filter.kinds.empty()) {
    nlohmann::json kinds = nlohmann::json::array();
    for (const std::string& k : filter.kinds) kinds.push_back(k);
    q.Text(
        kinds.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (!filter.deployment.empty()) q.Text(filter.deployment);
  if (!filter.tenant.empty()) q.Text(filter.tenant);
  if (filter.after_id != 0) q.Int(filter.after_id);
  q.Int(filter.limit > 0 ? filter.limit : -1);
  std::vector<Event> out;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) break;
    Event e;
    e.id = q.ColInt(0);
    e.time = q.ColInt(1);
    e.kind = q.ColText(2);
    e.deployment = q.ColText(3);
    e.tenant = q.ColText(4);
    e.message = q.ColText(5);
    e.instance = q.ColText(7);
    e.details = nlohmann::json::parse(q.ColText(6), nullptr,
                                      /*allow_exceptions=*/false);
    if (e.details.is_discarded()) {
      return absl::DataLossError(absl::StrCat(
          "store: event ", e.id, " has details that are not valid JSON"));
    }
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<int64_t> SqliteStore::PruneEvents(int64_t max_rows,
                                                 Micros older_than) {
  absl::MutexLock lock(&mu_);
  constexpr std::string_view kPurpose = "pruning events";
  int64_t deleted = 0;
  RETURN_IF_ERROR(Transaction(
      kPurpose, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
        {
          ASSIGN_OR_RETURN(
              sqlite3_stmt * stmt,
              Prepare("DELETE FROM events WHERE time_us < ?", kPurpose));
          RETURN_IF_ERROR(Query(this, stmt, kPurpose).Int(older_than).Run());
          deleted += sqlite3_changes64(db_);
        }
        if (max_rows >= 0) {
          // The id of the newest row beyond the newest `max_rows`; NULL
          // (nothing deleted) when there are not that many.
          ASSIGN_OR_RETURN(
              sqlite3_stmt * stmt,
              Prepare("DELETE FROM events WHERE id <= (SELECT id FROM events "
                      "ORDER BY id DESC LIMIT 1 OFFSET ?)",
                      kPurpose));
          RETURN_IF_ERROR(Query(this, stmt, kPurpose).Int(max_rows).Run());
          deleted += sqlite3_changes64(db_);
        }
        return absl::OkStatus();
      }));
  return deleted;
}

// --- Changes and health -----------------------------------------------------

void SqliteStore::Changed() {
  revision_.fetch_add(1, std::memory_order_acq_rel);
  on_change_.Notify();
}

void SqliteStore::SetChangeCallback(std::function<void()> callback) {
  on_change_.Set(std::move(callback));
}

void SqliteStore::SetRoundTripObserver(RoundTripObserver observer) {
  absl::MutexLock l(&callback_mu_);
  observer_ = std::move(observer);
}

StoreHealth SqliteStore::Health() const {
  StoreHealth h;
  h.kind = "sqlite";
  h.where = path_;
  h.reachable = true;
  h.revision = revision();
  return h;
}

}  // namespace gpusched::store
