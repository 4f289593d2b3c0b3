#include "auth/audit_log.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/sqlite_store.h"

namespace gpusched::auth {
namespace {

using nlohmann::json;

TEST(AuditLogTest, ManifestDiffHoldsOnlyWhatChanged) {
  const json before = {{"spec", {{"replicas", 1}, {"model", "m"}}},
                       {"metadata", {{"name", "chat"}}}};
  json after = before;
  after["spec"]["replicas"] = 3;
  after["spec"]["tenant"] = "a";
  EXPECT_EQ(ManifestDiff(before, after),
            json({{"before", {{"spec", {{"replicas", 1}}}}},
                  {"after", {{"spec", {{"replicas", 3}, {"tenant", "a"}}}}}}));
  EXPECT_EQ(ManifestDiff(json(), after),
            json({{"before", nullptr}, {"after", after}}));
  EXPECT_EQ(ManifestDiff(before, before), json::object());
}

TEST(AuditLogTest, RecordsExportsAsJsonLinesAndPrunes) {
  auto store = store::SqliteStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  const std::string path = ::testing::TempDir() + "/audit_log_test.jsonl";
  std::filesystem::remove(path);
  AuditOptions o;
  o.export_path = path;
  o.max_records = 3;
  o.prune_every = 5;
  AuditLog log(store->get(), o);
  for (int i = 1; i <= 5; ++i) {
    store::AuditRecord r;
    r.time = i * kMicrosPerSecond;
    r.who = "key:abcdefgh";
    r.verb = "scale";
    r.resource = "deployment/chat";
    r.outcome = "ok";
    ASSERT_TRUE(log.Record(r).ok());
  }
  // The fifth record pruned the log down to its newest three.
  EXPECT_EQ((*store)->QueryAudit({})->size(), 3u);
  EXPECT_EQ((*store)->GetAuditEnds()->anchor_seq, 2);
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    EXPECT_EQ(j["seq"], ++n);
    EXPECT_EQ(j["who"], "key:abcdefgh");
    EXPECT_EQ(j["hash"].get<std::string>().size(), 64u);
  }
  EXPECT_EQ(n, 5);  // the export keeps what the store let go
  EXPECT_EQ(log.failures(), 0);
}

}  // namespace
}  // namespace gpusched::auth
