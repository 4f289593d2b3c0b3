// The Store contract (store.h), run against every implementation: the
// SQLite store on a file, and the etcd store on a real etcd server the test
// starts (etcd_testing.h; skipped where etcd is not installed). A store
// whose instances share state (etcd) also runs the tests of what one
// instance sees of another's writes.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/api_keys.h"
#include "store/etcd_testing.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpusched::store {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Opens instances of one store: every Open() of one factory reaches the
// same data (a shared store's instances, or the same SQLite file).
class StoreFactory {
 public:
  virtual ~StoreFactory() = default;
  // Empty when the store cannot run here (the reason, for GTEST_SKIP).
  virtual std::string Unavailable() { return ""; }
  virtual std::unique_ptr<Store> Open() = 0;
};

class SqliteFactory : public StoreFactory {
 public:
  SqliteFactory() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = absl::StrCat("gpusched_conformance_", getpid(), "_",
                                    info->test_suite_name(), "_", info->name());
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = fs::path(::testing::TempDir()) / name;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~SqliteFactory() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::unique_ptr<Store> Open() override {
    auto s = SqliteStore::Open((dir_ / "state.db").string());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

 private:
  fs::path dir_;
};

class EtcdFactory : public StoreFactory {
 public:
  EtcdFactory() : prefix_(EtcdTestServer::UniquePrefix()) {}
  std::string Unavailable() override {
    return EtcdTestServer::Shared()->Unavailable();
  }
  std::unique_ptr<Store> Open() override {
    if (const std::string& e = EtcdTestServer::Shared()->StartError();
        !e.empty()) {
      ADD_FAILURE() << e;
      return nullptr;
    }
    auto s = EtcdTestServer::Shared()->OpenStore(prefix_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

 private:
  std::string prefix_;
};

class StoreConformance : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "sqlite") {
      factory_ = std::make_unique<SqliteFactory>();
    } else {
      factory_ = std::make_unique<EtcdFactory>();
    }
    if (std::string why = factory_->Unavailable(); !why.empty()) {
      GTEST_SKIP() << "skipped: " << why;
    }
    store_ = factory_->Open();
    ASSERT_NE(store_, nullptr);
  }

  std::unique_ptr<StoreFactory> factory_;
  std::unique_ptr<Store> store_;
};

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
  e.message = "m";
  e.details = {{"t", time}};
  return e;
}

TEST_P(StoreConformance, StartsEmpty) {
  EXPECT_TRUE(store_->ListDeployments()->empty());
  EXPECT_TRUE(store_->ListTenants()->empty());
  EXPECT_TRUE(store_->ListRoutes()->empty());
  EXPECT_TRUE(store_->ListApiKeys("")->empty());
  EXPECT_TRUE(store_->QueryEvents({})->empty());
  EXPECT_TRUE(store_->ListDesiredReplicas()->empty());
  EXPECT_TRUE(store_->Health().reachable);
  EXPECT_EQ(store_->Health().kind, store_->kind());
}

TEST_P(StoreConformance, GenerationsAreOptimisticConcurrency) {
  ASSERT_TRUE(store_->PutDeployment("a", R"({"v":1})", 3, 100).ok());
  // Stale: fails and changes nothing.
  absl::Status stale = store_->PutDeployment("a", R"({"v":0})", 2, 200);
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.message(), HasSubstr("stored generation is 3"));
  EXPECT_EQ(store_->GetDeployment("a")->manifest_json, R"({"v":1})");
  EXPECT_EQ(store_->GetDeployment("a")->updated, 100);
  // Equal with the same manifest: an idempotent re-apply.
  ASSERT_TRUE(store_->PutDeployment("a", R"({"v":1})", 3, 150).ok());
  EXPECT_EQ(store_->GetDeployment("a")->updated, 150);
  // Equal with another manifest: someone else wrote that generation.
  absl::Status raced = store_->PutDeployment("a", R"({"v":9})", 3, 160);
  EXPECT_EQ(raced.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(raced.message(), HasSubstr("another manifest"));
  EXPECT_EQ(store_->GetDeployment("a")->manifest_json, R"({"v":1})");
  // Newer: overwrites, keeps created.
  ASSERT_TRUE(store_->PutDeployment("a", R"({"v":2})", 4, 300).ok());
  absl::StatusOr<Document> doc = store_->GetDeployment("a");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc->manifest_json, R"({"v":2})");
  EXPECT_EQ(doc->generation, 4);
  EXPECT_EQ(doc->created, 100);
  EXPECT_EQ(doc->updated, 300);
  // Tenants share the contract but not the namespace.
  EXPECT_TRUE(store_->PutTenant("a", "{}", 1, 5).ok());
  EXPECT_EQ(store_->PutTenant("a", "{}", 0, 6).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->GetDeployment("a")->generation, 4);
}

TEST_P(StoreConformance, PutValidatesInput) {
  EXPECT_EQ(store_->PutDeployment("", "{}", 1, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->PutDeployment("a", "{not json", 1, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->PutDeployment("a", "{}", -1, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetDeployment("a").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreConformance, ListAndDelete) {
  for (const char* name : {"b", "c", "a"}) {
    ASSERT_TRUE(store_->PutDeployment(name, "{}", 1, 0).ok());
    ASSERT_TRUE(store_->PutTenant(name, "{}", 1, 0).ok());
  }
  EXPECT_THAT(Names(*store_->ListDeployments()), ElementsAre("a", "b", "c"));
  ASSERT_TRUE(store_->DeleteDeployment("b").ok());
  EXPECT_THAT(Names(*store_->ListDeployments()), ElementsAre("a", "c"));
  EXPECT_EQ(store_->DeleteDeployment("b").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetDeployment("b").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(store_->DeleteTenant("c").ok());
  EXPECT_THAT(Names(*store_->ListTenants()), ElementsAre("a", "b"));
  EXPECT_EQ(store_->DeleteTenant("zz").code(), absl::StatusCode::kNotFound);
  // A deleted name starts over.
  ASSERT_TRUE(store_->PutDeployment("b", "{}", 0, 9).ok());
  EXPECT_EQ(store_->GetDeployment("b")->created, 9);
}

TEST_P(StoreConformance, RoutesAndTheirState) {
  EXPECT_FALSE(store_->PutRouteState("r", "{}", 1).ok());  // no such route
  ASSERT_TRUE(store_->PutRoute("r", R"({"kind":"ModelRoute"})", 1, 5).ok());
  EXPECT_EQ(store_->GetRouteState("r").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(store_->PutRouteState("r", R"({"step":1})", 6).ok());
  ASSERT_TRUE(store_->PutRouteState("r", R"({"step":2})", 7).ok());
  EXPECT_EQ(*store_->GetRouteState("r"), R"({"step":2})");
  EXPECT_EQ(store_->PutRouteState("r", "{", 8).code(),
            absl::StatusCode::kInvalidArgument);
  auto routes = store_->ListRoutes();
  ASSERT_TRUE(routes.ok());
  ASSERT_EQ(routes->size(), 1u);
  EXPECT_EQ((*routes)[0].generation, 1);
  ASSERT_TRUE(store_->DeleteRoute("r").ok());
  EXPECT_EQ(store_->GetRouteState("r").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->DeleteRoute("r").code(), absl::StatusCode::kNotFound);
  // A route created again under the name has no state of the old one.
  ASSERT_TRUE(store_->PutRoute("r", "{}", 1, 9).ok());
  EXPECT_EQ(store_->GetRouteState("r").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreConformance, DesiredCountsGoWithTheirDeployment) {
  EXPECT_FALSE(store_->PutDesiredReplicas("chat", 2, 1).ok());  // not stored
  ASSERT_TRUE(store_->PutDeployment("chat", "{}", 1, 0).ok());
  ASSERT_TRUE(store_->PutDeployment("embed", "{}", 1, 0).ok());
  ASSERT_TRUE(store_->PutDesiredReplicas("chat", 2, 1).ok());
  ASSERT_TRUE(store_->PutDesiredReplicas("chat", 5, 2).ok());
  ASSERT_TRUE(store_->PutDesiredReplicas("embed", 0, 3).ok());
  EXPECT_EQ(store_->PutDesiredReplicas("embed", -1, 3).code(),
            absl::StatusCode::kInvalidArgument);
  auto counts = store_->ListDesiredReplicas();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, (std::map<std::string, int>{{"chat", 5}, {"embed", 0}}));
  ASSERT_TRUE(store_->DeleteDeployment("chat").ok());
  EXPECT_EQ(*store_->ListDesiredReplicas(),
            (std::map<std::string, int>{{"embed", 0}}));
  // Applied again, it starts from its manifest, not the old count.
  ASSERT_TRUE(store_->PutDeployment("chat", "{}", 1, 4).ok());
  EXPECT_FALSE(store_->ListDesiredReplicas()->contains("chat"));
}

TEST_P(StoreConformance, StatusDocuments) {
  ASSERT_TRUE(store_->PutStatus("deployments/chat", R"({"ready":1})").ok());
  ASSERT_TRUE(store_->PutStatus("deployments/embed", R"({"ready":2})").ok());
  ASSERT_TRUE(store_->PutStatus("cluster/gpus", "[]").ok());
  ASSERT_TRUE(store_->PutStatus("deployments/chat", R"({"ready":3})").ok());
  auto deployments = store_->ListStatus("deployments/");
  ASSERT_TRUE(deployments.ok());
  EXPECT_EQ(*deployments, (std::map<std::string, std::string>{
                              {"deployments/chat", R"({"ready":3})"},
                              {"deployments/embed", R"({"ready":2})"}}));
  ASSERT_TRUE(store_->DeleteStatus("deployments/chat").ok());
  EXPECT_EQ(store_->DeleteStatus("deployments/chat").code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->ListStatus("")->size(), 2u);
  EXPECT_EQ(store_->PutStatus("", "{}").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreConformance, RevisionGrowsAndTheCallbackRuns) {
  // A second instance, so that the first's callback stays unset.
  std::unique_ptr<Store> s = factory_->Open();
  ASSERT_NE(s, nullptr);
  std::atomic<int> calls{0};
  s->SetChangeCallback([&calls] { calls.fetch_add(1); });
  const int64_t before = s->revision();
  ASSERT_TRUE(s->PutTenant("acme", "{}", 1, 0).ok());
  EXPECT_GT(s->revision(), before);
  EXPECT_GE(calls.load(), 1);
  const int64_t after_put = s->revision();
  const int64_t desired = s->desired_revision();
  ASSERT_TRUE(s->AppendEvent(MakeEvent(1, "k")).ok());
  EXPECT_GT(s->revision(), after_put);
  // An event is no change of the desired state; a deployment is.
  EXPECT_EQ(s->desired_revision(), desired);
  ASSERT_TRUE(s->PutDeployment("chat", "{}", 1, 0).ok());
  EXPECT_GT(s->desired_revision(), desired);
  s->SetChangeCallback(nullptr);
}

TEST_P(StoreConformance, ApiKeyAuthenticates) {
  ASSERT_TRUE(store_->PutTenant("acme", "{}", 1, 0).ok());
  absl::StatusOr<NewApiKey> key = store_->CreateApiKey("acme", "ci", 42);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->secret.size(), 43u);
  EXPECT_EQ(key->secret.substr(0, 3), "gs-");
  EXPECT_EQ(key->secret.substr(3, 8), key->key_id);

  absl::StatusOr<KeyInfo> info = store_->AuthenticateKey(key->secret);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->key_id, key->key_id);
  EXPECT_EQ(info->tenant, "acme");
  EXPECT_EQ(info->name, "ci");
  EXPECT_FALSE(info->admin);
  EXPECT_EQ(info->created, 42);
  EXPECT_FALSE(info->revoked.has_value());
}

TEST_P(StoreConformance, ApiKeyRejections) {
  ASSERT_TRUE(store_->PutTenant("acme", "{}", 1, 0).ok());
  absl::StatusOr<NewApiKey> key = store_->CreateApiKey("acme", "ci", 0);
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
    absl::StatusOr<KeyInfo> info = store_->AuthenticateKey(attempt);
    ASSERT_FALSE(info.ok()) << attempt;
    EXPECT_EQ(info.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(info.status().message(), Not(HasSubstr(s.substr(11))));
    if (attempt.size() > 11) {
      EXPECT_THAT(info.status().message(), Not(HasSubstr(attempt.substr(11))));
    }
  }

  const int64_t keys_before = store_->keys_version();
  ASSERT_TRUE(store_->RevokeApiKey(key->key_id, 77).ok());
  EXPECT_GT(store_->keys_version(), keys_before);
  absl::StatusOr<KeyInfo> revoked = store_->AuthenticateKey(s);
  EXPECT_EQ(revoked.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(revoked.status().message(), HasSubstr("revoked"));
  EXPECT_THAT(revoked.status().message(), Not(HasSubstr(s.substr(11))));
  // Revoking again keeps the first time; unknown ids are NotFound.
  ASSERT_TRUE(store_->RevokeApiKey(key->key_id, 99).ok());
  EXPECT_EQ(*(*store_->ListApiKeys("acme"))[0].revoked, 77);
  EXPECT_EQ(store_->RevokeApiKey("nosuchid", 1).code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreConformance, ApiKeyNeedsExistingTenant) {
  EXPECT_EQ(store_->CreateApiKey("ghost", "x", 0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->CreateApiKey("", "x", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->CreateApiKey("", "root", 0, /*admin=*/true).ok());
}

TEST_P(StoreConformance, ListApiKeysAndTenantDeleteTakesItsKeys) {
  ASSERT_TRUE(store_->PutTenant("a", "{}", 1, 0).ok());
  ASSERT_TRUE(store_->PutTenant("b", "{}", 1, 0).ok());
  absl::StatusOr<NewApiKey> a1 = store_->CreateApiKey("a", "one", 1);
  absl::StatusOr<NewApiKey> a2 = store_->CreateApiKey("a", "two", 2);
  absl::StatusOr<NewApiKey> b1 = store_->CreateApiKey("b", "one", 3);
  ASSERT_TRUE(a1.ok() && a2.ok() && b1.ok());
  EXPECT_EQ(store_->ListApiKeys("a")->size(), 2u);
  EXPECT_EQ(store_->ListApiKeys("b")->size(), 1u);
  EXPECT_EQ(store_->ListApiKeys("")->size(), 3u);
  auto all = store_->ListApiKeys("");
  EXPECT_TRUE(std::is_sorted(
      all->begin(), all->end(),
      [](const KeyInfo& x, const KeyInfo& y) { return x.key_id < y.key_id; }));

  const int64_t keys_before = store_->keys_version();
  ASSERT_TRUE(store_->DeleteTenant("a").ok());
  EXPECT_GT(store_->keys_version(), keys_before);
  EXPECT_TRUE(store_->ListApiKeys("a")->empty());
  EXPECT_EQ(store_->AuthenticateKey(a1->secret).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(store_->AuthenticateKey(b1->secret).ok());
  // A tenant of the same name made again does not get the old keys back.
  ASSERT_TRUE(store_->PutTenant("a", "{}", 1, 4).ok());
  EXPECT_FALSE(store_->AuthenticateKey(a2->secret).ok());
}

TEST_P(StoreConformance, EnsureKeyIsIdempotent) {
  absl::StatusOr<std::string> secret = GenerateApiKeySecret();
  ASSERT_TRUE(secret.ok());
  absl::StatusOr<KeyInfo> first = store_->EnsureAdminKey(*secret, 10);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->admin);
  EXPECT_TRUE(first->tenant.empty());
  absl::StatusOr<KeyInfo> again = store_->EnsureAdminKey(*secret, 20);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->key_id, first->key_id);
  EXPECT_EQ(again->created, 10);
  EXPECT_EQ(store_->ListApiKeys("")->size(), 1u);
  EXPECT_TRUE(store_->AuthenticateKey(*secret)->admin);

  // Same key id, another secret: refused without echoing either secret.
  std::string other = *secret;
  other.back() = other.back() == 'A' ? 'B' : 'A';
  absl::StatusOr<KeyInfo> clash = store_->EnsureAdminKey(other, 40);
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(clash.status().message(), Not(HasSubstr(other.substr(11))));
  // Registered as an admin key, it is not a tenant's.
  ASSERT_TRUE(store_->PutTenant("acme", "{}", 1, 0).ok());
  EXPECT_EQ(store_->EnsureKey(*secret, "acme", "x", false, 41).status().code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<KeyInfo> malformed = store_->EnsureAdminKey("hunter2", 40);
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(malformed.status().message(), Not(HasSubstr("hunter2")));

  ASSERT_TRUE(store_->RevokeApiKey(first->key_id, 50).ok());
  EXPECT_EQ(store_->EnsureAdminKey(*secret, 60).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// --- Audit log
// ----------------------------------------------------------------

AuditRecord MakeAudit(Micros time, std::string who, std::string verb,
                      std::string resource) {
  AuditRecord r;
  r.time = time;
  r.who = std::move(who);
  r.role = "cluster-admin";
  r.verb = std::move(verb);
  r.resource = std::move(resource);
  r.peer = "127.0.0.1:1234";
  r.outcome = "ok";
  r.status = 200;
  r.diff = {{"after", {{"replicas", time}}}};
  return r;
}

// Every record the store holds, oldest first, and whether they chain.
absl::Status VerifyStore(Store* s) {
  AuditFilter all;
  all.limit = 0;
  all.oldest_first = true;
  absl::StatusOr<std::vector<AuditRecord>> records = s->QueryAudit(all);
  if (!records.ok()) return records.status();
  absl::StatusOr<AuditEnds> ends = s->GetAuditEnds();
  if (!ends.ok()) return ends.status();
  return VerifyAuditChain(*ends, *records);
}

TEST_P(StoreConformance, AuditAppendsAChainAndQueries) {
  EXPECT_TRUE(store_->QueryAudit({})->empty());
  EXPECT_TRUE(VerifyStore(store_.get()).ok());
  auto a = store_->AppendAudit(
      MakeAudit(10, "key:aaaaaaaa", "apply", "deployment/chat"));
  auto b = store_->AppendAudit(
      MakeAudit(20, "token:alice", "scale", "deployment/chat"));
  auto c = store_->AppendAudit(
      MakeAudit(30, "key:aaaaaaaa", "delete", "tenant/acme"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status() << b.status();
  EXPECT_EQ(a->seq, 1);
  EXPECT_EQ(b->seq, 2);
  EXPECT_EQ(c->seq, 3);
  EXPECT_EQ(a->prev_hash, "");
  EXPECT_EQ(b->prev_hash, a->hash);
  EXPECT_EQ(c->prev_hash, b->hash);
  EXPECT_EQ(c->hash, AuditHash(*c));
  EXPECT_EQ(store_->GetAuditEnds()->head_seq, 3);
  EXPECT_EQ(store_->GetAuditEnds()->head_hash, c->hash);
  EXPECT_TRUE(VerifyStore(store_.get()).ok());
  EXPECT_EQ(
      store_->AppendAudit(MakeAudit(1, "", "apply", "x/y")).status().code(),
      absl::StatusCode::kInvalidArgument);

  auto seqs = [&](const AuditFilter& f) {
    std::vector<int64_t> out;
    const absl::StatusOr<std::vector<AuditRecord>> records =
        store_->QueryAudit(f);
    for (const AuditRecord& r : *records) out.push_back(r.seq);
    return out;
  };
  EXPECT_THAT(seqs({}), ElementsAre(3, 2, 1));
  AuditFilter f;
  f.who = "aaaaaaaa";  // a key id matches its subject
  EXPECT_THAT(seqs(f), ElementsAre(3, 1));
  f = {};
  f.resource = "deployment";
  f.oldest_first = true;
  EXPECT_THAT(seqs(f), ElementsAre(1, 2));
  f = {};
  f.since = 20;
  f.verb = "scale";
  EXPECT_THAT(seqs(f), ElementsAre(2));
  f = {};
  f.limit = 1;
  EXPECT_THAT(seqs(f), ElementsAre(3));
  const AuditRecord back = store_->QueryAudit({})->back();
  EXPECT_EQ(back.who, "key:aaaaaaaa");
  EXPECT_EQ(back.peer, "127.0.0.1:1234");
  EXPECT_EQ(back.diff, a->diff);
}

TEST_P(StoreConformance, AuditSurvivesAReopen) {
  ASSERT_TRUE(store_->AppendAudit(MakeAudit(1, "key:a", "apply", "x/y")).ok());
  store_.reset();
  store_ = factory_->Open();
  ASSERT_NE(store_, nullptr);
  auto r = store_->AppendAudit(MakeAudit(2, "key:a", "apply", "x/y"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->seq, 2);
  EXPECT_TRUE(VerifyStore(store_.get()).ok());
}

TEST_P(StoreConformance, AuditRetentionMovesTheAnchor) {
  for (int i = 1; i <= 6; ++i) {
    ASSERT_TRUE(
        store_->AppendAudit(MakeAudit(i * 10, "key:a", "apply", "x/y")).ok());
  }
  // By age: records at 10 and 20 go.
  EXPECT_EQ(*store_->PruneAudit(-1, 25), 2);
  EXPECT_EQ(store_->GetAuditEnds()->anchor_seq, 2);
  EXPECT_TRUE(VerifyStore(store_.get()).ok());
  // By count: the newest 3 stay.
  EXPECT_EQ(*store_->PruneAudit(3, std::numeric_limits<Micros>::min()), 1);
  EXPECT_EQ(store_->GetAuditEnds()->anchor_seq, 3);
  EXPECT_EQ(store_->QueryAudit({})->size(), 3u);
  EXPECT_TRUE(VerifyStore(store_.get()).ok());
  EXPECT_EQ(*store_->PruneAudit(3, std::numeric_limits<Micros>::min()), 0);
  // The chain goes on from the head.
  EXPECT_EQ(store_->AppendAudit(MakeAudit(70, "key:a", "apply", "x/y"))->seq,
            7);
  EXPECT_TRUE(VerifyStore(store_.get()).ok());
}

TEST_P(StoreConformance, RolesAndBindingsAreDocuments) {
  ASSERT_TRUE(store_->Put(DocKind::kRole, "deployer", "{}", 1, 5).ok());
  ASSERT_TRUE(store_->Put(DocKind::kRoleBinding, "leads", "{}", 1, 5).ok());
  EXPECT_THAT(Names(*store_->List(DocKind::kRole)), ElementsAre("deployer"));
  EXPECT_THAT(Names(*store_->List(DocKind::kRoleBinding)),
              ElementsAre("leads"));
  EXPECT_TRUE(store_->ListDeployments()->empty());
  ASSERT_TRUE(store_->Delete(DocKind::kRole, "deployer").ok());
  EXPECT_EQ(store_->Get(DocKind::kRole, "deployer").status().code(),
            absl::StatusCode::kNotFound);
}

EventFilter Filter(void (*set)(EventFilter&)) {
  EventFilter f;
  set(f);
  return f;
}

class EventsConformance : public StoreConformance {
 protected:
  void SetUp() override {
    StoreConformance::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // index: time kind deployment tenant
    Append(10, "deployment.applied", "llama", "acme");   // 0
    Append(20, "replica.started", "llama", "");          // 1
    Append(30, "replica.failed", "qwen", "");            // 2
    Append(40, "tenant.applied", "", "acme");            // 3
    Append(50, "deployment.applied", "qwen", "globex");  // 4
  }
  void Append(Micros t, std::string kind, std::string dep, std::string ten) {
    absl::StatusOr<int64_t> id = store_->AppendEvent(
        MakeEvent(t, std::move(kind), std::move(dep), std::move(ten)));
    ASSERT_TRUE(id.ok()) << id.status();
    if (!ids_.empty()) {
      EXPECT_GT(*id, ids_.back());
    }
    ids_.push_back(*id);
  }
  // The indexes (in append order) of the events a query returns.
  std::vector<int> Query(const EventFilter& f) {
    absl::StatusOr<std::vector<Event>> events = store_->QueryEvents(f);
    EXPECT_TRUE(events.ok()) << events.status();
    std::vector<int> out;
    for (const Event& e : events.ok() ? *events : std::vector<Event>{}) {
      auto it = std::find(ids_.begin(), ids_.end(), e.id);
      out.push_back(it == ids_.end() ? -1
                                     : static_cast<int>(it - ids_.begin()));
    }
    return out;
  }
  std::vector<int64_t> ids_;
};

TEST_P(EventsConformance, RoundTrip) {
  absl::StatusOr<std::vector<Event>> events =
      store_->QueryEvents(Filter([](EventFilter& f) {
        f.limit = 1;
        f.oldest_first = true;
      }));
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  const Event& e = (*events)[0];
  EXPECT_EQ(e.id, ids_[0]);
  EXPECT_EQ(e.time, 10);
  EXPECT_EQ(e.kind, "deployment.applied");
  EXPECT_EQ(e.deployment, "llama");
  EXPECT_EQ(e.tenant, "acme");
  EXPECT_EQ(e.message, "m");
  EXPECT_EQ(e.details, nlohmann::json({{"t", 10}}));
  EXPECT_EQ(store_->AppendEvent(MakeEvent(1, "")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(EventsConformance, Filters) {
  struct Case {
    const char* name;
    EventFilter filter;
    std::vector<int> want;
  };
  const std::vector<Case> cases = {
      {"all newest first", {}, {4, 3, 2, 1, 0}},
      {"oldest first",
       Filter([](EventFilter& f) { f.oldest_first = true; }),
       {0, 1, 2, 3, 4}},
      {"one kind",
       Filter([](EventFilter& f) { f.kinds = {"deployment.applied"}; }),
       {4, 0}},
      {"two kinds",
       Filter([](EventFilter& f) {
         f.kinds = {"replica.started", "replica.failed"};
       }),
       {2, 1}},
      {"deployment",
       Filter([](EventFilter& f) { f.deployment = "llama"; }),
       {1, 0}},
      {"tenant", Filter([](EventFilter& f) { f.tenant = "acme"; }), {3, 0}},
      {"deployment and kind",
       Filter([](EventFilter& f) {
         f.kinds = {"deployment.applied"};
         f.deployment = "qwen";
       }),
       {4}},
      {"since inclusive, until exclusive",
       Filter([](EventFilter& f) {
         f.since = 20;
         f.until = 40;
       }),
       {2, 1}},
      {"limit", Filter([](EventFilter& f) { f.limit = 2; }), {4, 3}},
      {"limit oldest first",
       Filter([](EventFilter& f) {
         f.limit = 2;
         f.oldest_first = true;
       }),
       {0, 1}},
      {"no limit",
       Filter([](EventFilter& f) { f.limit = 0; }),
       {4, 3, 2, 1, 0}},
      {"nothing matches",
       Filter([](EventFilter& f) { f.tenant = "nobody"; }),
       {}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Query(c.filter), c.want) << c.name;
  }
  // Cursors continue after an id, in either order.
  EventFilter newest;
  newest.limit = 2;
  newest.after_id = ids_[3];
  EXPECT_EQ(Query(newest), (std::vector<int>{2, 1}));
  EventFilter oldest;
  oldest.limit = 2;
  oldest.after_id = ids_[1];
  oldest.oldest_first = true;
  EXPECT_EQ(Query(oldest), (std::vector<int>{2, 3}));
}

TEST_P(EventsConformance, PruneByAgeAndCount) {
  absl::StatusOr<int64_t> deleted =
      store_->PruneEvents(/*max_rows=*/-1, /*older_than=*/30);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 2);
  EXPECT_EQ(Query({}), (std::vector<int>{4, 3, 2}));

  deleted = store_->PruneEvents(/*max_rows=*/10, 0);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 0);

  deleted =
      store_->PruneEvents(/*max_rows=*/1, std::numeric_limits<Micros>::min());
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 2);
  EXPECT_EQ(Query({}), (std::vector<int>{4}));

  // Ids are never reused, even after the log was emptied.
  deleted = store_->PruneEvents(0, std::numeric_limits<Micros>::min());
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, 1);
  absl::StatusOr<int64_t> next = store_->AppendEvent(MakeEvent(60, "k"));
  ASSERT_TRUE(next.ok());
  EXPECT_GT(*next, ids_.back());
}

// --- What one instance of a shared store sees of another's writes -----------

class SharedConformance : public StoreConformance {
 protected:
  void SetUp() override {
    StoreConformance::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!store_->shared()) GTEST_SKIP() << "skipped: a single-instance store";
    other_ = factory_->Open();
    ASSERT_NE(other_, nullptr);
  }
  // Waits (up to 10 s) until `done` holds: a watch delivers changes soon,
  // but not at once.
  template <typename Done>
  bool Eventually(Done done) {
    for (int i = 0; i < 1000; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  }
  std::unique_ptr<Store> other_;
};

TEST_P(SharedConformance, WritesOfOneAreReadOnTheOther) {
  std::atomic<int> calls{0};
  other_->SetChangeCallback([&calls] { calls.fetch_add(1); });
  const int64_t before = other_->revision();
  ASSERT_TRUE(store_->PutTenant("acme", R"({"q":1})", 1, 5).ok());
  ASSERT_TRUE(store_->PutDeployment("chat", "{}", 1, 5).ok());
  ASSERT_TRUE(store_->PutDesiredReplicas("chat", 4, 6).ok());
  ASSERT_TRUE(store_->PutStatus("deployments/chat", "{}").ok());
  absl::StatusOr<int64_t> event = store_->AppendEvent(MakeEvent(7, "k"));
  ASSERT_TRUE(event.ok());
  EXPECT_TRUE(Eventually([&] {
    auto events = other_->QueryEvents({});
    return events.ok() && !events->empty() && (*events)[0].id == *event;
  }));
  EXPECT_GT(other_->revision(), before);
  EXPECT_GE(calls.load(), 1);
  EXPECT_EQ(other_->GetTenant("acme")->manifest_json, R"({"q":1})");
  EXPECT_EQ(other_->ListDesiredReplicas()->at("chat"), 4);
  EXPECT_EQ(other_->ListStatus("deployments/")->size(), 1u);
  // The other's write of the next generation is refused here once seen.
  ASSERT_TRUE(other_->PutTenant("acme", R"({"q":2})", 2, 8).ok());
  EXPECT_EQ(store_->PutTenant("acme", R"({"q":3})", 2, 9).code(),
            absl::StatusCode::kFailedPrecondition);
  other_->SetChangeCallback(nullptr);
}

TEST_P(SharedConformance, AKeyRevokedOnOneIsRefusedOnTheOther) {
  ASSERT_TRUE(store_->PutTenant("acme", "{}", 1, 0).ok());
  absl::StatusOr<NewApiKey> key = store_->CreateApiKey("acme", "ci", 1);
  ASSERT_TRUE(key.ok());
  EXPECT_TRUE(
      Eventually([&] { return other_->AuthenticateKey(key->secret).ok(); }));
  const int64_t version = other_->keys_version();
  ASSERT_TRUE(store_->RevokeApiKey(key->key_id, 2).ok());
  EXPECT_TRUE(Eventually([&] { return other_->keys_version() > version; }));
  EXPECT_EQ(other_->AuthenticateKey(key->secret).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_P(SharedConformance, AuditAppendsOfTwoInstancesChainAsOne) {
  // Both instances append at once; every record gets its own seq and the
  // chain verifies on either.
  constexpr int kEach = 20;
  std::thread t([&] {
    for (int i = 0; i < kEach; ++i) {
      EXPECT_TRUE(
          other_->AppendAudit(MakeAudit(i, "key:other", "apply", "x/y")).ok());
    }
  });
  for (int i = 0; i < kEach; ++i) {
    EXPECT_TRUE(
        store_->AppendAudit(MakeAudit(i, "key:this", "apply", "x/y")).ok());
  }
  t.join();
  EXPECT_TRUE(Eventually([&] {
    return store_->GetAuditEnds()->head_seq == 2 * kEach &&
           other_->GetAuditEnds()->head_seq == 2 * kEach;
  }));
  EXPECT_TRUE(VerifyStore(store_.get()).ok()) << VerifyStore(store_.get());
  EXPECT_TRUE(VerifyStore(other_.get()).ok()) << VerifyStore(other_.get());
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreConformance,
                         ::testing::Values("sqlite", "etcd"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Stores, EventsConformance,
                         ::testing::Values("sqlite", "etcd"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Stores, SharedConformance,
                         ::testing::Values("sqlite", "etcd"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace gpusched::store
