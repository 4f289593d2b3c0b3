#include "placement/quota.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "placement/testing.h"

namespace gpusched::placement {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

QueueConfig Queue(std::string name, std::string parent, int64_t quota,
                  int64_t limit = kNoLimit, double weight = 1) {
  return testing::GpuQueue(std::move(name), std::move(parent), quota, limit,
                           weight);
}

ResourceAmounts Gpu(int64_t milli) { return {.gpu_milli = milli}; }

QueueTree MustCreate(std::vector<QueueConfig> queues) {
  absl::StatusOr<QueueTree> t = QueueTree::Create(std::move(queues));
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

TEST(QueueTreeTest, ValidationListsEveryProblem) {
  QueueConfig cpu_child = Queue("c1", "p", 0);
  cpu_child.cpu = ResourceQuota{.quota = 3000};
  QueueConfig cpu_parent = Queue("p", "", 0);
  cpu_parent.cpu = ResourceQuota{.quota = 2000};
  struct Case {
    const char* label;
    std::vector<QueueConfig> queues;
    std::vector<std::string> problems;
  };
  const Case cases[] = {
      {"unknown parent",
       {Queue("a", "nope", 0)},
       {"queue 'a': unknown parent 'nope'"}},
      {"cycle",
       {Queue("a", "b", 0), Queue("b", "c", 0), Queue("c", "a", 0)},
       {"parent cycle: a -> b -> c -> a"}},
      {"self parent", {Queue("a", "a", 0)}, {"parent cycle: a -> a"}},
      {"children above parent quota",
       {Queue("d", "", 4000), Queue("t1", "d", 3000), Queue("t2", "d", 2000)},
       {"queue 'd': children's GPU milli quotas sum to 5000, above its "
        "quota 4000"}},
      {"children above parent quota, CPU",
       {cpu_parent, cpu_child},
       {"queue 'p': children's CPU milli quotas sum to 3000, above its quota "
        "2000"}},
      {"limit below quota",
       {Queue("a", "", 4000, 2000)},
       {"queue 'a': GPU milli limit 2000 is below its quota 4000"}},
      {"negative quota", {Queue("a", "", -1)}, {"GPU milli quota -1 < 0"}},
      {"negative limit",
       {Queue("a", "", 0, -5)},
       {"GPU milli limit -5 < 0 (use -1 for no limit)"}},
      {"negative weight",
       {Queue("a", "", 0, kNoLimit, -1)},
       {"overQuotaWeight -1 must be a finite number >= 0"}},
      {"NaN weight",
       {Queue("a", "", 0, kNoLimit, std::nan(""))},
       {"overQuotaWeight nan must be"}},
      {"duplicate",
       {Queue("a", "", 0), Queue("a", "", 0)},
       {"queue 'a': declared twice"}},
      {"empty name", {Queue("", "", 0)}, {"queue #1 has no name"}},
      {"root reserved", {Queue("root", "", 0)}, {"'root' is reserved"}},
      {"all at once",
       {Queue("a", "ghost", -1), Queue("b", "c", 0), Queue("c", "b", 0),
        Queue("d", "", 1000, 500), Queue("e", "d", 2000)},
       {"(5 problems)", "queue 'a': GPU milli quota -1 < 0",
        "queue 'a': unknown parent 'ghost'", "parent cycle: b -> c -> b",
        "queue 'd': GPU milli limit 500 is below its quota 1000",
        "queue 'd': children's GPU milli quotas sum to 2000, above its quota "
        "1000"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<QueueTree> t = QueueTree::Create(c.queues);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& p : c.problems) {
      EXPECT_THAT(std::string(t.status().message()), HasSubstr(p));
    }
  }
}

TEST(QueueTreeTest, ShapeAndDefaults) {
  QueueConfig dept = Queue("d", "", 4000, 8000, 2);
  dept.cpu = ResourceQuota{.quota = 1000};
  QueueConfig cpu = Queue("t2", "d", 0);
  cpu.cpu = ResourceQuota{.quota = 1000};
  QueueTree t =
      MustCreate({dept, Queue("t1", "d", 0), cpu, Queue("top", "root", 0)});
  EXPECT_THAT(t.Path("t1"), ElementsAre("t1", "d"));
  EXPECT_THAT(t.Path("top"), ElementsAre("top"));
  EXPECT_THAT(t.Path("root"), IsEmpty());
  EXPECT_THAT(t.Path("nope"), IsEmpty());
  EXPECT_TRUE(t.IsLeaf("t1"));
  EXPECT_FALSE(t.IsLeaf("d"));
  EXPECT_FALSE(t.IsLeaf(QueueTree::kRoot));
  EXPECT_TRUE(t.accounted(QuotaResource::kGpuMilli));
  EXPECT_TRUE(t.accounted(QuotaResource::kCpuMilli));  // t2 configures it
  EXPECT_FALSE(t.accounted(QuotaResource::kMemoryMib));
  const ResourceQuota* k = t.Knobs("t1", QuotaResource::kCpuMilli);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->quota, 0);
  EXPECT_EQ(k->limit, kNoLimit);
  EXPECT_EQ(k->over_quota_weight, 1);
  EXPECT_EQ(t.Knobs("d", QuotaResource::kGpuMilli)->over_quota_weight, 2);
  EXPECT_EQ(t.Knobs("root", QuotaResource::kGpuMilli), nullptr);
}

TEST(QueueTreeTest, ChargeRollsUpAndReleaseIsIdempotent) {
  QueueTree t = MustCreate(
      {Queue("d", "", 4000), Queue("t1", "d", 2000), Queue("t2", "d", 2000)});
  ASSERT_TRUE(t.Charge("p1", "t1", {1000, 2000, 300}).ok());
  ASSERT_TRUE(t.Charge("p2", "t2", Gpu(500)).ok());
  EXPECT_EQ(t.Usage("t1"), (ResourceAmounts{1000, 2000, 300}));
  EXPECT_EQ(t.Usage("d"), (ResourceAmounts{1500, 2000, 300}));
  EXPECT_EQ(t.Usage("root"), (ResourceAmounts{1500, 2000, 300}));
  EXPECT_EQ(t.QueueOf("p2"), "t2");

  EXPECT_EQ(t.Charge("p1", "t2", Gpu(1)).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(t.Charge("p3", "ghost", Gpu(1)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(t.Charge("p3", "d", Gpu(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.Charge("p3", "root", Gpu(1)).code(),
            absl::StatusCode::kFailedPrecondition);

  EXPECT_TRUE(t.Release("p1"));
  EXPECT_FALSE(t.Release("p1"));
  EXPECT_EQ(t.Usage("d"), Gpu(500));
  EXPECT_EQ(t.QueueOf("p1"), "");
}

TEST(QueueTreeTest, AdmitLimitsAndQuota) {
  // d: quota 4 GPUs, limit 6; t1: quota 2, limit 4; t2: quota 2, no limit.
  QueueConfig t1 = Queue("t1", "d", 2000, 4000);
  t1.cpu = ResourceQuota{.quota = 8000, .limit = 16000};
  QueueConfig d = Queue("d", "", 4000, 6000);
  d.cpu = ResourceQuota{.quota = 8000};
  QueueTree t = MustCreate({d, t1, Queue("t2", "d", 2000)});
  ASSERT_TRUE(t.Charge("a", "t1", {1000, 4000, 0}).ok());
  ASSERT_TRUE(t.Charge("b", "t2", Gpu(3000)).ok());
  struct Case {
    const char* label;
    std::string queue;
    ResourceAmounts request;
    bool admitted;
    bool in_quota;
    std::vector<std::string> reason;
  };
  const Case cases[] = {
      {"in quota", "t1", Gpu(1000), true, true, {"in quota"}},
      {"over quota, under limits",
       "t1",
       Gpu(2000),
       true,
       false,
       {"over quota in queue 't1': GPU milli 3000 would exceed its quota "
        "2000"}},
      {"leaf limit",
       "t1",
       Gpu(3500),
       false,
       false,
       {"queue 't1': GPU milli 4500 would exceed its limit 4000",
        "queue 'd': GPU milli 7500 would exceed its limit 6000"}},
      {"department limit only",
       "t2",
       Gpu(2500),
       false,
       false,
       {"queue 'd': GPU milli 6500 would exceed its limit 6000"}},
      {"CPU limit",
       "t1",
       {0, 13000, 0},
       false,
       false,
       {"queue 't1': CPU milli 17000 would exceed its limit 16000"}},
      {"CPU over quota",
       "t1",
       {500, 5000, 0},
       true,
       false,
       {"CPU milli 9000 would exceed its quota 8000"}},
      {"memory is not accounted", "t1", {0, 0, 1 << 30}, true, true, {}},
      {"unknown queue", "ghost", Gpu(1), false, false, {"unknown queue"}},
      {"not a leaf", "d", Gpu(1), false, false, {"'d' is not a leaf"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const AdmitVerdict v = t.Admit(c.queue, c.request);
    EXPECT_EQ(v.admitted, c.admitted);
    EXPECT_EQ(v.in_quota, c.in_quota);
    for (const std::string& r : c.reason) EXPECT_THAT(v.reason, HasSubstr(r));
  }
  EXPECT_THAT(t.Admit("t1", Gpu(3500)).reason,
              HasSubstr("'t1'"));  // leaf named first
  EXPECT_LT(t.Admit("t1", Gpu(3500)).reason.find("'t1'"),
            t.Admit("t1", Gpu(3500)).reason.find("'d'"));
}

TEST(QueueTreeTest, OverQuotaPodsRankByPriorityThenAge) {
  QueueTree t = MustCreate({Queue("a", "", 2000), Queue("b", "", 0)});
  // a's quota covers two GPUs: the highest priority first, oldest first.
  ASSERT_TRUE(t.Charge("old-low", "a", Gpu(1000), 100).ok());
  ASSERT_TRUE(t.Charge("mid", "a", Gpu(1000), 500).ok());
  ASSERT_TRUE(t.Charge("new-high", "a", Gpu(1000), 1000).ok());
  ASSERT_TRUE(t.Charge("old-mid", "a", Gpu(0), 500).ok());  // CPU only
  ASSERT_TRUE(t.Charge("b1", "b", Gpu(500), 2000).ok());
  EXPECT_THAT(t.OverQuotaPods(), UnorderedElementsAre("old-low", "b1"));
  EXPECT_TRUE(t.IsOverQuota("old-low"));
  EXPECT_FALSE(t.IsOverQuota("mid"));
  EXPECT_FALSE(t.IsOverQuota("old-mid"));  // uses none of what is over
  EXPECT_TRUE(t.OverQuota("a"));
  t.Release("new-high");
  EXPECT_THAT(t.OverQuotaPods(), UnorderedElementsAre("b1"));
  EXPECT_FALSE(t.OverQuota("a"));
}

TEST(QueueTreeTest, FairShareWaterFilling) {
  struct Demand {
    std::string queue;
    int64_t gpu_milli;
  };
  struct Case {
    const char* label;
    std::vector<QueueConfig> queues;
    int64_t capacity;
    std::vector<Demand> usage;
    std::vector<Demand> pending;
    std::vector<std::pair<std::string, double>> want;
  };
  const Case cases[] = {
      {"weights split the spare",
       {Queue("a", "", 0, kNoLimit, 1), Queue("b", "", 0, kNoLimit, 3)},
       8000,
       {{"a", 8000}, {"b", 8000}},
       {},
       {{"a", 2000}, {"b", 6000}, {"root", 8000}}},
      {"quota first, then the spare; a sibling's cap frees more",
       {Queue("a", "", 2000), Queue("b", "", 2000)},
       8000,
       {{"a", 10000}, {"b", 3000}},
       {},
       {{"a", 5000}, {"b", 3000}}},
      {"never above a limit",
       {Queue("a", "", 0, 3000), Queue("b", "", 0)},
       8000,
       {{"a", 8000}, {"b", 8000}},
       {},
       {{"a", 3000}, {"b", 5000}}},
      {"unused quota is lent out",
       {Queue("a", "", 4000), Queue("b", "", 0)},
       8000,
       {{"a", 1000}, {"b", 8000}},
       {},
       {{"a", 1000}, {"b", 7000}}},
      {"pending demand claims the quota back",
       {Queue("a", "", 4000), Queue("b", "", 0)},
       8000,
       {{"a", 1000}, {"b", 7000}},
       {{"a", 2000}},
       {{"a", 3000}, {"b", 5000}}},
      {"weight 0 gets its quota only",
       {Queue("a", "", 1000, kNoLimit, 0), Queue("b", "", 1000)},
       8000,
       {{"a", 8000}, {"b", 8000}},
       {},
       {{"a", 1000}, {"b", 7000}}},
      {"guarantees above capacity shrink in proportion",
       {Queue("a", "", 6000), Queue("b", "", 2000)},
       4000,
       {{"a", 6000}, {"b", 2000}},
       {},
       {{"a", 3000}, {"b", 1000}}},
      {"hierarchy: departments first, then their tenants",
       {Queue("d1", "", 4000, kNoLimit, 1), Queue("d2", "", 0, kNoLimit, 1),
        Queue("t1", "d1", 1000, kNoLimit, 1),
        Queue("t2", "d1", 1000, kNoLimit, 3), Queue("t3", "d2", 0)},
       12000,
       {{"t1", 12000}, {"t2", 12000}, {"t3", 12000}},
       {},
       // d1: 4000 + 4000 of the 8000 spare; inside it 2000 + 6000 * 1/4 and
       // 3/4.
       {{"d1", 8000}, {"d2", 4000}, {"t1", 2500}, {"t2", 5500}, {"t3", 4000}}},
      {"idle capacity stays idle",
       {Queue("a", "", 1000), Queue("b", "", 0)},
       8000,
       {{"a", 500}, {"b", 2000}},
       {},
       {{"a", 500}, {"b", 2000}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    QueueTree t = MustCreate(c.queues);
    int n = 0;
    for (const Demand& d : c.usage) {
      ASSERT_TRUE(
          t.Charge("p" + std::to_string(n++), d.queue, Gpu(d.gpu_milli)).ok());
    }
    absl::flat_hash_map<std::string, ResourceAmounts> pending;
    for (const Demand& d : c.pending) pending[d.queue] += Gpu(d.gpu_milli);
    const FairShares s = t.ComputeFairShares(Gpu(c.capacity), pending);
    for (const auto& [queue, want] : c.want) {
      EXPECT_NEAR(s.at(queue)[QuotaResource::kGpuMilli], want, 1e-6) << queue;
    }
    // Unaccounted resources have no share to exceed.
    EXPECT_TRUE(std::isinf(s.at("root")[QuotaResource::kCpuMilli]));
  }
}

TEST(QueueTreeTest, OverFairShare) {
  QueueTree t = MustCreate({Queue("a", "", 4000), Queue("b", "", 0)});
  ASSERT_TRUE(t.Charge("a1", "a", Gpu(1000)).ok());
  ASSERT_TRUE(t.Charge("b1", "b", Gpu(7000)).ok());
  // Nobody else wants the GPUs: b's borrowing is fair.
  FairShares s = t.ComputeFairShares(Gpu(8000));
  EXPECT_FALSE(t.OverFairShare("b", s));
  EXPECT_FALSE(t.OverFairShare("a", s));
  // a asks for 2 more GPUs: b now holds more than it deserves.
  s = t.ComputeFairShares(Gpu(8000), {{"a", Gpu(2000)}});
  EXPECT_TRUE(t.OverFairShare("b", s));
  EXPECT_FALSE(t.OverFairShare("a", s));
  EXPECT_FALSE(t.OverFairShare("ghost", s));
}

}  // namespace
}  // namespace gpusched::placement
