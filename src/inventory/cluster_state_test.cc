#include "inventory/cluster_state.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inventory/mig.h"

namespace gpusched::inventory {
namespace {

using ::testing::HasSubstr;

NodeSpec EightGpuNode(const std::string& name) {
  NodeSpec s;
  s.name = name;
  s.cpu_milli = 96000;
  s.memory_mib = 786432;
  s.gpu_model = "H100-SXM-80GB";
  s.gpu_count = 8;
  s.gpu_memory_mib = 81559;
  s.mig_slots = 8;
  return s;
}

Allocation Fraction(int node, int gpu, int milli, int64_t mem = 0) {
  Allocation a;
  a.node = node;
  a.cpu_milli = 1000;
  a.memory_mib = 1024;
  a.gpus.push_back({.gpu = gpu, .milli = milli, .memory_mib = mem});
  return a;
}

TEST(ClusterStateTest, AssumeForgetBind) {
  ClusterState cs;
  ASSERT_EQ(*cs.AddNode(EightGpuNode("n0")), 0);
  EXPECT_EQ(cs.AddNode(EightGpuNode("n0")).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(cs.Assume("p1", Fraction(0, 3, 400, 1000)).ok());
  EXPECT_EQ(cs.state(0).gpus[3].milli_free, 600);
  EXPECT_EQ(cs.state(0).idle_gpus, 7);
  EXPECT_EQ(cs.allocated_gpu_milli(), 400);
  EXPECT_EQ(cs.Assume("p1", Fraction(0, 2, 100)).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(cs.Bind("p1").ok());
  EXPECT_TRUE(cs.FindPod("p1")->bound);
  EXPECT_EQ(cs.Bind("nope").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(cs.Forget("p1"));
  EXPECT_FALSE(cs.Forget("p1"));  // idempotent
  EXPECT_EQ(cs.state(0).gpus[3].milli_free, 1000);
  EXPECT_EQ(cs.allocated_gpu_milli(), 0);
}

TEST(ClusterStateTest, KeepsFreeGpuMilliPerNodeType) {
  ClusterState cs;
  ASSERT_EQ(*cs.AddNode(EightGpuNode("a")), 0);
  ASSERT_EQ(*cs.AddNode(EightGpuNode("b")), 1);
  NodeSpec other = EightGpuNode("c");
  other.cpu_milli = 128000;
  ASSERT_EQ(*cs.AddNode(other), 2);
  EXPECT_EQ(cs.node_spec_id(0), cs.node_spec_id(1));  // same spec
  EXPECT_NE(cs.node_spec_id(0), cs.node_spec_id(2));
  EXPECT_EQ(cs.num_node_specs(), 2);
  const int ab = cs.node_spec_id(0), c = cs.node_spec_id(2);
  EXPECT_EQ(cs.free_gpu_milli_of_spec(ab), 16000);
  EXPECT_EQ(cs.free_gpu_milli_of_spec(c), 8000);
  ASSERT_TRUE(cs.Assume("p", Fraction(1, 0, 300)).ok());
  EXPECT_EQ(cs.free_gpu_milli_of_spec(ab), 15700);
  EXPECT_EQ(cs.free_gpu_milli(), 23700);
  ASSERT_TRUE(cs.SetGpuHealth(2, 5, false).ok());  // an unhealthy GPU is
  EXPECT_EQ(cs.free_gpu_milli_of_spec(c), 7000);   // not free
  EXPECT_TRUE(cs.Forget("p"));
  EXPECT_EQ(cs.free_gpu_milli_of_spec(ab), 16000);
  EXPECT_EQ(cs.free_gpu_milli(), 23000);
  EXPECT_EQ(cs.free_gpu_milli_of_spec(-1), 0);
  EXPECT_EQ(cs.free_gpu_milli_of_spec(99), 0);
}

TEST(ClusterStateTest, RejectsNodesPlacementCannotModel) {
  ClusterState cs;
  NodeSpec big = EightGpuNode("big");
  big.gpu_count = 17;
  big.mig_slots = 0;
  EXPECT_THAT(cs.AddNode(big).status().message(),
              HasSubstr("17 GPUs; at most 16 per node"));
  NodeSpec slots = EightGpuNode("slots");
  slots.mig_slots = 4;  // an H100 has 8
  EXPECT_THAT(cs.AddNode(slots).status().message(),
              HasSubstr("mig_slots 4 but H100-SXM-80GB has 8"));
  NodeSpec t4 = EightGpuNode("t4");
  t4.gpu_model = "T4";
  EXPECT_THAT(cs.AddNode(t4).status().message(),
              HasSubstr("'T4' is not MIG-capable"));
  EXPECT_EQ(cs.num_nodes(), 0);
  const uint64_t epoch = cs.cluster_epoch();
  ASSERT_TRUE(cs.AddNode(EightGpuNode("ok")).ok());
  EXPECT_GT(cs.cluster_epoch(), epoch);
}

TEST(ClusterStateTest, FitsExplainsWhy) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(EightGpuNode("n0")).ok());
  ASSERT_TRUE(cs.Assume("a", Fraction(0, 0, 700)).ok());
  EXPECT_THAT(cs.Fits(Fraction(0, 0, 400)),
              HasSubstr("need 400 milli, free 300"));
  EXPECT_THAT(cs.Fits(Fraction(0, 9, 1)), HasSubstr("no GPU 9"));
  Allocation mig;
  mig.node = 0;
  mig.gpus.push_back({.gpu = 0,
                      .milli = 142,
                      .memory_mib = 9984,
                      .mig_start = 0,
                      .mig_size = 1});
  EXPECT_THAT(cs.Fits(mig), HasSubstr("time-shared"));
  mig.gpus[0].gpu = 1;
  ASSERT_TRUE(cs.Assume("m", mig).ok());
  EXPECT_THAT(cs.Fits(Fraction(0, 1, 100)), HasSubstr("partitioned into MIG"));
  EXPECT_THAT(cs.Fits(mig), HasSubstr("overlap"));
  mig.gpus[0].mig_start = 7;
  mig.gpus[0].mig_size = 2;
  EXPECT_THAT(cs.Fits(mig), HasSubstr("outside"));
}

// Two whole GPUs, then one in MIG mode with 1g@0, 1g@1 and 3g@4, as a
// cluster manager created them.
NodeSpec StaticMigNode(const std::string& name) {
  NodeSpec s = EightGpuNode(name);
  s.gpu_count = 3;
  s.mig_instances = {{}, {}, {{"1g.10gb", 0}, {"1g.10gb", 1}, {"3g.40gb", 4}}};
  return s;
}

Allocation Slice(int node, int gpu, const std::string& profile, int start,
                 int size) {
  Allocation a;
  a.node = node;
  a.gpus.push_back({.gpu = gpu,
                    .milli = size == 4 ? 428 : 142,
                    .memory_mib = 9984,
                    .mig_start = start,
                    .mig_size = size,
                    .mig_profile = profile});
  return a;
}

TEST(ClusterStateTest, StaticMigLayoutTakesSlicesOnlyAtItsInstances) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(StaticMigNode("n0")).ok());
  const NodeState& st = cs.state(0);
  EXPECT_TRUE(st.gpus[2].mig_static);
  EXPECT_FALSE(st.gpus[0].mig_static);
  // The MIG GPU is neither idle nor a place for shares or whole GPUs.
  EXPECT_EQ(st.idle_gpus, 2);
  EXPECT_THAT(cs.Fits(Fraction(0, 2, 100)), HasSubstr("in MIG mode"));
  // A slice at an instance fits; anywhere else it does not, and a whole
  // GPU takes none.
  EXPECT_EQ(cs.Fits(Slice(0, 2, "1g.10gb", 1, 1)), "");
  EXPECT_THAT(cs.Fits(Slice(0, 2, "1g.10gb", 2, 1)),
              HasSubstr("no MIG instance 1g.10gb at slot 2"));
  EXPECT_THAT(cs.Fits(Slice(0, 0, "1g.10gb", 0, 1)),
              HasSubstr("no MIG instance"));
  ASSERT_TRUE(cs.Assume("a", Slice(0, 2, "1g.10gb", 1, 1)).ok());
  EXPECT_THAT(cs.Fits(Slice(0, 2, "1g.10gb", 1, 1)), HasSubstr("overlap"));
  // Slots that other work holds.
  ASSERT_TRUE(cs.SetMigForeign(0, 2, MigSlotMask(4, 4)).ok());
  EXPECT_THAT(cs.Fits(Slice(0, 2, "3g.40gb", 4, 4)),
              HasSubstr("held by other work"));
  EXPECT_EQ(cs.Snapshot()->states[0].gpus[2].mig_foreign, MigSlotMask(4, 4));
  ASSERT_TRUE(cs.SetMigForeign(0, 2, 0).ok());
  EXPECT_EQ(cs.Fits(Slice(0, 2, "3g.40gb", 4, 4)), "");
  EXPECT_FALSE(cs.SetMigForeign(0, 2, 1u << 8).ok());  // 8 slots
  EXPECT_FALSE(cs.SetMigForeign(0, 3, 1).ok());
  // Forget gives the instance back.
  EXPECT_TRUE(cs.Forget("a"));
  EXPECT_EQ(cs.Fits(Slice(0, 2, "1g.10gb", 1, 1)), "");
}

TEST(ClusterStateTest, RejectsStaticLayoutsTheDriverWouldNot) {
  ClusterState cs;
  NodeSpec count = StaticMigNode("count");
  count.mig_instances.pop_back();
  EXPECT_THAT(cs.AddNode(count).status().message(),
              HasSubstr("mig_instances has 2 entries for 3 GPUs"));
  NodeSpec overlap = StaticMigNode("overlap");
  overlap.mig_instances[2].push_back({"1g.10gb", 4});
  EXPECT_THAT(cs.AddNode(overlap).status().message(), HasSubstr("GPU 2"));
  NodeSpec spelling = StaticMigNode("spelling");
  spelling.mig_instances[2][0].profile = "MIG 1g.10gb";
  EXPECT_THAT(cs.AddNode(spelling).status().message(),
              HasSubstr("spelling of a MIG profile"));
  NodeSpec t4 = StaticMigNode("t4");
  t4.gpu_model = "T4";
  t4.mig_slots = 0;
  EXPECT_THAT(cs.AddNode(t4).status().message(), HasSubstr("not MIG-capable"));
  EXPECT_EQ(cs.num_nodes(), 0);
  // The layout is part of the node type: same layout, same type.
  ASSERT_TRUE(cs.AddNode(StaticMigNode("a")).ok());
  ASSERT_TRUE(cs.AddNode(StaticMigNode("b")).ok());
  NodeSpec other = StaticMigNode("c");
  other.mig_instances[2].pop_back();
  ASSERT_TRUE(cs.AddNode(other).ok());
  EXPECT_EQ(cs.node_spec_id(0), cs.node_spec_id(1));
  EXPECT_NE(cs.node_spec_id(0), cs.node_spec_id(2));
}

TEST(ClusterStateDeathTest, DoubleAllocationIsACheckFailure) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(EightGpuNode("n0")).ok());
  ASSERT_TRUE(cs.Assume("a", Fraction(0, 0, 700)).ok());
  EXPECT_DEATH((void)cs.Assume("b", Fraction(0, 0, 400)),
               "double allocation for pod 'b'");
}

TEST(ClusterStateTest, IdenticalNodesShareOneClass) {
  ClusterState cs;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(cs.AddNode(EightGpuNode("n" + std::to_string(i))).ok());
  }
  EXPECT_EQ(cs.live_classes().size(), 1u);
  ASSERT_TRUE(cs.Assume("a", Fraction(5, 0, 500)).ok());
  ASSERT_TRUE(
      cs.Assume("b", Fraction(6, 7, 500)).ok());  // same state, other GPU
  EXPECT_EQ(cs.live_classes().size(), 2u);
  EXPECT_EQ(cs.class_of(5), cs.class_of(6));
  cs.Forget("a");
  cs.Forget("b");
  EXPECT_EQ(cs.live_classes().size(), 1u);
}

TEST(ClusterStateTest, SnapshotIsImmutableAndCached) {
  ClusterState cs;
  ASSERT_TRUE(cs.AddNode(EightGpuNode("n0")).ok());
  auto s1 = cs.Snapshot();
  EXPECT_EQ(cs.Snapshot(), s1);
  ASSERT_TRUE(cs.Assume("a", Fraction(0, 0, 700)).ok());
  auto s2 = cs.Snapshot();
  EXPECT_NE(s2, s1);
  EXPECT_EQ(s1->states[0].gpus[0].milli_free, 1000);
  EXPECT_EQ(s2->states[0].gpus[0].milli_free, 300);
  ASSERT_EQ(s2->pods.size(), 1u);
  EXPECT_EQ(s2->pods[0].first, "a");
}

// The trivial reference model: a list of allocations, with every free
// quantity recomputed from scratch on demand.
struct Model {
  std::vector<NodeSpec> specs;
  std::map<std::string, Allocation> pods;
  std::map<std::pair<int, int>, bool> unhealthy;

  NodeState Compute(int n) const {
    NodeState st;
    st.cpu_free = specs[n].cpu_milli;
    st.memory_free_mib = specs[n].memory_mib;
    st.gpus.resize(specs[n].gpu_count);
    for (auto& g : st.gpus) g.memory_free_mib = specs[n].gpu_memory_mib;
    for (int i = 0; i < specs[n].gpu_count; ++i) {
      st.gpus[i].healthy = !unhealthy.count({n, i});
    }
    for (const auto& [id, a] : pods) {
      if (a.node != n) continue;
      st.cpu_free -= a.cpu_milli;
      st.memory_free_mib -= a.memory_mib;
      for (const GpuShare& s : a.gpus) {
        GpuState& g = st.gpus[s.gpu];
        g.milli_free -= s.milli;
        g.memory_free_mib -= s.memory_mib;
        if (s.mig_start >= 0) {
          g.mig_used |= ((1u << s.mig_size) - 1) << s.mig_start;
          g.mig_milli += s.milli;
        }
      }
    }
    return st;
  }

  bool Fits(const Allocation& a) const {
    NodeState st = Compute(a.node);
    if (a.cpu_milli > st.cpu_free || a.memory_mib > st.memory_free_mib) {
      return false;
    }
    for (const GpuShare& s : a.gpus) {
      const GpuState& g = st.gpus[s.gpu];
      if (!g.healthy || s.milli > g.milli_free ||
          s.memory_mib > g.memory_free_mib) {
        return false;
      }
      if (s.mig_start >= 0) {
        const uint32_t mask = ((1u << s.mig_size) - 1) << s.mig_start;
        if ((g.mig_used & mask) || g.milli_free + g.mig_milli != 1000) {
          return false;
        }
      } else if (g.mig_used) {
        return false;
      }
    }
    return true;
  }
};

TEST(ClusterStateTest, RandomizedAgainstReferenceModel) {
  const uint64_t seed = 20261129;
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  ClusterState cs;
  Model model;
  for (int i = 0; i < 12; ++i) {
    NodeSpec s = EightGpuNode("n" + std::to_string(i));
    s.gpu_count = 2 + 2 * static_cast<int>(rng.Uniform(2));
    s.cpu_milli = 8000 * (1 + static_cast<int>(rng.Uniform(2)));
    s.gpu_memory_mib = 40000;
    if (i % 3 == 0) {
      s.nvlink_group.resize(s.gpu_count);
      for (int g = 0; g < s.gpu_count; ++g) s.nvlink_group[g] = g / 4;
    }
    ASSERT_TRUE(cs.AddNode(s).ok());
    model.specs.push_back(s);
  }
  int next_pod = 0, assumed = 0, rejected = 0;
  for (int op = 0; op < 5000; ++op) {
    SCOPED_TRACE("op " + std::to_string(op));
    const uint64_t kind = rng.Uniform(10);
    if (kind < 6) {
      Allocation a;
      a.node = static_cast<int>(rng.Uniform(model.specs.size()));
      const NodeSpec& spec = model.specs[a.node];
      a.cpu_milli = 500 * static_cast<int64_t>(rng.Uniform(8));
      a.memory_mib = 1024 * static_cast<int64_t>(rng.Uniform(8));
      const int shares = static_cast<int>(rng.Uniform(3));
      std::vector<int> gpus(spec.gpu_count);
      for (int g = 0; g < spec.gpu_count; ++g) gpus[g] = g;
      rng.Shuffle(gpus);
      for (int k = 0; k < shares && k < spec.gpu_count; ++k) {
        GpuShare s;
        s.gpu = gpus[k];
        if (rng.Uniform(4) == 0) {
          s.mig_size = 1 << rng.Uniform(3);
          s.mig_start =
              s.mig_size * static_cast<int>(rng.Uniform(8 / s.mig_size));
          s.milli = 142 * s.mig_size;
          s.memory_mib = 5000 * s.mig_size;
        } else {
          s.milli = 100 * (1 + static_cast<int>(rng.Uniform(10)));
          s.memory_mib = 4000 * static_cast<int64_t>(rng.Uniform(5));
        }
        a.gpus.push_back(s);
      }
      const bool fits = model.Fits(a);
      ASSERT_EQ(cs.Fits(a).empty(), fits) << cs.Fits(a);
      if (fits) {
        const std::string id = "p" + std::to_string(next_pod++);
        ASSERT_TRUE(cs.Assume(id, a).ok());
        model.pods[id] = a;
        ++assumed;
      } else {
        ++rejected;
      }
    } else if (kind < 9) {
      // Forget a live pod, or an unknown one (idempotence).
      std::string id = "p" + std::to_string(rng.Uniform(next_pod + 1));
      const bool had = model.pods.erase(id) > 0;
      ASSERT_EQ(cs.Forget(id), had);
    } else {
      const int n = static_cast<int>(rng.Uniform(model.specs.size()));
      const int g = static_cast<int>(rng.Uniform(model.specs[n].gpu_count));
      const bool healthy = rng.Uniform(3) != 0;
      ASSERT_TRUE(cs.SetGpuHealth(n, g, healthy).ok());
      if (healthy) {
        model.unhealthy.erase({n, g});
      } else {
        model.unhealthy[{n, g}] = true;
      }
    }
    // Full comparison against the model.
    int64_t allocated = 0, total = 0;
    for (const auto& [id, a] : model.pods) allocated += a.GpuMilli();
    for (int n = 0; n < cs.num_nodes(); ++n) {
      const NodeState want = model.Compute(n);
      const NodeState& got = cs.state(n);
      ASSERT_EQ(got.cpu_free, want.cpu_free);
      ASSERT_EQ(got.memory_free_mib, want.memory_free_mib);
      ASSERT_EQ(got.gpus, want.gpus);
      // Derived fields, recomputed here from the model's GPUs.
      int idle = 0, max_free = 0;
      int64_t free_sum = 0;
      for (const GpuState& g : want.gpus) {
        if (!g.healthy) continue;
        free_sum += g.milli_free;
        if (g.Idle()) ++idle;
        if (g.mig_used == 0) max_free = std::max(max_free, g.milli_free);
      }
      ASSERT_EQ(got.idle_gpus, idle);
      ASSERT_EQ(got.max_milli_free, max_free);
      ASSERT_EQ(got.gpu_milli_free, free_sum);
      for (const GpuState& g : want.gpus) total += g.healthy ? 1000 : 0;
    }
    ASSERT_EQ(cs.allocated_gpu_milli(), allocated);
    ASSERT_EQ(cs.total_gpu_milli(), total);
    ASSERT_EQ(cs.num_pods(), model.pods.size());
    // Class invariants: each node in exactly its class; a class's members
    // share spec and sorted state.
    size_t members = 0;
    for (int c : cs.live_classes()) {
      const NodeClass& nc = cs.node_class(c);
      ASSERT_FALSE(nc.members.empty());
      members += nc.members.size();
      const int first = *nc.members.begin();
      for (int m : nc.members) {
        ASSERT_EQ(cs.class_of(m), c);
        ASSERT_EQ(cs.state(m).cpu_free, cs.state(first).cpu_free);
        ASSERT_EQ(cs.state(m).gpu_milli_free, cs.state(first).gpu_milli_free);
        ASSERT_EQ(cs.spec(m).gpu_count, cs.spec(first).gpu_count);
      }
    }
    ASSERT_EQ(members, static_cast<size_t>(cs.num_nodes()));
    // ... and nodes with the same spec and the same (sorted) state share one.
    for (int a = 0; a < cs.num_nodes(); ++a) {
      for (int b = a + 1; b < cs.num_nodes(); ++b) {
        const NodeSpec& sa = model.specs[a];
        const NodeSpec& sb = model.specs[b];
        if (sa.gpu_count != sb.gpu_count || sa.cpu_milli != sb.cpu_milli ||
            sa.nvlink_group != sb.nvlink_group) {
          continue;
        }
        std::vector<GpuState> ga = cs.state(a).gpus, gb = cs.state(b).gpus;
        auto less = [](const GpuState& x, const GpuState& y) {
          return std::tie(x.healthy, x.mig_used, x.milli_free,
                          x.memory_free_mib, x.mig_milli) <
                 std::tie(y.healthy, y.mig_used, y.milli_free,
                          y.memory_free_mib, y.mig_milli);
        };
        if (sa.nvlink_group.empty()) {
          std::sort(ga.begin(), ga.end(), less);
          std::sort(gb.begin(), gb.end(), less);
        }
        const bool same =
            ga == gb && cs.state(a).cpu_free == cs.state(b).cpu_free &&
            cs.state(a).memory_free_mib == cs.state(b).memory_free_mib;
        ASSERT_EQ(cs.class_of(a) == cs.class_of(b), same)
            << "nodes " << a << " and " << b;
      }
    }
  }
  EXPECT_GT(assumed, 500);
  EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace gpusched::inventory
