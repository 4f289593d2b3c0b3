// GpuCatalog: what gpusched knows about each GPU model without asking the
// hardware — memory, SMs, bandwidth, NVLink, and the MIG geometry and
// profiles with NVIDIA's slot placement rules.
//
// The built-in catalog (GpuCatalog::Builtin()) is immutable and built once on
// first use; it is thread-safe to read from any thread. Every value has a
// source (keys and links in gpu_catalog.cc, summary in docs/inventory.md);
// values no captured nvidia-smi output confirmed are marked INFERRED or
// UNCONFIRMED there. Memory figures are what nvidia-smi / NVML report in MiB,
// which is what placement must budget against; where drivers differ, the
// smallest reported value is used. Live discovery (nvml.h) reads the real
// figures.
//
// MIG accounting: a MIG slice of a GPU with C compute slices (7 on every
// MIG-capable model here) holds
//     milli = compute_slices * 1000 / C   (integer division, rounded down)
// of the GPU's 1000 compute milli in ClusterState, so 1g = 142, 2g = 285,
// 3g = 428, 4g = 571 and 7g = 1000. Seven 1g slices hold 994 milli; the
// rounding loss is deliberate (a GPU never appears more than full).
#ifndef GPUSCHED_INVENTORY_GPU_CATALOG_H_
#define GPUSCHED_INVENTORY_GPU_CATALOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpusched::inventory {

// One MIG GPU-instance profile of one GPU model.
struct MigProfile {
  std::string name;         // as nvidia-smi writes it without "MIG ", "3g.40gb"
  int profile_id = -1;      // nvidia-smi `mig -lgip` ID (GPU instance profile
                            // ID, as NVML's nvmlGpuInstanceInfo_t.profileId);
                            // -1 = not known for this model
  int compute_slices = 0;   // the "Ng" in the name
  int memory_slots = 0;     // memory slices taken: `-lgipp` ":size"
  int64_t memory_mib = 0;   // usable memory as `-lgip` reports it (floor)
  int sm_count = 0;         // SMs as `-lgip` prints them; 0 = unknown
  int max_count = 0;        // most instances of this profile on one GPU
  std::vector<int> starts;  // allowed first memory slots (`-lgipp` {...})
  bool media_extensions = false;  // "+me": holds the GPU's media engines
  int milli = 0;  // compute milli for ClusterState (see file comment)
};

enum class NvLinkKind {
  kNone,    // no NVLink
  kBridge,  // PCIe card with an optional 2- or 4-way NVLink bridge
  kSxm,     // SXM module on an NVLink baseboard (with or without NVSwitch)
};
const char* NvLinkKindName(NvLinkKind kind);

struct GpuModelSpec {
  std::string name;                  // canonical, e.g. "H100-SXM-80GB"
  std::vector<std::string> aliases;  // NVML names, short forms, trace codes
  int64_t memory_mib = 0;            // total, as nvidia-smi reports it
  int sm_count = 0;
  int memory_bandwidth_gbps = 0;  // GB/s
  NvLinkKind nvlink = NvLinkKind::kNone;
  int nvlink_links = 0;           // links per GPU; 0 = none or unknown
  int nvlink_bandwidth_gbps = 0;  // total per GPU, both directions
  // NVML pciDeviceId values (device id << 16 | 0x10DE) of this model.
  std::vector<uint32_t> pci_device_ids;
  // MIG geometry: memory slices x compute slices; 0 x 0 = no MIG.
  int mig_memory_slots = 0;
  int mig_compute_slices = 0;
  std::vector<MigProfile> mig_profiles;

  bool mig_capable() const { return mig_memory_slots > 0; }
  // Case-insensitive; accepts "3g.40gb", "MIG 3g.40gb" and "mig-3g.40gb"
  // (the Kubernetes resource spelling). nullptr if the model has no such
  // profile.
  const MigProfile* FindMigProfile(absl::string_view name) const;
  // By nvidia-smi / NVML GPU instance profile ID; nullptr if unknown.
  const MigProfile* FindMigProfileById(int profile_id) const;
};

class GpuCatalog {
 public:
  // Validates `models`: unique names and aliases (case-insensitive, with
  // ' ' and '_' read as '-'), MIG profiles inside the model's geometry. Fills
  // MigProfile::milli.
  static absl::StatusOr<GpuCatalog> Create(std::vector<GpuModelSpec> models);

  // The models gpusched ships with (listed in docs/inventory.md).
  static const GpuCatalog& Builtin();

  // By canonical name or alias, case-insensitive; a leading "NVIDIA " or
  // "Tesla " is ignored when the full string is not known. nullptr if
  // unknown.
  const GpuModelSpec* Find(absl::string_view name_or_alias) const;
  // `name` as a cluster manager spells it (a GRES type, a GFD product label)
  // through `mapping` (keys matched case-insensitively) when it holds it,
  // then Find(). nullptr if unknown or empty.
  const GpuModelSpec* FindMapped(
      absl::string_view name,
      const absl::flat_hash_map<std::string, std::string>& mapping) const;
  // By NVML pciDeviceId; nullptr if unknown.
  const GpuModelSpec* FindByPciDeviceId(uint32_t pci_device_id) const;

  const std::vector<GpuModelSpec>& models() const { return models_; }
  // Canonical names in catalog order, for error messages.
  std::vector<std::string> Names() const;

 private:
  std::vector<GpuModelSpec> models_;
  absl::flat_hash_map<std::string, int> by_key_;
  absl::flat_hash_map<uint32_t, int> by_pci_;
};

}  // namespace gpusched::inventory

#endif  // GPUSCHED_INVENTORY_GPU_CATALOG_H_
