#include "store/sqlite_store.h"

#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/api_keys.h"

namespace gpusched::store {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// A fresh directory per test under gtest's temp dir, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::path(::testing::TempDir()) /
            (std::string("gpusched_store_") + info->test_suite_name() + "_" +
             info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const {
    return (path_ / name).string();
  }

 private:
  fs::path path_;
};

std::unique_ptr<SqliteStore> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Event MakeEvent(Micros time, std::string kind, std::string deployment = "",
                std::string tenant = "") {
  Event e;
  e.time = time;
  e.kind = std::move(kind);
  e.deployment = std::move(deployment);
  e.tenant = std::move(tenant);
  return e;
}

TEST(SqliteStoreTest, FileUsesWalAndSurvivesReopen) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(
        store->PutDeployment("llama", R"({"replicas":2})", 1, 100).ok());
    ASSERT_TRUE(store->PutTenant("acme", R"({"quota":4})", 1, 100).ok());
    ASSERT_TRUE(store->AppendEvent(MakeEvent(5, "k")).ok());
  }
  // Reopening an existing schema is fine and keeps the rows.
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<Document> dep = store->GetDeployment("llama");
  ASSERT_TRUE(dep.ok()) << dep.status();
  EXPECT_EQ(dep->manifest_json, R"({"replicas":2})");
  EXPECT_EQ(dep->generation, 1);
  EXPECT_EQ(dep->created, 100);
  EXPECT_TRUE(store->GetTenant("acme").ok());
  EXPECT_EQ(store->QueryEvents({})->size(), 1u);

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)),
               "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

// Simulates kill -9: the database and its WAL are copied while the store is
// still open (no clean close, no checkpoint), and the copy is opened.
TEST(SqliteStoreTest, CommittedRowsSurviveCrash) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutTenant("acme", "{}", 1, 10).ok());
  ASSERT_TRUE(store->PutDeployment("llama", R"({"v":1})", 1, 10).ok());
  ASSERT_TRUE(store->PutDeployment("llama", R"({"v":2})", 2, 20).ok());
  absl::StatusOr<NewApiKey> key = store->CreateApiKey("acme", "ci", 30);
  ASSERT_TRUE(key.ok()) << key.status();
  ASSERT_TRUE(
      store->AppendEvent(MakeEvent(40, "deployment.applied", "llama")).ok());

  ASSERT_TRUE(fs::exists(path + "-wal"));
  ASSERT_GT(fs::file_size(path + "-wal"), 0u)
      << "the rows must still be in the WAL for this test to mean anything";
  const std::string crashed = dir.File("crashed.db");
  fs::copy_file(path, crashed);
  fs::copy_file(path + "-wal", crashed + "-wal");

  auto recovered = OpenOrDie(crashed);
  ASSERT_NE(recovered, nullptr);
  absl::StatusOr<Document> dep = recovered->GetDeployment("llama");
  ASSERT_TRUE(dep.ok()) << dep.status();
  EXPECT_EQ(dep->manifest_json, R"({"v":2})");
  EXPECT_EQ(dep->generation, 2);
  EXPECT_TRUE(recovered->GetTenant("acme").ok());
  EXPECT_TRUE(recovered->AuthenticateKey(key->secret).ok());
  absl::StatusOr<std::vector<Event>> events = recovered->QueryEvents({});
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].kind, "deployment.applied");
}

TEST(SqliteStoreTest, NewerSchemaVersionIsRefused) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  { ASSERT_NE(OpenOrDie(path), nullptr); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE schema_version SET version = 5", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);

  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("schema version 5"));
  EXPECT_THAT(store.status().message(), HasSubstr("newer"));
}

TEST(SqliteStoreTest, UpgradesFromVersion1) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  {
    auto store = OpenOrDie(path);
    ASSERT_TRUE(store->PutDeployment("chat", "{}", 1, 10).ok());
  }
  // A version-1 database: no route tables, no desired counts, events
  // without their instance, no roles, bindings or audit log.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP TABLE route_states; DROP TABLE routes; DROP "
                         "TABLE desired_replicas; ALTER TABLE events DROP "
                         "COLUMN instance; DROP TABLE roles; DROP TABLE "
                         "rolebindings; DROP TABLE audit; DROP TABLE "
                         "audit_ends; DELETE FROM schema_version; INSERT "
                         "INTO schema_version(version) VALUES (1)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->GetDeployment("chat").ok());  // kept
  // The tables of versions 2 and 3 are there (their behaviour is the
  // conformance suite's).
  ASSERT_TRUE(store->PutRoute("r", R"({"kind":"ModelRoute"})", 1, 5).ok());
  ASSERT_TRUE(store->PutRouteState("r", R"({"step":1})", 6).ok());
  EXPECT_EQ(*store->GetRouteState("r"), R"({"step":1})");
  ASSERT_TRUE(store->PutDesiredReplicas("chat", 3, 9).ok());
  EXPECT_EQ(store->ListDesiredReplicas()->at("chat"), 3);
  Event e = MakeEvent(9, "k");
  e.instance = "a";
  ASSERT_TRUE(store->AppendEvent(e).ok());
  EXPECT_EQ((*store->QueryEvents({}))[0].instance, "a");
  // And those of version 4: roles, bindings, the audit log and its ends.
  ASSERT_TRUE(store->Put(DocKind::kRole, "r", "{}", 1, 9).ok());
  AuditRecord a;
  a.who = "key:abcdefgh";
  a.verb = "apply";
  EXPECT_EQ(store->AppendAudit(a)->seq, 1);
}

TEST(SqliteStoreTest, NotADatabaseIsAnError) {
  TempDir dir;
  const std::string path = dir.File("junk.db");
  std::ofstream(path) << "this is not a sqlite database, not even close....";
  EXPECT_FALSE(SqliteStore::Open(path).ok());
}

// Failures reach the round-trip observer (gpusched_store_requests_total
// {op="sqlite",result="error"}); successes and answers do not.
TEST(SqliteStoreTest, ErrorsReachTheObserver) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  std::unique_ptr<SqliteStore> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  std::vector<std::pair<std::string, bool>> seen;
  store->SetRoundTripObserver([&](std::string_view op, double, bool ok) {
    seen.emplace_back(std::string(op), ok);
  });
  ASSERT_TRUE(store->AppendEvent(MakeEvent(1, "a.b")).ok());
  EXPECT_TRUE(seen.empty());
  // Another connection drops the events table: the next statement that
  // needs it fails.
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "DROP TABLE events", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(other);
  EXPECT_FALSE(store->QueryEvents({}).ok());
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].first, "sqlite");
  EXPECT_FALSE(seen[0].second);
  store->SetRoundTripObserver(nullptr);
}

TEST(SqliteStoreTest, SecretNeverStoredAndSaltsDiffer) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  std::string s1, s2;
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutTenant("acme", "{}", 1, 0).ok());
    absl::StatusOr<NewApiKey> k1 = store->CreateApiKey("acme", "one", 0);
    absl::StatusOr<NewApiKey> k2 = store->CreateApiKey("acme", "two", 0);
    ASSERT_TRUE(k1.ok() && k2.ok());
    s1 = k1->secret;
    s2 = k2->secret;
    EXPECT_NE(s1, s2);
    // While open, the rows may sit in the WAL: check every file.
    for (const std::string& file : {path, path + "-wal"}) {
      const std::string bytes = ReadBytes(file);
      for (const std::string& s : {s1, s2}) {
        EXPECT_EQ(bytes.find(s), std::string::npos) << file;
        EXPECT_EQ(bytes.find(s.substr(11)), std::string::npos) << file;
      }
    }
  }
  const std::string bytes = ReadBytes(path);
  ASSERT_FALSE(bytes.empty());
  for (const std::string& s : {s1, s2}) {
    EXPECT_EQ(bytes.find(s), std::string::npos);
    EXPECT_EQ(bytes.find(s.substr(11)), std::string::npos);
  }

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT salt, hash FROM api_keys", -1, &stmt,
                               nullptr),
            SQLITE_OK);
  std::set<std::string> salts, hashes;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    EXPECT_EQ(sqlite3_column_bytes(stmt, 0), 16);
    EXPECT_EQ(sqlite3_column_bytes(stmt, 1), 32);
    salts.insert(std::string(
        static_cast<const char*>(sqlite3_column_blob(stmt, 0)), 16));
    hashes.insert(std::string(
        static_cast<const char*>(sqlite3_column_blob(stmt, 1)), 32));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  EXPECT_EQ(salts.size(), 2u);
  EXPECT_EQ(hashes.size(), 2u);
}

TEST(SqliteStoreTest, EnsureAdminKeyIsIdempotent) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  absl::StatusOr<std::string> secret = GenerateApiKeySecret();
  ASSERT_TRUE(secret.ok());
  std::string key_id;
  {
    auto store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    absl::StatusOr<KeyInfo> first = store->EnsureAdminKey(*secret, 10);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_TRUE(first->admin);
    EXPECT_TRUE(first->tenant.empty());
    key_id = first->key_id;
    absl::StatusOr<KeyInfo> again = store->EnsureAdminKey(*secret, 20);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->key_id, key_id);
    EXPECT_EQ(again->created, 10);
  }
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->EnsureAdminKey(*secret, 30).ok());
  EXPECT_EQ(store->ListApiKeys("")->size(), 1u);
  absl::StatusOr<KeyInfo> auth = store->AuthenticateKey(*secret);
  ASSERT_TRUE(auth.ok());
  EXPECT_TRUE(auth->admin);

  // Same key id, another secret: refused without echoing either secret.
  std::string other = *secret;
  other.back() = other.back() == 'A' ? 'B' : 'A';
  absl::StatusOr<KeyInfo> clash = store->EnsureAdminKey(other, 40);
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(clash.status().message(), Not(HasSubstr(other.substr(11))));

  absl::StatusOr<KeyInfo> malformed = store->EnsureAdminKey("hunter2", 40);
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(malformed.status().message(), Not(HasSubstr("hunter2")));

  ASSERT_TRUE(store->RevokeApiKey(key_id, 50).ok());
  EXPECT_EQ(store->EnsureAdminKey(*secret, 60).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// The audit log on a SQLite file that someone edits behind gpusched's
// back: a changed record, a removed one and a removed newest one are each
// found by the chain check, naming the record.
TEST(SqliteStoreTest, AuditTamperingIsDetected) {
  struct Case {
    const char* name;
    const char* sql;
    const char* expect;
  };
  const Case cases[] = {
      {"changed",
       "UPDATE audit SET record = replace(record, "
       "'\"replicas\":2', '\"replicas\":0') WHERE seq = 2",
       "record 2: changed"},
      {"removed", "DELETE FROM audit WHERE seq = 3", "record 3: removed"},
      {"newest removed", "DELETE FROM audit WHERE seq = 4",
       "records 4..4: removed"},
      {"renumbered",
       "UPDATE audit SET record = replace(record, "
       "'\"seq\":3', '\"seq\":2') WHERE seq = 3",
       "record 2: out of order"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    const std::string path = dir.File(absl::StrCat("audit.db"));
    {
      std::unique_ptr<SqliteStore> store = OpenOrDie(path);
      for (int i = 1; i <= 4; ++i) {
        AuditRecord r;
        r.time = i;
        r.who = "key:abcdefgh";
        r.verb = "scale";
        r.resource = "deployment/chat";
        r.diff = {{"replicas", i}};
        ASSERT_TRUE(store->AppendAudit(r).ok());
      }
    }
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, c.sql, nullptr, nullptr, nullptr), SQLITE_OK);
    EXPECT_EQ(sqlite3_changes(db), 1);
    sqlite3_close(db);
    std::unique_ptr<SqliteStore> store = OpenOrDie(path);
    AuditFilter all;
    all.limit = 0;
    all.oldest_first = true;
    absl::Status st =
        VerifyAuditChain(*store->GetAuditEnds(), *store->QueryAudit(all));
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr(c.expect));
  }
}

}  // namespace
}  // namespace gpusched::store
