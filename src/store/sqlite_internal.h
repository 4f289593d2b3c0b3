// Internal to the SQLite store (sqlite_store.cc, sqlite_documents.cc): one use
// of a cached statement, and transactions.
#ifndef GPUSCHED_STORE_SQLITE_INTERNAL_H_
#define GPUSCHED_STORE_SQLITE_INTERNAL_H_

#include <sqlite3.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "store/sqlite_store.h"

namespace gpusched::store {

// One use of a cached statement: binds parameters in order, steps, reads
// columns, and resets the statement when it goes out of scope (an unreset
// SELECT would hold its read snapshot and block WAL checkpoints).
class SqliteStore::Query {
 public:
  Query(const SqliteStore* store, sqlite3_stmt* stmt, std::string_view purpose)
      : store_(store), stmt_(stmt), purpose_(purpose) {}
  ~Query() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  Query& Int(int64_t v) { return Check(sqlite3_bind_int64(stmt_, ++n_, v)); }
  Query& Null() { return Check(sqlite3_bind_null(stmt_, ++n_)); }
  Query& Text(std::string_view v) {
    return Check(sqlite3_bind_text64(stmt_, ++n_, v.data(), v.size(),
                                     SQLITE_TRANSIENT, SQLITE_UTF8));
  }
  Query& Blob(std::string_view v) {
    return Check(
        sqlite3_bind_blob64(stmt_, ++n_, v.data(), v.size(), SQLITE_TRANSIENT));
  }

  // True when a row is ready, false when the statement is done.
  absl::StatusOr<bool> Step() {
    RETURN_IF_ERROR(bind_status_);
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return store_->Error(rc, purpose_);
  }
  // Runs a statement that returns no rows.
  absl::Status Run() {
    ASSIGN_OR_RETURN(const bool row, Step());
    if (row)
      return absl::InternalError(absl::StrCat(
          "store: ", absl::string_view(purpose_.data(), purpose_.size()),
          ": unexpected row"));
    return absl::OkStatus();
  }

  int64_t ColInt(int i) const { return sqlite3_column_int64(stmt_, i); }
  bool ColNull(int i) const {
    return sqlite3_column_type(stmt_, i) == SQLITE_NULL;
  }
  std::string ColText(int i) const {
    const auto* p = sqlite3_column_text(stmt_, i);
    const int n = sqlite3_column_bytes(stmt_, i);
    return p == nullptr ? std::string()
                        : std::string(reinterpret_cast<const char*>(p), n);
  }
  std::string ColBlob(int i) const {
    const void* p = sqlite3_column_blob(stmt_, i);
    const int n = sqlite3_column_bytes(stmt_, i);
    return p == nullptr ? std::string()
                        : std::string(static_cast<const char*>(p), n);
  }

 private:
  Query& Check(int rc) {
    if (rc != SQLITE_OK && bind_status_.ok()) {
      bind_status_ = store_->Error(rc, purpose_);
    }
    return *this;
  }

  const SqliteStore* store_;
  sqlite3_stmt* stmt_;
  std::string_view purpose_;
  int n_ = 0;
  absl::Status bind_status_;
};

template <typename Body>
absl::Status SqliteStore::Transaction(std::string_view purpose, Body body) {
  RETURN_IF_ERROR(
      Exec("BEGIN IMMEDIATE",
           absl::StrCat("beginning transaction for ",
                        absl::string_view(purpose.data(), purpose.size()))));
  absl::Status status = body();
  if (status.ok()) {
    status =
        Exec("COMMIT",
             absl::StrCat("committing ",
                          absl::string_view(purpose.data(), purpose.size())));
  }
  if (!status.ok() && !sqlite3_get_autocommit(db_)) {
    // Best effort: the original error is the one worth reporting.
    (void)Exec("ROLLBACK",
               absl::StrCat("rolling back ",
                            absl::string_view(purpose.data(), purpose.size())));
  }
  return status;
}

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_SQLITE_INTERNAL_H_
