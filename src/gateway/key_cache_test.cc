#include "gateway/key_cache.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "store/sqlite_store.h"

namespace gpusched::gateway {
namespace {

class KeyCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = store::SqliteStore::Open(":memory:");
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = *std::move(opened);
    ASSERT_TRUE(store_->PutTenant("alice", R"({"name":"alice"})", 1, 1).ok());
    ASSERT_TRUE(store_->PutTenant("bob", R"({"name":"bob"})", 1, 1).ok());
  }
  std::string NewKey(const std::string& tenant) {
    auto k = store_->CreateApiKey(tenant, "test", 2);
    EXPECT_TRUE(k.ok()) << k.status();
    key_ids_[k->secret] = k->key_id;
    return k->secret;
  }
  std::unique_ptr<store::Store> store_;
  std::map<std::string, std::string> key_ids_;
};

TEST_F(KeyCacheTest, AnswersFromMemoryAfterTheFirstCheck) {
  KeyCache cache(store_.get());
  const std::string a = NewKey("alice");
  auto info = cache.Authenticate(a);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tenant, "alice");
  EXPECT_EQ(cache.size(), 1u);
  info = cache.Authenticate(a);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->tenant, "alice");
  EXPECT_EQ(cache.size(), 1u);
}

TEST_F(KeyCacheTest, FailuresAreNotCached) {
  KeyCache cache(store_.get());
  EXPECT_EQ(cache.Authenticate("gs-not-a-key").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(cache.size(), 0u);
}

TEST_F(KeyCacheTest, ARevokedKeyStopsAtOnce) {
  KeyCache cache(store_.get());
  const std::string a = NewKey("alice");
  const std::string b = NewKey("bob");
  ASSERT_TRUE(cache.Authenticate(a).ok());
  ASSERT_TRUE(cache.Authenticate(b).ok());
  ASSERT_TRUE(store_->RevokeApiKey(key_ids_[a], 3).ok());
  EXPECT_EQ(cache.Authenticate(a).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(cache.Authenticate(b).ok());  // others keep working
}

TEST_F(KeyCacheTest, ADeletedTenantsKeysStopAtOnce) {
  KeyCache cache(store_.get());
  const std::string a = NewKey("alice");
  ASSERT_TRUE(cache.Authenticate(a).ok());
  ASSERT_TRUE(store_->DeleteTenant("alice").ok());
  EXPECT_FALSE(cache.Authenticate(a).ok());
}

TEST_F(KeyCacheTest, BoundedByItsCapacity) {
  KeyCache cache(store_.get(), /*capacity=*/2);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(cache.Authenticate(NewKey("alice")).ok());
    EXPECT_LE(cache.size(), 2u);
  }
}

}  // namespace
}  // namespace gpusched::gateway
