#include "control/room.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "placement/registry.h"
#include "placement/testing.h"

namespace gpusched::control {
namespace {

using ::testing::ElementsAreArray;
namespace pt = placement::testing;

constexpr Micros kSecond = kMicrosPerSecond;

// One placed replica in a case: a share of one GPU of node 0.
struct Placed {
  std::string name;
  int gpu = 0;
  int milli = 1000;
  int deployment = 1;
  int class_rank = 1;
  bool autoscaled = true;
  bool preemptible = true;
  bool ready = true;
  bool idle = true;
  Micros last_busy = 0;
  std::string tenant = "-";
  int priority = 500;
};

struct Case {
  std::string name;
  int gpus = 2;  // on one node
  std::vector<Placed> placed;
  int ask_milli = 1000;
  int ask_class_rank = 1;
  int ask_priority = 500;
  std::string ask_tenant = "-";
  std::vector<RoomQueue> queues;
  Micros now = 100 * kSecond;
  Micros swap_min_idle = 0;
  RoomPlan::Kind want_kind = RoomPlan::Kind::kNone;
  std::vector<std::string> want_victims;
};

class PlanRoomTest : public ::testing::TestWithParam<Case> {};

TEST_P(PlanRoomTest, Plans) {
  const Case& c = GetParam();
  inventory::ClusterState cluster;
  ASSERT_TRUE(cluster.AddNode(pt::Node("n0", c.gpus)).ok());
  std::vector<RoomCandidate> candidates;
  for (const Placed& p : c.placed) {
    inventory::Allocation a;
    a.node = 0;
    a.gpus.push_back({p.gpu, p.milli});
    ASSERT_TRUE(
        cluster
            .Assume(p.name, a,
                    inventory::PodInfo{p.tenant, p.priority, p.preemptible})
            .ok());
    ASSERT_TRUE(cluster.Bind(p.name).ok());
    candidates.push_back({p.name, p.deployment, p.class_rank, p.autoscaled,
                          p.preemptible, p.ready, p.idle, p.last_busy});
  }
  auto policy = placement::NewPolicy("fillfrag", placement::PolicyOptions{});
  ASSERT_TRUE(policy.ok());
  placement::Scheduler scheduler(&cluster, *std::move(policy), 1);
  const auto filters = placement::DefaultFilters();
  RoomAsk ask;
  ask.pod = pt::Compile(c.ask_milli >= 1000 ? pt::Whole(c.ask_milli / 1000, 0)
                                            : pt::Share(c.ask_milli, 0),
                        cluster);
  ask.pod.info = inventory::PodInfo{c.ask_tenant, c.ask_priority, true};
  ask.replica = "asker";
  ask.deployment = 0;
  ask.class_rank = c.ask_class_rank;
  const uint64_t version = cluster.version();
  const RoomPlan plan = PlanRoom(cluster, scheduler, filters, ask, candidates,
                                 c.queues, c.now, c.swap_min_idle);
  EXPECT_EQ(RoomKindName(plan.kind), std::string(RoomKindName(c.want_kind)))
      << plan.why;
  std::vector<std::string> got;
  for (const RoomVictim& v : plan.victims) got.push_back(v.replica);
  EXPECT_THAT(got, ElementsAreArray(c.want_victims));
  // The cluster is as it was: every replica still placed where it was.
  for (const Placed& p : c.placed) {
    const inventory::PodRecord* rec = cluster.FindPod(p.name);
    ASSERT_NE(rec, nullptr) << p.name;
    EXPECT_TRUE(rec->bound) << p.name;
    EXPECT_EQ(rec->allocation.gpus.at(0).gpu, p.gpu) << p.name;
  }
  EXPECT_GE(cluster.version(), version);
}

Placed P(std::string name, int gpu) {
  Placed p;
  p.name = std::move(name);
  p.gpu = gpu;
  return p;
}
template <typename F>
Placed P(std::string name, int gpu, F change) {
  Placed p = P(std::move(name), gpu);
  change(p);
  return p;
}

std::vector<Case> Cases() {
  using K = RoomPlan::Kind;
  std::vector<Case> cases;
  cases.push_back(
      {.name = "swaps_the_least_recently_used_idle_replica",
       .placed = {P("a", 0, [](Placed& p) { p.last_busy = 50 * kSecond; }),
                  P("b", 1, [](Placed& p) { p.last_busy = 20 * kSecond; })},
       .want_kind = K::kSwap,
       .want_victims = {"b"}});
  cases.push_back(
      {.name = "swaps_the_lowest_class_first",
       .placed = {P("a", 0,
                    [](Placed& p) {
                      p.class_rank = 3;
                      p.last_busy = 90 * kSecond;
                    }),
                  P("b", 1, [](Placed& p) { p.last_busy = 10 * kSecond; })},
       .want_kind = K::kSwap,
       .want_victims = {"a"}});
  cases.push_back({.name = "takes_as_few_as_fit_two_halves",
                   .gpus = 1,
                   .placed = {P("a", 0,
                                [](Placed& p) {
                                  p.milli = 500;
                                  p.last_busy = 1;
                                }),
                              P("b", 0,
                                [](Placed& p) {
                                  p.milli = 500;
                                  p.last_busy = 2;
                                })},
                   .want_kind = K::kSwap,
                   .want_victims = {"a", "b"}});
  cases.push_back({.name = "a_half_needs_only_one_half",
                   .gpus = 1,
                   .placed = {P("a", 0,
                                [](Placed& p) {
                                  p.milli = 500;
                                  p.last_busy = 1;
                                }),
                              P("b", 0,
                                [](Placed& p) {
                                  p.milli = 500;
                                  p.last_busy = 2;
                                })},
                   .ask_milli = 500,
                   .want_kind = K::kSwap,
                   .want_victims = {"a"}});
  cases.push_back(
      {.name = "busy_replicas_are_not_swapped_and_equal_class_not_preempted",
       .placed = {P("a", 0, [](Placed& p) { p.idle = false; }),
                  P("b", 1, [](Placed& p) { p.idle = false; })},
       .want_kind = K::kNone});
  cases.push_back({.name = "a_more_important_class_is_not_swapped",
                   .placed = {P("a", 0, [](Placed& p) { p.class_rank = 0; }),
                              P("b", 1, [](Placed& p) { p.class_rank = 0; })},
                   .want_kind = K::kNone});
  cases.push_back(
      {.name = "not_autoscaled_is_not_swapped",
       .placed = {P("a", 0, [](Placed& p) { p.autoscaled = false; }),
                  P("b", 1, [](Placed& p) { p.autoscaled = false; })},
       .want_kind = K::kNone});
  cases.push_back(
      {.name = "used_within_min_idle_is_kept",
       .placed = {P("a", 0, [](Placed& p) { p.last_busy = 95 * kSecond; }),
                  P("b", 1, [](Placed& p) { p.last_busy = 30 * kSecond; })},
       .swap_min_idle = 60 * kSecond,
       .want_kind = K::kSwap,
       .want_victims = {"b"}});
  cases.push_back({.name = "a_higher_priority_preempts_a_busy_lower_one",
                   .placed = {P("a", 0,
                                [](Placed& p) {
                                  p.idle = false;
                                  p.class_rank = 2;
                                  p.priority = 100;
                                }),
                              P("b", 1, [](Placed& p) { p.idle = false; })},
                   .ask_class_rank = 0,
                   .ask_priority = 1000,
                   .want_kind = K::kPreempt,
                   .want_victims = {"a"}});
  cases.push_back({.name = "not_preemptible_is_never_taken",
                   .placed = {P("a", 0,
                                [](Placed& p) {
                                  p.idle = false;
                                  p.class_rank = 2;
                                  p.priority = 100;
                                  p.preemptible = false;
                                }),
                              P("b", 1,
                                [](Placed& p) {
                                  p.idle = false;
                                  p.preemptible = false;
                                })},
                   .ask_class_rank = 0,
                   .ask_priority = 1000,
                   .want_kind = K::kNone});
  // Tenant quotas: alice is guaranteed 1 GPU and holds none; bob holds
  // both over his quota of 0, at the same priority: alice reclaims one.
  cases.push_back({.name = "a_tenant_under_its_quota_reclaims",
                   .placed = {P("a", 0,
                                [](Placed& p) {
                                  p.idle = false;
                                  p.tenant = "bob";
                                }),
                              P("b", 1,
                                [](Placed& p) {
                                  p.idle = false;
                                  p.tenant = "bob";
                                })},
                   .ask_tenant = "alice",
                   .queues = {{"alice", 1, 0, 1}, {"bob", 0, 0, 1}},
                   .want_kind = K::kPreempt,
                   .want_victims = {"a"}});
  cases.push_back(
      {.name = "a_tenant_at_its_quota_does_not_reclaim_from_one_within",
       .placed = {P("a", 0,
                    [](Placed& p) {
                      p.idle = false;
                      p.tenant = "bob";
                    }),
                  P("b", 1,
                    [](Placed& p) {
                      p.idle = false;
                      p.tenant = "bob";
                    })},
       .ask_tenant = "alice",
       .queues = {{"alice", 0, 0, 1}, {"bob", 2, 0, 1}},
       .want_kind = K::kNone});
  cases.push_back({.name = "the_askers_own_deployment_is_not_swapped",
                   .placed = {P("a", 0, [](Placed& p) { p.deployment = 0; }),
                              P("b", 1, [](Placed& p) { p.deployment = 0; })},
                   .want_kind = K::kNone});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Room, PlanRoomTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(OverGpuLimitTest, Table) {
  EXPECT_EQ(OverGpuLimit("a", 5000, 1000, 0), std::nullopt);  // no limit
  EXPECT_EQ(OverGpuLimit("a", 1000, 1000, 2), std::nullopt);  // exactly
  EXPECT_EQ(OverGpuLimit("a", 1500, 500, 2), std::nullopt);
  EXPECT_EQ(OverGpuLimit("a", 1500, 1000, 2),
            "tenant a's GPU limit: 1.50 of 2.00 GPUs in use, this replica "
            "needs 1.00 more");
  EXPECT_NE(OverGpuLimit("a", 0, 500, 0.25), std::nullopt);
}

TEST(PassOrderTest, VictimsGoneFirstThenByClass) {
  // batch(2), critical(0), standard(1) waiting for victims that are gone,
  // critical(0) again, sheddable(3) waiting too.
  const std::vector<PassEntry> d = {
      {2, false}, {0, false}, {1, true}, {0, false}, {3, true}};
  EXPECT_THAT(PassOrder(d), ElementsAreArray({2, 4, 1, 3, 0}));
  EXPECT_TRUE(PassOrder({}).empty());
}

}  // namespace
}  // namespace gpusched::control
