// Table-driven tests of each placement policy's scoring and GPU choice.
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inventory/mig.h"
#include "placement/fragmentation.h"
#include "placement/gpu_select.h"
#include "placement/registry.h"
#include "placement/scheduler.h"
#include "placement/testing.h"

namespace gpusched::placement {
namespace {

using testing::Compile;
using testing::CpuOnly;
using testing::Node;
using testing::Occupy;
using testing::Share;
using testing::Whole;

std::unique_ptr<ScorePlugin> Policy(const std::string& name,
                                    TargetWorkload workload = {}) {
  PolicyOptions o;
  o.workload = std::move(workload);
  auto p = NewPolicy(name, o);
  CHECK(p.ok()) << p.status();
  return *std::move(p);
}

TEST(RegistryTest, ListsEveryPolicyAndRejectsUnknown) {
  EXPECT_THAT(PolicyNames(),
              ::testing::ElementsAre("random", "spread", "binpack", "dotprod",
                                     "gpu-packing", "gpu-clustering",
                                     "best-fit", "fgd", "fillfrag"));
  auto bad = NewPolicy("fastest", {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("known: random"));
}

// Three nodes: idle, half-used, and almost full; which one each policy
// picks for a one-GPU pod.
struct ChoiceCase {
  std::string policy;
  int want_node;
};

class ChoiceTest : public ::testing::TestWithParam<ChoiceCase> {};

TEST_P(ChoiceTest, PicksExpectedNode) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(Node("idle", 8)).ok());
  ASSERT_TRUE(cs.AddNode(Node("half", 8)).ok());
  ASSERT_TRUE(cs.AddNode(Node("full", 8)).ok());
  for (int g = 0; g < 4; ++g) Occupy(cs, 1, g, 1000, 10000);
  for (int g = 0; g < 7; ++g) Occupy(cs, 2, g, 1000, 12000);
  const PodRequest pod = Compile(Whole(1, 8000), cs);
  Scheduler s(&cs, Policy(GetParam().policy, TypicalShapes({pod})), 1);
  const Decision d = s.Schedule(pod);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.allocation.node, GetParam().want_node);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, ChoiceTest,
    ::testing::Values(ChoiceCase{"spread", 0}, ChoiceCase{"binpack", 2},
                      // Smallest dot product of free and requested: the
                      // fullest node.
                      ChoiceCase{"dotprod", 2}, ChoiceCase{"best-fit", 2},
                      // Idle GPU on a partly used node (49) beats an idle
                      // node (25); ties go to the lower index.
                      ChoiceCase{"gpu-packing", 1},
                      // Both used nodes host only 1-GPU pods: 75 + b, and b
                      // grows with use.
                      ChoiceCase{"gpu-clustering", 2}),
    [](const auto& info) {
      std::string n = info.param.policy;
      for (char& c : n) c = c == '-' ? '_' : c;
      return n;
    });

TEST(GpuPackingTest, ScoreBands) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(Node("a", 8)).ok());
  ASSERT_TRUE(cs.AddNode(Node("b", 8)).ok());
  Occupy(cs, 1, 0, 700);
  auto p = Policy("gpu-packing");
  EXPECT_EQ(p->Score(Compile(Whole(1), cs), cs, 0), 25);    // max(33-8, 8)
  EXPECT_EQ(p->Score(Compile(Whole(2), cs), cs, 1), 48);    // 50 - 2 idle used
  EXPECT_EQ(p->Score(Compile(Share(200), cs), cs, 1), 97);  // 100 - 300/100
  EXPECT_EQ(p->Score(Compile(CpuOnly(1000), cs), cs, 1), 0);
}

TEST(GpuClusteringTest, ScoreBands) {
  ClusterState cs;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(cs.AddNode(Node("n" + std::to_string(i), 8)).ok());
  }
  Occupy(cs, 1, 0, 500);      // a share pod
  Occupy(cs, 2, 0, 500);      // a share pod ...
  Occupy(cs, 2, 1, 1000);     // ... and a 1-GPU pod
  Occupy(cs, 3, 0, 0, 4000);  // a CPU-only pod: invisible
  auto p = Policy("gpu-clustering");
  const PodRequest share = Compile(Share(300), cs);
  EXPECT_EQ(p->Score(share, cs, 0), 25);      // empty: 25 + 0
  EXPECT_EQ(p->Score(share, cs, 1), 75 + 1);  // only shares: 75 + 25*500/8000
  EXPECT_EQ(p->Score(share, cs, 2), 50 + 4);  // mixed: 50 + 25*1500/8000
  EXPECT_EQ(p->Score(share, cs, 3), 25);      // CPU-only pods do not count
  EXPECT_EQ(p->Score(Compile(Whole(2), cs), cs, 1), 1);  // other class only
}

TEST(DotProdAndBestFitTest, Formulas) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(Node("a", 8, 128000)).ok());
  ASSERT_TRUE(cs.AddNode(Node("b", 2, 64000)).ok());
  const PodRequest pod = Compile(Share(500, 16000), cs);
  // dot = (64000/128000)(16000/128000) + (2000/8000)(500/8000) = 0.078125
  EXPECT_EQ(Policy("dotprod")->Score(pod, cs, 1), 96);
  // s = 0.5*48000/128000 + 0.5*1500/8000 = 0.28125 -> 71
  EXPECT_EQ(Policy("best-fit")->Score(pod, cs, 1), 71);
}

TEST(SpreadBinpackTest, MeanOfCpuMemoryGpu) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(Node("a", 4, 100000, "G2", 100000)).ok());
  inventory::ResourceRequest r = Whole(1, 50000);
  r.memory_mib = 25000;
  const PodRequest pod = Compile(r, cs);
  // free after: CPU 50%, memory 75%, GPU 75% -> spread (50+75+75)/3 = 66
  EXPECT_EQ(Policy("spread")->Score(pod, cs, 0), 66);
  EXPECT_EQ(Policy("binpack")->Score(pod, cs, 0), 33);
}

TEST(RandomTest, SpreadsOverFeasibleNodesOnly) {
  ClusterState cs;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(cs.AddNode(Node("n" + std::to_string(i), 8)).ok());
  }
  ASSERT_TRUE(cs.AddNode(Node("t4", 2, 96000, "T4")).ok());
  PolicyOptions o;
  o.seed = 3;
  Scheduler s(&cs, *NewPolicy("random", o), 3);
  inventory::ResourceRequest r = Share(100);
  r.gpu_models = {"G2"};
  std::set<int> nodes, gpus;
  for (int i = 0; i < 40; ++i) {
    const Decision d = s.Place("p" + std::to_string(i), Compile(r, cs));
    ASSERT_TRUE(d.placed);
    nodes.insert(d.allocation.node);
    gpus.insert(d.allocation.gpus[0].gpu);
  }
  EXPECT_EQ(nodes.count(4), 0u);  // the T4 node is never chosen
  EXPECT_EQ(nodes.size(), 4u);
  EXPECT_GT(gpus.size(), 4u);  // random-fit GPUs, not always the same
}

TEST(FragmentationTest, TypicalShapesKeepTheCrossingShape) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(Node("a", 8)).ok());
  std::vector<PodRequest> pods;
  for (int i = 0; i < 6; ++i) pods.push_back(Compile(Whole(1), cs));
  for (int i = 0; i < 3; ++i) pods.push_back(Compile(Share(500), cs));
  pods.push_back(Compile(CpuOnly(4000), cs));
  // 60% + 30% = 90% < 95%: the CPU-only shape that crosses is kept too.
  EXPECT_EQ(TypicalShapes(pods, 0.95).size(), 3u);
  const TargetWorkload w = TypicalShapes(pods, 0.85);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_DOUBLE_EQ(w[0].weight, 6.0 / 9);
  EXPECT_DOUBLE_EQ(w[1].weight, 3.0 / 9);
}

TEST(FragmentationTest, MeasureByHand) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(Node("a", 2)).ok());
  std::vector<PodRequest> pods = {Compile(Whole(1, 8000), cs),
                                  Compile(Share(500, 8000), cs)};
  Fragmentation f(TypicalShapes(pods));  // 50% / 50%
  FragNode n;
  n.model_id = 0;
  n.cpu_free = 96000;
  n.num_gpus = 2;
  n.free = {1000, 300};
  // whole: hostable, 300 on the small GPU is fragment; share: same.
  EXPECT_DOUBLE_EQ(f.Of(n), 0.5 * 300 + 0.5 * 300);
  n.cpu_free = 4000;  // neither shape fits on CPU: all 1300 count
  EXPECT_DOUBLE_EQ(f.Of(n), 1300);
}

TEST(FgdTest, PrefersThePlacementThatFragmentsLeast) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(Node("a", 2)).ok());
  Occupy(cs, 0, 1, 500);
  std::vector<PodRequest> pods = {Compile(Whole(1), cs),
                                  Compile(Share(500), cs)};
  Scheduler s(&cs, Policy("fgd", TypicalShapes(pods)), 1);
  // Filling GPU 1's remaining 500 keeps GPU 0 whole for the 1-GPU shape.
  const Decision d = s.Schedule(Compile(Share(500), cs));
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.allocation.gpus[0].gpu, 1);
}

TEST(FillFragTest, KeepsCpuForTheGpusThatNeedIt) {
  // Two 8-GPU nodes; "lean" has just the CPU its GPUs need (8 x 12 CPUs),
  // "rich" has plenty. FGD sees no difference for a CPU-only pod (both can
  // still host one more GPU pod); fillfrag sends it to the rich node.
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(Node("lean", 8, 96000)).ok());
  ASSERT_TRUE(cs.AddNode(Node("rich", 8, 192000)).ok());
  std::vector<PodRequest> pods = {Compile(Whole(1, 12000), cs)};
  const PodRequest cpu_pod = Compile(CpuOnly(12000), cs);
  EXPECT_EQ(Policy("fgd", TypicalShapes(pods))->Score(cpu_pod, cs, 0),
            Policy("fgd", TypicalShapes(pods))->Score(cpu_pod, cs, 1));
  Scheduler s(&cs, Policy("fillfrag", TypicalShapes(pods)), 1);
  const Decision d = s.Schedule(cpu_pod);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.allocation.node, 1);
}

TEST(FillFragTest, KeepsAScarceGpuModelForThePodsThatNeedIt) {
  // 32 G2 GPUs and 4 T4 GPUs; half the demand must run on G2, a tenth on
  // T4. FGD's measure counts a T4 node's free milli as fragmentation for
  // the G2-only half, so it sends a pod that may run anywhere to T4, the
  // scarce pool the T4-only pods need. fillfrag's reserve term weighs the
  // T4 pool's pressure (a tenth of the demand for a ninth of the GPUs)
  // against G2's and keeps T4 free.
  ClusterState cs;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(cs.AddNode(Node("g2-" + std::to_string(i), 8)).ok());
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(
        cs.AddNode(Node("t4-" + std::to_string(i), 2, 96000, "T4")).ok());
  }
  auto on = [&](const std::string& model) {
    inventory::ResourceRequest r = Whole(1);
    if (!model.empty()) r.gpu_models = {model};
    return Compile(r, cs);
  };
  std::vector<PodRequest> pods;
  for (int i = 0; i < 4; ++i) pods.push_back(on(""));
  for (int i = 0; i < 5; ++i) pods.push_back(on("G2"));
  pods.push_back(on("T4"));
  const TargetWorkload workload = TypicalShapes(pods, 1.0);
  for (const std::string policy : {"fgd", "fillfrag"}) {
    SCOPED_TRACE(policy);
    ClusterState copy;
    for (int n = 0; n < cs.num_nodes(); ++n) {
      ASSERT_TRUE(copy.AddNode(cs.spec(n)).ok());
    }
    Scheduler s(&copy, Policy(policy, workload), 1);
    ASSERT_TRUE(s.Place("first", on("G2")).placed);  // pressures derived
    const Decision d = s.Schedule(on(""));
    ASSERT_TRUE(d.placed);
    EXPECT_EQ(copy.spec(d.allocation.node).gpu_model,
              policy == "fgd" ? "T4" : "G2");
  }
}

TEST(FillFragTest, LearnsTheWorkloadOnline) {
  ClusterState cs;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(cs.AddNode(Node("n" + std::to_string(i), 8)).ok());
  }
  Scheduler s(&cs, Policy("fillfrag"), 1);
  EXPECT_EQ(s.policy().epoch(), 0u);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(
        s.Place("p" + std::to_string(i), Compile(Share(500), cs)).placed);
  }
  EXPECT_EQ(s.policy().epoch(), 1u);  // re-derived after 16 placements
  // Having learnt 500-milli shares, it pairs them on one GPU.
  EXPECT_EQ(cs.state(0).gpus[0].milli_free, 0);
}

TEST(GpuSelectTest, WholeGpusPreferTheTightestNvlinkDomain) {
  ClusterState cs;
  inventory::NodeSpec spec = Node("a", 8);
  spec.nvlink_group = {0, 0, 0, 0, 1, 1, 1, 1};
  ASSERT_TRUE(cs.AddNode(spec).ok());
  Occupy(cs, 0, 4, 1000);  // domain 1 has 3 idle GPUs, domain 0 has 4
  inventory::ResourceRequest r = Whole(2);
  r.topology = inventory::Topology::kRequired;
  PodRequest pod = Compile(r, cs);
  // The 2-GPU gang goes to domain 1 (3 idle), keeping domain 0 intact.
  EXPECT_EQ(ChooseWholeGpus(pod, cs.spec(0), cs.state(0)),
            (std::vector<int>{5, 6}));
  pod.gpus = 5;  // no single domain holds 5
  EXPECT_TRUE(ChooseWholeGpus(pod, cs.spec(0), cs.state(0)).empty());
  EXPECT_FALSE(HasNvlinkGang(pod, cs.spec(0), cs.state(0)));
  pod.topology = inventory::Topology::kPreferred;  // spill: largest first
  EXPECT_EQ(ChooseWholeGpus(pod, cs.spec(0), cs.state(0)),
            (std::vector<int>{0, 1, 2, 3, 5}));
}

TEST(GpuSelectTest, NvlinkRequiredIsAFilter) {
  ClusterState cs;
  inventory::NodeSpec pcie = Node("pcie", 8);
  ASSERT_TRUE(cs.AddNode(pcie).ok());
  inventory::NodeSpec nvl = Node("nvl", 8);
  nvl.nvlink_group = {0, 0, 0, 0, 0, 0, 0, 0};
  ASSERT_TRUE(cs.AddNode(nvl).ok());
  inventory::ResourceRequest r = Whole(4);
  r.topology = inventory::Topology::kRequired;
  Scheduler s(&cs, Policy("spread"), 1);
  const Decision d = s.Schedule(Compile(r, cs));
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.allocation.node, 1);
}

TEST(MigPlacementTest, OneMediaSlicePerGpu) {
  ClusterState cs;
  inventory::NodeSpec h100 = testing::Node("h100", 2, 96000, "H100-SXM-80GB");
  h100.mig_slots = 8;
  h100.gpu_memory_mib = 81559;
  ASSERT_TRUE(cs.AddNode(h100).ok());
  Scheduler s(&cs, *NewPolicy("best-fit", {}), 1);
  inventory::ResourceRequest r;
  r.kind = GpuKind::kMig;
  r.mig_profile = "1g.10gb+me";
  std::set<int> gpus;
  for (int i = 0; i < 2; ++i) {
    const Decision d = s.Place("me" + std::to_string(i), Compile(r, cs));
    ASSERT_TRUE(d.placed) << d.Summary(cs);
    gpus.insert(d.allocation.gpus[0].gpu);
  }
  EXPECT_EQ(gpus.size(), 2u);  // never two media slices on one GPU
  EXPECT_FALSE(s.Schedule(Compile(r, cs)).placed);
  r.mig_profile = "1g.10gb";  // plain slices still fit beside them
  EXPECT_TRUE(s.Schedule(Compile(r, cs)).placed);
}

TEST(GpuSelectTest, NvlinkPreferredTakesAnIntactDomainWhenThereIsOne) {
  // Node a: two domains with 2 idle GPUs each; node b: one intact domain of
  // 4. Every policy scores a higher (fuller, or lower index); "preferred"
  // still puts the 4-GPU gang on b, inside one domain.
  ClusterState cs;
  inventory::NodeSpec a = Node("a", 8);
  a.nvlink_group = {0, 0, 0, 0, 1, 1, 1, 1};
  ASSERT_TRUE(cs.AddNode(a).ok());
  inventory::NodeSpec b = Node("b", 4);
  b.nvlink_group = {0, 0, 0, 0};
  ASSERT_TRUE(cs.AddNode(b).ok());
  for (int g : {0, 1, 4, 5}) Occupy(cs, 0, g, 1000);
  inventory::ResourceRequest r = Whole(4);
  r.topology = inventory::Topology::kPreferred;
  for (const std::string& name : PolicyNames()) {
    SCOPED_TRACE(name);
    Scheduler s(&cs, Policy(name, TypicalShapes({Compile(r, cs)})), 1);
    const Decision d = s.Schedule(Compile(r, cs));
    ASSERT_TRUE(d.placed);
    EXPECT_EQ(d.allocation.node, 1);
  }
  // With b busy, the gang still fits on a, across its two domains.
  Occupy(cs, 1, 0, 1000);
  Scheduler s(&cs, Policy("best-fit"), 1);
  const Decision d = s.Schedule(Compile(r, cs));
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.allocation.node, 0);
  EXPECT_EQ(d.allocation.gpus.size(), 4u);
}

TEST(GpuSelectTest, BestAndRandomFit) {
  inventory::NodeState st;
  st.gpus.resize(4);
  for (auto& g : st.gpus) g.memory_free_mib = 1000;
  st.gpus[0].milli_free = 900;
  st.gpus[1].milli_free = 400;
  st.gpus[2].milli_free = 400;
  st.gpus[3].milli_free = 300;
  PodRequest pod;
  pod.kind = GpuKind::kFraction;
  pod.gpus = 1;
  pod.gpu_milli = 350;
  EXPECT_EQ(BestFitGpu(pod, st), 1);  // 400 is tightest, lowest index
  pod.gpu_memory_mib = 2000;
  EXPECT_EQ(BestFitGpu(pod, st), -1);  // GPU memory is checked too
  pod.gpu_memory_mib = 0;
  Rng rng(5);
  std::set<int> seen;
  for (int i = 0; i < 100; ++i) seen.insert(RandomFitGpu(pod, st, rng));
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2}));
}

TEST(MigPlacementTest, PacksSlicesAndExplainsMisfits) {
  ClusterState cs;
  inventory::NodeSpec h100 = testing::Node("h100", 2, 96000, "H100-SXM-80GB");
  h100.mig_slots = 8;
  h100.gpu_memory_mib = 81559;
  ASSERT_TRUE(cs.AddNode(h100).ok());
  ASSERT_TRUE(cs.AddNode(testing::Node("t4", 2, 96000, "T4")).ok());
  Scheduler s(&cs, *NewPolicy("best-fit", {}), 1);
  inventory::ResourceRequest r;
  r.kind = GpuKind::kMig;
  r.mig_profile = "3g.40gb";
  std::vector<Allocation> got;
  for (int i = 0; i < 4; ++i) {
    const Decision d =
        s.Place("m" + std::to_string(i), testing::Compile(r, cs));
    ASSERT_TRUE(d.placed) << i << ": " << d.Summary(cs);
    got.push_back(d.allocation);
  }
  // Two 3g slices per GPU (starts 0 and 4), the second GPU only once the
  // first is full.
  EXPECT_EQ(got[0].gpus[0].gpu, 0);
  EXPECT_EQ(got[1].gpus[0].gpu, 0);
  EXPECT_NE(got[0].gpus[0].mig_start, got[1].gpus[0].mig_start);
  EXPECT_EQ(got[2].gpus[0].gpu, 1);
  EXPECT_EQ(got[0].gpus[0].mig_size, 4);
  EXPECT_EQ(got[0].gpus[0].mig_profile, "3g.40gb");
  const Decision full = s.Schedule(testing::Compile(r, cs));
  EXPECT_FALSE(full.placed);
  EXPECT_EQ(full.Summary(cs),
            "0/2 nodes are available: 1 GpuFit: GPU model not MIG-capable, 1 "
            "GpuFit: no free MIG slot");
  // A fraction cannot share a partitioned GPU: it goes to the T4 node.
  const Decision frac = s.Schedule(testing::Compile(testing::Share(100), cs));
  ASSERT_TRUE(frac.placed);
  EXPECT_EQ(frac.allocation.node, 1);
  r.mig_profile = "9g.99gb";
  EXPECT_THAT(s.Schedule(testing::Compile(r, cs)).Summary(cs),
              ::testing::HasSubstr("no such MIG profile"));
}

TEST(MigPlacementTest, StaticLayoutsPlaceOnlyAtTheManagersInstances) {
  // One whole H100 and one in MIG mode with the manager's 3 x 1g + 1 x 3g.
  ClusterState cs;
  inventory::NodeSpec n = testing::Node("n", 1, 96000, "H100-SXM-80GB");
  n.gpu_memory_mib = 81559;
  ASSERT_TRUE(inventory::AddStaticMigGpus(
                  n, *inventory::GpuCatalog::Builtin().Find("H100-SXM-80GB"),
                  {{"1g.10gb", 3}, {"3g.40gb", 1}})
                  .ok());
  ASSERT_TRUE(cs.AddNode(n).ok());
  const auto ones = inventory::StaticMigSlices(cs.spec(0), "1g.10gb");
  ASSERT_EQ(ones.size(), 3u);
  for (const std::string& policy : PolicyNames()) {
    SCOPED_TRACE(policy);
    inventory::ResourceRequest r;
    r.kind = GpuKind::kMig;
    r.mig_profile = "1g.10gb";
    std::vector<std::string> placed;
    // Another user holds the first 1g instance.
    ASSERT_TRUE(cs.SetMigForeign(0, ones[0].first,
                                 inventory::MigSlotMask(ones[0].second, 1))
                    .ok());
    Scheduler s(&cs, Policy(policy, TypicalShapes({Compile(r, cs)})), 1);
    for (int i = 0; i < 2; ++i) {
      const Decision d = s.Place(absl::StrCat(policy, i), Compile(r, cs));
      ASSERT_TRUE(d.placed) << d.Summary(cs);
      // The manager's instances, in order, skipping the foreign one.
      EXPECT_EQ(d.allocation.gpus[0].gpu, ones[i + 1].first);
      EXPECT_EQ(d.allocation.gpus[0].mig_start, ones[i + 1].second);
      placed.push_back(absl::StrCat(policy, i));
    }
    EXPECT_FALSE(s.Schedule(Compile(r, cs)).placed);  // all three taken
    // A profile the layout lacks does not fit, though the model has it.
    r.mig_profile = "2g.20gb";
    EXPECT_THAT(s.Schedule(Compile(r, cs)).Summary(cs),
                ::testing::HasSubstr("no free MIG slot"));
    // Whole GPUs and fractions keep off the MIG GPU.
    EXPECT_TRUE(s.Schedule(Compile(Whole(1), cs)).placed);
    EXPECT_FALSE(s.Schedule(Compile(Whole(2), cs)).placed);
    const Decision f = s.Schedule(Compile(testing::Share(100), cs));
    ASSERT_TRUE(f.placed);
    EXPECT_EQ(f.allocation.gpus[0].gpu, 0);
    for (const std::string& p : placed) cs.Forget(p);
    ASSERT_TRUE(cs.SetMigForeign(0, ones[0].first, 0).ok());
  }
}

}  // namespace
}  // namespace gpusched::placement
