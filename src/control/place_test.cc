#include "control/place.h"

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

}  // namespace
}  // namespace gpusched::control
