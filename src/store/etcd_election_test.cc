// Leader election over a real etcd (etcd_testing.h): one leader among
// instances, takeover on resignation and on a crash, fencing of a deposed
// leader's writes, and self-fencing of a leader that cannot reach etcd.
// Deadlines are generous: these wait on states, never on the machine's speed.
#include "store/etcd_election.h"

#include <chrono>
#include <memory>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/etcd_testing.h"

namespace gpusched::store {
namespace {

using ::testing::HasSubstr;

// An instance: its own store (copy and watch) and election.
struct Instance {
  // The store's watch calls the election until its callback is cleared.
  ~Instance() {
    if (store) store->SetChangeCallback(nullptr);
  }
  std::unique_ptr<EtcdStore> store;
  std::unique_ptr<EtcdElection> election;
};

class ElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EtcdTestServer* etcd = EtcdTestServer::Shared();
    if (!etcd->Unavailable().empty()) {
      GTEST_SKIP() << "skipped: " << etcd->Unavailable();
    }
    ASSERT_EQ(etcd->StartError(), "");
    prefix_ = EtcdTestServer::UniquePrefix();
  }

  std::unique_ptr<Instance> Make(const std::string& id) {
    auto i = std::make_unique<Instance>();
    auto s = EtcdTestServer::Shared()->OpenStore(prefix_, id);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return nullptr;
    i->store = *std::move(s);
    ElectionOptions o;
    o.self = {id, "http://" + id, "test", 1, 0};
    i->election = std::make_unique<EtcdElection>(i->store.get(), o);
    EtcdElection* e = i->election.get();
    i->store->SetChangeCallback([e] { e->Wake(); });
    EXPECT_TRUE(i->election->Start().ok());
    return i;
  }

  template <typename Done>
  static bool Eventually(Done done, int seconds = 30) {
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return done();
  }

  std::string prefix_;
};

TEST(LocalElectionTest, LeadsOnceStarted) {
  LocalElection e({"solo", "http://x", "v", 1, 0});
  EXPECT_FALSE(e.Current().leader);
  ASSERT_TRUE(e.Start().ok());
  EXPECT_TRUE(e.Current().acting);
  EXPECT_EQ(e.Leader()->instance.id, "solo");
  EXPECT_EQ(e.Instances().size(), 1u);
}

TEST_F(ElectionTest, OptionsAreChecked) {
  ElectionOptions o;
  o.self.id = "a b";
  EXPECT_THAT(std::string(ValidateElectionOptions(o).message()),
              HasSubstr("ha.instance_id"));
  o.self.id = "a";
  o.lease_ttl = 500 * kMicrosPerMilli;
  EXPECT_THAT(std::string(ValidateElectionOptions(o).message()),
              HasSubstr("ha.lease_ttl_s"));
  o.lease_ttl = 2 * kMicrosPerSecond;
  o.renew_interval = 1500 * kMicrosPerMilli;
  EXPECT_THAT(std::string(ValidateElectionOptions(o).message()),
              HasSubstr("renew_interval"));
  o.renew_interval = 0;
  EXPECT_TRUE(ValidateElectionOptions(o).ok());
}

TEST_F(ElectionTest, OneLeadsAndResigningHandsOver) {
  auto a = Make("a");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(Eventually([&] { return a->election->Current().acting; }));
  auto b = Make("b");
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(Eventually([&] { return b->election->Instances().size() == 2; }));
  // b sees a lead and does not lead itself.
  ASSERT_TRUE(b->election->Leader().has_value());
  EXPECT_EQ(b->election->Leader()->instance.id, "a");
  EXPECT_EQ(b->election->Leader()->instance.address, "http://a");
  EXPECT_FALSE(b->election->Current().leader);
  const int64_t term = a->election->Current().term;
  EXPECT_EQ(b->election->Leader()->term, term);

  a->election->Stop(/*resign=*/true);
  EXPECT_FALSE(a->election->Current().leader);
  ASSERT_TRUE(Eventually([&] { return b->election->Current().acting; }));
  EXPECT_GT(b->election->Current().term, term);
  ASSERT_TRUE(Eventually([&] { return b->election->Instances().size() == 1; }));
  EXPECT_EQ(b->election->Stats().elected, 1);
}

TEST_F(ElectionTest, ACrashedLeaderIsReplacedAndItsWritesAreFenced) {
  auto a = Make("a");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(Eventually([&] { return a->election->Current().acting; }));
  auto b = Make("b");
  ASSERT_NE(b, nullptr);
  const Leadership old = a->election->Current();
  ASSERT_TRUE(a->store->PutStatus("deployments/x", "{}", &old.fence).ok());
  // A crash: the election stops without resigning; its lease runs out.
  a->election->Stop(/*resign=*/false);
  ASSERT_TRUE(Eventually([&] { return b->election->Current().acting; }));
  const Leadership now = b->election->Current();
  EXPECT_GT(now.term, old.term);
  // The old leader's fenced writes fail; the new one's pass.
  absl::Status stale = a->store->PutStatus("deployments/x", "{}", &old.fence);
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stale.message()), HasSubstr("not the leader"));
  Event e;
  e.time = 1;
  e.kind = "k";
  EXPECT_EQ(a->store->AppendEvent(e, &old.fence).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(b->store->PutStatus("deployments/x", "{}", &now.fence).ok());
}

TEST_F(ElectionTest, ALeaderThatCannotRenewStopsActing) {
  auto a = Make("a");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(Eventually([&] { return a->election->Current().acting; }));
  // etcd stops answering (connections stay open, as in a partition).
  EtcdTestServer::Shared()->Pause();
  const Leadership paused = a->election->Current();
  const ElectionStats stats = a->election->Stats();
  // Its proof ends before the lease could (renewal sent + TTL).
  EXPECT_LT(paused.valid_until, stats.last_renewal + stats.lease_ttl);
  auto steady = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  while (steady() <= paused.valid_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const Leadership after = a->election->Current();
  EtcdTestServer::Shared()->Resume();
  EXPECT_FALSE(after.acting);
  EXPECT_TRUE(after.leader || !after.acting);
  // Once renewals get through again it acts again (the same term, or a new
  // one when etcd ended the lease meanwhile).
  ASSERT_TRUE(Eventually([&] { return a->election->Current().acting; }));
}

}  // namespace
}  // namespace gpusched::store
