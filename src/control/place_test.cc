#include "control/place.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "placement/registry.h"
#include "placement/testing.h"

namespace gpusched::control {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace pt = placement::testing;

TEST(WeightsLocalityTest, MostRecentFirstAndBounded) {
  WeightsLocality w;
  EXPECT_TRUE(w.Nodes("/w/llama").empty());
  w.Loaded("/w/llama", 2);
  w.Loaded("/w/llama", 0);
  w.Loaded("/w/llama", 2);  // again: moves to the front, once
  w.Loaded("/w/mistral", 0);
  w.Loaded("", 1);           // no weights: nothing recorded
  w.Loaded("/w/llama", -1);  // no node (unbounded): nothing
  EXPECT_THAT(w.Nodes("/w/llama"), ElementsAre(2, 0));
  EXPECT_TRUE(w.IsLocal("/w/llama", 0));
  EXPECT_FALSE(w.IsLocal("/w/llama", 1));
  EXPECT_THAT(w.Paths(0), ElementsAre("/w/llama", "/w/mistral"));
  EXPECT_THAT(w.Paths(2), ElementsAre("/w/llama"));
  EXPECT_TRUE(w.Nodes("").empty());
  // Past the bound the least recently loaded path is forgotten.
  for (size_t i = 0; i < WeightsLocality::kMaxPaths; ++i) {
    w.Loaded("/w/other-" + std::to_string(i), 1);
  }
  EXPECT_EQ(w.size(), WeightsLocality::kMaxPaths);
  EXPECT_TRUE(w.Nodes("/w/llama").empty());
  EXPECT_TRUE(w.Nodes("/w/mistral").empty());
  EXPECT_THAT(w.Nodes("/w/other-0"), ElementsAre(1));
}

class PlaceReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int n = 0; n < 3; ++n) {
      ASSERT_TRUE(cluster_.AddNode(pt::Node("n" + std::to_string(n), 2)).ok());
    }
    auto policy = placement::NewPolicy("fillfrag", placement::PolicyOptions{});
    ASSERT_TRUE(policy.ok());
    scheduler_ = std::make_unique<placement::Scheduler>(&cluster_,
                                                        *std::move(policy), 1);
  }
  PlaceAsk Ask(const std::string& replica, int gpus) const {
    PlaceAsk a;
    a.replica = replica;
    a.request.kind = inventory::GpuKind::kWhole;
    a.request.gpus = gpus;
    a.info = {"team-a", 500, true};
    return a;
  }
  inventory::ClusterState cluster_;
  std::unique_ptr<placement::Scheduler> scheduler_;
  WeightsLocality weights_;
};

TEST_F(PlaceReplicaTest, WeightsLocalNodesFirst) {
  weights_.Loaded("/w/llama", 2);
  PlaceAsk a = Ask("chat-0", 1);
  a.weights = "/w/llama";
  PlaceResult r = PlaceReplica(cluster_, *scheduler_, weights_, a);
  ASSERT_EQ(r.kind, PlaceResult::Kind::kPlaced) << r.why;
  EXPECT_EQ(r.decision.allocation.node, 2);
  EXPECT_TRUE(r.weights_local);
  const inventory::PodRecord* rec = cluster_.FindPod("chat-0");
  ASSERT_NE(rec, nullptr);
  EXPECT_TRUE(rec->bound);
  // Node 2 cannot take two more GPUs: the policy's choice elsewhere.
  PlaceAsk b = Ask("chat-1", 2);
  b.weights = "/w/llama";
  r = PlaceReplica(cluster_, *scheduler_, weights_, b);
  ASSERT_EQ(r.kind, PlaceResult::Kind::kPlaced) << r.why;
  EXPECT_NE(r.decision.allocation.node, 2);
  EXPECT_FALSE(r.weights_local);
  // Without weights: never marked local.
  r = PlaceReplica(cluster_, *scheduler_, weights_, Ask("other-0", 1));
  ASSERT_EQ(r.kind, PlaceResult::Kind::kPlaced) << r.why;
  EXPECT_FALSE(r.weights_local);
}

TEST_F(PlaceReplicaTest, OwnersGpuLimit) {
  PlaceAsk a = Ask("chat-0", 2);
  a.owner = "team-a";
  a.limit_gpus = 3;
  ASSERT_EQ(PlaceReplica(cluster_, *scheduler_, weights_, a).kind,
            PlaceResult::Kind::kPlaced);
  // Another queue's GPUs do not count against team-a.
  PlaceAsk other = Ask("batch-0", 2);
  other.info.tenant = "team-b";
  ASSERT_EQ(PlaceReplica(cluster_, *scheduler_, weights_, other).kind,
            PlaceResult::Kind::kPlaced);
  EXPECT_EQ(QueueGpuMilli(cluster_, "team-a"), 2000);
  EXPECT_EQ(QueueGpuMilli(cluster_, "team-b"), 2000);
  a.replica = "chat-1";
  PlaceResult r = PlaceReplica(cluster_, *scheduler_, weights_, a);
  EXPECT_EQ(r.kind, PlaceResult::Kind::kOverLimit);
  EXPECT_THAT(r.why, HasSubstr("tenant team-a's GPU limit: 2.00 of 3.00"));
  EXPECT_EQ(r.reasons["TenantQuota"], 1);
  EXPECT_EQ(cluster_.FindPod("chat-1"), nullptr);  // nothing taken
  a.request.gpus = 1;
  EXPECT_EQ(PlaceReplica(cluster_, *scheduler_, weights_, a).kind,
            PlaceResult::Kind::kPlaced);
}

TEST_F(PlaceReplicaTest, InvalidAndNoFit) {
  PlaceAsk bad = Ask("chat-0", 1);
  bad.request.kind = inventory::GpuKind::kFraction;
  bad.request.gpu_milli = 1500;
  PlaceResult r = PlaceReplica(cluster_, *scheduler_, weights_, bad);
  EXPECT_EQ(r.kind, PlaceResult::Kind::kInvalid);
  EXPECT_THAT(r.why, HasSubstr("gpu_milli must be 1..1000, got 1500"));
  EXPECT_FALSE(r.pod.has_value());
  // Three GPUs on one node: no node has them.
  r = PlaceReplica(cluster_, *scheduler_, weights_, Ask("big-0", 3));
  ASSERT_EQ(r.kind, PlaceResult::Kind::kNoFit);
  ASSERT_TRUE(r.pod.has_value());  // for making room
  EXPECT_THAT(r.why, HasSubstr("0/3 nodes are available"));
  EXPECT_FALSE(r.reasons.empty());
  EXPECT_EQ(cluster_.FindPod("big-0"), nullptr);
}

TEST_F(PlaceReplicaTest, SpreadsReplicasOverNodesThenGpus) {
  // Three one-GPU replicas of a deployment: three nodes.
  std::vector<std::string> placed;
  std::vector<int> nodes;
  for (int i = 0; i < 3; ++i) {
    PlaceAsk a = Ask("chat-" + std::to_string(i), 1);
    a.siblings = placed;
    PlaceResult r = PlaceReplica(cluster_, *scheduler_, weights_, a);
    ASSERT_EQ(r.kind, PlaceResult::Kind::kPlaced) << r.why;
    nodes.push_back(r.decision.allocation.node);
    placed.push_back(a.replica);
  }
  std::sort(nodes.begin(), nodes.end());
  EXPECT_THAT(nodes, ElementsAre(0, 1, 2));
  // A fourth still goes somewhere: every node has a sibling, so any node.
  PlaceAsk fourth = Ask("chat-3", 1);
  fourth.siblings = placed;
  EXPECT_EQ(PlaceReplica(cluster_, *scheduler_, weights_, fourth).kind,
            PlaceResult::Kind::kPlaced);
}

TEST_F(PlaceReplicaTest, SpreadBeatsWeightsLocality) {
  // Weights local on a sibling's node do not pull a replica there.
  weights_.Loaded("/w/embed", 0);
  PlaceAsk e0 = Ask("embed-0", 1);
  e0.weights = "/w/embed";
  PlaceResult r0 = PlaceReplica(cluster_, *scheduler_, weights_, e0);
  ASSERT_EQ(r0.kind, PlaceResult::Kind::kPlaced) << r0.why;
  EXPECT_EQ(r0.decision.allocation.node, 0);
  PlaceAsk e1 = Ask("embed-1", 1);
  e1.weights = "/w/embed";
  e1.siblings = {"embed-0"};
  PlaceResult r1 = PlaceReplica(cluster_, *scheduler_, weights_, e1);
  ASSERT_EQ(r1.kind, PlaceResult::Kind::kPlaced) << r1.why;
  EXPECT_NE(r1.decision.allocation.node, 0);
  EXPECT_FALSE(r1.weights_local);
}

// Capacity on demand: the cheapest nodes that fit first (a node without a
// cost, static, counts 0), then within them weights and spread as before.
TEST_F(PlaceReplicaTest, CheapestNodesFirstByCost) {
  weights_.Loaded("/w/llama", 1);  // local on the dearest node
  auto place = [&](const std::string& name, int gpus,
                   std::vector<std::string> siblings) {
    PlaceAsk a = Ask(name, gpus);
    a.weights = "/w/llama";
    a.siblings = std::move(siblings);
    a.node_cost = {{1, 12.0}, {2, 5.0}};  // node 0: static (0)
    PlaceResult r = PlaceReplica(cluster_, *scheduler_, weights_, a);
    EXPECT_EQ(r.kind, PlaceResult::Kind::kPlaced) << r.why;
    return std::make_pair(r.decision.allocation.node, r.weights_local);
  };
  // The static node, though the weights are local on node 1.
  EXPECT_EQ(place("chat-0", 1, {}), std::make_pair(0, false));
  // A sibling there: it keeps off it where a node of the same cost fits;
  // none does, so the static node again (cheaper than a spread).
  EXPECT_EQ(place("chat-1", 1, {"chat-0"}), std::make_pair(0, false));
  // Node 0 full: the cheaper pool node (2), not the dearer one (1).
  EXPECT_EQ(place("chat-2", 1, {}), std::make_pair(2, false));
  EXPECT_EQ(place("chat-3", 2, {}).first, 1) << "only node 1 has 2 GPUs";
  // Two GPUs free nowhere: no fit, and the why names every node.
  PlaceAsk full = Ask("chat-4", 2);  // node 2 has 1 GPU left
  full.node_cost = {{1, 12.0}, {2, 5.0}};
  PlaceResult r = PlaceReplica(cluster_, *scheduler_, weights_, full);
  EXPECT_EQ(r.kind, PlaceResult::Kind::kNoFit);
  EXPECT_THAT(r.why, HasSubstr("0/3 nodes are available"));
  EXPECT_EQ(cluster_.FindPod("chat-4"), nullptr);
}

TEST_F(PlaceReplicaTest, SpreadGpuKeepsSharesOffTheirSiblingsGpus) {
  auto share = [&](const std::string& name, std::vector<std::string> sibs,
                   const std::string& spread) {
    PlaceAsk a = Ask(name, 0);
    a.request.kind = inventory::GpuKind::kFraction;
    a.request.gpu_milli = 250;
    a.request.gpu_memory_mib = 1024;
    a.siblings = std::move(sibs);
    a.spread = spread;
    PlaceResult r = PlaceReplica(cluster_, *scheduler_, weights_, a);
    EXPECT_EQ(r.kind, PlaceResult::Kind::kPlaced) << r.why;
    return std::pair{r.decision.allocation.node,
                     r.decision.allocation.gpus.at(0).gpu};
  };
  const auto first = share("f-0", {}, "gpu");
  const auto second = share("f-1", {"f-0"}, "gpu");
  EXPECT_NE(first, second);
  // The cluster's accounting follows the GPU it moved to.
  const inventory::PodRecord* rec = cluster_.FindPod("f-1");
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->allocation.gpus[0].gpu, second.second);
  EXPECT_TRUE(rec->bound);
  EXPECT_EQ(cluster_.state(second.first).gpus[second.second].milli_free, 750);
}

}  // namespace
}  // namespace gpusched::control
