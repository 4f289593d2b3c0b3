#include "placement/scheduler.h"

#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "placement/registry.h"
#include "placement/testing.h"

namespace gpusched::placement {
namespace {

using testing::Compile;
using testing::CpuOnly;
using ::testing::HasSubstr;
using testing::Node;
using testing::Occupy;
using testing::Share;
using testing::Whole;

std::unique_ptr<ScorePlugin> Policy(const std::string& name) {
  PolicyOptions o;
  auto p = NewPolicy(name, o);
  CHECK(p.ok()) << p.status();
  return *std::move(p);
}

TEST(SchedulerTest, ExplainsWhyNothingFits) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(Node("a", 8)).ok());
  ASSERT_TRUE(cs.AddNode(Node("b", 8)).ok());
  ASSERT_TRUE(cs.AddNode(Node("c", 2, 96000, "T4")).ok());
  ASSERT_TRUE(cs.AddNode(Node("d", 0, 4000)).ok());
  Occupy(cs, 0, 0, 900);
  Occupy(cs, 1, 0, 900);
  for (int g = 1; g < 8; ++g) {
    Occupy(cs, 0, g, 900);
    Occupy(cs, 1, g, 900);
  }
  Scheduler s(&cs, Policy("best-fit"), 1);
  inventory::ResourceRequest r = Share(500, 8000);
  r.gpu_models = {"G2"};
  const Decision d = s.Schedule(Compile(r, cs));
  EXPECT_FALSE(d.placed);
  EXPECT_EQ(d.nodes_total, 4);
  EXPECT_EQ(d.Summary(cs),
            "0/4 nodes are available: 2 GpuFit: insufficient GPU milli, 1 "
            "GpuModel: GPU model mismatch, 1 NodeResourcesFit: insufficient "
            "CPU");
}

TEST(SchedulerTest, TiesGoToTheLowestNodeIndex) {
  ClusterState cs;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(cs.AddNode(Node("n" + std::to_string(i), 8)).ok());
  }
  Scheduler s(&cs, Policy("gpu-packing"), 1);
  // Every node is idle: all tie, node 0 wins; then packing keeps using it.
  for (int i = 0; i < 3; ++i) {
    const Decision d = s.Place("p" + std::to_string(i), Compile(Whole(1), cs));
    ASSERT_TRUE(d.placed);
    EXPECT_EQ(d.allocation.node, 0);
  }
  EXPECT_EQ(cs.state(0).idle_gpus, 5);
}

TEST(SchedulerTest, PlaceAssumesAndReportsTopCandidates) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(Node("a", 8)).ok());
  ASSERT_TRUE(cs.AddNode(Node("b", 8)).ok());
  Occupy(cs, 1, 3, 600);
  Scheduler s(&cs, Policy("best-fit"), 1);
  const Decision d = s.Place("x", Compile(Share(400), cs));
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.allocation.node, 1);
  ASSERT_EQ(d.allocation.gpus.size(), 1u);
  EXPECT_EQ(d.allocation.gpus[0].gpu, 3);  // tightest fit: 400 free
  EXPECT_EQ(cs.state(1).gpus[3].milli_free, 0);
  ASSERT_GE(d.top.size(), 2u);
  EXPECT_EQ(d.top[0].node, 1);
  EXPECT_GT(d.top[0].score, d.top[1].score);
  EXPECT_THAT(d.Summary(cs), HasSubstr("placed on b GPUs [3:400m]"));
}

// Brute force: every node filtered and scored by a fresh policy, best score
// wins, lowest index on ties. The Scheduler (classes + caches) must agree.
TEST(SchedulerTest, RandomizedAgreesWithBruteForce) {
  const uint64_t seed = 77;
  for (const std::string& name : PolicyNames()) {
    if (name == "random") continue;  // scores are random draws
    SCOPED_TRACE(name + " seed " + std::to_string(seed));
    Rng rng(seed);
    ClusterState cs;
    const char* models[] = {"G2", "T4", "V100M32"};
    for (int i = 0; i < 40; ++i) {
      const int gpus = std::vector<int>{1, 2, 4, 8}[rng.Uniform(4)];
      ASSERT_TRUE(
          cs.AddNode(Node("n" + std::to_string(i), gpus,
                          16000 * (1 + rng.Uniform(6)), models[rng.Uniform(3)]))
              .ok());
    }
    std::vector<PodRequest> shapes;
    for (int i = 0; i < 12; ++i) {
      inventory::ResourceRequest r;
      switch (rng.Uniform(3)) {
        case 0:
          r = Share(100 * (1 + rng.Uniform(9)), 1000 * (1 + rng.Uniform(8)));
          break;
        case 1:
          r = Whole(1 + rng.Uniform(2), 4000 * (1 + rng.Uniform(4)));
          break;
        default:
          r = CpuOnly(2000 * (1 + rng.Uniform(8)));
      }
      if (rng.Uniform(5) == 0) r.gpu_models = {models[rng.Uniform(3)]};
      shapes.push_back(Compile(r, cs));
    }
    PolicyOptions options;
    options.workload = TypicalShapes(shapes);
    Scheduler s(&cs, *NewPolicy(name, options), seed);
    auto oracle = *NewPolicy(name, options);
    const auto filters = DefaultFilters();
    int placed = 0, failed = 0;
    for (int step = 0; step < 400; ++step) {
      const PodRequest& pod = shapes[rng.Uniform(shapes.size())];
      int want = -1;
      double want_score = 0;
      for (int n = 0; n < cs.num_nodes(); ++n) {
        bool ok = true;
        for (const auto& f : filters) ok = ok && f->Filter(pod, cs, n).ok();
        if (!ok) continue;
        const double sc = oracle->Score(pod, cs, n);
        if (want < 0 || sc > want_score) {
          want = n;
          want_score = sc;
        }
      }
      const Decision d = s.Place("p" + std::to_string(step), pod);
      ASSERT_EQ(d.placed, want >= 0) << "step " << step;
      ++(d.placed ? placed : failed);
      if (want < 0) continue;
      ASSERT_EQ(d.allocation.node, want) << "step " << step;
      ASSERT_EQ(d.score, want_score) << "step " << step;
      oracle->Observe(pod, d.allocation, cs);  // as the Scheduler tells its own
      // Free something now and then so classes split and merge.
      if (rng.Uniform(4) == 0)
        cs.Forget("p" + std::to_string(rng.Uniform(step + 1)));
      // Cluster-wide changes: a bigger node joins (moving the largest spec
      // that dotprod and best-fit normalise by), a GPU fails or recovers.
      if (step % 50 == 49) {
        inventory::NodeSpec big =
            Node("big" + std::to_string(step), 8, 96000 + 16000 * (step / 50));
        if (step % 100 == 49) big.nvlink_group = {0, 0, 0, 0, 1, 1, 1, 1};
        ASSERT_TRUE(cs.AddNode(big).ok());
      }
      if (step % 37 == 36) {
        const int n = static_cast<int>(rng.Uniform(cs.num_nodes()));
        if (cs.spec(n).gpu_count > 0) {
          ASSERT_TRUE(cs.SetGpuHealth(n, 0, !cs.state(n).gpus[0].healthy).ok());
        }
      }
    }
    EXPECT_GT(placed, 100);
    EXPECT_GT(failed, 0);  // the cluster saturates
  }
}

}  // namespace
}  // namespace gpusched::placement
