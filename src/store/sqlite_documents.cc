// The SQLite store's desired-state documents: deployments, tenants and
// ModelRoutes, their rollouts' state, desired counts, and the status
// documents it keeps in memory.
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "store/sqlite_internal.h"
#include "store/sqlite_store.h"
#include "store/store_internal.h"

namespace gpusched::store {

const char* SqliteStore::Table(DocKind kind) {
  switch (kind) {
    case DocKind::kDeployment:
      return "deployments";
    case DocKind::kTenant:
      return "tenants";
    case DocKind::kRoute:
      return "routes";
    case DocKind::kRole:
      return "roles";
    case DocKind::kRoleBinding:
      return "rolebindings";
  }
  return "?";
}

absl::Status SqliteStore::Put(DocKind kind, const std::string& name,
                              const std::string& manifest_json,
                              int64_t generation, Micros now) {
  RETURN_IF_ERROR(CheckPut(kind, name, manifest_json, generation));
  const std::string purpose =
      absl::StrCat("putting ", DocKindName(kind), " '", name, "'");
  absl::Status st;
  {
    absl::MutexLock lock(&mu_);
    st = Transaction(
        purpose, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
          std::optional<std::pair<int64_t, std::string>> stored;
          {
            ASSIGN_OR_RETURN(
                sqlite3_stmt * stmt,
                Prepare(absl::StrCat("SELECT generation, manifest FROM ",
                                     Table(kind), " WHERE name = ?"),
                        purpose));
            Query q(this, stmt, purpose);
            q.Text(name);
            ASSIGN_OR_RETURN(const bool row, q.Step());
            if (row) stored = {q.ColInt(0), q.ColText(1)};
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
          RETURN_IF_ERROR(CheckGeneration(kind, name, stored->first,
                                          stored->second, generation,
                                          manifest_json));
          ASSIGN_OR_RETURN(
              sqlite3_stmt * stmt,
              Prepare(absl::StrCat(
                          "UPDATE ", Table(kind),
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
  if (st.ok()) {
    desired_revision_.fetch_add(1, std::memory_order_acq_rel);
    Changed();
  }
  return st;
}

absl::StatusOr<Document> SqliteStore::GetLocked(DocKind kind,
                                                const std::string& name) {
  const char* what = DocKindName(kind);
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

absl::StatusOr<Document> SqliteStore::Get(DocKind kind,
                                          const std::string& name) {
  absl::MutexLock lock(&mu_);
  return GetLocked(kind, name);
}

absl::StatusOr<std::vector<Document>> SqliteStore::List(DocKind kind) {
  absl::MutexLock lock(&mu_);
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

absl::Status SqliteStore::Delete(DocKind kind, const std::string& name) {
  {
    absl::MutexLock lock(&mu_);
    const char* what = DocKindName(kind);
    const std::string purpose =
        absl::StrCat("deleting ", what, " '", name, "'");
    // One statement (plus the cascades: a tenant's api_keys, a route's
    // state, a deployment's desired count) is atomic on its own.
    ASSIGN_OR_RETURN(
        sqlite3_stmt * stmt,
        Prepare(absl::StrCat("DELETE FROM ", Table(kind), " WHERE name = ?"),
                purpose));
    RETURN_IF_ERROR(Query(this, stmt, purpose).Text(name).Run());
    if (sqlite3_changes(db_) == 0) {
      return absl::NotFoundError(absl::StrCat(what, " '", name, "' not found"));
    }
    // A tenant's keys went with it: caches of them are stale.
    if (kind == DocKind::kTenant) {
      keys_version_.fetch_add(1, std::memory_order_release);
    }
  }
  desired_revision_.fetch_add(1, std::memory_order_acq_rel);
  Changed();
  return absl::OkStatus();
}

absl::Status SqliteStore::PutRouteState(const std::string& name,
                                        const std::string& state_json,
                                        Micros now, const Fence* fence) {
  if (!nlohmann::json::accept(state_json)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: route '", name, "': state is not valid JSON"));
  }
  {
    absl::MutexLock lock(&mu_);
    const std::string purpose =
        absl::StrCat("putting the state of route '", name, "'");
    ASSIGN_OR_RETURN(
        sqlite3_stmt * stmt,
        Prepare("INSERT INTO route_states(name, state, updated_us) VALUES (?, "
                "?, ?) ON CONFLICT(name) DO UPDATE SET state = excluded.state, "
                "updated_us = excluded.updated_us",
                purpose));
    // A route that is not stored fails the foreign key.
    RETURN_IF_ERROR(
        Query(this, stmt, purpose).Text(name).Text(state_json).Int(now).Run());
  }
  Changed();
  return absl::OkStatus();
}

absl::StatusOr<std::string> SqliteStore::GetRouteState(
    const std::string& name) {
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

absl::Status SqliteStore::PutDesiredReplicas(const std::string& deployment,
                                             int replicas, Micros now,
                                             const Fence* fence) {
  if (replicas < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: deployment '", deployment, "': desired count ",
                     replicas, " is negative"));
  }
  {
    absl::MutexLock lock(&mu_);
    const std::string purpose = absl::StrCat(
        "putting the desired count of deployment '", deployment, "'");
    ASSIGN_OR_RETURN(
        sqlite3_stmt * stmt,
        Prepare("INSERT INTO desired_replicas(name, replicas, updated_us) "
                "VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE SET replicas = "
                "excluded.replicas, updated_us = excluded.updated_us",
                purpose));
    // A deployment that is not stored fails the foreign key.
    RETURN_IF_ERROR(Query(this, stmt, purpose)
                        .Text(deployment)
                        .Int(replicas)
                        .Int(now)
                        .Run());
  }
  Changed();
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, int>> SqliteStore::ListDesiredReplicas() {
  absl::MutexLock lock(&mu_);
  constexpr std::string_view kPurpose = "listing desired counts";
  ASSIGN_OR_RETURN(
      sqlite3_stmt * stmt,
      Prepare("SELECT name, replicas FROM desired_replicas", kPurpose));
  Query q(this, stmt, kPurpose);
  std::map<std::string, int> out;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, q.Step());
    if (!row) break;
    out[q.ColText(0)] = static_cast<int>(q.ColInt(1));
  }
  return out;
}

absl::Status SqliteStore::PutStatus(const std::string& name,
                                    const std::string& json,
                                    const Fence* fence) {
  RETURN_IF_ERROR(CheckStatus(name, json));
  {
    absl::MutexLock lock(&mu_);
    status_[name] = json;
  }
  Changed();
  return absl::OkStatus();
}

absl::Status SqliteStore::DeleteStatus(const std::string& name,
                                       const Fence* fence) {
  {
    absl::MutexLock lock(&mu_);
    if (status_.erase(name) == 0) {
      return absl::NotFoundError(absl::StrCat("status '", name, "' not found"));
    }
  }
  Changed();
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> SqliteStore::ListStatus(
    const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::string> out;
  for (auto it = status_.lower_bound(prefix);
       it != status_.end() && absl::StartsWith(it->first, prefix); ++it) {
    out.insert(*it);
  }
  return out;
}

}  // namespace gpusched::store
