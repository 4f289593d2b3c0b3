#include "placement/preemption.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inventory/gpu_catalog.h"
#include "placement/registry.h"
#include "placement/testing.h"

namespace gpusched::placement {
namespace {

using testing::GpuQueue;

using inventory::Allocation;
using inventory::ClusterState;
using inventory::GpuShare;
using inventory::NodeSpec;
using inventory::PodInfo;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kGpuMemory = 81920;
constexpr char kMigModel[] = "H100-SXM-80GB";

// A running pod: whole GPUs (milli 1000) or a fraction of each listed GPU.
struct Running {
  std::string id;
  std::string queue;
  int priority = 0;
  int node = 0;
  std::vector<int> gpus;
  int milli = 1000;
  bool preemptible = true;
  // >= 0: a MIG slice of `profile` starting at this slot on gpus[0]; its
  // milli and memory are the profile's (`milli` is ignored).
  int mig_start = -1;
  std::string profile = "1g.10gb";
};

// A MIG slice of `profile` at slot `start` of GPU `gpu` on node 0, queue a.
Running Slice(std::string id, int priority, int gpu, int start,
              std::string profile = "1g.10gb", bool preemptible = true) {
  Running r;
  r.id = std::move(id);
  r.queue = "a";
  r.priority = priority;
  r.gpus = {gpu};
  r.preemptible = preemptible;
  r.mig_start = start;
  r.profile = std::move(profile);
  return r;
}

// Slices of the 1g profile at slots 0..6 of `gpu` (a full GPU: slot 7 fits
// no 1g), ids prefix0..prefix6, all of `priority`.
std::vector<Running> FullOfSlices(const std::string& prefix, int priority,
                                  int gpu, bool preemptible = true) {
  std::vector<Running> out;
  for (int s = 0; s < 7; ++s) {
    out.push_back(Slice(prefix + std::to_string(s), priority, gpu, s, "1g.10gb",
                        preemptible));
  }
  return out;
}

// The pending pod.
struct Ask {
  std::string queue;
  int priority = 0;
  GpuKind kind = GpuKind::kWhole;
  int amount = 1;  // GPUs (whole) or milli (fraction)
  Topology topology = Topology::kAny;
  std::string mig = "1g.10gb";  // the profile of a kMig request
};

NodeSpec Node(int i, bool nvlink, const std::string& model = kMigModel) {
  NodeSpec s;
  s.name = "n" + std::to_string(i);
  s.cpu_milli = 64000;
  s.memory_mib = 524288;
  s.gpu_model = model;
  s.gpu_count = 8;
  s.gpu_memory_mib = kGpuMemory;
  const inventory::GpuModelSpec* m =
      inventory::GpuCatalog::Builtin().Find(model);
  s.mig_slots = m != nullptr ? m->mig_memory_slots : 0;
  if (nvlink) s.nvlink_group = {0, 0, 0, 0, 1, 1, 1, 1};
  return s;
}

PodRequest MakeRequest(const Ask& a) {
  PodRequest p;
  p.kind = a.kind;
  p.cpu_milli = 1000;
  p.memory_mib = 1024;
  p.topology = a.topology;
  if (a.kind == GpuKind::kWhole) {
    p.gpus = a.amount;
    p.gpu_milli = 1000;
  } else if (a.kind == GpuKind::kFraction) {
    p.gpus = 1;
    p.gpu_milli = a.amount;
  } else if (a.kind == GpuKind::kMig) {
    // As CompilePodRequest resolves it: the profile's compute share.
    p.gpus = 1;
    p.mig_profile = a.mig;
    const inventory::MigProfile* profile =
        inventory::GpuCatalog::Builtin().Find(kMigModel)->FindMigProfile(a.mig);
    p.gpu_milli = profile != nullptr ? profile->milli : 0;
  }
  p.info = {a.queue, a.priority, true};
  return p;
}

// A cluster of 8-GPU nodes, a queue tree, and running pods charged to both.
// Node i has GPU model models[i], or kMigModel when `models` is empty.
struct World {
  ClusterState cs;
  std::unique_ptr<QueueTree> tree;

  World(int nodes, std::vector<QueueConfig> queues,
        const std::vector<Running>& running, bool nvlink = false,
        const std::vector<std::string>& models = {}) {
    for (int i = 0; i < nodes; ++i) {
      EXPECT_TRUE(
          cs.AddNode(Node(i, nvlink, models.empty() ? kMigModel : models[i]))
              .ok());
    }
    absl::StatusOr<QueueTree> t = QueueTree::Create(std::move(queues));
    EXPECT_TRUE(t.ok()) << t.status();
    tree = std::make_unique<QueueTree>(*std::move(t));
    for (const Running& r : running) Start(r);
  }

  void Start(const Running& r) {
    Allocation a;
    a.node = r.node;
    a.cpu_milli = 1000;
    a.memory_mib = 1024;
    for (int g : r.gpus) {
      GpuShare s;
      s.gpu = g;
      s.milli = r.milli;
      if (r.milli == 1000) s.memory_mib = kGpuMemory;
      if (r.mig_start >= 0) {
        const inventory::MigProfile* p =
            inventory::GpuCatalog::Builtin().Find(kMigModel)->FindMigProfile(
                r.profile);
        ASSERT_NE(p, nullptr) << r.profile;
        s.milli = p->milli;
        s.memory_mib = p->memory_mib;
        s.mig_start = r.mig_start;
        s.mig_size = p->memory_slots;
        s.mig_profile = p->name;
      }
      a.gpus.push_back(s);
    }
    ASSERT_TRUE(
        cs.Assume(r.id, a, PodInfo{r.queue, r.priority, r.preemptible}).ok())
        << r.id;
    ASSERT_TRUE(tree->Charge(r.id, r.queue, AmountsOf(a), r.priority).ok())
        << r.id;
  }

  PreemptionPlan Plan(const Ask& ask, const PreemptionOptions& options = {}) {
    return PlanPreemption(cs, *tree, MakeRequest(ask), DefaultFilters(),
                          options);
  }
};

// n pods on one node, one per GPU starting at `first_gpu`, ids
// prefix0..prefix(n-1).
std::vector<Running> Fill(const std::string& prefix, const std::string& queue,
                          int priority, int node, int first_gpu, int n,
                          bool preemptible = true) {
  std::vector<Running> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({prefix + std::to_string(i),
                   queue,
                   priority,
                   node,
                   {first_gpu + i},
                   1000,
                   preemptible});
  }
  return out;
}

std::vector<Running> Concat(std::vector<std::vector<Running>> parts) {
  std::vector<Running> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

struct Case {
  const char* label;
  int nodes = 1;
  std::vector<QueueConfig> queues = {};
  std::vector<Running> running = {};
  Ask ask = {};
  bool found = false;
  int node = -1;
  std::vector<std::string> victims = {};  // ascending priority, then id
  std::vector<std::string> reason_has = {};
  bool nvlink = false;
  std::vector<std::string> models = {};  // per node; empty: all kMigModel
};

void Check(const Case& c) {
  SCOPED_TRACE(c.label);
  World w(c.nodes, c.queues, c.running, c.nvlink, c.models);
  const PreemptionPlan plan = w.Plan(c.ask);
  EXPECT_EQ(plan.found, c.found) << plan.reason;
  std::string text = plan.reason;
  for (const PreemptionVictim& v : plan.victims) text += "\n" + v.reason;
  if (c.found) {
    EXPECT_EQ(plan.node, c.node) << text;
    EXPECT_THAT(plan.VictimIds(), ElementsAreArray(c.victims)) << text;
    EXPECT_TRUE(plan.exhaustive);
  }
  for (const std::string& r : c.reason_has) EXPECT_THAT(text, HasSubstr(r));
}

const std::vector<QueueConfig> kOneQueue = {GpuQueue("a", "", 0)};

TEST(PreemptionTest, OnlyLowerPriorityPods) {
  const Case cases[] = {
      {.label = "the one lower-priority pod goes",
       .queues = kOneQueue,
       .running =
           Concat({Fill("hi", "a", 500, 0, 0, 7), {{"lo", "a", 100, 0, {7}}}}),
       .ask = {"a", 500},
       .found = true,
       .node = 0,
       .victims = {"lo"},
       .reason_has = {"priority 100 < 500 in the same queue 'a'"}},
      {.label = "equal priority is not enough",
       .queues = kOneQueue,
       .running = Fill("p", "a", 500, 0, 0, 8),
       .ask = {"a", 500},
       .reason_has = {"1 node: no eligible victims",
                      "8 of the same queue not of lower priority"}},
      {.label = "higher priority stays",
       .queues = kOneQueue,
       .running = Fill("p", "a", 1000, 0, 0, 8),
       .ask = {"a", 500},
       .reason_has = {"no eligible victims"}},
      {.label = "a borrowed lower-priority pod of another queue goes",
       .queues = {GpuQueue("a", "", 0), GpuQueue("b", "", 0)},
       .running = Fill("b", "b", 100, 0, 0, 8),
       .ask = {"a", 500},
       .found = true,
       .node = 0,
       .victims = {"b0"},
       .reason_has = {"borrowed: over the quota of queue 'b'"}},
      {.label = "another queue's guaranteed lower-priority pod stays",
       .queues = {GpuQueue("a", "", 0), GpuQueue("b", "", 8000)},
       .running = Fill("b", "b", 100, 0, 0, 8),
       .ask = {"a", 500},
       .reason_has = {"8 of other queues (in quota"}},
  };
  for (const Case& c : cases) Check(c);
}

TEST(PreemptionTest, NeverNonPreemptible) {
  const Case cases[] = {
      {.label = "non-preemptible pods stay whatever their priority",
       .queues = kOneQueue,
       .running = Fill("sys", "a", 0, 0, 0, 8, /*preemptible=*/false),
       .ask = {"a", 2000},
       .reason_has = {"8 non-preemptible"}},
      {.label = "a node of higher-priority preemptible pods is used instead",
       .nodes = 2,
       .queues = kOneQueue,
       .running = Concat(
           {Fill("sys", "a", 0, 0, 0, 8, false), Fill("p", "a", 900, 1, 0, 8)}),
       .ask = {"a", 2000},
       .found = true,
       .node = 1,
       .victims = {"p0"}},
      {.label = "a gang cannot be made of one preemptible GPU",
       .queues = kOneQueue,
       .running = Concat(
           {Fill("sys", "a", 0, 0, 0, 7, false), {{"p", "a", 0, 0, {7}}}}),
       .ask = {"a", 2000, GpuKind::kWhole, 2},
       .reason_has = {"too small even with every eligible pod evicted",
                      "7 non-preemptible"}},
  };
  for (const Case& c : cases) Check(c);
}

TEST(PreemptionTest, CheapestSet) {
  const Case cases[] = {
      {.label = "lowest priority first, across nodes",
       .nodes = 2,
       .queues = kOneQueue,
       .running =
           Concat({Fill("x", "a", 100, 0, 0, 8), Fill("y", "a", 0, 1, 0, 8)}),
       .ask = {"a", 500},
       .found = true,
       .node = 1,
       .victims = {"y0"}},
      {.label = "lowest priority first, even if it releases more GPU",
       .nodes = 2,
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 100, 0, 0, 8),
                          Fill("hi", "a", 1000, 1, 0, 4),
                          {{"big", "a", 0, 1, {4, 5, 6, 7}}}}),
       .ask = {"a", 500},
       .found = true,
       .node = 1,
       .victims = {"big"}},
      {.label = "then least GPU released, across nodes",
       .nodes = 2,
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 1000, 0, 0, 4),
                          {{"four", "a", 0, 0, {4, 5, 6, 7}}},
                          Fill("y", "a", 1000, 1, 0, 7),
                          {{"one", "a", 0, 1, {7}}}}),
       .ask = {"a", 500},
       .found = true,
       .node = 1,
       .victims = {"one"}},
      {.label = "then least GPU released, on one node",
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 1000, 0, 0, 3),
                          {{"four", "a", 0, 0, {3, 4, 5, 6}}},
                          {{"one", "a", 0, 0, {7}}}}),
       .ask = {"a", 500},
       .found = true,
       .node = 0,
       .victims = {"one"},
       .reason_has = {"1000 GPU milli released, 0 beyond the pod's need"}},
      {.label = "then fewest victims",
       .nodes = 2,
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 1000, 0, 0, 6),
                          Fill("single", "a", 0, 0, 6, 2),
                          Fill("y", "a", 1000, 1, 0, 6),
                          {{"pair", "a", 0, 1, {6, 7}}}}),
       .ask = {"a", 500, GpuKind::kWhole, 2},
       .found = true,
       .node = 1,
       .victims = {"pair"}},
      {.label = "then the lowest node index",
       .nodes = 3,
       .queues = kOneQueue,
       .running =
           Concat({Fill("x", "a", 100, 0, 0, 8), Fill("y", "a", 100, 1, 0, 8),
                   Fill("z", "a", 100, 2, 0, 8)}),
       .ask = {"a", 500},
       .found = true,
       .node = 0,
       .victims = {"x0"}},
      {.label = "a pod that fits needs no victims",
       .nodes = 2,
       .queues = kOneQueue,
       .running =
           Concat({Fill("x", "a", 0, 0, 0, 8), Fill("y", "a", 0, 1, 0, 7)}),
       .ask = {"a", 500},
       .found = true,
       .node = 1,
       .victims = {},
       .reason_has = {"fits on node n1 without preemption"}},
  };
  for (const Case& c : cases) Check(c);
}

TEST(PreemptionTest, MultiGpuGangs) {
  // Priorities by GPU: 0 0 100 100 | 0 0 100 100.
  const std::vector<Running> mixed = {
      {"g0", "a", 0, 0, {0}},   {"g1", "a", 0, 0, {1}},
      {"g2", "a", 100, 0, {2}}, {"g3", "a", 100, 0, {3}},
      {"g4", "a", 0, 0, {4}},   {"g5", "a", 0, 0, {5}},
      {"g6", "a", 100, 0, {6}}, {"g7", "a", 100, 0, {7}},
  };
  const Case cases[] = {
      {.label = "four GPUs from four victims, lowest priority",
       .queues = kOneQueue,
       .running = mixed,
       .ask = {"a", 500, GpuKind::kWhole, 4},
       .found = true,
       .node = 0,
       .victims = {"g0", "g1", "g4", "g5"}},
      {.label = "an NVLink-required gang must come from one domain",
       .queues = kOneQueue,
       .running = mixed,
       .ask = {"a", 500, GpuKind::kWhole, 4, Topology::kRequired},
       .found = true,
       .node = 0,
       .victims = {"g0", "g1", "g2", "g3"},
       .nvlink = true},
      {.label = "one multi-GPU victim beats two single ones",
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 1000, 0, 0, 3),
                          {{"two", "a", 0, 0, {3, 4}}},
                          Fill("single", "a", 0, 0, 5, 3)}),
       .ask = {"a", 500, GpuKind::kWhole, 3},
       .found = true,
       .node = 0,
       .victims = {"single0", "two"}},
  };
  for (const Case& c : cases) Check(c);
}

TEST(PreemptionTest, FractionalVictims) {
  const Case cases[] = {
      {.label = "exact search: one 700m victim beats two 500m ones",
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 1000, 0, 2, 6),
                          {{"f500a", "a", 0, 0, {0}, 500},
                           {"f500b", "a", 0, 0, {0}, 500},
                           {"f700", "a", 0, 0, {1}, 700}}}),
       .ask = {"a", 500, GpuKind::kFraction, 600},
       .found = true,
       .node = 0,
       .victims = {"f700"},
       .reason_has = {"700 GPU milli released, 100 beyond"}},
      {.label = "a whole GPU needs every fraction on it gone",
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 1000, 0, 1, 7),
                          {{"s1", "a", 0, 0, {0}, 300},
                           {"s2", "a", 0, 0, {0}, 300},
                           {"s3", "a", 100, 0, {0}, 400}}}),
       .ask = {"a", 500},
       .found = true,
       .node = 0,
       .victims = {"s1", "s2", "s3"}},
      {.label = "a fraction makes room from the lowest priority share",
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 1000, 0, 2, 6),
                          {{"lo", "a", 0, 0, {0}, 300},
                           {"mid", "a", 100, 0, {0}, 400},
                           {"mid2", "a", 100, 0, {1}, 600}}}),
       .ask = {"a", 500, GpuKind::kFraction, 500},
       .found = true,
       .node = 0,
       .victims = {"lo"}},
      {.label = "a MIG slice goes to free a whole GPU",
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 1000, 0, 1, 7),
                          {{"mig", "a", 0, 0, {0}, 142, true, 0}}}),
       .ask = {"a", 500},
       .found = true,
       .node = 0,
       .victims = {"mig"}},
  };
  for (const Case& c : cases) Check(c);
}

TEST(PreemptionTest, MigRequests) {
  // GPUs 1..7 hold priority-1000 whole pods, out of reach of a priority-500
  // preemptor, unless a case says otherwise.
  const std::vector<Running> busy = Fill("x", "a", 1000, 0, 1, 7);
  const Ask one_g = {"a", 500, GpuKind::kMig};
  const Ask seven_g = {"a", 500, GpuKind::kMig, 1, Topology::kAny, "7g.80gb"};
  std::vector<Running> one_low = FullOfSlices("s", 1000, 0);
  one_low[3].priority = 100;
  const Case cases[] = {
      {.label = "a slot freed by evicting a lower-priority slice",
       .queues = kOneQueue,
       .running = Concat({busy, one_low}),
       .ask = one_g,
       .found = true,
       .node = 0,
       .victims = {"s3"},
       .reason_has = {"142 GPU milli released, 0 beyond the pod's need",
                      "priority 100 < 500 in the same queue 'a'"}},
      {.label = "a free slot needs no victims",
       .queues = kOneQueue,
       .running = Concat({busy, {Slice("s0", 0, 0, 6)}}),
       .ask = one_g,
       .found = true,
       .node = 0,
       .victims = {},
       .reason_has = {"fits on node n0 without preemption"}},
      {.label = "a 7g needing a whole GPU evicts a fractional pod",
       .queues = kOneQueue,
       .running = Concat({busy, {{"frac", "a", 0, 0, {0}, 500}}}),
       .ask = seven_g,
       .found = true,
       .node = 0,
       .victims = {"frac"},
       .reason_has = {"500 GPU milli released, 0 beyond"}},
      {.label = "a 7g needs every slice on its GPU gone",
       .queues = kOneQueue,
       .running = Concat(
           {busy,
            {Slice("one", 0, 0, 0), Slice("three", 100, 0, 4, "3g.40gb")}}),
       .ask = seven_g,
       .found = true,
       .node = 0,
       .victims = {"one", "three"}},
      {.label = "a slice never shares a GPU with a fraction that stays",
       .queues = kOneQueue,
       .running = Concat(
           {busy,
            {{"lo", "a", 0, 0, {0}, 300}, {"hi", "a", 1000, 0, {0}, 300}}}),
       .ask = one_g,
       .reason_has = {"1 node: too small even with every eligible pod evicted",
                      "8 of the same queue not of lower priority"}},
      {.label = "a non-preemptible slice is never evicted",
       .queues = kOneQueue,
       .running = Concat({busy, FullOfSlices("sys", 0, 0, false)}),
       .ask = one_g,
       .reason_has = {"1 node: no eligible victims", "7 non-preemptible"}},
      {.label = "a higher-priority pod goes instead of a non-preemptible slice",
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 1000, 0, 1, 6),
                          {{"p", "a", 900, 0, {7}}},
                          FullOfSlices("sys", 0, 0, false)}),
       .ask = {"a", 2000, GpuKind::kMig},
       .found = true,
       .node = 0,
       .victims = {"p"}},
      {.label = "cheapest among two GPUs: a slice releases less than a "
                "fraction",
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 1000, 0, 2, 6),
                          {{"frac", "a", 0, 0, {0}, 300}},
                          FullOfSlices("s", 0, 1)}),
       .ask = one_g,
       .found = true,
       .node = 0,
       .victims = {"s0"},
       .reason_has = {"142 GPU milli released, 0 beyond"}},
      {.label = "cheapest among two GPUs: lowest priority first",
       .queues = kOneQueue,
       .running = Concat({Fill("x", "a", 1000, 0, 2, 6),
                          {{"frac", "a", 0, 0, {0}, 300}},
                          FullOfSlices("s", 100, 1)}),
       .ask = one_g,
       .found = true,
       .node = 0,
       .victims = {"frac"},
       .reason_has = {"300 GPU milli released, 158 beyond"}},
      {.label = "at its limit, the queue frees the slice's milli",
       .queues = {GpuQueue("a", "", 0, 1000)},
       .running = {{"a0", "a", 100, 0, {0}}},
       .ask = one_g,
       .found = true,
       .node = 0,
       .victims = {"a0"},
       .reason_has = {"same queue 'a'"}},
      {.label = "no plan on a node whose GPUs are not MIG-capable",
       .queues = kOneQueue,
       .running = Fill("p", "a", 0, 0, 0, 8),
       .ask = one_g,
       .reason_has = {"1 node: GpuFit: GPU model not MIG-capable"},
       .models = {"L40S-48GB"}},
      {.label = "no plan for a profile the model does not have",
       .queues = kOneQueue,
       .running = Fill("p", "a", 0, 0, 0, 8),
       .ask = {"a", 500, GpuKind::kMig, 1, Topology::kAny, "1g.18gb"},
       .reason_has = {"1 node: GpuFit: no such MIG profile on this GPU model"}},
      {.label = "the MIG-capable node of a mixed cluster",
       .nodes = 2,
       .queues = kOneQueue,
       .running =
           Concat({Fill("p", "a", 0, 0, 0, 8), Fill("q", "a", 0, 1, 0, 8)}),
       .ask = one_g,
       .found = true,
       .node = 1,
       .victims = {"q0"},
       .models = {"L40S-48GB", kMigModel}},
  };
  for (const Case& c : cases) Check(c);
}

TEST(PreemptionTest, ReclaimForUnderQuotaQueue) {
  const Case cases[] = {
      {.label = "reclaims an over-quota pod of higher priority",
       .queues = {GpuQueue("a", "", 4000), GpuQueue("b", "", 4000)},
       .running = Concat({Fill("b-in", "b", 1000, 0, 0, 4),
                          Fill("b-over", "b", 500, 0, 4, 4)}),
       .ask = {"a", 100},
       .found = true,
       .node = 0,
       .victims = {"b-over0"},
       .reason_has = {"reclaim for queue 'a' (in quota)",
                      "queue 'b' above its fair share (GPU milli 8000 > "
                      "7000)"}},
      {.label = "no reclaim once the preemptor is over its own quota",
       .nodes = 2,
       .queues = {GpuQueue("a", "", 4000), GpuQueue("b", "", 4000)},
       .running =
           Concat({Fill("a", "a", 100, 0, 0, 4), Fill("b", "b", 500, 0, 4, 4),
                   Fill("b-more", "b", 500, 1, 0, 8)}),
       .ask = {"a", 100},
       .reason_has = {"4 of the same queue not of lower priority",
                      "12 of other queues"}},
      {.label = "only from a queue above its fair share",
       // Fair shares with a's pending GPU: a 2000, b 2000, c 4000.
       .queues = {GpuQueue("a", "", 2000), GpuQueue("b", "", 1000, kNoLimit, 1),
                  GpuQueue("c", "", 1000, kNoLimit, 3)},
       .running = Concat({{{"a0", "a", 100, 0, {0}}},
                          Fill("b", "b", 500, 0, 1, 2),
                          Fill("c", "c", 500, 0, 3, 5)}),
       .ask = {"a", 100},
       .found = true,
       .node = 0,
       .victims = {"c1"},
       .reason_has = {"queue 'c' above its fair share"}},
      {.label = "across departments: the other branch is over its share",
       .queues = {GpuQueue("d1", "", 2000), GpuQueue("t1", "d1", 2000),
                  GpuQueue("d2", "", 0), GpuQueue("t2", "d2", 0),
                  GpuQueue("t3", "d2", 0)},
       .running = Concat(
           {Fill("t2-", "t2", 500, 0, 0, 4), Fill("t3-", "t3", 500, 0, 4, 4)}),
       .ask = {"t1", 100},
       .found = true,
       .node = 0,
       .victims = {"t2-0"},
       .reason_has = {"queue 'd2' above its fair share"}},
      {.label = "a department's guarantee covers its zero-quota tenants",
       // t1's pods are over t1's quota (0) and of lower priority, but d1
       // is within its own quota: only y, borrowing, gives way.
       .queues = {GpuQueue("x", "", 4000), GpuQueue("d1", "", 4000),
                  GpuQueue("t1", "d1", 0), GpuQueue("y", "", 0)},
       .running = Concat(
           {Fill("t1-", "t1", 0, 0, 0, 4), Fill("y", "y", 500, 0, 4, 4)}),
       .ask = {"x", 100},
       .found = true,
       .node = 0,
       .victims = {"y0"},
       .reason_has = {"reclaim for queue 'x'"}},
  };
  for (const Case& c : cases) Check(c);
}

TEST(PreemptionTest, QueueLimits) {
  const Case cases[] = {
      {.label = "at its limit, a queue makes room among its own pods",
       .queues = {GpuQueue("a", "", 0, 2000)},
       .running = Fill("a", "a", 100, 0, 0, 2),
       .ask = {"a", 1000},
       .found = true,
       .node = 0,
       .victims = {"a0"},
       .reason_has = {"same queue 'a'"}},
      {.label = "a limit no eviction can lift",
       .queues = {GpuQueue("a", "", 0, 2000)},
       .running = Fill("a", "a", 1000, 0, 0, 2),
       .ask = {"a", 1000},
       .reason_has = {"queue 'a': GPU milli 3000 would exceed its limit 2000",
                      "1 node: no eligible victims"}},
      {.label = "victims elsewhere do not lift a limit",
       .queues = {GpuQueue("a", "", 0, 2000), GpuQueue("b", "", 0)},
       .running =
           Concat({Fill("a", "a", 1000, 0, 0, 2), Fill("b", "b", 0, 0, 2, 6)}),
       .ask = {"a", 1000},
       .reason_has = {"leaves the queue over its limit",
                      "would exceed its limit 2000"}},
      {.label = "a department limit, freed by a sibling's borrowed pod",
       .queues = {GpuQueue("d", "", 0, 2000), GpuQueue("t1", "d", 0),
                  GpuQueue("t2", "d", 0)},
       .running = Fill("t2-", "t2", 100, 0, 0, 2),
       .ask = {"t1", 1000},
       .found = true,
       .node = 0,
       .victims = {"t2-0"},
       .reason_has = {"borrowed"}},
  };
  for (const Case& c : cases) Check(c);
}

TEST(PreemptionTest, NoPlanReasons) {
  World w(2, kOneQueue, Fill("p", "a", 0, 0, 0, 8));
  EXPECT_THAT(w.Plan({"ghost", 500}).reason, HasSubstr("unknown queue"));
  PodRequest wrong_model = MakeRequest({"a", 500});
  wrong_model.any_model = false;
  wrong_model.model_mask = 0;
  const PreemptionPlan plan =
      PlanPreemption(w.cs, *w.tree, wrong_model, DefaultFilters());
  EXPECT_FALSE(plan.found);
  EXPECT_THAT(plan.reason, HasSubstr("2 nodes: GpuModel: GPU model mismatch"));
}

// Rejects node "n0" whatever it holds.
class NotN0 : public FilterPlugin {
 public:
  absl::string_view name() const override { return "NotN0"; }
  FilterVerdict Filter(const PodRequest&, const ClusterState& cs,
                       int node) const override {
    if (cs.spec(node).name == "n0") return {"node n0 is cordoned"};
    return {};
  }
};

TEST(PreemptionTest, FiltersConfirmTheChosenNode) {
  World w(2, kOneQueue,
          Concat({Fill("x", "a", 0, 0, 0, 8), Fill("y", "a", 100, 1, 0, 8)}));
  std::vector<std::unique_ptr<FilterPlugin>> filters = DefaultFilters();
  filters.push_back(std::make_unique<NotN0>());
  PreemptionPlan plan =
      PlanPreemption(w.cs, *w.tree, MakeRequest({"a", 500}), filters);
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_EQ(plan.node, 1);
  EXPECT_THAT(plan.VictimIds(), ElementsAreArray({"y0"}));

  World full(1, kOneQueue, Fill("x", "a", 0, 0, 0, 8));
  plan = PlanPreemption(full.cs, *full.tree, MakeRequest({"a", 500}), filters);
  EXPECT_FALSE(plan.found);
  EXPECT_THAT(plan.reason, HasSubstr("1 node: NotN0: node n0 is cordoned"));
}

TEST(PreemptionTest, SearchBudgetStillGivesAMinimalSet) {
  World w(1, kOneQueue,
          Concat({Fill("x", "a", 1000, 0, 2, 6),
                  {{"f500a", "a", 0, 0, {0}, 500},
                   {"f500b", "a", 0, 0, {0}, 500},
                   {"f700", "a", 0, 0, {1}, 700}}}));
  PreemptionOptions options;
  options.max_fit_checks_per_node = 1;
  const PreemptionPlan plan =
      w.Plan({"a", 500, GpuKind::kFraction, 600}, options);
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_FALSE(plan.exhaustive);
  // The greedy start: minimal (neither can be spared), not the cheapest.
  EXPECT_THAT(plan.VictimIds(), ElementsAreArray({"f500a", "f500b"}));
}

TEST(PreemptionTest, PlanningChangesNothingAndApplyCarriesItOut) {
  World w(2, {GpuQueue("a", "", 4000), GpuQueue("b", "", 4000)},
          Concat({Fill("b-in", "b", 1000, 0, 0, 4),
                  Fill("b-over", "b", 500, 0, 4, 4),
                  Fill("b-x", "b", 500, 1, 0, 8)}));
  const uint64_t version = w.cs.version();
  const PodRequest pod = MakeRequest({"a", 100});
  const PreemptionPlan plan =
      PlanPreemption(w.cs, *w.tree, pod, DefaultFilters());
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_EQ(w.cs.version(), version);
  EXPECT_EQ(w.tree->Usage("b").gpu_milli, 16000);
  ASSERT_EQ(plan.victims.size(), 1u);
  const std::string victim = plan.victims[0].pod;
  EXPECT_EQ(plan.victims[0].queue, "b");
  EXPECT_EQ(plan.victims[0].priority, 500);
  EXPECT_EQ(plan.victims[0].gpu_milli, 1000);

  absl::StatusOr<std::unique_ptr<ScorePlugin>> policy =
      NewPolicy("best-fit", {});
  ASSERT_TRUE(policy.ok());
  Scheduler scheduler(&w.cs, *std::move(policy), /*seed=*/1);
  absl::StatusOr<Decision> d =
      ApplyPreemption(plan, "new", pod, scheduler, w.tree.get());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->allocation.node, plan.node);
  EXPECT_EQ(w.cs.FindPod(victim), nullptr);
  EXPECT_NE(w.cs.FindPod("new"), nullptr);
  EXPECT_EQ(w.tree->QueueOf(victim), "");
  EXPECT_EQ(w.tree->QueueOf("new"), "a");
  EXPECT_EQ(w.tree->Usage("a").gpu_milli, 1000);
  EXPECT_EQ(w.tree->Usage("b").gpu_milli, 15000);

  // A plan made before the cluster changed is refused, changing nothing.
  const PreemptionPlan stale =
      PlanPreemption(w.cs, *w.tree, pod, DefaultFilters());
  ASSERT_TRUE(stale.found) << stale.reason;
  w.cs.Forget("b-x7");
  const uint64_t before = w.cs.version();
  EXPECT_EQ(ApplyPreemption(stale, "new2", pod, scheduler, w.tree.get())
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.cs.version(), before);
  EXPECT_EQ(ApplyPreemption(PreemptionPlan{}, "new2", pod, scheduler, nullptr)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(PreemptionTest, MigPlanThenApply) {
  std::vector<Running> running =
      Concat({Fill("x", "a", 1000, 0, 1, 7), FullOfSlices("s", 1000, 0)});
  running[7 + 3].priority = 100;  // s3
  World w(1, kOneQueue, running);
  const PodRequest pod = MakeRequest({"a", 500, GpuKind::kMig});
  const PreemptionPlan plan =
      PlanPreemption(w.cs, *w.tree, pod, DefaultFilters());
  ASSERT_TRUE(plan.found) << plan.reason;
  EXPECT_THAT(plan.VictimIds(), ElementsAreArray({"s3"}));
  EXPECT_EQ(plan.gpu_milli_released, 142);
  EXPECT_EQ(plan.gpu_milli_excess, 0);
  const int64_t before = w.tree->Usage("a").gpu_milli;

  absl::StatusOr<std::unique_ptr<ScorePlugin>> policy =
      NewPolicy("best-fit", {});
  ASSERT_TRUE(policy.ok());
  Scheduler scheduler(&w.cs, *std::move(policy), /*seed=*/1);
  absl::StatusOr<Decision> d =
      ApplyPreemption(plan, "new", pod, scheduler, w.tree.get());
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->allocation.gpus.size(), 1u);
  EXPECT_EQ(d->allocation.gpus[0].gpu, 0);
  EXPECT_EQ(d->allocation.gpus[0].mig_start, 3);
  EXPECT_EQ(w.cs.FindPod("s3"), nullptr);
  EXPECT_EQ(w.tree->Usage("a").gpu_milli, before);
}

// A scheduler whose extra filter disagrees with the plan: the pod cannot go
// on the planned node, so the victims come back as they were.
class RejectEverything : public FilterPlugin {
 public:
  absl::string_view name() const override { return "RejectEverything"; }
  FilterVerdict Filter(const PodRequest&, const ClusterState&,
                       int) const override {
    return {"no"};
  }
};

TEST(PreemptionTest, FailedApplyRestoresTheVictims) {
  std::vector<Running> running =
      Concat({Fill("x", "a", 1000, 0, 1, 7), FullOfSlices("s", 1000, 0)});
  running[7 + 3].priority = 100;  // s3
  World w(1, kOneQueue, running);
  const PodRequest pod = MakeRequest({"a", 500, GpuKind::kMig});
  const PreemptionPlan plan =
      PlanPreemption(w.cs, *w.tree, pod, DefaultFilters());
  ASSERT_TRUE(plan.found) << plan.reason;
  const inventory::Allocation s3 = w.cs.FindPod("s3")->allocation;
  const int64_t usage = w.tree->Usage("a").gpu_milli;
  auto filters = DefaultFilters();
  filters.push_back(std::make_unique<RejectEverything>());
  Scheduler scheduler(&w.cs, *NewPolicy("best-fit", {}), 1, std::move(filters));
  absl::StatusOr<Decision> d =
      ApplyPreemption(plan, "new", pod, scheduler, w.tree.get());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(d.status().message(), HasSubstr("victims restored"));
  ASSERT_NE(w.cs.FindPod("s3"), nullptr);
  EXPECT_EQ(w.cs.FindPod("s3")->allocation, s3);
  EXPECT_EQ(w.cs.FindPod("new"), nullptr);
  EXPECT_EQ(w.tree->Usage("a").gpu_milli, usage);
}

}  // namespace
}  // namespace gpusched::placement
