#include "inventory/gpu_catalog.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::inventory {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const GpuCatalog& Cat() { return GpuCatalog::Builtin(); }

TEST(GpuCatalogTest, ShipsTheDocumentedModels) {
  EXPECT_THAT(
      Cat().Names(),
      ElementsAre("A100-40GB", "A100-80GB", "H100-SXM-80GB", "H100-PCIe-80GB",
                  "H100-NVL-94GB", "H200-141GB", "B200-180GB", "L4-24GB",
                  "L40S-48GB", "T4-16GB", "A10-24GB", "A10G-24GB", "P100-16GB",
                  "V100-16GB", "V100-32GB"));
}

TEST(GpuCatalogTest, FindsByNameAliasAndNvmlName) {
  struct Case {
    const char* query;
    const char* model;  // nullptr: not found
  };
  const Case cases[] = {
      {"H100-SXM-80GB", "H100-SXM-80GB"},
      {"h100-sxm-80gb", "H100-SXM-80GB"},
      {"NVIDIA H100 80GB HBM3", "H100-SXM-80GB"},
      {"nvidia h100 80gb hbm3", "H100-SXM-80GB"},
      {"H100", "H100-SXM-80GB"},
      {"h100_sxm", "H100-SXM-80GB"},
      {"NVIDIA H100 PCIe", "H100-PCIe-80GB"},
      {"NVIDIA H100 NVL", "H100-NVL-94GB"},
      {"NVIDIA H200", "H200-141GB"},
      {"NVIDIA A100-SXM4-40GB", "A100-40GB"},
      {"NVIDIA A100 80GB PCIe", "A100-80GB"},
      {"NVIDIA B200", "B200-180GB"},
      {"NVIDIA L4", "L4-24GB"},
      {"L40S", "L40S-48GB"},
      {"Tesla T4", "T4-16GB"},
      {"T4", "T4-16GB"},
      {"A10", "A10-24GB"},
      {"NVIDIA A10G", "A10G-24GB"},
      {"P100", "P100-16GB"},
      {"Tesla V100-SXM2-16GB", "V100-16GB"},
      {"V100M16", "V100-16GB"},
      {"V100M32", "V100-32GB"},
      {"  V100-32GB ", "V100-32GB"},
      // "NVIDIA " / "Tesla " prefixes are optional.
      {"NVIDIA H100-SXM-80GB", "H100-SXM-80GB"},
      {"Tesla V100-32GB", "V100-32GB"},
      // Ambiguous short forms are deliberately not aliases.
      {"A100", nullptr},
      {"V100", nullptr},
      {"G2", nullptr},
      {"NVIDIA GeForce RTX 4090", nullptr},
      {"", nullptr},
  };
  for (const Case& c : cases) {
    const GpuModelSpec* m = Cat().Find(c.query);
    if (c.model == nullptr) {
      EXPECT_EQ(m, nullptr) << c.query << " found " << m->name;
    } else {
      ASSERT_NE(m, nullptr) << c.query;
      EXPECT_EQ(m->name, c.model) << c.query;
    }
  }
}

TEST(GpuCatalogTest, FindsByPciDeviceId) {
  EXPECT_EQ(Cat().FindByPciDeviceId(0x233010DE)->name, "H100-SXM-80GB");
  EXPECT_EQ(Cat().FindByPciDeviceId(0x233110DE)->name, "H100-PCIe-80GB");
  EXPECT_EQ(Cat().FindByPciDeviceId(0x232110DE)->name, "H100-NVL-94GB");
  EXPECT_EQ(Cat().FindByPciDeviceId(0x233B10DE)->name, "H200-141GB");
  EXPECT_EQ(Cat().FindByPciDeviceId(0x20B510DE)->name, "A100-80GB");
  EXPECT_EQ(Cat().FindByPciDeviceId(0x12345678), nullptr);
}

TEST(GpuCatalogTest, WholeGpuFacts) {
  struct Case {
    const char* model;
    int64_t memory_mib;
    int sms;
    int bandwidth;
    bool mig;
    NvLinkKind nvlink;
  };
  const Case cases[] = {
      {"A100-40GB", 40960, 108, 1555, true, NvLinkKind::kSxm},
      {"A100-80GB", 81920, 108, 2039, true, NvLinkKind::kSxm},
      {"H100-SXM-80GB", 81559, 132, 3350, true, NvLinkKind::kSxm},
      {"H100-PCIe-80GB", 81559, 114, 2000, true, NvLinkKind::kBridge},
      {"H100-NVL-94GB", 95830, 132, 3900, true, NvLinkKind::kBridge},
      {"H200-141GB", 143771, 132, 4800, true, NvLinkKind::kSxm},
      {"B200-180GB", 183359, 148, 8000, true, NvLinkKind::kSxm},
      {"L4-24GB", 23034, 58, 300, false, NvLinkKind::kNone},
      {"L40S-48GB", 46068, 142, 864, false, NvLinkKind::kNone},
      {"T4-16GB", 15360, 40, 320, false, NvLinkKind::kNone},
      {"A10-24GB", 23028, 72, 600, false, NvLinkKind::kNone},
      {"A10G-24GB", 23028, 80, 600, false, NvLinkKind::kNone},
      {"P100-16GB", 16276, 56, 732, false, NvLinkKind::kSxm},
      {"V100-16GB", 16384, 80, 900, false, NvLinkKind::kSxm},
      {"V100-32GB", 32768, 80, 900, false, NvLinkKind::kSxm},
  };
  for (const Case& c : cases) {
    const GpuModelSpec* m = Cat().Find(c.model);
    ASSERT_NE(m, nullptr) << c.model;
    EXPECT_EQ(m->memory_mib, c.memory_mib) << c.model;
    EXPECT_EQ(m->sm_count, c.sms) << c.model;
    EXPECT_EQ(m->memory_bandwidth_gbps, c.bandwidth) << c.model;
    EXPECT_EQ(m->mig_capable(), c.mig) << c.model;
    EXPECT_EQ(m->nvlink, c.nvlink) << c.model;
    if (!c.mig) {
      EXPECT_TRUE(m->mig_profiles.empty()) << c.model;
    }
  }
}

TEST(GpuCatalogTest, MigProfilesOfH100Sxm) {
  const GpuModelSpec& m = *Cat().Find("H100-SXM-80GB");
  EXPECT_EQ(m.mig_memory_slots, 8);
  EXPECT_EQ(m.mig_compute_slices, 7);
  struct Case {
    const char* name;
    int id, compute, slots, max, milli;
    int64_t mib;
    std::vector<int> starts;
  };
  const Case cases[] = {
      {"1g.10gb", 19, 1, 1, 7, 142, 9984, {0, 1, 2, 3, 4, 5, 6}},
      {"1g.10gb+me", 20, 1, 1, 1, 142, 9984, {0, 1, 2, 3, 4, 5, 6}},
      {"1g.20gb", 15, 1, 2, 4, 142, 20096, {0, 2, 4, 6}},
      {"2g.20gb", 14, 2, 2, 3, 285, 20096, {0, 2, 4}},
      {"3g.40gb", 9, 3, 4, 2, 428, 40448, {0, 4}},
      {"4g.40gb", 5, 4, 4, 1, 571, 40448, {0}},
      {"7g.80gb", 0, 7, 8, 1, 1000, 81152, {0}},
  };
  ASSERT_EQ(m.mig_profiles.size(), std::size(cases));
  for (const Case& c : cases) {
    const MigProfile* p = m.FindMigProfile(c.name);
    ASSERT_NE(p, nullptr) << c.name;
    EXPECT_EQ(p->profile_id, c.id) << c.name;
    EXPECT_EQ(p->compute_slices, c.compute) << c.name;
    EXPECT_EQ(p->memory_slots, c.slots) << c.name;
    EXPECT_EQ(p->max_count, c.max) << c.name;
    EXPECT_EQ(p->milli, c.milli) << c.name;
    EXPECT_EQ(p->memory_mib, c.mib) << c.name;
    EXPECT_EQ(p->starts, c.starts) << c.name;
    EXPECT_EQ(p->media_extensions,
              absl::string_view(c.name).find("+me") != absl::string_view::npos)
        << c.name;
    EXPECT_EQ(m.FindMigProfileById(c.id), p) << c.name;
  }
}

TEST(GpuCatalogTest, MigProfileNamesPerModel) {
  struct Case {
    const char* model;
    std::vector<std::string> names;
  };
  const Case cases[] = {
      {"A100-40GB",
       {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb",
        "7g.40gb"}},
      {"A100-80GB",
       {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
        "7g.80gb"}},
      {"H100-PCIe-80GB",
       {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb",
        "7g.80gb"}},
      {"H100-NVL-94GB",
       {"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb",
        "7g.94gb"}},
      {"H200-141GB",
       {"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb",
        "7g.141gb"}},
      {"B200-180GB",
       {"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb",
        "7g.180gb"}},
  };
  for (const Case& c : cases) {
    const GpuModelSpec& m = *Cat().Find(c.model);
    std::vector<std::string> names;
    for (const MigProfile& p : m.mig_profiles) names.push_back(p.name);
    EXPECT_EQ(names, c.names) << c.model;
  }
}

// Invariants every MIG-capable model in the catalog must satisfy.
TEST(GpuCatalogTest, MigProfilesAreConsistent) {
  for (const GpuModelSpec& m : Cat().models()) {
    if (!m.mig_capable()) continue;
    SCOPED_TRACE(m.name);
    std::set<int> ids;
    int64_t prev_mib = 0;
    for (const MigProfile& p : m.mig_profiles) {
      SCOPED_TRACE(p.name);
      EXPECT_EQ(p.milli, p.compute_slices * 1000 / m.mig_compute_slices);
      EXPECT_LE(p.memory_mib, m.memory_mib);
      EXPECT_GE(p.memory_mib, prev_mib);  // listed smallest first
      prev_mib = p.memory_mib;
      EXPECT_GT(p.memory_mib, 0);
      // The name's "Ng" is the compute slice count.
      EXPECT_EQ(p.name.substr(0, 2), absl::StrCat(p.compute_slices, "g"));
      if (p.profile_id >= 0) {
        EXPECT_TRUE(ids.insert(p.profile_id).second);
      }
      for (int s : p.starts) {
        EXPECT_LE(s + p.memory_slots, m.mig_memory_slots);
        EXPECT_EQ(s % p.memory_slots, 0) << "start " << s << " misaligned";
      }
      // Max count equals the number of disjoint starts.
      int disjoint = 0, end = 0;
      for (int s : p.starts) {
        if (s >= end) {
          ++disjoint;
          end = s + p.memory_slots;
        }
      }
      if (!p.media_extensions) {
        EXPECT_EQ(p.max_count, disjoint);
      }
    }
    const MigProfile& full = m.mig_profiles.back();
    EXPECT_EQ(full.compute_slices, m.mig_compute_slices);
    EXPECT_EQ(full.memory_slots, m.mig_memory_slots);
    EXPECT_EQ(full.milli, 1000);
  }
}

TEST(GpuCatalogTest, FindMigProfileSpellings) {
  const GpuModelSpec& m = *Cat().Find("A100-80GB");
  for (const char* s : {"3g.40gb", "3G.40GB", "MIG 3g.40gb", "mig-3g.40gb",
                        "nvidia.com/mig-3g.40gb"}) {
    const MigProfile* p = m.FindMigProfile(s);
    ASSERT_NE(p, nullptr) << s;
    EXPECT_EQ(p->name, "3g.40gb");
  }
  EXPECT_EQ(m.FindMigProfile("3g.20gb"), nullptr);  // an A100-40GB name
  EXPECT_EQ(m.FindMigProfileById(-1), nullptr);
  EXPECT_EQ(Cat().Find("T4")->FindMigProfile("1g.5gb"), nullptr);
}

TEST(GpuCatalogTest, CreateRejectsDuplicatesAndBadGeometry) {
  GpuModelSpec a;
  a.name = "X";
  a.aliases = {"same"};
  GpuModelSpec b;
  b.name = "Y";
  b.aliases = {"SAME"};
  absl::StatusOr<GpuCatalog> dup = GpuCatalog::Create({a, b});
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(dup.status().message(), HasSubstr("'SAME' names both X and Y"));

  GpuModelSpec c;
  c.name = "Z";
  c.mig_memory_slots = 8;
  c.mig_compute_slices = 7;
  MigProfile p;
  p.name = "3g.x";
  p.compute_slices = 3;
  p.memory_slots = 4;
  p.max_count = 1;
  p.starts = {6};
  c.mig_profiles = {p};
  absl::StatusOr<GpuCatalog> bad = GpuCatalog::Create({c});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("start 6 outside the GPU"));

  c.mig_profiles[0].starts = {4};
  absl::StatusOr<GpuCatalog> ok = GpuCatalog::Create({c});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->Find("z")->mig_profiles[0].milli, 428);
}

}  // namespace
}  // namespace gpusched::inventory
