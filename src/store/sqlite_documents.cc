// The Store's desired-state documents: deployments, tenants and
// ModelRoutes (with their rollouts' state).
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "store/sqlite_internal.h"
#include "store/store.h"

namespace gpusched::store {

// --- Deployments and tenants ----------------------------------------------

absl::Status Store::PutDocument(DocKind kind, const std::string& name,
                                const std::string& manifest_json,
                                int64_t generation, Micros now) {
  const char* what = What(kind);
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: ", what, " name is empty"));
  }
  if (generation < 0) {
    return absl::InvalidArgumentError(absl::StrCat("store: ", what, " '", name,
                                                   "': generation ", generation,
                                                   " is negative"));
  }
  if (!nlohmann::json::accept(manifest_json)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store: ", what, " '", name, "': manifest is not valid JSON"));
  }
  const std::string purpose = absl::StrCat("putting ", what, " '", name, "'");
  return Transaction(
      purpose, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
        std::optional<int64_t> stored;
        {
          ASSIGN_OR_RETURN(sqlite3_stmt * stmt,
                           Prepare(absl::StrCat("SELECT generation FROM ",
                                                Table(kind), " WHERE name = ?"),
                                   purpose));
          Query q(this, stmt, purpose);
          q.Text(name);
          ASSIGN_OR_RETURN(const bool row, q.Step());
          if (row) stored = q.ColInt(0);
        }
        if (stored.has_value() && generation < *stored) {
          return absl::FailedPreconditionError(
              absl::StrCat("store: ", what, " '", name, "': generation ",
                           generation, " is stale; the stored generation is ",
                           *stored, " (re-read and retry)"));
        }
        if (!stored.has_value()) {
          ASSIGN_OR_RETURN(
              sqlite3_stmt * stmt,
              Prepare(absl::StrCat("INSERT INTO ", Table(kind),
                                   "(name, manifest, generation, created_us, "
                                   "updated_us) VALUES (?, ?, ?, ?, ?)"),
                      purpose));
          return Query(this, stmt, purpose)
              .Text(name)
              .Text(manifest_json)
              .Int(generation)
              .Int(now)
              .Int(now)
              .Run();
        }
        ASSIGN_OR_RETURN(
            sqlite3_stmt * stmt,
            Prepare(
                absl::StrCat("UPDATE ", Table(kind),
                             " SET manifest = ?, generation = ?, updated_us = "
                             "? WHERE name = ?"),
                purpose));
        return Query(this, stmt, purpose)
            .Text(manifest_json)
            .Int(generation)
            .Int(now)
            .Text(name)
            .Run();
      });
}

absl::StatusOr<Document> Store::GetDocument(DocKind kind,
                                            const std::string& name) {
  const char* what = What(kind);
  const std::string purpose = absl::StrCat("reading ", what, " '", name, "'");
  ASSIGN_OR_RETURN(
      sqlite3_stmt * stmt,
      Prepare(absl::StrCat("SELECT manifest, generation, created_us, "
                           "updated_us FROM ",
                           Table(kind), " WHERE name = ?"),
              purpose));
  Query q(this, stmt, purpose);
  q.Text(name);
  ASSIGN_OR_RETURN(const bool row, q.Step());
  if (!row) {
    return absl::NotFoundError(absl::StrCat(what, " '", name, "' not found"));
  }
  return Document{name, q.ColText(0), q.ColInt(1), q.ColInt(2), q.ColInt(3)};
}

absl::StatusOr<std::vector<Document>> Store::ListDocuments(DocKind kind) {
  const std::string purpose = absl::StrCat("listing ", Table(kind));
  ASSIGN_OR_RETURN(
      sqlite3_stmt * stmt,
      Prepare(absl::StrCat("SELECT name, manifest, generation, created_us, "
                           "updated_us FROM ",
                           Table(kind), " ORDER BY name"),
              purpose));
  Query q(this, stmt, purpose);
  std::vector<Document> out;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) break;
    out.push_back(Document{q.ColText(0), q.ColText(1), q.ColInt(2), q.ColInt(3),
                           q.ColInt(4)});
  }
  return out;
}

absl::Status Store::DeleteDocument(DocKind kind, const std::string& name) {
  const char* what = What(kind);
  const std::string purpose = absl::StrCat("deleting ", what, " '", name, "'");
  // One statement (plus the cascade to api_keys) is atomic on its own.
  ASSIGN_OR_RETURN(
      sqlite3_stmt * stmt,
      Prepare(absl::StrCat("DELETE FROM ", Table(kind), " WHERE name = ?"),
              purpose));
  RETURN_IF_ERROR(Query(this, stmt, purpose).Text(name).Run());
  if (sqlite3_changes(db_) == 0) {
    return absl::NotFoundError(absl::StrCat(what, " '", name, "' not found"));
  }
  return absl::OkStatus();
}

const char* Store::Table(DocKind kind) {
  switch (kind) {
    case DocKind::kDeployment:
      return "deployments";
    case DocKind::kTenant:
      return "tenants";
    case DocKind::kRoute:
      return "routes";
  }
  return "?";
}

const char* Store::What(DocKind kind) {
  switch (kind) {
    case DocKind::kDeployment:
      return "deployment";
    case DocKind::kTenant:
      return "tenant";
    case DocKind::kRoute:
      return "route";
  }
  return "?";
}

absl::Status Store::PutRoute(const std::string& name,
                             const std::string& manifest_json,
                             int64_t generation, Micros now) {
  absl::MutexLock lock(&mu_);
  return PutDocument(DocKind::kRoute, name, manifest_json, generation, now);
}
absl::StatusOr<Document> Store::GetRoute(const std::string& name) {
  absl::MutexLock lock(&mu_);
  return GetDocument(DocKind::kRoute, name);
}
absl::StatusOr<std::vector<Document>> Store::ListRoutes() {
  absl::MutexLock lock(&mu_);
  return ListDocuments(DocKind::kRoute);
}
absl::Status Store::DeleteRoute(const std::string& name) {
  absl::MutexLock lock(&mu_);
  return DeleteDocument(DocKind::kRoute, name);  // its state cascades
}

absl::Status Store::PutRouteState(const std::string& name,
                                  const std::string& state_json, Micros now) {
  absl::MutexLock lock(&mu_);
  if (!nlohmann::json::accept(state_json)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: route '", name, "': state is not valid JSON"));
  }
  const std::string purpose =
      absl::StrCat("putting the state of route '", name, "'");
  ASSIGN_OR_RETURN(
      sqlite3_stmt * stmt,
      Prepare("INSERT INTO route_states(name, state, updated_us) VALUES (?, "
              "?, ?) ON CONFLICT(name) DO UPDATE SET state = excluded.state, "
              "updated_us = excluded.updated_us",
              purpose));
  // A route that is not stored fails the foreign key.
  return Query(this, stmt, purpose).Text(name).Text(state_json).Int(now).Run();
}

absl::StatusOr<std::string> Store::GetRouteState(const std::string& name) {
  absl::MutexLock lock(&mu_);
  const std::string purpose =
      absl::StrCat("reading the state of route '", name, "'");
  ASSIGN_OR_RETURN(
      sqlite3_stmt * stmt,
      Prepare("SELECT state FROM route_states WHERE name = ?", purpose));
  Query q(this, stmt, purpose);
  q.Text(name);
  ASSIGN_OR_RETURN(const bool row, q.Step());
  if (!row) {
    return absl::NotFoundError(
        absl::StrCat("route '", name, "' has no stored state"));
  }
  return q.ColText(0);
}

absl::Status Store::PutDeployment(const std::string& name,
                                  const std::string& manifest_json,
                                  int64_t generation, Micros now) {
  absl::MutexLock lock(&mu_);
  return PutDocument(DocKind::kDeployment, name, manifest_json, generation,
                     now);
}
absl::StatusOr<Document> Store::GetDeployment(const std::string& name) {
  absl::MutexLock lock(&mu_);
  return GetDocument(DocKind::kDeployment, name);
}
absl::StatusOr<std::vector<Document>> Store::ListDeployments() {
  absl::MutexLock lock(&mu_);
  return ListDocuments(DocKind::kDeployment);
}
absl::Status Store::DeleteDeployment(const std::string& name) {
  absl::MutexLock lock(&mu_);
  return DeleteDocument(DocKind::kDeployment, name);
}
absl::Status Store::PutTenant(const std::string& name,
                              const std::string& manifest_json,
                              int64_t generation, Micros now) {
  absl::MutexLock lock(&mu_);
  return PutDocument(DocKind::kTenant, name, manifest_json, generation, now);
}
absl::StatusOr<Document> Store::GetTenant(const std::string& name) {
  absl::MutexLock lock(&mu_);
  return GetDocument(DocKind::kTenant, name);
}
absl::StatusOr<std::vector<Document>> Store::ListTenants() {
  absl::MutexLock lock(&mu_);
  return ListDocuments(DocKind::kTenant);
}
absl::Status Store::DeleteTenant(const std::string& name) {
  absl::MutexLock lock(&mu_);
  // Its keys go with it (ON DELETE CASCADE): caches of them are stale.
  keys_version_.fetch_add(1, std::memory_order_release);
  return DeleteDocument(DocKind::kTenant, name);
}

}  // namespace gpusched::store
