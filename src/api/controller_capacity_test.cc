// Capacity on demand in the live controller where the manager names no node
// in advance (Kubernetes): nodes learned at run time, the waiting replica as
// the ask, bound once placed; nodes lost after they came up. The TSan build
// runs it (label "threads").
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/controller_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::api {
namespace {

using controller_testing::ControllerTest;
using controller_testing::InProcessLauncher;
using nlohmann::json;

// Capacity on demand where the manager names no node in advance
// (Kubernetes): node-0 has 1 GPU, the pool "gpu-pool" at most 1 node of 2.
class ControllerCapacityTest : public ControllerTest {
 protected:
  void Configure(runtime::ControllerOptions* o) override {
    o->capacity.scale_up_delay_s = 0;
    o->capacity.scale_down_delay_s = 0.5;
    o->capacity.interval_s = 0.05;
  }
  void ConfigureNode(inventory::NodeSpec* node) override {
    node->gpu_count = 1;
  }
  void ConfigureLauncher(InProcessLauncher* launcher) override {
    backends::PoolReport p;
    p.pool = "gpu-pool";
    p.gpu_model = "H100-SXM-80GB";
    p.gpus_per_node = 2;
    p.max_nodes = 1;
    launcher->pool = p;
  }
  // Deployment `big`: `replicas` of 2 GPUs, which node-0 cannot hold.
  void ApplyBig(int replicas) {
    Apply(absl::StrCat(
        "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: "
        "big}\nspec:\n  model: big\n  engine: {template: reference}\n",
        "  resources: {whole: 2}\n  replicas: ", replicas, "\n"));
  }
  // A pool node as the manager reports it, with its NodeSpec.
  static backends::PoolNodeReport PoolNode(const std::string& name,
                                           backends::PoolNodeState state) {
    backends::PoolNodeReport r;
    r.node = name;
    r.pool = "gpu-pool";
    r.state = state;
    inventory::NodeSpec spec;
    spec.name = name;
    spec.cpu_milli = 64000;
    spec.memory_mib = 256 * 1024;
    spec.gpu_model = "H100-SXM-80GB";
    spec.gpu_count = 2;
    spec.gpu_memory_mib = 80 * 1024;
    r.spec = spec;
    return r;
  }
  // `big` at 1 replica, which waits for a node of the pool; pool-1 comes
  // up and the replica runs there.
  void BigRunsOnAPoolNode() {
    ApplyBig(1);
    ASSERT_TRUE(WaitFor([&] { return launcher_->waiting().size() == 1; }));
    launcher_->ReportPoolNode(PoolNode("pool-1", backends::PoolNodeState::kUp));
    launcher_->Report({.node = "pool-1", .usable = true, .state = "Ready"});
    ASSERT_TRUE(WaitFor([&] { return Ready("big") == 1; }));
  }
  // The autoscaler deleted pool node `name`'s Node object.
  void PoolNodeDeleted(const std::string& name) {
    launcher_->ReportPoolNode(
        PoolNode(name, backends::PoolNodeState::kPoweredDown));
    launcher_->Report({.node = name,
                       .usable = false,
                       .state = "deleted",
                       .reason = "the Node object was deleted"});
  }
  // The controller's node `name` (NodesJson), empty when it has none.
  json Node(const std::string& name) {
    for (const json& n : controller_->NodesJson()) {
      if (n.value("name", "") == name) return n;
    }
    return json::object();
  }
  std::vector<std::string> Messages(const std::string& kind) {
    store::EventFilter f;
    f.kinds = {kind};
    f.limit = 100;
    std::vector<std::string> out;
    auto events = controller_->Events(f);
    if (events.ok()) {
      for (const store::Event& e : *events) out.push_back(e.message);
    }
    return out;
  }
  bool HasMessage(const std::string& kind, const std::string& text) {
    for (const std::string& m : Messages(kind)) {
      if (m.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

TEST_F(ControllerCapacityTest, LearnsANodeAtRunTimeBindsThereAndForgetsIt) {
  ApplyBig(1);
  // No node has 2 GPUs: the replica waits for one of the pool, unbound.
  ASSERT_TRUE(WaitFor([&] {
    return launcher_->waiting() == std::vector<std::string>{"gpu-pool"};
  })) << controller_->DeploymentsJson("big").dump();
  EXPECT_TRUE(HasMessage("capacity.requested", "pool gpu-pool"));
  EXPECT_EQ(Ready("big"), 0);
  EXPECT_EQ(launcher_->size(), 0);  // no engine runs for it

  // Reports the controller refuses: not a node name, a spec of another
  // node.
  struct Bad {
    std::string node, spec_name, why;
  };
  for (const Bad& b : {Bad{"Bad_Name", "Bad_Name", "is not a node name"},
                       Bad{"pool-x", "other", "describes node 'other'"}}) {
    backends::PoolNodeReport r = PoolNode(b.node, backends::PoolNodeState::kUp);
    r.spec->name = b.spec_name;
    launcher_->ReportPoolNode(r);
    EXPECT_TRUE(WaitFor([&] {
      return HasMessage("capacity.failed",
                        absl::StrCat("node ", b.node, " of pool gpu-pool")) &&
             HasMessage("capacity.failed", b.why);
    })) << b.node;
    EXPECT_TRUE(Node(b.node).empty()) << b.node;
  }

  // The node the autoscaler added, registered but not Ready yet: learned,
  // its GPUs take no replica.
  launcher_->ReportPoolNode(
      PoolNode("pool-1", backends::PoolNodeState::kPoweringUp));
  launcher_->Report({.node = "pool-1", .usable = true, .state = "NotReady"});
  ASSERT_TRUE(WaitFor([&] {
    return Node("pool-1").value("capacityState", "") == "powering_up";
  }));
  EXPECT_EQ(launcher_->bound("big-0"), "");
  // Up: the replica is bound there, and the delay since the ask measured.
  launcher_->ReportPoolNode(PoolNode("pool-1", backends::PoolNodeState::kUp));
  launcher_->Report({.node = "pool-1", .usable = true, .state = "Ready"});
  ASSERT_TRUE(WaitFor([&] { return Ready("big") == 1; }))
      << controller_->DeploymentsJson("big").dump();
  EXPECT_EQ(launcher_->bound("big-0"), "pool-1");
  EXPECT_TRUE(launcher_->waiting().empty());
  const json n = Node("pool-1");
  ASSERT_FALSE(n.empty());
  EXPECT_EQ(n["gpus"], 2);
  EXPECT_EQ(n["allocatedGpuMilli"], 2000);
  EXPECT_EQ(n["capacityState"], "up");
  EXPECT_TRUE(
      HasMessage("node.provisioned", "node pool-1 of pool gpu-pool is up, "));
  EXPECT_TRUE(HasMessage("node.provisioned", "after it was asked for"));
  EXPECT_EQ(controller_->PoolsJson()[0]["measuredDelays"], 1);

  // The pool's one node is there: a second is not learned.
  launcher_->ReportPoolNode(PoolNode("pool-2", backends::PoolNodeState::kUp));
  EXPECT_TRUE(WaitFor([&] {
    return HasMessage("capacity.failed", "pool gpu-pool has 1 of its 1 nodes");
  }));
  EXPECT_TRUE(Node("pool-2").empty());

  // Idle: given back; once the autoscaler removed it, it is powered down
  // and holds nothing.
  ApplyBig(0);
  ASSERT_TRUE(WaitFor([&] {
    return launcher_->released() == std::vector<std::string>{"pool-1"};
  })) << controller_->PoolsJson().dump();
  PoolNodeDeleted("pool-1");
  ASSERT_TRUE(WaitFor([&] {
    return Node("pool-1").value("capacityState", "") == "powered_down";
  })) << Node("pool-1").dump();
  EXPECT_EQ(Node("pool-1")["allocatedGpuMilli"], 0);
  EXPECT_TRUE(HasMessage("node.powered_down", "node pool-1"));
}

TEST_F(ControllerCapacityTest, NoNodeIsAskedForAMigSliceOnAPoolOfUnnamedNodes) {
  // A node the pool adds comes without a MIG layout: the slice's replica
  // waits, and only the whole-GPU replica is asked for.
  Apply(
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: "
      "slice}\nspec:\n  model: slice\n  engine: {template: reference}\n"
      "  resources: {mig: 1g.10gb}\n  replicas: 1\n");
  ASSERT_TRUE(WaitFor(
      [&] { return HasMessage("replica.unschedulable", "slice-0: "); }));
  ApplyBig(1);
  ASSERT_TRUE(WaitFor([&] { return launcher_->waiting().size() == 1; }));
  const std::vector<std::string> asked = Messages("capacity.requested");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_THAT(asked[0], ::testing::HasSubstr("(big-0)"));
}

// A node that came up and then failed is a node lost, not a failed
// resume: the event says so, and the pool is not skipped, so the replica's
// replacement asks it again.
TEST_F(ControllerCapacityTest, ANodeThatFailsAfterComingUpIsALossNotASkip) {
  ASSERT_NO_FATAL_FAILURE(BigRunsOnAPoolNode());
  ASSERT_EQ(Messages("capacity.requested").size(), 1u);

  backends::PoolNodeReport failed =
      PoolNode("pool-1", backends::PoolNodeState::kFailed);
  failed.reason = "kubelet stopped posting node status";
  launcher_->ReportPoolNode(failed);
  launcher_->Report({.node = "pool-1",
                     .usable = false,
                     .state = "NotReady",
                     .reason = "kubelet stopped posting node status"});
  ASSERT_TRUE(WaitFor([&] {
    return HasMessage("capacity.failed",
                      "node pool-1 of pool gpu-pool failed after it came up: "
                      "kubelet stopped posting node status; its replicas of "
                      "big are replaced");
  })) << ::testing::PrintToString(Messages("capacity.failed"));
  EXPECT_FALSE(HasMessage("capacity.failed", "did not come up"));
  // Not skipped: the replacement asks the pool again.
  EXPECT_TRUE(WaitFor([&] {
    return Messages("capacity.requested").size() == 2;
  })) << ::testing::PrintToString(Messages("capacity.requested"));
}

// The same pool as spot: a node taken back is a spot preemption.
class ControllerSpotCapacityTest : public ControllerCapacityTest {
 protected:
  void ConfigureLauncher(InProcessLauncher* launcher) override {
    ControllerCapacityTest::ConfigureLauncher(launcher);
    launcher->pool->spot = true;
  }
};

TEST_F(ControllerSpotCapacityTest, ASpotNodeGoneUnaskedIsAPreemption) {
  ASSERT_NO_FATAL_FAILURE(BigRunsOnAPoolNode());
  PoolNodeDeleted("pool-1");
  ASSERT_TRUE(WaitFor([&] {
    return HasMessage("spot.preempted",
                      "spot node pool-1 of pool gpu-pool was taken back; its "
                      "replicas of big are replaced");
  })) << ::testing::PrintToString(Messages("spot.preempted"));
  EXPECT_TRUE(HasMessage("node.powered_down", "node pool-1"));
  EXPECT_TRUE(Messages("capacity.failed").empty());
}

TEST_F(ControllerCapacityTest, AWaitingReplicaScaledAwayEndsItsAsk) {
  ApplyBig(1);
  ASSERT_TRUE(WaitFor([&] { return launcher_->waiting().size() == 1; }));
  ApplyBig(0);
  EXPECT_TRUE(WaitFor([&] { return launcher_->waiting().empty(); }));
}

}  // namespace
}  // namespace gpusched::api
