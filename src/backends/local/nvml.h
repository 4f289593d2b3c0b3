// NVML discovery: the GPUs of this machine, read through NVIDIA's management
// library loaded at run time with dlopen("libnvidia-ml.so.1"), so gpusched
// builds without CUDA and runs without a GPU.
//
// Layers:
//   * nvml_abi: the few NVML types, constants and entry points gpusched
//     uses, declared here from the NVML API reference (no CUDA headers).
//   * NvmlApi: a table of those entry points. NvmlLibrary::Load fills it
//     with dlsym; tests fill it with fakes, so the conversion logic in
//     DiscoverGpus is tested without a GPU.
//   * DiscoverGpus: NVML -> DiscoveredGpu (index, UUID, name, catalog model,
//     memory, utilisation, MIG mode and instances, NVLink peers, health).
//   * LocalNodeSpec: discovered GPUs -> the NodeSpec of this machine.
//
// Optional entry points (MIG, NVLink, ECC, retired pages) may be missing on
// old drivers or unsupported on a GPU; discovery then leaves those fields at
// their "unknown" values instead of failing. Functions here are
// thread-compatible; NVML itself is thread-safe.
#ifndef GPUSCHED_BACKENDS_LOCAL_NVML_H_
#define GPUSCHED_BACKENDS_LOCAL_NVML_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inventory/cluster_state.h"
#include "inventory/gpu_catalog.h"

namespace gpusched::backends {

namespace nvml_abi {
// nvmlReturn_t values (NVML API reference, "Error reporting").
using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorLibraryNotFound = 12;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorUnknown = 999;

// Opaque handles (nvmlDevice_t, nvmlGpuInstance_t).
struct DeviceOpaque;
using Device = DeviceOpaque*;
struct GpuInstanceOpaque;
using GpuInstance = GpuInstanceOpaque*;

// nvmlEnableState_t: NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1.
using EnableState = int;
inline constexpr EnableState kFeatureEnabled = 1;
// NVML_DEVICE_MIG_ENABLE.
inline constexpr unsigned int kDeviceMigEnable = 1;
// NVML_NVLINK_MAX_LINKS (18 since Hopper; older GPUs report fewer links as
// NOT_SUPPORTED or INVALID_ARGUMENT).
inline constexpr unsigned int kNvLinkMaxLinks = 18;
// nvmlMemoryErrorType_t / nvmlEccCounterType_t.
inline constexpr int kMemoryErrorTypeUncorrected = 1;
inline constexpr int kVolatileEcc = 0;
// NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE.
inline constexpr unsigned int kDeviceNameBufferSize = 96;
inline constexpr unsigned int kDeviceUuidBufferSize = 96;

struct Memory {  // nvmlMemory_t (v1), bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct Utilization {  // nvmlUtilization_t, percent
  unsigned int gpu;
  unsigned int memory;
};
struct PciInfo {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;  // device id << 16 | vendor id
  unsigned int pci_sub_system_id;
  char bus_id[32];
};
struct GpuInstancePlacement {  // nvmlGpuInstancePlacement_t
  unsigned int start;
  unsigned int size;
};
struct GpuInstanceInfo {  // nvmlGpuInstanceInfo_t
  Device device;
  unsigned int id;
  unsigned int profile_id;
  GpuInstancePlacement placement;
};
}  // namespace nvml_abi

// The NVML entry points discovery uses; the symbol each comes from is in
// the comment. Required entries must be set; optional ones may be null.
struct NvmlApi {
  using R = nvml_abi::Return;
  using D = nvml_abi::Device;
  // Required.
  R (*init)() = nullptr;                           // nvmlInit_v2
  R (*shutdown)() = nullptr;                       // nvmlShutdown
  R (*device_get_count)(unsigned int*) = nullptr;  // nvmlDeviceGetCount_v2
  R(*device_get_handle_by_index)
  (unsigned int, D*) =  //
      nullptr;          // nvmlDeviceGetHandleByIndex_v2
  R (*device_get_name)(D, char*, unsigned int) = nullptr;  // nvmlDeviceGetName
  R (*device_get_uuid)(D, char*, unsigned int) = nullptr;  // nvmlDeviceGetUUID
  R(*device_get_memory_info)
  (D, nvml_abi::Memory*) = nullptr;  // nvmlDeviceGetMemoryInfo
  // Optional.
  const char* (*error_string)(R) = nullptr;  // nvmlErrorString
  R(*device_get_utilization_rates)
  (D, nvml_abi::Utilization*) = nullptr;  // nvmlDeviceGetUtilizationRates
  R(*device_get_pci_info)
  (D, nvml_abi::PciInfo*) = nullptr;  // nvmlDeviceGetPciInfo_v3
  R(*device_get_mig_mode)
  (D, unsigned int*, unsigned int*) = nullptr;  // nvmlDeviceGetMigMode
  R(*device_get_max_mig_device_count)
  (D, unsigned int*) = nullptr;  // nvmlDeviceGetMaxMigDeviceCount
  R(*device_get_mig_device_handle_by_index)
  (D, unsigned int, D*) = nullptr;  // nvmlDeviceGetMigDeviceHandleByIndex
  R(*device_get_gpu_instance_id)
  (D, unsigned int*) = nullptr;  // nvmlDeviceGetGpuInstanceId
  R(*device_get_gpu_instance_by_id)
  (D, unsigned int,
   nvml_abi::GpuInstance*) =
      nullptr;  // nvmlDeviceGetGpuInstanceById (needs privileges)
  R(*gpu_instance_get_info)
  (nvml_abi::GpuInstance,
   nvml_abi::GpuInstanceInfo*) = nullptr;  // nvmlGpuInstanceGetInfo
  R(*device_get_nvlink_state)
  (D, unsigned int,
   nvml_abi::EnableState*) = nullptr;  // nvmlDeviceGetNvLinkState
  R(*device_get_nvlink_remote_pci_info)
  (D, unsigned int,
   nvml_abi::PciInfo*) = nullptr;  // nvmlDeviceGetNvLinkRemotePciInfo_v2
  R(*device_get_total_ecc_errors)
  (D, int, int, unsigned long long*) = nullptr;  // nvmlDeviceGetTotalEccErrors
  R(*device_get_retired_pages_pending_status)
  (D,
   nvml_abi::EnableState*) = nullptr;  // nvmlDeviceGetRetiredPagesPendingStatus
};

// Owns the dlopen handle and the NvmlApi filled from it.
class NvmlLibrary {
 public:
  static constexpr const char* kDefaultPath = "libnvidia-ml.so.1";

  // Unavailable, with a one-line reason, when the library cannot be opened
  // ("NVML not available: libnvidia-ml.so.1 not found (no NVIDIA driver)")
  // or lacks a required entry point.
  static absl::StatusOr<std::unique_ptr<NvmlLibrary>> Load(
      const char* path = kDefaultPath);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const NvmlApi& api() const { return api_; }

 private:
  explicit NvmlLibrary(void* handle) : handle_(handle) {}
  void* handle_;
  NvmlApi api_;
};

// One MIG device (a compute instance inside a GPU instance).
struct DiscoveredMigInstance {
  int index = 0;        // MIG device index under its GPU
  std::string uuid;     // "MIG-..."
  std::string name;     // NVML name, e.g. "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
  std::string profile;  // GPU instance profile, e.g. "3g.40gb"; "" unknown
  int gpu_instance_id = -1;
  int profile_id = -1;  // nvidia-smi GI profile ID; -1 unknown
  int start = -1;       // first memory slot; -1 unknown (needs privileges)
  int size = 0;         // memory slots
  int64_t memory_total_mib = 0;
  int64_t memory_used_mib = 0;
};

struct DiscoveredGpu {
  int index = 0;           // NVML index
  std::string uuid;        // "GPU-..."
  std::string name;        // NVML product name, e.g. "NVIDIA H100 80GB HBM3"
  std::string model;       // catalog canonical name; "" if not in the catalog
  std::string pci_bus_id;  // "00000000:07:00.0"; "" unknown
  uint32_t pci_device_id = 0;  // 0 unknown
  int64_t memory_total_mib = 0;
  int64_t memory_used_mib = 0;
  int utilization_gpu_pct = -1;     // -1 unknown
  int utilization_memory_pct = -1;  // -1 unknown
  bool mig_enabled = false;         // current MIG mode
  bool mig_pending = false;         // MIG mode after the next GPU reset
  std::vector<DiscoveredMigInstance> mig_instances;
  int nvlink_active_links = 0;
  std::vector<int> nvlink_peers;  // indexes of GPUs linked directly
  bool nvswitch = false;          // has active links to a non-GPU (an NVSwitch)
  int64_t ecc_uncorrected_volatile = -1;  // -1 unknown
  bool retired_pages_pending = false;
  bool healthy = true;
  std::vector<std::string> health_notes;  // why not healthy
};

// Initialises NVML through `api`, reads every GPU and shuts NVML down.
// Unavailable if NVML cannot initialise or reports no GPU.
absl::StatusOr<std::vector<DiscoveredGpu>> DiscoverGpus(
    const NvmlApi& api,
    const inventory::GpuCatalog& catalog = inventory::GpuCatalog::Builtin());

// Load() + DiscoverGpus().
absl::StatusOr<std::vector<DiscoveredGpu>> DiscoverLocalGpus(
    const inventory::GpuCatalog& catalog = inventory::GpuCatalog::Builtin());

// NVLink domains from peers: GPUs in one connected component of the direct
// links, plus all GPUs with NVSwitch links, share a group id. Ids number the
// groups in order of their lowest GPU index. Empty if no GPU has NVLink.
std::vector<int> NvLinkGroups(const std::vector<DiscoveredGpu>& gpus);

struct LocalNodeOptions {
  std::string name;  // node name, e.g. the host name
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::vector<std::pair<std::string, std::string>> labels;
};

// The NodeSpec of this machine (simulated = false). gpu_model is the catalog
// name, or the NVML name for a GPU the catalog does not know; per-GPU memory
// is the smallest NVML total; nvlink_group from NvLinkGroups. GPUs in MIG
// mode get a static MIG layout (NodeSpec::mig_instances, inventory/mig.h):
// the instances that exist, at NVML's slots, or laid out canonically where
// NVML does not give the slots; the others stay whole (gpusched neither
// switches MIG modes nor creates instances). InvalidArgument if the GPUs are
// of different models (a node has one GPU model).
absl::StatusOr<inventory::NodeSpec> LocalNodeSpec(
    const std::vector<DiscoveredGpu>& gpus, const LocalNodeOptions& options,
    const inventory::GpuCatalog& catalog = inventory::GpuCatalog::Builtin());

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_LOCAL_NVML_H_
