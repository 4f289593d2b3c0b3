#include "inventory/mig.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::inventory {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const GpuModelSpec& Model(const char* name) {
  const GpuModelSpec* m = GpuCatalog::Builtin().Find(name);
  EXPECT_NE(m, nullptr) << name;
  return *m;
}

const MigProfile& Profile(const GpuModelSpec& m, const char* name) {
  const MigProfile* p = m.FindMigProfile(name);
  EXPECT_NE(p, nullptr) << name;
  return *p;
}

// Slot mask from a string, slot 0 first: "11110000" = slots 0-3 taken.
uint32_t Used(const char* slots) {
  uint32_t mask = 0;
  for (int i = 0; slots[i] != '\0'; ++i) {
    if (slots[i] == '1') mask |= 1u << i;
  }
  return mask;
}

std::map<std::string, int> Counts(const MigPlan& plan) {
  std::map<std::string, int> out;
  for (const MigSlice& s : plan.slices) ++out[s.profile->name];
  return out;
}

TEST(MigTest, SlotMask) {
  EXPECT_EQ(MigSlotMask(0, 1), 0x1u);
  EXPECT_EQ(MigSlotMask(4, 4), 0xF0u);
  EXPECT_EQ(MigSlotMask(0, 8), 0xFFu);
  EXPECT_EQ(MigSlotMask(0, 32), 0xFFFFFFFFu);
  EXPECT_EQ(MigSlotMask(3, 0), 0u);
}

TEST(MigTest, ValidStarts) {
  struct Case {
    const char* profile;
    const char* used;
    std::vector<int> starts;
  };
  const Case cases[] = {
      {"1g.10gb", "00000000", {0, 1, 2, 3, 4, 5, 6}},  // never slot 7
      {"1g.10gb", "11111110", {}},
      {"1g.10gb+me", "10000000", {1, 2, 3, 4, 5, 6}},
      {"1g.20gb", "00000010", {0, 2, 4}},
      {"2g.20gb", "00001100", {0, 2}},
      {"2g.20gb", "00000001", {0, 2, 4}},  // never slot 6
      {"3g.40gb", "00000000", {0, 4}},
      {"3g.40gb", "10000000", {4}},
      {"3g.40gb", "00000001", {0}},
      {"3g.40gb", "01000100", {}},
      {"4g.40gb", "00001111", {0}},  // 4g at 0 beside a 3g at 4
      {"4g.40gb", "00100000", {}},
      {"7g.80gb", "00000000", {0}},
      {"7g.80gb", "00000001", {}},
  };
  const GpuModelSpec& m = Model("H100-SXM-80GB");
  for (const Case& c : cases) {
    EXPECT_EQ(ValidMigStarts(m, Profile(m, c.profile), Used(c.used)), c.starts)
        << c.profile << " on " << c.used;
  }
  // Not MIG-capable: nothing.
  const GpuModelSpec& t4 = Model("T4");
  EXPECT_THAT(ValidMigStarts(t4, Profile(m, "1g.10gb"), 0), IsEmpty());
}

TEST(MigTest, ChooseStartKeepsRoomForBigProfiles) {
  struct Case {
    const char* profile;
    const char* used;
    int start;
  };
  const Case cases[] = {
      // First small slices go to the top, as NVIDIA's driver does, keeping
      // 4g/3g at 0 possible.
      {"1g.10gb", "00000000", 6},
      {"1g.10gb", "00000010", 5},
      {"1g.20gb", "00000000", 6},
      {"2g.20gb", "00000000", 4},
      // A 3g goes where a 4g can still follow (4g needs slot 0).
      {"3g.40gb", "00000000", 4},
      {"3g.40gb", "11110000", 4},
      {"3g.40gb", "00001111", 0},
      {"4g.40gb", "00001111", 0},
      {"3g.40gb", "00000011", 0},
      // Once slot 4 is taken, a 1g packs beside it: 0-3 stay whole for a
      // 4g/3g and 6-7 for a 1g.20gb.
      {"1g.10gb", "00001000", 5},
      {"7g.80gb", "00000000", 0},
      {"7g.80gb", "00000001", -1},
      {"1g.10gb", "11111110", -1},
  };
  const GpuModelSpec& m = Model("A100-80GB");
  for (const Case& c : cases) {
    EXPECT_EQ(ChooseMigStart(m, Profile(m, c.profile), Used(c.used)), c.start)
        << c.profile << " on " << c.used;
  }
}

TEST(MigTest, ChooseStartFillsAGpuWithSevenSmallSlices) {
  const GpuModelSpec& m = Model("H200-141GB");
  const MigProfile& p = Profile(m, "1g.18gb");
  uint32_t used = 0;
  std::vector<int> starts;
  for (int i = 0; i < 7; ++i) {
    const int s = ChooseMigStart(m, p, used);
    ASSERT_GE(s, 0) << "slice " << i;
    starts.push_back(s);
    used |= MigSlotMask(s, 1);
  }
  EXPECT_EQ(starts, (std::vector<int>{6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(ChooseMigStart(m, p, used), -1);
}

TEST(MigTest, ValidateLayout) {
  struct Case {
    std::vector<std::pair<const char*, int>> slices;
    bool pre_r510;
    const char* error;  // nullptr: valid
  };
  const Case cases[] = {
      {{{"7g.80gb", 0}}, false, nullptr},
      {{{"3g.40gb", 0}, {"3g.40gb", 4}}, false, nullptr},
      {{{"4g.40gb", 0}, {"3g.40gb", 4}}, false, nullptr},
      {{{"4g.40gb", 0}, {"3g.40gb", 4}}, true, "before driver R510"},
      {{{"4g.40gb", 0}, {"2g.20gb", 4}, {"1g.10gb", 6}}, true, nullptr},
      {{{"2g.20gb", 0}, {"2g.20gb", 2}, {"2g.20gb", 4}, {"1g.10gb", 6}},
       false,
       nullptr},
      {{{"1g.20gb", 0}, {"1g.20gb", 2}, {"1g.20gb", 4}, {"1g.20gb", 6}},
       false,
       nullptr},
      {{{"1g.10gb+me", 3}, {"1g.10gb", 0}}, false, nullptr},
      {{{"1g.10gb", 7}}, false, "cannot start at slot 7"},
      {{{"2g.20gb", 6}}, false, "cannot start at slot 6"},
      {{{"3g.40gb", 2}}, false, "cannot start at slot 2"},
      {{{"4g.40gb", 4}}, false, "cannot start at slot 4"},
      {{{"1g.20gb", 0}, {"2g.20gb", 0}}, false, "overlaps"},
      {{{"7g.80gb", 0}, {"1g.10gb", 3}}, false, "overlaps"},
      {{{"1g.10gb+me", 0}, {"1g.10gb+me", 1}}, false, "more than 1"},
  };
  const GpuModelSpec& m = Model("H100-SXM-80GB");
  for (const Case& c : cases) {
    std::vector<MigSlice> slices;
    for (const auto& [name, start] : c.slices) {
      slices.push_back({&Profile(m, name), start});
    }
    const absl::Status st =
        ValidateMigLayout(m, slices, MigRules{.pre_r510_driver = c.pre_r510});
    SCOPED_TRACE(MigLayoutString(slices));
    if (c.error == nullptr) {
      EXPECT_TRUE(st.ok()) << st;
    } else {
      EXPECT_THAT(st.message(), HasSubstr(c.error));
    }
  }
  // A profile of another model is refused.
  const GpuModelSpec& a100 = Model("A100-40GB");
  EXPECT_THAT(ValidateMigLayout(m, {{&Profile(a100, "1g.5gb"), 0}}).message(),
              HasSubstr("is not a H100-SXM-80GB profile"));
  EXPECT_THAT(ValidateMigLayout(Model("L4"), {}).message(),
              HasSubstr("does not support MIG"));
}

// Every layout the slot rules allow also respects the compute budget and the
// max counts (so the mask-only functions are safe), on every MIG model.
TEST(MigTest, SlotRulesImplyComputeAndCountLimits) {
  for (const GpuModelSpec& m : GpuCatalog::Builtin().models()) {
    if (!m.mig_capable()) continue;
    SCOPED_TRACE(m.name);
    int layouts = 0;
    std::vector<MigSlice> cur;
    std::function<void(size_t, int, uint32_t)> dfs = [&](size_t pi, int si,
                                                         uint32_t used) {
      ++layouts;
      bool media = false;
      for (const MigSlice& s : cur)
        media = media || s.profile->media_extensions;
      // At most one +me: a count rule the mask cannot express, skipped here.
      const absl::Status st = ValidateMigLayout(m, cur);
      if (!media) {
        EXPECT_TRUE(st.ok()) << MigLayoutString(cur);
      }
      for (size_t p = pi; p < m.mig_profiles.size(); ++p) {
        const MigProfile& prof = m.mig_profiles[p];
        if (prof.media_extensions) continue;
        const auto& starts = prof.starts;
        for (size_t k = (p == pi ? si : 0); k < starts.size(); ++k) {
          const uint32_t mask = MigSlotMask(starts[k], prof.memory_slots);
          if (used & mask) continue;
          cur.push_back({&prof, starts[k]});
          dfs(p, static_cast<int>(k) + 1, used | mask);
          cur.pop_back();
        }
      }
    };
    dfs(0, 0, 0);
    EXPECT_GT(layouts, 100);
  }
}

TEST(MigTest, PlanFillsTwoThreeG) {
  const GpuModelSpec& m = Model("A100-40GB");
  absl::StatusOr<MigPlan> plan = PlanMigLayout(m, {{"3g.20gb", 2}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(MigLayoutString(plan->slices), "3g.20gb@0, 3g.20gb@4");
  EXPECT_EQ(plan->value, 6);
  EXPECT_EQ(plan->used, 0xFFu);
}

// NVIDIA's known issue: 1g, 1g, 2g created first leave no room for a 3g.
// The planner places all four, and lists the 3g first.
TEST(MigTest, PlanAvoidsTheInsufficientResourcesTrap) {
  const GpuModelSpec& m = Model("A100-40GB");
  absl::StatusOr<MigPlan> plan =
      PlanMigLayout(m, {{"1g.5gb", 2}, {"2g.10gb", 1}, {"3g.20gb", 1}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->value, 7);
  EXPECT_EQ(Counts(*plan), (std::map<std::string, int>{
                               {"1g.5gb", 2}, {"2g.10gb", 1}, {"3g.20gb", 1}}));
  EXPECT_EQ(plan->slices[0].profile->name, "3g.20gb");
  EXPECT_TRUE(ValidateMigLayout(m, plan->slices).ok());
}

TEST(MigTest, PlanTable) {
  struct Case {
    const char* name;
    const char* model;
    std::vector<MigDemand> demand;
    MigPlanOptions options;
    double value;
    const char* layout;  // creation order
  };
  MigPlanOptions memory;
  memory.objective = MigObjective::kMemory;
  MigPlanOptions old_driver;
  old_driver.rules.pre_r510_driver = true;
  MigPlanOptions top_taken;
  top_taken.used = 0xF0;  // slots 4-7
  const Case cases[] = {
      {"nothing wanted", "H100-SXM-80GB", {}, {}, 0, ""},
      {"one 7g", "H100-SXM-80GB", {{"7g.80gb", 3}}, {}, 7, "7g.80gb@0"},
      {"seven 1g, the eighth does not fit",
       "H100-SXM-80GB",
       {{"1g.10gb", 8}},
       {},
       7,
       "1g.10gb@0, 1g.10gb@1, 1g.10gb@2, 1g.10gb@3, 1g.10gb@4, 1g.10gb@5, "
       "1g.10gb@6"},
      {"4g beside 3g on R510+",
       "H100-SXM-80GB",
       {{"4g.40gb", 1}, {"3g.40gb", 1}},
       {},
       7,
       "3g.40gb@4, 4g.40gb@0"},
      {"4g or 3g before R510: the 4g is worth more",
       "H100-SXM-80GB",
       {{"4g.40gb", 1}, {"3g.40gb", 1}},
       old_driver,
       4,
       "4g.40gb@0"},
      {"weights decide: a 3g worth 3x beats a 4g",
       "H100-SXM-80GB",
       {{"4g.40gb", 1}, {"3g.40gb", 1, 3.0}},
       old_driver,
       9,
       "3g.40gb@4"},
      {"memory objective prefers 1g.20gb",
       "H100-NVL-94GB",
       {{"1g.24gb", 4}, {"1g.12gb", 7}},
       memory,
       8,
       "1g.24gb@0, 1g.24gb@2, 1g.24gb@4, 1g.24gb@6"},
      {"only one +me",
       "H200-141GB",
       {{"1g.18gb+me", 3}},
       {},
       1,
       "1g.18gb+me@6"},
      {"around taken slots",
       "B200-180GB",
       {{"3g.90gb", 2}},
       top_taken,
       3,
       "3g.90gb@0"},
      {"mixed demand packs the 3g with four 1g",
       "A100-80GB",
       {{"3g.40gb", 1}, {"1g.10gb", 5}},
       {},
       7,
       "3g.40gb@4, 1g.10gb@0, 1g.10gb@1, 1g.10gb@2, 1g.10gb@3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const GpuModelSpec& m = Model(c.model);
    absl::StatusOr<MigPlan> plan = PlanMigLayout(m, c.demand, c.options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->value, c.value);
    EXPECT_EQ(MigLayoutString(plan->slices), c.layout);
    EXPECT_TRUE(ValidateMigLayout(m, plan->slices, c.options.rules).ok());
    EXPECT_EQ(plan->used & c.options.used, c.options.used);
  }
}

TEST(MigTest, PlanRejectsBadDemand) {
  const GpuModelSpec& m = Model("H100-SXM-80GB");
  EXPECT_THAT(PlanMigLayout(m, {{"3g.20gb", 1}}).status().message(),
              HasSubstr("unknown MIG profile '3g.20gb' for H100-SXM-80GB; "
                        "known: 1g.10gb, 1g.10gb+me"));
  EXPECT_THAT(PlanMigLayout(m, {{"3g.40gb", -1}}).status().message(),
              HasSubstr("negative"));
  EXPECT_THAT(PlanMigLayout(Model("L40S"), {}).status().message(),
              HasSubstr("L40S-48GB does not support MIG"));
  EXPECT_FALSE(PlanMigLayouts(m, {}, -1).ok());
}

TEST(MigTest, PlanManyGpusGreedily) {
  const GpuModelSpec& m = Model("H100-SXM-80GB");
  absl::StatusOr<std::vector<MigPlan>> plans =
      PlanMigLayouts(m, {{"3g.40gb", 3}, {"1g.10gb", 4}}, 3);
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_EQ(plans->size(), 3u);
  EXPECT_EQ(MigLayoutString((*plans)[0].slices),
            "3g.40gb@4, 1g.10gb@0, 1g.10gb@1, 1g.10gb@2, 1g.10gb@3");
  EXPECT_EQ(MigLayoutString((*plans)[1].slices), "3g.40gb@0, 3g.40gb@4");
  EXPECT_THAT((*plans)[2].slices, IsEmpty());
  for (const MigPlan& p : *plans) {
    EXPECT_TRUE(ValidateMigLayout(m, p.slices).ok());
  }
}

TEST(MigTest, PlansAreDeterministic) {
  const GpuModelSpec& m = Model("A100-80GB");
  const std::vector<MigDemand> demand = {
      {"1g.10gb", 3}, {"2g.20gb", 2}, {"1g.20gb", 1}, {"3g.40gb", 1}};
  absl::StatusOr<MigPlan> a = PlanMigLayout(m, demand);
  absl::StatusOr<MigPlan> b = PlanMigLayout(m, demand);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->slices, b->slices);
  EXPECT_EQ(a->value, 7);
}

TEST(StaticMigTest, LaysManagerDevicesOntoTheFewestGpus) {
  const GpuModelSpec& h100 = Model("H100-SXM-80GB");
  // 7 x 1g fill one GPU; 2 x 3g another; the order given does not matter.
  auto a = LayOutMigDevices(h100, {{"3g.40gb", 2}, {"1g.10gb", 7}}, 16);
  auto b = LayOutMigDevices(h100, {{"1g.10gb", 7}, {"MIG 3g.40gb", 2}}, 16);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), 2u);
  ASSERT_EQ(b->size(), 2u);
  for (size_t g = 0; g < a->size(); ++g) {
    EXPECT_EQ(MigLayoutString((*a)[g]), MigLayoutString((*b)[g]));
    // Each GPU's layout is valid and listed by ascending start.
    EXPECT_TRUE(ValidateMigLayout(h100, (*a)[g]).ok());
    for (size_t i = 1; i < (*a)[g].size(); ++i) {
      EXPECT_LT((*a)[g][i - 1].start, (*a)[g][i].start);
    }
  }
  int ones = 0, threes = 0;
  for (const auto& gpu : *a) {
    for (const MigSlice& s : gpu) {
      ones += s.profile->name == "1g.10gb";
      threes += s.profile->name == "3g.40gb";
    }
  }
  EXPECT_EQ(ones, 7);
  EXPECT_EQ(threes, 2);
  EXPECT_THAT(*LayOutMigDevices(h100, {}, 16), IsEmpty());
  EXPECT_THAT(*LayOutMigDevices(h100, {{"1g.10gb", 0}}, 16), IsEmpty());
}

TEST(StaticMigTest, ErrorsNameTheProfileAndTheBound) {
  const GpuModelSpec& h100 = Model("H100-SXM-80GB");
  EXPECT_THAT(LayOutMigDevices(h100, {{"1g.5gb", 1}}, 16).status().message(),
              HasSubstr("no MIG profile '1g.5gb' on H100-SXM-80GB"));
  EXPECT_THAT(LayOutMigDevices(h100, {{"1g.10gb", -1}}, 16).status().message(),
              HasSubstr("at most"));
  EXPECT_THAT(
      LayOutMigDevices(h100, {{"1g.10gb", 1000}}, 16).status().message(),
      HasSubstr("at most 112"));
  EXPECT_THAT(LayOutMigDevices(h100, {{"7g.80gb", 3}}, 2).status().message(),
              HasSubstr("do not fit on 2"));
  EXPECT_FALSE(LayOutMigDevices(Model("T4"), {{"1g.10gb", 1}}, 16).ok());
}

TEST(StaticMigTest, AddsGpusAfterTheWholeOnesAndListsSlicesInOrder) {
  NodeSpec spec;
  spec.name = "n";
  spec.gpu_model = "H100-SXM-80GB";
  spec.gpu_count = 2;
  const GpuModelSpec& h100 = Model("H100-SXM-80GB");
  ASSERT_TRUE(
      AddStaticMigGpus(spec, h100, {{"1g.10gb", 3}, {"3g.40gb", 1}}).ok());
  EXPECT_EQ(spec.gpu_count, 3);
  EXPECT_EQ(spec.mig_slots, 8);
  ASSERT_EQ(spec.mig_instances.size(), 3u);
  EXPECT_THAT(spec.mig_instances[0], IsEmpty());
  EXPECT_THAT(spec.mig_instances[1], IsEmpty());
  EXPECT_EQ(spec.mig_instances[2].size(), 4u);
  const auto ones = StaticMigSlices(spec, "1g.10gb");
  ASSERT_EQ(ones.size(), 3u);
  for (size_t i = 0; i < ones.size(); ++i) {
    EXPECT_EQ(ones[i].first, 2);
    if (i > 0) {
      EXPECT_LT(ones[i - 1].second, ones[i].second);
    }
  }
  EXPECT_EQ(StaticMigSlices(spec, "mig-3g.40gb").size(), 1u);
  EXPECT_THAT(StaticMigSlices(spec, "2g.20gb"), IsEmpty());
  // Nothing to add: the node is left as it was.
  NodeSpec plain = spec;
  plain.mig_instances.clear();
  plain.gpu_count = 2;
  plain.mig_slots = 0;
  NodeSpec before = plain;
  ASSERT_TRUE(AddStaticMigGpus(plain, h100, {}).ok());
  EXPECT_EQ(plain.gpu_count, before.gpu_count);
  EXPECT_THAT(plain.mig_instances, IsEmpty());
  // 16 GPUs per node at most.
  NodeSpec full = before;
  full.gpu_count = 15;
  EXPECT_THAT(AddStaticMigGpus(full, h100, {{"7g.80gb", 2}}).message(),
              HasSubstr("do not fit on 1"));
}

}  // namespace
}  // namespace gpusched::inventory
