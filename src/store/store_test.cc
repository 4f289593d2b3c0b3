#include "store/store.h"

#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::store {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
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

std::unique_ptr<Store> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> Names(const std::vector<Document>& docs) {
  std::vector<std::string> out;
  for (const Document& d : docs) out.push_back(d.name);
  return out;
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

std::vector<int64_t> Ids(const std::vector<Event>& events) {
  std::vector<int64_t> out;
  for (const Event& e : events) out.push_back(e.id);
  return out;
}

TEST(StoreTest, OpenInMemory) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->ListDeployments().ok());
  EXPECT_TRUE(store->ListDeployments()->empty());
}

TEST(StoreTest, FileUsesWalAndSurvivesReopen) {
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
TEST(StoreTest, CommittedRowsSurviveCrash) {
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

TEST(StoreTest, NewerSchemaVersionIsRefused) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  { ASSERT_NE(OpenOrDie(path), nullptr); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE schema_version SET version = 3", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);

  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("schema version 3"));
  EXPECT_THAT(store.status().message(), HasSubstr("newer"));
}

TEST(StoreTest, RoutesAndTheirStateAndTheUpgradeFromVersion1) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  {
    auto store = OpenOrDie(path);
    ASSERT_TRUE(store->PutDeployment("chat", "{}", 1, 10).ok());
  }
  // A version-1 database: no route tables.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP TABLE route_states; DROP TABLE routes; DELETE "
                         "FROM schema_version; INSERT INTO "
                         "schema_version(version) VALUES (1)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(store->GetDeployment("chat").ok());         // kept
  EXPECT_FALSE(store->PutRouteState("r", "{}", 1).ok());  // no such route
  ASSERT_TRUE(store->PutRoute("r", R"({"kind":"ModelRoute"})", 1, 5).ok());
  EXPECT_EQ(store->GetRouteState("r").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->PutRouteState("r", R"({"step":1})", 6).ok());
  ASSERT_TRUE(store->PutRouteState("r", R"({"step":2})", 7).ok());
  EXPECT_EQ(*store->GetRouteState("r"), R"({"step":2})");
  EXPECT_FALSE(store->PutRouteState("r", "{", 8).ok());
  auto routes = store->ListRoutes();
  ASSERT_TRUE(routes.ok());
  ASSERT_EQ(routes->size(), 1u);
  EXPECT_EQ((*routes)[0].generation, 1);
  ASSERT_TRUE(store->DeleteRoute("r").ok());
  EXPECT_EQ(store->GetRouteState("r").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->DeleteRoute("r").code(), absl::StatusCode::kNotFound);
}

TEST(StoreTest, NotADatabaseIsAnError) {
  TempDir dir;
  const std::string path = dir.File("junk.db");
  std::ofstream(path) << "this is not a sqlite database, not even close....";
  EXPECT_FALSE(Store::Open(path).ok());
}

TEST(StoreTest, GenerationsAreOptimisticConcurrency) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutDeployment("a", R"({"v":1})", 3, 100).ok());
  // Stale: fails and changes nothing.
  absl::Status stale = store->PutDeployment("a", R"({"v":0})", 2, 200);
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.message(), HasSubstr("stored generation is 3"));
  EXPECT_EQ(store->GetDeployment("a")->manifest_json, R"({"v":1})");
  EXPECT_EQ(store->GetDeployment("a")->updated, 100);
  // Equal: idempotent re-apply.
  ASSERT_TRUE(store->PutDeployment("a", R"({"v":1})", 3, 150).ok());
  // Newer: overwrites, keeps created.
  ASSERT_TRUE(store->PutDeployment("a", R"({"v":2})", 4, 300).ok());
  absl::StatusOr<Document> doc = store->GetDeployment("a");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc->manifest_json, R"({"v":2})");
  EXPECT_EQ(doc->generation, 4);
  EXPECT_EQ(doc->created, 100);
  EXPECT_EQ(doc->updated, 300);
  // Tenants share the contract but not the namespace.
  EXPECT_TRUE(store->PutTenant("a", "{}", 1, 5).ok());
  EXPECT_EQ(store->PutTenant("a", "{}", 0, 6).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->GetDeployment("a")->generation, 4);
}

TEST(StoreTest, PutValidatesInput) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->PutDeployment("", "{}", 1, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->PutDeployment("a", "{not json", 1, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->PutDeployment("a", "{}", -1, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->GetDeployment("a").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(StoreTest, ListAndDelete) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  for (const char* name : {"b", "c", "a"}) {
    ASSERT_TRUE(store->PutDeployment(name, "{}", 1, 0).ok());
    ASSERT_TRUE(store->PutTenant(name, "{}", 1, 0).ok());
  }
  EXPECT_THAT(Names(*store->ListDeployments()), ElementsAre("a", "b", "c"));
  ASSERT_TRUE(store->DeleteDeployment("b").ok());
  EXPECT_THAT(Names(*store->ListDeployments()), ElementsAre("a", "c"));
  EXPECT_EQ(store->DeleteDeployment("b").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->GetDeployment("b").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->DeleteTenant("c").ok());
  EXPECT_THAT(Names(*store->ListTenants()), ElementsAre("a", "b"));
  EXPECT_EQ(store->DeleteTenant("zz").code(), absl::StatusCode::kNotFound);
  // A deleted name starts over.
  ASSERT_TRUE(store->PutDeployment("b", "{}", 0, 9).ok());
  EXPECT_EQ(store->GetDeployment("b")->created, 9);
}

TEST(StoreTest, ApiKeyAuthenticates) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutTenant("acme", "{}", 1, 0).ok());
  absl::StatusOr<NewApiKey> key = store->CreateApiKey("acme", "ci", 42);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->secret.size(), 43u);
  EXPECT_EQ(key->secret.substr(0, 3), "gs-");
  EXPECT_EQ(key->secret.substr(3, 8), key->key_id);

  absl::StatusOr<KeyInfo> info = store->AuthenticateKey(key->secret);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->key_id, key->key_id);
  EXPECT_EQ(info->tenant, "acme");
  EXPECT_EQ(info->name, "ci");
  EXPECT_FALSE(info->admin);
  EXPECT_EQ(info->created, 42);
  EXPECT_FALSE(info->revoked.has_value());
}

TEST(StoreTest, ApiKeyRejections) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutTenant("acme", "{}", 1, 0).ok());
  absl::StatusOr<NewApiKey> key = store->CreateApiKey("acme", "ci", 0);
  ASSERT_TRUE(key.ok());
  const std::string& s = key->secret;

  std::string wrong_secret = s;  // right key id, wrong secret part
  wrong_secret.back() = wrong_secret.back() == 'A' ? 'B' : 'A';
  std::string wrong_prefix = s;  // unknown key id
  wrong_prefix[3] = wrong_prefix[3] == 'A' ? 'B' : 'A';
  std::string bad_char = s;
  bad_char[20] = '!';
  for (const std::string& attempt :
       {wrong_secret, wrong_prefix, bad_char, s.substr(0, 42), s + "x",
        std::string("gs-"), std::string(""), "xx" + s.substr(2)}) {
    absl::StatusOr<KeyInfo> info = store->AuthenticateKey(attempt);
    ASSERT_FALSE(info.ok()) << attempt;
    EXPECT_EQ(info.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(info.status().message(), Not(HasSubstr(s.substr(11))));
    if (attempt.size() > 11) {
      EXPECT_THAT(info.status().message(), Not(HasSubstr(attempt.substr(11))));
    }
  }

  ASSERT_TRUE(store->RevokeApiKey(key->key_id, 77).ok());
  absl::StatusOr<KeyInfo> revoked = store->AuthenticateKey(s);
  EXPECT_EQ(revoked.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(revoked.status().message(), HasSubstr("revoked"));
  EXPECT_THAT(revoked.status().message(), Not(HasSubstr(s.substr(11))));
  // Revoking again keeps the first time; unknown ids are NotFound.
  ASSERT_TRUE(store->RevokeApiKey(key->key_id, 99).ok());
  EXPECT_EQ(*(*store->ListApiKeys("acme"))[0].revoked, 77);
  EXPECT_EQ(store->RevokeApiKey("nosuchid", 1).code(),
            absl::StatusCode::kNotFound);
}

TEST(StoreTest, ApiKeyNeedsExistingTenant) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->CreateApiKey("ghost", "x", 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->CreateApiKey("", "x", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store->CreateApiKey("", "root", 0, /*admin=*/true).ok());
}

TEST(StoreTest, ListApiKeysAndTenantDeleteCascades) {
  auto store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutTenant("a", "{}", 1, 0).ok());
  ASSERT_TRUE(store->PutTenant("b", "{}", 1, 0).ok());
  absl::StatusOr<NewApiKey> a1 = store->CreateApiKey("a", "one", 1);
  absl::StatusOr<NewApiKey> a2 = store->CreateApiKey("a", "two", 2);
  absl::StatusOr<NewApiKey> b1 = store->CreateApiKey("b", "one", 3);
  ASSERT_TRUE(a1.ok() && a2.ok() && b1.ok());
  EXPECT_EQ(store->ListApiKeys("a")->size(), 2u);
  EXPECT_EQ(store->ListApiKeys("b")->size(), 1u);
  EXPECT_EQ(store->ListApiKeys("")->size(), 3u);

  ASSERT_TRUE(store->DeleteTenant("a").ok());
  EXPECT_TRUE(store->ListApiKeys("a")->empty());
  EXPECT_EQ(store->AuthenticateKey(a1->secret).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(store->AuthenticateKey(b1->secret).ok());
}

TEST(StoreTest, SecretNeverStoredAndSaltsDiffer) {
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

TEST(StoreTest, EnsureAdminKeyIsIdempotent) {
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

EventFilter Filter(void (*set)(EventFilter&)) {
  EventFilter f;
  set(f);
  return f;
}

class EventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenOrDie(":memory:");
    ASSERT_NE(store_, nullptr);
    // id: time kind deployment tenant
    Append(10, "deployment.applied", "llama", "acme");   // 1
    Append(20, "replica.started", "llama", "");          // 2
    Append(30, "replica.failed", "qwen", "");            // 3
    Append(40, "tenant.applied", "", "acme");            // 4
    Append(50, "deployment.applied", "qwen", "globex");  // 5
  }
  void Append(Micros t, std::string kind, std::string dep, std::string ten) {
    Event e;
    e.time = t;
    e.kind = std::move(kind);
    e.deployment = std::move(dep);
    e.tenant = std::move(ten);
    e.message = "m";
    e.details = {{"t", t}};
    absl::StatusOr<int64_t> id = store_->AppendEvent(e);
    ASSERT_TRUE(id.ok()) << id.status();
  }
  std::vector<int64_t> Query(const EventFilter& f) {
    absl::StatusOr<std::vector<Event>> events = store_->QueryEvents(f);
    EXPECT_TRUE(events.ok()) << events.status();
    return events.ok() ? Ids(*events) : std::vector<int64_t>{};
  }
  std::unique_ptr<Store> store_;
};

TEST_F(EventsTest, RoundTrip) {
  absl::StatusOr<std::vector<Event>> events =
      store_->QueryEvents(Filter([](EventFilter& f) {
        f.limit = 1;
        f.oldest_first = true;
      }));
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  const Event& e = (*events)[0];
  EXPECT_EQ(e.id, 1);
  EXPECT_EQ(e.time, 10);
  EXPECT_EQ(e.kind, "deployment.applied");
  EXPECT_EQ(e.deployment, "llama");
  EXPECT_EQ(e.tenant, "acme");
  EXPECT_EQ(e.message, "m");
  EXPECT_EQ(e.details, nlohmann::json({{"t", 10}}));
  EXPECT_EQ(store_->AppendEvent(MakeEvent(1, "")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(EventsTest, Filters) {
  struct Case {
    const char* name;
    EventFilter filter;
    std::vector<int64_t> want;
  };
  const Case cases[] = {
      {"all newest first", {}, {5, 4, 3, 2, 1}},
      {"oldest first",
       Filter([](EventFilter& f) { f.oldest_first = true; }),
       {1, 2, 3, 4, 5}},
      {"one kind",
       Filter([](EventFilter& f) { f.kinds = {"deployment.applied"}; }),
       {5, 1}},
      {"two kinds",
       Filter([](EventFilter& f) {
         f.kinds = {"replica.started", "replica.failed"};
       }),
       {3, 2}},
      {"deployment",
       Filter([](EventFilter& f) { f.deployment = "llama"; }),
       {2, 1}},
      {"tenant", Filter([](EventFilter& f) { f.tenant = "acme"; }), {4, 1}},
      {"deployment and kind",
       Filter([](EventFilter& f) {
         f.kinds = {"deployment.applied"};
         f.deployment = "qwen";
       }),
       {5}},
      {"since inclusive, until exclusive",
       Filter([](EventFilter& f) {
         f.since = 20;
         f.until = 40;
       }),
       {3, 2}},
      {"limit", Filter([](EventFilter& f) { f.limit = 2; }), {5, 4}},
      {"limit oldest first",
       Filter([](EventFilter& f) {
         f.limit = 2;
         f.oldest_first = true;
       }),
       {1, 2}},
      {"no limit",
       Filter([](EventFilter& f) { f.limit = 0; }),
       {5, 4, 3, 2, 1}},
      {"cursor newest first",
       Filter([](EventFilter& f) {
         f.limit = 2;
         f.after_id = 4;
       }),
       {3, 2}},
      {"cursor oldest first",
       Filter([](EventFilter& f) {
         f.limit = 2;
         f.after_id = 2;
         f.oldest_first = true;
       }),
       {3, 4}},
      {"nothing matches",
       Filter([](EventFilter& f) { f.tenant = "nobody"; }),
       {}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Query(c.filter), c.want) << c.name;
  }
}

TEST_F(EventsTest, PruneByAgeAndCount) {
  absl::StatusOr<int64_t> deleted =
      store_->PruneEvents(/*max_rows=*/-1, /*older_than=*/30);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 2);
  EXPECT_EQ(Query({}), (std::vector<int64_t>{5, 4, 3}));

  deleted = store_->PruneEvents(/*max_rows=*/10, 0);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 0);

  deleted =
      store_->PruneEvents(/*max_rows=*/1, std::numeric_limits<Micros>::min());
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 2);
  EXPECT_EQ(Query({}), (std::vector<int64_t>{5}));

  // Ids are never reused, even after the log was emptied.
  deleted = store_->PruneEvents(0, std::numeric_limits<Micros>::min());
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 1);
  EXPECT_EQ(*store_->AppendEvent(MakeEvent(60, "k")), 6);
}

}  // namespace
}  // namespace gpusched::store
