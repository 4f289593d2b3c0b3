#include "backends/local/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "inventory/mig.h"

namespace gpusched::backends {
namespace {

using nvml_abi::Return;
constexpr int64_t kMiB = 1024 * 1024;

std::string ErrorText(const NvmlApi& api, Return rc) {
  if (api.error_string != nullptr) {
    const char* s = api.error_string(rc);
    if (s != nullptr) return s;
  }
  return absl::StrCat("NVML error ", rc);
}

// Copies a NUL-terminated C string out of a fixed buffer (NVML terminates
// its strings, but a fake or a truncated buffer might not).
std::string FromBuffer(const char* buf, size_t size) {
  return std::string(buf, strnlen(buf, size));
}

// "NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb" -> "3g.20gb": the GPU instance
// profile of a MIG device, without a compute-instance prefix ("1c.").
std::string MigProfileFromName(absl::string_view name) {
  const size_t pos = name.rfind("MIG ");
  if (pos == absl::string_view::npos) return "";
  std::string profile(name.substr(pos + 4));
  std::vector<std::string> parts = absl::StrSplit(profile, '.');
  if (parts.size() >= 3 && absl::EndsWith(parts[0], "c")) {
    profile = absl::StrJoin(parts.begin() + 1, parts.end(), ".");
  }
  return profile;
}

using PciKey = std::tuple<unsigned int, unsigned int, unsigned int>;

// Reads one GPU; a failed optional query leaves its field unknown.
class GpuReader {
 public:
  GpuReader(const NvmlApi& api, const inventory::GpuCatalog& catalog,
            DiscoveredGpu& gpu)
      : api_(api), catalog_(catalog), gpu_(gpu) {}

  void Read(nvml_abi::Device dev) {
    char buf[nvml_abi::kDeviceNameBufferSize] = {};
    if (Ok(api_.device_get_name(dev, buf, sizeof(buf)), "name")) {
      gpu_.name = FromBuffer(buf, sizeof(buf));
    }
    char uuid[nvml_abi::kDeviceUuidBufferSize] = {};
    if (Ok(api_.device_get_uuid(dev, uuid, sizeof(uuid)), "UUID")) {
      gpu_.uuid = FromBuffer(uuid, sizeof(uuid));
    }
    nvml_abi::Memory mem = {};
    if (Ok(api_.device_get_memory_info(dev, &mem), "memory")) {
      gpu_.memory_total_mib = static_cast<int64_t>(mem.total / kMiB);
      gpu_.memory_used_mib = static_cast<int64_t>(mem.used / kMiB);
    }
    if (api_.device_get_utilization_rates != nullptr) {
      nvml_abi::Utilization u = {};
      if (Ok(api_.device_get_utilization_rates(dev, &u), "utilization")) {
        gpu_.utilization_gpu_pct = static_cast<int>(u.gpu);
        gpu_.utilization_memory_pct = static_cast<int>(u.memory);
      }
    }
    if (api_.device_get_pci_info != nullptr) {
      nvml_abi::PciInfo pci = {};
      if (Ok(api_.device_get_pci_info(dev, &pci), "PCI info")) {
        gpu_.pci_bus_id = FromBuffer(pci.bus_id, sizeof(pci.bus_id));
        gpu_.pci_device_id = pci.pci_device_id;
        pci_ = PciKey(pci.domain, pci.bus, pci.device);
        have_pci_ = true;
      }
    }
    const inventory::GpuModelSpec* model =
        catalog_.FindByPciDeviceId(gpu_.pci_device_id);
    if (model == nullptr && !gpu_.name.empty())
      model = catalog_.Find(gpu_.name);
    if (model != nullptr) gpu_.model = model->name;
    ReadMig(dev, model);
    ReadNvLinks(dev);
    ReadHealth(dev);
  }

  bool have_pci() const { return have_pci_; }
  const PciKey& pci() const { return pci_; }
  const std::vector<PciKey>& remotes() const { return remotes_; }

 private:
  bool Ok(Return rc, const char* what) {
    if (rc == nvml_abi::kSuccess) return true;
    if (rc == nvml_abi::kErrorGpuIsLost && !lost_) {
      lost_ = true;
      gpu_.healthy = false;
      gpu_.health_notes.push_back(
          absl::StrCat("GPU is lost (", what, ": ", ErrorText(api_, rc), ")"));
    }
    return false;
  }

  void ReadMig(nvml_abi::Device dev, const inventory::GpuModelSpec* model) {
    if (api_.device_get_mig_mode == nullptr) return;
    unsigned int current = 0, pending = 0;
    if (!Ok(api_.device_get_mig_mode(dev, &current, &pending), "MIG mode")) {
      return;  // NOT_SUPPORTED on GPUs without MIG
    }
    gpu_.mig_enabled = current == nvml_abi::kDeviceMigEnable;
    gpu_.mig_pending = pending == nvml_abi::kDeviceMigEnable;
    if (!gpu_.mig_enabled || api_.device_get_max_mig_device_count == nullptr ||
        api_.device_get_mig_device_handle_by_index == nullptr) {
      return;
    }
    unsigned int max = 0;
    if (!Ok(api_.device_get_max_mig_device_count(dev, &max), "MIG count")) {
      return;
    }
    for (unsigned int j = 0; j < max; ++j) {
      nvml_abi::Device mig = nullptr;
      // NOT_FOUND: no MIG device at this index.
      if (!Ok(api_.device_get_mig_device_handle_by_index(dev, j, &mig),
              "MIG device")) {
        continue;
      }
      DiscoveredMigInstance inst;
      inst.index = static_cast<int>(j);
      char buf[nvml_abi::kDeviceNameBufferSize] = {};
      if (Ok(api_.device_get_name(mig, buf, sizeof(buf)), "MIG name")) {
        inst.name = FromBuffer(buf, sizeof(buf));
        inst.profile = MigProfileFromName(inst.name);
      }
      char uuid[nvml_abi::kDeviceUuidBufferSize] = {};
      if (Ok(api_.device_get_uuid(mig, uuid, sizeof(uuid)), "MIG UUID")) {
        inst.uuid = FromBuffer(uuid, sizeof(uuid));
      }
      nvml_abi::Memory mem = {};
      if (Ok(api_.device_get_memory_info(mig, &mem), "MIG memory")) {
        inst.memory_total_mib = static_cast<int64_t>(mem.total / kMiB);
        inst.memory_used_mib = static_cast<int64_t>(mem.used / kMiB);
      }
      ReadPlacement(dev, mig, inst);
      if (model != nullptr) {
        const inventory::MigProfile* p = model->FindMigProfile(inst.profile);
        if (p == nullptr) p = model->FindMigProfileById(inst.profile_id);
        if (p != nullptr) {
          if (inst.profile.empty()) inst.profile = p->name;
          if (inst.profile_id < 0) inst.profile_id = p->profile_id;
          if (inst.size == 0) inst.size = p->memory_slots;
        }
      }
      gpu_.mig_instances.push_back(std::move(inst));
    }
  }

  // The GPU instance's placement; needs privileges, so often unknown.
  void ReadPlacement(nvml_abi::Device dev, nvml_abi::Device mig,
                     DiscoveredMigInstance& inst) {
    if (api_.device_get_gpu_instance_id == nullptr) return;
    unsigned int gi = 0;
    if (!Ok(api_.device_get_gpu_instance_id(mig, &gi), "GPU instance id")) {
      return;
    }
    inst.gpu_instance_id = static_cast<int>(gi);
    if (api_.device_get_gpu_instance_by_id == nullptr ||
        api_.gpu_instance_get_info == nullptr) {
      return;
    }
    nvml_abi::GpuInstance handle = nullptr;
    if (!Ok(api_.device_get_gpu_instance_by_id(dev, gi, &handle),
            "GPU instance")) {
      return;
    }
    nvml_abi::GpuInstanceInfo info = {};
    if (!Ok(api_.gpu_instance_get_info(handle, &info), "GPU instance info")) {
      return;
    }
    inst.profile_id = static_cast<int>(info.profile_id);
    inst.start = static_cast<int>(info.placement.start);
    inst.size = static_cast<int>(info.placement.size);
  }

  void ReadNvLinks(nvml_abi::Device dev) {
    if (api_.device_get_nvlink_state == nullptr) return;
    for (unsigned int link = 0; link < nvml_abi::kNvLinkMaxLinks; ++link) {
      nvml_abi::EnableState active = 0;
      const Return rc = api_.device_get_nvlink_state(dev, link, &active);
      if (rc == nvml_abi::kErrorNotSupported && link == 0) return;
      if (!Ok(rc, "NVLink state") || active != nvml_abi::kFeatureEnabled) {
        continue;
      }
      ++gpu_.nvlink_active_links;
      if (api_.device_get_nvlink_remote_pci_info == nullptr) continue;
      nvml_abi::PciInfo remote = {};
      if (Ok(api_.device_get_nvlink_remote_pci_info(dev, link, &remote),
             "NVLink remote")) {
        remotes_.emplace_back(remote.domain, remote.bus, remote.device);
      }
    }
  }

  void ReadHealth(nvml_abi::Device dev) {
    if (api_.device_get_total_ecc_errors != nullptr) {
      unsigned long long n = 0;
      if (Ok(api_.device_get_total_ecc_errors(
                 dev, nvml_abi::kMemoryErrorTypeUncorrected,
                 nvml_abi::kVolatileEcc, &n),
             "ECC errors")) {
        gpu_.ecc_uncorrected_volatile = static_cast<int64_t>(n);
        if (n > 0) {
          gpu_.healthy = false;
          gpu_.health_notes.push_back(absl::StrCat(
              n, " uncorrected ECC error(s) since the driver loaded"));
        }
      }
    }
    if (api_.device_get_retired_pages_pending_status != nullptr) {
      nvml_abi::EnableState pending = 0;
      if (Ok(api_.device_get_retired_pages_pending_status(dev, &pending),
             "retired pages") &&
          pending == nvml_abi::kFeatureEnabled) {
        gpu_.retired_pages_pending = true;
        gpu_.healthy = false;
        gpu_.health_notes.push_back(
            "memory pages pending retirement; the GPU needs a reset");
      }
    }
  }

  const NvmlApi& api_;
  const inventory::GpuCatalog& catalog_;
  DiscoveredGpu& gpu_;
  bool lost_ = false;
  bool have_pci_ = false;
  PciKey pci_;
  std::vector<PciKey> remotes_;
};

// Union-find over GPU positions plus one node per non-GPU link endpoint.
class Components {
 public:
  explicit Components(int n) : parent_(n) {
    std::iota(parent_.begin(), parent_.end(), 0);
  }
  int Add() {
    parent_.push_back(static_cast<int>(parent_.size()));
    return parent_.back();
  }
  int Find(int x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  void Union(int a, int b) { parent_[Find(a)] = Find(b); }

 private:
  std::vector<int> parent_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Load(
    const char* path) {
  dlerror();
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    const std::string detail = err != nullptr ? err : "";
    if (detail.empty() || absl::StrContains(detail, "No such file")) {
      return absl::UnavailableError(absl::StrCat(
          "NVML not available: ", path, " not found (no NVIDIA driver)"));
    }
    return absl::UnavailableError(
        absl::StrCat("NVML not available: cannot load ", path, ": ", detail));
  }
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary(handle));
  std::vector<std::string> missing;
  auto bind = [&](auto& fn, const char* symbol, bool required) {
    using Fn = std::remove_reference_t<decltype(fn)>;
    fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
    if (fn == nullptr && required) missing.push_back(symbol);
  };
  NvmlApi& a = lib->api_;
  bind(a.init, "nvmlInit_v2", true);
  bind(a.shutdown, "nvmlShutdown", true);
  bind(a.device_get_count, "nvmlDeviceGetCount_v2", true);
  bind(a.device_get_handle_by_index, "nvmlDeviceGetHandleByIndex_v2", true);
  bind(a.device_get_name, "nvmlDeviceGetName", true);
  bind(a.device_get_uuid, "nvmlDeviceGetUUID", true);
  bind(a.device_get_memory_info, "nvmlDeviceGetMemoryInfo", true);
  bind(a.error_string, "nvmlErrorString", false);
  bind(a.device_get_utilization_rates, "nvmlDeviceGetUtilizationRates", false);
  bind(a.device_get_pci_info, "nvmlDeviceGetPciInfo_v3", false);
  bind(a.device_get_mig_mode, "nvmlDeviceGetMigMode", false);
  bind(a.device_get_max_mig_device_count, "nvmlDeviceGetMaxMigDeviceCount",
       false);
  bind(a.device_get_mig_device_handle_by_index,
       "nvmlDeviceGetMigDeviceHandleByIndex", false);
  bind(a.device_get_gpu_instance_id, "nvmlDeviceGetGpuInstanceId", false);
  bind(a.device_get_gpu_instance_by_id, "nvmlDeviceGetGpuInstanceById", false);
  bind(a.gpu_instance_get_info, "nvmlGpuInstanceGetInfo", false);
  bind(a.device_get_nvlink_state, "nvmlDeviceGetNvLinkState", false);
  bind(a.device_get_nvlink_remote_pci_info,
       "nvmlDeviceGetNvLinkRemotePciInfo_v2", false);
  bind(a.device_get_total_ecc_errors, "nvmlDeviceGetTotalEccErrors", false);
  bind(a.device_get_retired_pages_pending_status,
       "nvmlDeviceGetRetiredPagesPendingStatus", false);
  if (!missing.empty()) {
    return absl::UnavailableError(
        absl::StrCat("NVML not available: ", path, " lacks ",
                     absl::StrJoin(missing, ", "), " (driver too old?)"));
  }
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

absl::StatusOr<std::vector<DiscoveredGpu>> DiscoverGpus(
    const NvmlApi& api, const inventory::GpuCatalog& catalog) {
  if (api.init == nullptr || api.shutdown == nullptr ||
      api.device_get_count == nullptr ||
      api.device_get_handle_by_index == nullptr ||
      api.device_get_name == nullptr || api.device_get_uuid == nullptr ||
      api.device_get_memory_info == nullptr) {
    return absl::InvalidArgumentError("NVML API table lacks a required entry");
  }
  const Return init = api.init();
  if (init != nvml_abi::kSuccess) {
    if (init == nvml_abi::kErrorDriverNotLoaded) {
      return absl::UnavailableError(
          "NVML not available: the NVIDIA driver is not loaded");
    }
    return absl::UnavailableError(absl::StrCat(
        "NVML not available: nvmlInit failed: ", ErrorText(api, init)));
  }
  struct Shutdown {
    const NvmlApi& api;
    ~Shutdown() { api.shutdown(); }
  } shutdown{api};

  unsigned int count = 0;
  const Return rc = api.device_get_count(&count);
  if (rc != nvml_abi::kSuccess) {
    return absl::UnavailableError(absl::StrCat(
        "NVML not available: cannot count GPUs: ", ErrorText(api, rc)));
  }
  if (count == 0) {
    return absl::UnavailableError("NVML not available: no GPU found");
  }
  std::vector<DiscoveredGpu> gpus(count);
  std::vector<std::unique_ptr<GpuReader>> readers;
  for (unsigned int i = 0; i < count; ++i) {
    DiscoveredGpu& gpu = gpus[i];
    gpu.index = static_cast<int>(i);
    auto reader = std::make_unique<GpuReader>(api, catalog, gpu);
    nvml_abi::Device dev = nullptr;
    const Return h = api.device_get_handle_by_index(i, &dev);
    if (h != nvml_abi::kSuccess) {
      // NO_PERMISSION or GPU_IS_LOST: report the GPU, unusable.
      gpu.healthy = false;
      gpu.health_notes.push_back(
          absl::StrCat("cannot open GPU: ", ErrorText(api, h)));
    } else {
      reader->Read(dev);
    }
    // A GPU in MIG mode runs MIG devices only, and gpusched does not create
    // them: without any, or with one whose profile it cannot tell, nothing
    // can be placed there.
    if (gpu.mig_enabled) {
      const inventory::GpuModelSpec* model = catalog.Find(gpu.model);
      bool known = model != nullptr && !gpu.mig_instances.empty();
      for (const DiscoveredMigInstance& m : gpu.mig_instances) {
        known = known && model->FindMigProfile(m.profile) != nullptr;
      }
      if (!known) {
        gpu.healthy = false;
        gpu.health_notes.push_back(
            gpu.mig_instances.empty()
                ? "MIG mode is on but the GPU has no MIG instance; create "
                  "them (nvidia-smi mig -cgi ... -C) or turn MIG mode off"
                : "MIG mode is on with an instance whose profile is not in "
                  "the GPU catalog");
      }
    }
    readers.push_back(std::move(reader));
  }
  // NVLink peers: match each link's remote PCI address to a GPU.
  absl::flat_hash_map<PciKey, int> by_pci;
  for (unsigned int i = 0; i < count; ++i) {
    if (readers[i]->have_pci()) by_pci.emplace(readers[i]->pci(), i);
  }
  for (unsigned int i = 0; i < count; ++i) {
    for (const PciKey& remote : readers[i]->remotes()) {
      auto it = by_pci.find(remote);
      if (it == by_pci.end()) {
        gpus[i].nvswitch = true;
      } else if (it->second != static_cast<int>(i)) {
        gpus[i].nvlink_peers.push_back(gpus[it->second].index);
      }
    }
    std::vector<int>& peers = gpus[i].nvlink_peers;
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  }
  return gpus;
}

absl::StatusOr<std::vector<DiscoveredGpu>> DiscoverLocalGpus(
    const inventory::GpuCatalog& catalog) {
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Load();
  if (!lib.ok()) return lib.status();
  return DiscoverGpus((*lib)->api(), catalog);
}

std::vector<int> NvLinkGroups(const std::vector<DiscoveredGpu>& gpus) {
  const int n = static_cast<int>(gpus.size());
  absl::flat_hash_map<int, int> pos;  // NVML index -> position
  for (int i = 0; i < n; ++i) pos[gpus[i].index] = i;
  Components c(n);
  int nvswitch = -1;
  bool any = false;
  for (int i = 0; i < n; ++i) {
    for (int peer : gpus[i].nvlink_peers) {
      auto it = pos.find(peer);
      if (it == pos.end()) continue;
      c.Union(i, it->second);
      any = true;
    }
    if (gpus[i].nvswitch) {
      if (nvswitch < 0) nvswitch = c.Add();
      c.Union(i, nvswitch);
      any = true;
    }
  }
  if (!any) return {};
  std::vector<int> group(n);
  absl::flat_hash_map<int, int> id_of_root;
  for (int i = 0; i < n; ++i) {
    auto [it, inserted] =
        id_of_root.try_emplace(c.Find(i), static_cast<int>(id_of_root.size()));
    group[i] = it->second;
  }
  return group;
}

absl::StatusOr<inventory::NodeSpec> LocalNodeSpec(
    const std::vector<DiscoveredGpu>& gpus, const LocalNodeOptions& options,
    const inventory::GpuCatalog& catalog) {
  inventory::NodeSpec spec;
  spec.name = options.name;
  spec.labels = options.labels;
  spec.cpu_milli = options.cpu_milli;
  spec.memory_mib = options.memory_mib;
  spec.simulated = false;
  spec.gpu_count = static_cast<int>(gpus.size());
  std::vector<std::string> models;
  bool any_mig = false;
  for (const DiscoveredGpu& g : gpus) {
    const std::string model = g.model.empty() ? g.name : g.model;
    if (std::find(models.begin(), models.end(), model) == models.end()) {
      models.push_back(model);
    }
    if (spec.gpu_memory_mib == 0 || g.memory_total_mib < spec.gpu_memory_mib) {
      spec.gpu_memory_mib = g.memory_total_mib;
    }
    any_mig = any_mig || g.mig_enabled;
  }
  if (models.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", options.name, "' has GPUs of different models (",
                     absl::StrJoin(models, ", "),
                     "); gpusched models one GPU model per "
                     "node: declare the node in an inventory file instead"));
  }
  if (!models.empty()) spec.gpu_model = models[0];
  spec.nvlink_group = NvLinkGroups(gpus);
  // GPUs in MIG mode: the instances that exist are a static layout, at the
  // slots NVML gives, else laid out canonically (LayOutMigDevices) where
  // NVML does not say (it needs privileges). Other GPUs stay whole.
  const inventory::GpuModelSpec* model = catalog.Find(spec.gpu_model);
  if (model == nullptr || !model->mig_capable() || !any_mig) return spec;
  std::vector<std::vector<inventory::MigInstance>> layout(gpus.size());
  bool any = false;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (!gpus[i].mig_enabled) continue;
    std::vector<inventory::MigSlice> exact;
    std::map<std::string, int> counts;
    bool starts_known = true;
    for (const DiscoveredMigInstance& m : gpus[i].mig_instances) {
      const inventory::MigProfile* p = model->FindMigProfile(m.profile);
      if (p == nullptr) continue;  // the GPU is unhealthy (DiscoverGpus)
      ++counts[p->name];
      starts_known = starts_known && m.start >= 0;
      exact.push_back({p, m.start});
    }
    std::sort(exact.begin(), exact.end(),
              [](const inventory::MigSlice& a, const inventory::MigSlice& b) {
                return a.start < b.start;
              });
    if (!starts_known || !inventory::ValidateMigLayout(*model, exact).ok()) {
      absl::StatusOr<std::vector<std::vector<inventory::MigSlice>>> canon =
          inventory::LayOutMigDevices(*model,
                                      std::vector<std::pair<std::string, int>>(
                                          counts.begin(), counts.end()),
                                      1);
      exact = canon.ok() && canon->size() == 1
                  ? (*canon)[0]
                  : std::vector<inventory::MigSlice>{};
    }
    for (const inventory::MigSlice& m : exact) {
      layout[i].push_back({m.profile->name, m.start});
    }
    any = any || !layout[i].empty();
  }
  if (any) {
    spec.mig_instances = std::move(layout);
    spec.mig_slots = model->mig_memory_slots;
  }
  return spec;
}

}  // namespace gpusched::backends
