#include "backends/kubernetes/kube_watch.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/http_server.h"
#include "nlohmann/json.hpp"

namespace gpusched::backends {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

json PodJson(const std::string& name, int rv) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "ns"},
            {"resourceVersion", std::to_string(rv)}}}};
}

// A collection on an HTTP server: lists answer `items` at `version`; watches
// stay open until the test pushes lines or expires them; the next `faults`
// requests get 429 with Retry-After.
class FakeCollection {
 public:
  FakeCollection() {
    auto server = net::HttpServer::Start(
        {}, [this](net::HttpRequest req, std::shared_ptr<net::Responder> r) {
          Handle(std::move(req), std::move(r));
        });
    server_ = *std::move(server);
  }
  ~FakeCollection() {
    {
      absl::MutexLock l(&mu_);
      for (auto& w : watches_) w->EndStream();
      watches_.clear();
    }
    server_->Shutdown(std::chrono::milliseconds(100));
    // A watch that came in while the server shut down: released while the
    // server, whose strand its connection uses, still exists (a Responder
    // must not outlive its server; found by TSan under load).
    absl::MutexLock l(&mu_);
    watches_.clear();
  }

  KubeCredentials Credentials() const {
    KubeCredentials c;
    c.host = "127.0.0.1";
    c.port = server_->port();
    c.tls = false;
    c.server = absl::StrCat("http://127.0.0.1:", c.port);
    return c;
  }

  void Set(std::vector<json> items, int version) {
    absl::MutexLock l(&mu_);
    items_ = std::move(items);
    version_ = version;
  }
  void Faults(int n) {
    absl::MutexLock l(&mu_);
    faults_ = n;
  }
  // Sends `event` on every open watch.
  void Push(const json& event) {
    absl::MutexLock l(&mu_);
    for (auto& w : watches_) w->SendChunk(event.dump() + "\n");
  }
  // Every open watch gets 410 Expired and ends.
  void Expire() {
    absl::MutexLock l(&mu_);
    const json gone = {{"type", "ERROR"},
                       {"object",
                        {{"kind", "Status"},
                         {"apiVersion", "v1"},
                         {"status", "Failure"},
                         {"reason", "Expired"},
                         {"message", "too old resource version"},
                         {"code", 410}}}};
    for (auto& w : watches_) {
      w->SendChunk(gone.dump() + "\n");
      w->EndStream();
    }
    watches_.clear();
  }
  bool WaitWatches(int n) {
    for (int i = 0; i < 500; ++i) {
      {
        absl::MutexLock l(&mu_);
        if (static_cast<int>(watches_.size()) >= n) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  std::vector<std::string> targets() const {
    absl::MutexLock l(&mu_);
    return targets_;
  }

 private:
  void Handle(net::HttpRequest req, std::shared_ptr<net::Responder> r) {
    absl::MutexLock l(&mu_);
    const std::string target(req.target());
    targets_.push_back(target);
    net::HttpResponse res;
    res.version(11);
    res.set(net::http::field::content_type, "application/json");
    if (faults_ > 0) {
      --faults_;
      res.result(429);
      res.set(net::http::field::retry_after, "1");
      res.body() = json{{"kind", "Status"},       {"apiVersion", "v1"},
                        {"status", "Failure"},    {"reason", "TooManyRequests"},
                        {"message", "slow down"}, {"code", 429}}
                       .dump();
      r->Send(std::move(res));
      return;
    }
    if (absl::StrContains(target, "watch=true")) {
      res.result(200);
      r->StartStream(std::move(res));
      watches_.push_back(std::move(r));
      return;
    }
    res.result(200);
    res.body() = json{
        {"kind", "PodList"},
        {"apiVersion", "v1"},
        {"metadata", {{"resourceVersion", std::to_string(version_)}}},
        {"items",
         items_}}.dump();
    r->Send(std::move(res));
  }

  mutable absl::Mutex mu_;
  std::vector<json> items_ ABSL_GUARDED_BY(mu_);
  int version_ ABSL_GUARDED_BY(mu_) = 1;
  int faults_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<net::Responder>> watches_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> targets_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<net::HttpServer> server_;
};

std::vector<std::string> Names(const KubeWatcher::Changes& c) {
  std::vector<std::string> out;
  for (const json& o : c.upserted) out.push_back(KubeWatcher::Key(o));
  return out;
}

// Waits until Take() has something, and returns it.
KubeWatcher::Changes TakeSome(KubeWatcher& w) {
  KubeWatcher::Changes c;
  for (int i = 0; i < 500; ++i) {
    KubeWatcher::Changes more = w.Take();
    c.upserted.insert(c.upserted.end(), more.upserted.begin(),
                      more.upserted.end());
    c.deleted.insert(c.deleted.end(), more.deleted.begin(), more.deleted.end());
    if (!c.upserted.empty() || !c.deleted.empty()) return c;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return c;
}

TEST(KubeWatcherTest, ListsWatchesAndRelistsWithoutDuplicates) {
  FakeCollection api;
  api.Set({PodJson("a", 2), PodJson("b", 3)}, 3);
  auto client = *KubeClient::Create(api.Credentials(), {});
  KubeWatcher w(client.get(), {.path = "/api/v1/pods",
                               .label_selector = "app=x",
                               .min_backoff = 10 * kMicrosPerMilli});
  w.Start();
  ASSERT_TRUE(w.WaitSynced(10 * kMicrosPerSecond));
  EXPECT_THAT(Names(w.Take()), UnorderedElementsAre("ns/a", "ns/b"));
  ASSERT_TRUE(api.WaitWatches(1));
  // A change, a bookmark, a deletion.
  api.Push({{"type", "MODIFIED"}, {"object", PodJson("a", 5)}});
  KubeWatcher::Changes c = TakeSome(w);
  EXPECT_THAT(Names(c), ElementsAre("ns/a"));
  EXPECT_EQ(c.upserted[0]["metadata"]["resourceVersion"], "5");
  api.Push({{"type", "BOOKMARK"},
            {"object",
             {{"kind", "Pod"},
              {"apiVersion", "v1"},
              {"metadata", {{"resourceVersion", "7"}}}}}});
  api.Push({{"type", "DELETED"}, {"object", PodJson("b", 8)}});
  c = TakeSome(w);
  EXPECT_THAT(c.deleted, ElementsAre("ns/b"));
  // 410: relisted. a is unchanged (not reported again), b came back, c is
  // new, and nothing else is reported.
  api.Set({PodJson("a", 5), PodJson("b", 9), PodJson("c", 10)}, 10);
  api.Expire();
  c = TakeSome(w);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  KubeWatcher::Changes rest = w.Take();
  c.upserted.insert(c.upserted.end(), rest.upserted.begin(),
                    rest.upserted.end());
  EXPECT_THAT(Names(c), UnorderedElementsAre("ns/b", "ns/c"));
  EXPECT_TRUE(c.deleted.empty());
  ASSERT_TRUE(api.WaitWatches(1));
  const std::vector<std::string> t = api.targets();
  ASSERT_GE(t.size(), 4u);
  // list, watch from the list's version, relist, watch from the new list's.
  EXPECT_THAT(t[0], HasSubstr("labelSelector=app%3Dx&limit=500"));
  EXPECT_THAT(t[1], HasSubstr("watch=true&allowWatchBookmarks=true&"
                              "resourceVersion=3&timeoutSeconds=300"));
  EXPECT_THAT(t[2], HasSubstr("limit=500"));
  EXPECT_THAT(t[3], HasSubstr("resourceVersion=10"));
  EXPECT_EQ(w.stats().relists, 1);
  EXPECT_EQ(w.stats().bookmarks, 1);
  EXPECT_EQ(w.Snapshot().size(), 3u);
}

TEST(KubeWatcherTest, BacksOffOnTooManyRequestsAndSaysSo) {
  FakeCollection api;
  api.Set({PodJson("a", 2)}, 2);
  api.Faults(2);
  auto client = *KubeClient::Create(api.Credentials(), {});
  KubeWatcher w(client.get(), {.path = "/api/v1/pods",
                               .label_selector = "",
                               .min_backoff = 10 * kMicrosPerMilli});
  const auto start = std::chrono::steady_clock::now();
  w.Start();
  ASSERT_TRUE(w.WaitSynced(30 * kMicrosPerSecond));
  // Retry-After: 1 was honoured twice.
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  const std::vector<ManagerReport> r = w.TakeReports();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_FALSE(r[0].reachable);
  EXPECT_THAT(r[0].message, HasSubstr("429 TooManyRequests: slow down"));
  EXPECT_TRUE(r[1].reachable);
  EXPECT_EQ(w.stats().failures, 2);
}

TEST(KubeWatcherTest, StopEndsAWatchInProgress) {
  FakeCollection api;
  auto client = *KubeClient::Create(api.Credentials(), {});
  auto w = std::make_unique<KubeWatcher>(
      client.get(), KubeWatcher::Options{.path = "/p", .label_selector = ""});
  w->Start();
  ASSERT_TRUE(api.WaitWatches(1));
  w->Stop();  // returns: the blocked watch was cancelled
  w.reset();
  EXPECT_TRUE(absl::IsCancelled(client->Request("GET", "/p").status()));
}

}  // namespace
}  // namespace gpusched::backends
