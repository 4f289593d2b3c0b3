#include "inventory/gpu_catalog.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "inventory/resources.h"

// Source keys (from the project's GPU research notes; docs/inventory.md
// summarises them):
//   [MIG-PROF]   NVIDIA MIG User Guide, "Supported MIG Profiles" (fractions,
//                max instance counts): docs.nvidia.com/datacenter/tesla/
//                mig-user-guide/supported-mig-profiles.html
//   [MIG-GS]     MIG UG "Getting Started": `nvidia-smi mig -lgipp` on
//                A100-40GB (placements).
//   [MIG-UG-R510] MIG UG "Partitioning": before driver R510 a 4g and a 3g
//                profile could not share a GPU; newer drivers allow it.
//   [MIGPARTED]  NVIDIA/mig-parted deployments/systemd/config-default.yaml
//                (PCI device IDs per model).
//   [MIGPARTED-120] NVIDIA/mig-parted issue #120: real `-lgip` on H200 (IDs
//                9/5/0, GiB and SMs for 1g.35gb, 3g.71gb, 4g.71gb, 7g.141gb).
//   [MIGPARTED-166/187] NVIDIA/mig-parted PRs #166/#187: real `-lgip` on
//                B200 (IDs and GiB for 1g.23gb, 1g.23gb+me, 1g.45gb, 2g.45gb).
//   [SMI-*]      real nvidia-smi captures of memory MiB, `-lgip` and
//                `-lgipp` on the named GPU (A100-40/80, H100 SXM/PCIe/NVL).
//   [GFD-A100-80] gpu-feature-discovery labels on an A100 80GB PCIe.
//   [H200-FIX]   an H200 `-lgip` excerpt inside a test fixture.
//   [NV-H100-LP] NVIDIA LaunchPad H100 MIG doc (114 SMs, 2 TB/s, PCIe).
//   [MLC-H200]   MLPerf Inference v4.1 NVIDIA system JSON (H200 NVLink).
//   [VULTR-B200] Vultr HGX B200 hardware overview (8 TB/s, NV18).
//   [COLFAX]     Colfax Research H100 NVL `-lgipp`.
//
// Placement rules shared by every 8-slot x 7-compute model (confirmed by
// real `-lgipp` on A100-40GB, H100 80GB HBM3 and H100 NVL; INFERRED for
// A100-80GB, H100 PCIe, H200 and B200, which have the same fractions):
//   1g {0..6}:1   1g+me {0..6}:1 (max 1)   1g.2x {0,2,4,6}:2   2g {0,2,4}:2
//   3g {0,4}:4    4g {0}:4                 7g {0}:8
// Per-profile MiB is the `-lgip` "Memory GiB" x 1024, the smallest value
// seen across drivers.

namespace gpusched::inventory {
namespace {

// One row of the 8x7 MIG ladder; starts and max counts come from the kind.
struct Rung {
  const char* name;
  int profile_id;
  int64_t memory_mib;
  int sm_count;
};

enum RungKind { k1g, k1gMe, k1g2x, k2g, k3g, k4g, k7g, kNumRungs };

std::vector<MigProfile> Ladder8x7(const Rung (&rungs)[kNumRungs]) {
  struct Shape {
    int compute, memory, max;
    std::vector<int> starts;
    bool me;
  };
  const Shape shapes[kNumRungs] = {
      {1, 1, 7, {0, 1, 2, 3, 4, 5, 6}, false},
      {1, 1, 1, {0, 1, 2, 3, 4, 5, 6}, true},
      {1, 2, 4, {0, 2, 4, 6}, false},
      {2, 2, 3, {0, 2, 4}, false},
      {3, 4, 2, {0, 4}, false},
      {4, 4, 1, {0}, false},
      {7, 8, 1, {0}, false},
  };
  std::vector<MigProfile> out;
  for (int i = 0; i < kNumRungs; ++i) {
    MigProfile p;
    p.name = rungs[i].name;
    p.profile_id = rungs[i].profile_id;
    p.memory_mib = rungs[i].memory_mib;
    p.sm_count = rungs[i].sm_count;
    p.compute_slices = shapes[i].compute;
    p.memory_slots = shapes[i].memory;
    p.max_count = shapes[i].max;
    p.starts = shapes[i].starts;
    p.media_extensions = shapes[i].me;
    out.push_back(std::move(p));
  }
  return out;
}

void MakeMig8x7(GpuModelSpec& m, const Rung (&rungs)[kNumRungs]) {
  m.mig_memory_slots = 8;
  m.mig_compute_slices = 7;
  m.mig_profiles = Ladder8x7(rungs);
}

std::vector<GpuModelSpec> BuiltinModels() {
  std::vector<GpuModelSpec> v;

  {  // A100 40GB (SXM4; the PCIe 40GB card has the same MIG table).
    GpuModelSpec m;
    m.name = "A100-40GB";
    m.aliases = {"NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB",
                 "A100-SXM4-40GB", "A100-PCIE-40GB", "A100 40GB"};
    m.memory_mib = 40960;  // newer drivers; R450 showed 40537 [SMI]
    m.sm_count = 108;
    m.memory_bandwidth_gbps = 1555;
    m.nvlink = NvLinkKind::kSxm;  // NVLink 3, 12 links, 600 GB/s (SXM4)
    m.nvlink_links = 12;
    m.nvlink_bandwidth_gbps = 600;
    m.pci_device_ids = {0x20B010DE, 0x20F110DE};  // [MIGPARTED]
    // [SMI-A100-40] lgip/lgipp, [MIG-GS] lgipp incl. ID 15. 1g.10gb MiB and
    // SMs are UNCONFIRMED (old-driver capture lacks it): 2 x 1g.5gb is used.
    MakeMig8x7(m, {{"1g.5gb", 19, 4864, 14},
                   {"1g.5gb+me", 20, 4864, 14},
                   {"1g.10gb", 15, 9728, 14},
                   {"2g.10gb", 14, 9984, 28},
                   {"3g.20gb", 9, 20096, 42},
                   {"4g.20gb", 5, 20096, 56},
                   {"7g.40gb", 0, 40448, 98}});
    v.push_back(std::move(m));
  }
  {  // A100 80GB (SXM4 figures; the PCIe card has 1,935 GB/s and a bridge).
    GpuModelSpec m;
    m.name = "A100-80GB";
    m.aliases = {"NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe",
                 "A100-SXM4-80GB", "A100-PCIE-80GB", "A100 80GB"};
    m.memory_mib = 81920;  // [GFD-A100-80]
    m.sm_count = 108;
    m.memory_bandwidth_gbps = 2039;
    m.nvlink = NvLinkKind::kSxm;
    m.nvlink_links = 12;
    m.nvlink_bandwidth_gbps = 600;
    m.pci_device_ids = {0x20B210DE, 0x20B510DE};  // [MIGPARTED]
    // [SMI-A100-80]: four real lgip captures, GiB 9.50-9.75 / 19.50 /
    // 39.25-39.50 / 78.50-79.25; the floors are used. Placements INFERRED
    // (no A100-80GB lgipp capture), except 3g at 0 and 4 (seen in `-lgi`).
    MakeMig8x7(m, {{"1g.10gb", 19, 9728, 14},
                   {"1g.10gb+me", 20, 9728, 14},
                   {"1g.20gb", 15, 19968, 14},
                   {"2g.20gb", 14, 19968, 28},
                   {"3g.40gb", 9, 40192, 42},
                   {"4g.40gb", 5, 40192, 56},
                   {"7g.80gb", 0, 80384, 98}});
    v.push_back(std::move(m));
  }
  {  // H100 80GB SXM5 ("NVIDIA H100 80GB HBM3").
    GpuModelSpec m;
    m.name = "H100-SXM-80GB";
    m.aliases = {"NVIDIA H100 80GB HBM3", "H100",     "H100-SXM",
                 "H100-SXM5-80GB",        "H100 SXM", "H100-80GB-HBM3"};
    m.memory_mib = 81559;
    m.sm_count = 132;
    m.memory_bandwidth_gbps = 3350;
    m.nvlink = NvLinkKind::kSxm;  // NVLink 4, 18 links, 900 GB/s
    m.nvlink_links = 18;
    m.nvlink_bandwidth_gbps = 900;
    m.pci_device_ids = {0x233010DE};
    // [SMI-H100SXM] lgip + lgipp. 1g.20gb "26 SMs" is what nvidia-smi prints
    // (meaning UNCONFIRMED; one compute slice is 16 SMs).
    MakeMig8x7(m, {{"1g.10gb", 19, 9984, 16},
                   {"1g.10gb+me", 20, 9984, 16},
                   {"1g.20gb", 15, 20096, 26},
                   {"2g.20gb", 14, 20096, 32},
                   {"3g.40gb", 9, 40448, 60},
                   {"4g.40gb", 5, 40448, 64},
                   {"7g.80gb", 0, 81152, 132}});
    v.push_back(std::move(m));
  }
  {  // H100 80GB PCIe ("NVIDIA H100 PCIe").
    GpuModelSpec m;
    m.name = "H100-PCIe-80GB";
    m.aliases = {"NVIDIA H100 PCIe", "H100-PCIe", "H100 PCIe",
                 "H100-PCIE-80GB"};
    m.memory_mib = 81559;  // [SMI-H100PCIE]
    m.sm_count = 114;      // [NV-H100-LP]
    m.memory_bandwidth_gbps = 2000;
    // Optional NVLink bridge; 600 GB/s is UNCONFIRMED (not in the PB
    // excerpt retrieved).
    m.nvlink = NvLinkKind::kBridge;
    m.nvlink_bandwidth_gbps = 600;
    m.pci_device_ids = {0x233110DE};
    // [SMI-H100PCIE] lgip; placements INFERRED from the H100 80GB table.
    MakeMig8x7(m, {{"1g.10gb", 19, 9984, 14},
                   {"1g.10gb+me", 20, 9984, 14},
                   {"1g.20gb", 15, 20096, 14},
                   {"2g.20gb", 14, 20096, 30},
                   {"3g.40gb", 9, 40448, 46},
                   {"4g.40gb", 5, 40448, 62},
                   {"7g.80gb", 0, 81152, 114}});
    v.push_back(std::move(m));
  }
  {  // H100 NVL 94GB ("NVIDIA H100 NVL").
    GpuModelSpec m;
    m.name = "H100-NVL-94GB";
    m.aliases = {"NVIDIA H100 NVL", "H100-NVL", "H100 NVL"};
    m.memory_mib = 95830;  // [SMI-H100NVL-a]
    m.sm_count = 132;
    m.memory_bandwidth_gbps = 3900;  // third-party figure only
    m.nvlink = NvLinkKind::kBridge;  // 2-card bridge, 600 GB/s (third-party)
    m.nvlink_bandwidth_gbps = 600;
    m.pci_device_ids = {0x232110DE};
    // [SMI-H100NVL-a/b] lgip on two drivers (floors), [COLFAX] lgipp.
    MakeMig8x7(m, {{"1g.12gb", 19, 10880, 16},
                   {"1g.12gb+me", 20, 10880, 16},
                   {"1g.24gb", 15, 22016, 26},
                   {"2g.24gb", 14, 22016, 32},
                   {"3g.47gb", 9, 47232, 60},
                   {"4g.47gb", 5, 47232, 64},
                   {"7g.94gb", 0, 94848, 132}});
    v.push_back(std::move(m));
  }
  {  // H200 141GB (SXM). H200 NVL shares the MIG table [MIGPARTED].
    GpuModelSpec m;
    m.name = "H200-141GB";
    m.aliases = {"NVIDIA H200",     "H200",    "H200-SXM-141GB", "H200 SXM",
                 "NVIDIA H200 NVL", "H200-NVL"};
    m.memory_mib = 143771;
    m.sm_count = 132;
    m.memory_bandwidth_gbps = 4800;
    m.nvlink = NvLinkKind::kSxm;  // 18x NVLink 4, 900 GB/s [MLC-H200]
    m.nvlink_links = 18;
    m.nvlink_bandwidth_gbps = 900;
    m.pci_device_ids = {0x233510DE, 0x233B10DE};
    // [MIGPARTED-120] real lgip: 1g.18gb 16.00, 1g.35gb 32.25 (26 SMs),
    // 3g.71gb 69.50, 4g.71gb 69.50, 7g.141gb 139.75. 2g.35gb: 32.50 in a
    // fixture [H200-FIX]; the 1g.35gb figure (32.25) is used as the floor.
    // Placements INFERRED (no H200 lgipp capture).
    MakeMig8x7(m, {{"1g.18gb", 19, 16384, 16},
                   {"1g.18gb+me", 20, 16384, 16},
                   {"1g.35gb", 15, 33024, 26},
                   {"2g.35gb", 14, 33024, 32},
                   {"3g.71gb", 9, 71168, 60},
                   {"4g.71gb", 5, 71168, 64},
                   {"7g.141gb", 0, 143104, 132}});
    v.push_back(std::move(m));
  }
  {  // B200 ("B200 180 GB product" [MIG-PROF]).
    GpuModelSpec m;
    m.name = "B200-180GB";
    m.aliases = {"NVIDIA B200", "B200", "B200-SXM-180GB"};
    m.memory_mib = 183359;  // nvidia-smi; third parties say "192 GB"
    m.sm_count = 148;
    m.memory_bandwidth_gbps = 8000;  // [VULTR-B200]
    m.nvlink = NvLinkKind::kSxm;     // NVLink 5, NV18, 1.8 TB/s
    m.nvlink_links = 18;
    m.nvlink_bandwidth_gbps = 1800;
    m.pci_device_ids = {0x290110DE};
    // [MIGPARTED-166/187] real lgip: 1g.23gb 20.50-22.00 GiB (18 SMs),
    // 1g.45gb 44.25 (30 SMs), 2g.45gb 44.25 (36 SMs), IDs 19/20/15/14.
    // 3g/4g/7g rows were not captured: IDs 9/5/0 are INFERRED from every
    // other model, and their MiB are UNCONFIRMED conservative estimates
    // (2 x 2g.45gb for 3g/4g, 4 x 2g.45gb for 7g); SMs unknown. Placements
    // INFERRED. GB200 uses different names (1g.24gb, 3g.93gb, ...).
    MakeMig8x7(m, {{"1g.23gb", 19, 20992, 18},
                   {"1g.23gb+me", 20, 20992, 18},
                   {"1g.45gb", 15, 45312, 30},
                   {"2g.45gb", 14, 45312, 36},
                   {"3g.90gb", 9, 90624, 0},
                   {"4g.90gb", 5, 90624, 0},
                   {"7g.180gb", 0, 181248, 0}});
    v.push_back(std::move(m));
  }
  {  // L4: no MIG, no NVLink.
    GpuModelSpec m;
    m.name = "L4-24GB";
    m.aliases = {"NVIDIA L4", "L4"};
    m.memory_mib = 23034;
    m.sm_count = 58;
    m.memory_bandwidth_gbps = 300;
    v.push_back(std::move(m));
  }
  {  // L40S: no MIG, no NVLink.
    GpuModelSpec m;
    m.name = "L40S-48GB";
    m.aliases = {"NVIDIA L40S", "L40S"};
    m.memory_mib = 46068;
    m.sm_count = 142;
    m.memory_bandwidth_gbps = 864;
    v.push_back(std::move(m));
  }
  {  // T4 (also the Alibaba trace code "T4").
    GpuModelSpec m;
    m.name = "T4-16GB";
    m.aliases = {"Tesla T4", "NVIDIA T4", "T4"};
    m.memory_mib = 15360;  // ECC on: 15109 / 15079 on some hosts
    m.sm_count = 40;
    m.memory_bandwidth_gbps = 320;  // product brief; datasheet says 300
    v.push_back(std::move(m));
  }
  {  // A10 (also the Alibaba trace code "A10").
    GpuModelSpec m;
    m.name = "A10-24GB";
    m.aliases = {"NVIDIA A10", "A10"};
    m.memory_mib = 23028;  // with ECC (24564 without)
    m.sm_count = 72;       // third-party deviceQuery
    m.memory_bandwidth_gbps = 600;
    v.push_back(std::move(m));
  }
  {  // A10G (AWS G5).
    GpuModelSpec m;
    m.name = "A10G-24GB";
    m.aliases = {"NVIDIA A10G", "A10G"};
    m.memory_mib = 23028;
    m.sm_count = 80;
    m.memory_bandwidth_gbps = 600;  // UNCONFIRMED by a primary source
    v.push_back(std::move(m));
  }
  {  // P100 16GB (Alibaba trace code "P100"). NVLink on SXM2 only.
    GpuModelSpec m;
    m.name = "P100-16GB";
    m.aliases = {"Tesla P100-PCIE-16GB", "Tesla P100-SXM2-16GB", "P100"};
    m.memory_mib = 16276;
    m.sm_count = 56;
    m.memory_bandwidth_gbps = 732;  // datasheet; whitepaper says 720
    m.nvlink = NvLinkKind::kSxm;    // SXM2: 4 links, 160 GB/s
    m.nvlink_links = 4;
    m.nvlink_bandwidth_gbps = 160;
    v.push_back(std::move(m));
  }
  {  // V100 16GB (Alibaba trace code "V100M16"). NVLink on SXM2 only.
    GpuModelSpec m;
    m.name = "V100-16GB";
    m.aliases = {"Tesla V100-SXM2-16GB", "Tesla V100-PCIE-16GB", "V100M16"};
    m.memory_mib = 16384;  // older drivers: 16160
    m.sm_count = 80;
    m.memory_bandwidth_gbps = 900;
    m.nvlink = NvLinkKind::kSxm;  // SXM2: 6 links, 300 GB/s
    m.nvlink_links = 6;
    m.nvlink_bandwidth_gbps = 300;
    v.push_back(std::move(m));
  }
  {  // V100 32GB (Alibaba trace code "V100M32"). NVLink on SXM2 only.
    GpuModelSpec m;
    m.name = "V100-32GB";
    m.aliases = {"Tesla V100-SXM2-32GB", "Tesla V100-PCIE-32GB",
                 "Tesla V100S-PCIE-32GB", "V100M32"};
    m.memory_mib = 32768;  // older drivers: 32510 / 32480
    m.sm_count = 80;
    m.memory_bandwidth_gbps = 900;
    m.nvlink = NvLinkKind::kSxm;
    m.nvlink_links = 6;
    m.nvlink_bandwidth_gbps = 300;
    v.push_back(std::move(m));
  }
  return v;
}

// Lower case, with ' ' and '_' read as '-'.
std::string Key(absl::string_view s) {
  std::string k = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s));
  for (char& c : k) {
    if (c == ' ' || c == '_') c = '-';
  }
  return k;
}

std::string MigKey(absl::string_view name) {
  std::string k = Key(name);
  for (absl::string_view prefix : {"mig-", "nvidia.com/mig-"}) {
    if (absl::StartsWith(k, prefix)) {
      k.erase(0, prefix.size());
      break;
    }
  }
  return k;
}

}  // namespace

const char* NvLinkKindName(NvLinkKind kind) {
  switch (kind) {
    case NvLinkKind::kNone:
      return "none";
    case NvLinkKind::kBridge:
      return "bridge";
    case NvLinkKind::kSxm:
      return "sxm";
  }
  return "unknown";
}

const MigProfile* GpuModelSpec::FindMigProfile(absl::string_view name) const {
  const std::string key = MigKey(name);
  for (const MigProfile& p : mig_profiles) {
    if (Key(p.name) == key) return &p;
  }
  return nullptr;
}

const MigProfile* GpuModelSpec::FindMigProfileById(int profile_id) const {
  if (profile_id < 0) return nullptr;
  for (const MigProfile& p : mig_profiles) {
    if (p.profile_id == profile_id) return &p;
  }
  return nullptr;
}

absl::StatusOr<GpuCatalog> GpuCatalog::Create(
    std::vector<GpuModelSpec> models) {
  GpuCatalog cat;
  std::vector<std::string> problems;
  for (size_t i = 0; i < models.size(); ++i) {
    GpuModelSpec& m = models[i];
    if (m.name.empty()) {
      problems.push_back(absl::StrCat("model #", i, " has no name"));
      continue;
    }
    std::vector<std::string> names = {m.name};
    names.insert(names.end(), m.aliases.begin(), m.aliases.end());
    for (const std::string& n : names) {
      auto [it, inserted] =
          cat.by_key_.try_emplace(Key(n), static_cast<int>(i));
      if (!inserted && it->second != static_cast<int>(i)) {
        problems.push_back(absl::StrCat(
            "'", n, "' names both ", models[it->second].name, " and ", m.name));
      }
    }
    for (uint32_t id : m.pci_device_ids) {
      if (!cat.by_pci_.try_emplace(id, static_cast<int>(i)).second) {
        problems.push_back(
            absl::StrCat(m.name, ": PCI device id ", id, " listed twice"));
      }
    }
    if (m.mig_memory_slots < 0 || m.mig_memory_slots > 32 ||
        (m.mig_memory_slots > 0) != (m.mig_compute_slices > 0)) {
      problems.push_back(absl::StrCat(m.name, ": bad MIG geometry ",
                                      m.mig_memory_slots, "x",
                                      m.mig_compute_slices));
      continue;
    }
    if (!m.mig_capable() && !m.mig_profiles.empty()) {
      problems.push_back(
          absl::StrCat(m.name, ": MIG profiles on a model without MIG"));
    }
    for (MigProfile& p : m.mig_profiles) {
      const bool ok =
          p.compute_slices > 0 && p.compute_slices <= m.mig_compute_slices &&
          p.memory_slots > 0 && p.max_count > 0 && !p.starts.empty();
      if (!ok) {
        problems.push_back(absl::StrCat(m.name, " ", p.name,
                                        ": bad compute, memory or count"));
        continue;
      }
      for (int s : p.starts) {
        if (s < 0 || s + p.memory_slots > m.mig_memory_slots) {
          problems.push_back(absl::StrCat(m.name, " ", p.name, ": start ", s,
                                          " outside the GPU"));
        }
      }
      p.milli = p.compute_slices * kMilliPerGpu / m.mig_compute_slices;
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU catalog: ", absl::StrJoin(problems, "; ")));
  }
  cat.models_ = std::move(models);
  return cat;
}

const GpuCatalog& GpuCatalog::Builtin() {
  // Never destroyed (Google style for non-trivially-destructible statics).
  static const GpuCatalog* const kCatalog = [] {
    absl::StatusOr<GpuCatalog> cat = Create(BuiltinModels());
    CHECK(cat.ok()) << cat.status().message();
    return new GpuCatalog(*std::move(cat));
  }();
  return *kCatalog;
}

const GpuModelSpec* GpuCatalog::Find(absl::string_view name_or_alias) const {
  std::string key = Key(name_or_alias);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) {
    for (absl::string_view prefix : {"nvidia-", "tesla-"}) {
      if (absl::StartsWith(key, prefix)) {
        it = by_key_.find(key.substr(prefix.size()));
        break;
      }
    }
  }
  return it == by_key_.end() ? nullptr : &models_[it->second];
}

const GpuModelSpec* GpuCatalog::FindMapped(
    absl::string_view name,
    const absl::flat_hash_map<std::string, std::string>& mapping) const {
  const std::string lower = absl::AsciiStrToLower(name);
  std::string model(name);
  for (const auto& [k, v] : mapping) {
    if (absl::AsciiStrToLower(k) == lower) model = v;
  }
  return model.empty() ? nullptr : Find(model);
}

const GpuModelSpec* GpuCatalog::FindByPciDeviceId(
    uint32_t pci_device_id) const {
  auto it = by_pci_.find(pci_device_id);
  return it == by_pci_.end() ? nullptr : &models_[it->second];
}

std::vector<std::string> GpuCatalog::Names() const {
  std::vector<std::string> names;
  names.reserve(models_.size());
  for (const GpuModelSpec& m : models_) names.push_back(m.name);
  return names;
}

}  // namespace gpusched::inventory
