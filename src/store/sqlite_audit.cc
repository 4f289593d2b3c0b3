// The SQLite store's audit log (store/audit.h): records as JSON by seq, the
// anchor and head in one row, each append and prune one transaction.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "store/sqlite_internal.h"
#include "store/sqlite_store.h"

namespace gpusched::store {

using nlohmann::json;

namespace {

absl::Status CheckAudit(const AuditRecord& r) {
  if (r.verb.empty()) {
    return absl::InvalidArgumentError("store: audit record verb is empty");
  }
  if (r.who.empty()) {
    return absl::InvalidArgumentError("store: audit record who is empty");
  }
  return absl::OkStatus();
}

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<AuditEnds> SqliteStore::ReadAuditEndsLocked() {
  constexpr std::string_view kPurpose = "reading the audit log's ends";
  ASSIGN_OR_RETURN(sqlite3_stmt * stmt,
                   Prepare("SELECT anchor_seq, anchor_hash, head_seq, "
                           "head_hash FROM audit_ends WHERE id = 1",
                           kPurpose));
  Query q(this, stmt, kPurpose);
  ASSIGN_OR_RETURN(const bool row, q.Step());
  if (!row) {
    return absl::DataLossError(
        "store: the audit log's anchor and head are missing");
  }
  return AuditEnds{q.ColInt(0), q.ColText(1), q.ColInt(2), q.ColText(3)};
}

absl::StatusOr<AuditRecord> SqliteStore::AppendAudit(
    const AuditRecord& record) {
  RETURN_IF_ERROR(CheckAudit(record));
  AuditRecord out;
  {
    absl::MutexLock lock(&mu_);
    constexpr std::string_view kPurpose = "appending an audit record";
    RETURN_IF_ERROR(Transaction(
        kPurpose, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
          ASSIGN_OR_RETURN(AuditEnds ends, ReadAuditEndsLocked());
          AuditRecord r = record;
          BoundAudit(&r);
          out = ChainAudit(std::move(r), ends.head_seq, ends.head_hash);
          {
            ASSIGN_OR_RETURN(sqlite3_stmt * stmt,
                             Prepare("INSERT INTO audit(seq, time_us, record) "
                                     "VALUES (?, ?, ?)",
                                     kPurpose));
            RETURN_IF_ERROR(Query(this, stmt, kPurpose)
                                .Int(out.seq)
                                .Int(out.time)
                                .Text(Dump(AuditJson(out)))
                                .Run());
          }
          ASSIGN_OR_RETURN(sqlite3_stmt * stmt,
                           Prepare("UPDATE audit_ends SET head_seq = ?, "
                                   "head_hash = ? WHERE id = 1",
                                   kPurpose));
          return Query(this, stmt, kPurpose).Int(out.seq).Text(out.hash).Run();
        }));
  }
  Changed();
  return out;
}

absl::StatusOr<std::vector<AuditRecord>> SqliteStore::QueryAudit(
    const AuditFilter& filter) {
  absl::MutexLock lock(&mu_);
  constexpr std::string_view kPurpose = "reading the audit log";
  ASSIGN_OR_RETURN(
      sqlite3_stmt * stmt,
      Prepare(filter.oldest_first
                  ? "SELECT record FROM audit WHERE time_us >= ? AND time_us "
                    "< ? ORDER BY seq ASC"
                  : "SELECT record FROM audit WHERE time_us >= ? AND time_us "
                    "< ? ORDER BY seq DESC",
              kPurpose));
  Query q(this, stmt, kPurpose);
  q.Int(filter.since).Int(filter.until);
  std::vector<AuditRecord> out;
  while (filter.limit <= 0 || static_cast<int64_t>(out.size()) < filter.limit) {
    ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) break;
    const json j = json::parse(q.ColText(0), nullptr, false);
    ASSIGN_OR_RETURN(AuditRecord r, AuditFromJson(j));
    if (AuditMatches(r, filter)) out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<AuditEnds> SqliteStore::GetAuditEnds() {
  absl::MutexLock lock(&mu_);
  return ReadAuditEndsLocked();
}

absl::StatusOr<int64_t> SqliteStore::PruneAudit(int64_t max_rows,
                                                Micros older_than) {
  int64_t deleted = 0;
  {
    absl::MutexLock lock(&mu_);
    constexpr std::string_view kPurpose = "pruning the audit log";
    RETURN_IF_ERROR(Transaction(
        kPurpose, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
          // The newest record to remove: the last one older than
          // `older_than`, or the last beyond the newest `max_rows`.
          int64_t cut = 0;
          {
            ASSIGN_OR_RETURN(
                sqlite3_stmt * stmt,
                Prepare("SELECT MAX(seq) FROM audit WHERE time_us < ?",
                        kPurpose));
            Query q(this, stmt, kPurpose);
            q.Int(older_than);
            ASSIGN_OR_RETURN(const bool row, q.Step());
            if (row && !q.ColNull(0)) cut = q.ColInt(0);
          }
          if (max_rows >= 0) {
            ASSIGN_OR_RETURN(sqlite3_stmt * stmt,
                             Prepare("SELECT seq FROM audit ORDER BY seq DESC "
                                     "LIMIT 1 OFFSET ?",
                                     kPurpose));
            Query q(this, stmt, kPurpose);
            q.Int(max_rows);
            ASSIGN_OR_RETURN(const bool row, q.Step());
            if (row) cut = std::max(cut, q.ColInt(0));
          }
          if (cut == 0) return absl::OkStatus();
          std::string hash;
          {
            ASSIGN_OR_RETURN(
                sqlite3_stmt * stmt,
                Prepare("SELECT record FROM audit WHERE seq = ?", kPurpose));
            Query q(this, stmt, kPurpose);
            q.Int(cut);
            ASSIGN_OR_RETURN(const bool row, q.Step());
            if (!row) return absl::OkStatus();
            ASSIGN_OR_RETURN(AuditRecord r, AuditFromJson(json::parse(
                                                q.ColText(0), nullptr, false)));
            hash = r.hash;
          }
          {
            ASSIGN_OR_RETURN(
                sqlite3_stmt * stmt,
                Prepare("DELETE FROM audit WHERE seq <= ?", kPurpose));
            RETURN_IF_ERROR(Query(this, stmt, kPurpose).Int(cut).Run());
            deleted = sqlite3_changes64(db_);
          }
          ASSIGN_OR_RETURN(sqlite3_stmt * stmt,
                           Prepare("UPDATE audit_ends SET anchor_seq = ?, "
                                   "anchor_hash = ? WHERE id = 1",
                                   kPurpose));
          return Query(this, stmt, kPurpose).Int(cut).Text(hash).Run();
        }));
  }
  if (deleted > 0) Changed();
  return deleted;
}

}  // namespace gpusched::store
