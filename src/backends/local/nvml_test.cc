#include "backends/local/nvml.h"

#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inventory/mig.h"

namespace gpusched::backends {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
namespace abi = nvml_abi;

constexpr unsigned long long kMiB = 1024ull * 1024;

struct FakeMig {
  std::string name, uuid;
  unsigned long long total_mib = 0, used_mib = 0;
  unsigned int gi_id = 0;
  abi::Return gi_rc = abi::kSuccess;  // nvmlDeviceGetGpuInstanceById
  unsigned int profile_id = 0, start = 0, size = 0;
};

struct FakeLink {
  bool active = true;
  unsigned int domain = 0, bus = 0, device = 0;  // remote PCI address
};

struct FakeGpu {
  abi::Return handle_rc = abi::kSuccess;
  std::string name, uuid;
  unsigned long long total_mib = 0, used_mib = 0;
  abi::Return util_rc = abi::kSuccess;
  unsigned int util_gpu = 0, util_mem = 0;
  unsigned int bus = 0;  // PCI 0000:<bus>:00
  unsigned int pci_device_id = 0;
  abi::Return mig_rc = abi::kErrorNotSupported;
  unsigned int mig_current = 0, mig_pending = 0;
  std::vector<FakeMig> migs;  // index = MIG device index; "" name = empty
  std::vector<FakeLink> links;
  abi::Return nvlink_rc = abi::kSuccess;
  unsigned long long ecc = 0;
  abi::Return ecc_rc = abi::kErrorNotSupported;
  abi::EnableState retired_pending = 0;
  abi::Return memory_rc = abi::kSuccess;
};

// The fake driver behind the C function pointers (which cannot capture).
struct FakeNvml {
  abi::Return init_rc = abi::kSuccess;
  int inits = 0, shutdowns = 0;
  std::vector<FakeGpu> gpus;
  // Handles: stable addresses of (gpu, mig) pairs.
  struct Handle {
    int gpu;
    int mig;  // -1 for the GPU itself
  };
  std::deque<Handle> handles;
};
FakeNvml* fake = nullptr;

abi::Device MakeHandle(int gpu, int mig) {
  fake->handles.push_back({gpu, mig});
  return reinterpret_cast<abi::Device>(&fake->handles.back());
}
const FakeNvml::Handle& H(abi::Device d) {
  return *reinterpret_cast<const FakeNvml::Handle*>(d);
}
FakeGpu& G(abi::Device d) { return fake->gpus[H(d).gpu]; }

void Copy(const std::string& s, char* buf, unsigned int len) {
  std::snprintf(buf, len, "%s", s.c_str());
}

NvmlApi FakeApi() {
  NvmlApi api;
  api.init = [] {
    ++fake->inits;
    return fake->init_rc;
  };
  api.shutdown = [] {
    ++fake->shutdowns;
    return abi::kSuccess;
  };
  api.error_string = [](abi::Return rc) -> const char* {
    switch (rc) {
      case abi::kErrorGpuIsLost:
        return "GPU is lost";
      case abi::kErrorNoPermission:
        return "Insufficient Permissions";
      default:
        return "Unknown Error";
    }
  };
  api.device_get_count = [](unsigned int* n) {
    *n = static_cast<unsigned int>(fake->gpus.size());
    return abi::kSuccess;
  };
  api.device_get_handle_by_index = [](unsigned int i, abi::Device* d) {
    if (fake->gpus[i].handle_rc != abi::kSuccess)
      return fake->gpus[i].handle_rc;
    *d = MakeHandle(static_cast<int>(i), -1);
    return abi::kSuccess;
  };
  api.device_get_name = [](abi::Device d, char* buf, unsigned int len) {
    Copy(H(d).mig < 0 ? G(d).name : G(d).migs[H(d).mig].name, buf, len);
    return abi::kSuccess;
  };
  api.device_get_uuid = [](abi::Device d, char* buf, unsigned int len) {
    Copy(H(d).mig < 0 ? G(d).uuid : G(d).migs[H(d).mig].uuid, buf, len);
    return abi::kSuccess;
  };
  api.device_get_memory_info = [](abi::Device d, abi::Memory* m) {
    if (G(d).memory_rc != abi::kSuccess) return G(d).memory_rc;
    unsigned long long total = G(d).total_mib, used = G(d).used_mib;
    if (H(d).mig >= 0) {
      total = G(d).migs[H(d).mig].total_mib;
      used = G(d).migs[H(d).mig].used_mib;
    }
    *m = {total * kMiB, (total - used) * kMiB, used * kMiB};
    return abi::kSuccess;
  };
  api.device_get_utilization_rates = [](abi::Device d, abi::Utilization* u) {
    if (G(d).util_rc != abi::kSuccess) return G(d).util_rc;
    *u = {G(d).util_gpu, G(d).util_mem};
    return abi::kSuccess;
  };
  api.device_get_pci_info = [](abi::Device d, abi::PciInfo* p) {
    *p = {};
    p->bus = G(d).bus;
    p->pci_device_id = G(d).pci_device_id;
    Copy(absl::StrCat("00000000:", absl::Hex(G(d).bus, absl::kZeroPad2),
                      ":00.0"),
         p->bus_id, sizeof(p->bus_id));
    return abi::kSuccess;
  };
  api.device_get_mig_mode = [](abi::Device d, unsigned int* cur,
                               unsigned int* pend) {
    if (G(d).mig_rc != abi::kSuccess) return G(d).mig_rc;
    *cur = G(d).mig_current;
    *pend = G(d).mig_pending;
    return abi::kSuccess;
  };
  api.device_get_max_mig_device_count = [](abi::Device d, unsigned int* n) {
    *n = 7;
    return abi::kSuccess;
  };
  api.device_get_mig_device_handle_by_index = [](abi::Device d, unsigned int j,
                                                 abi::Device* out) {
    if (j >= G(d).migs.size() || G(d).migs[j].name.empty()) {
      return abi::kErrorNotFound;
    }
    *out = MakeHandle(H(d).gpu, static_cast<int>(j));
    return abi::kSuccess;
  };
  api.device_get_gpu_instance_id = [](abi::Device d, unsigned int* id) {
    *id = G(d).migs[H(d).mig].gi_id;
    return abi::kSuccess;
  };
  api.device_get_gpu_instance_by_id = [](abi::Device d, unsigned int id,
                                         abi::GpuInstance* gi) {
    for (size_t j = 0; j < G(d).migs.size(); ++j) {
      const FakeMig& m = G(d).migs[j];
      if (m.gi_id == id && !m.name.empty()) {
        if (m.gi_rc != abi::kSuccess) return m.gi_rc;
        *gi = reinterpret_cast<abi::GpuInstance>(
            MakeHandle(H(d).gpu, static_cast<int>(j)));
        return abi::kSuccess;
      }
    }
    return abi::kErrorNotFound;
  };
  api.gpu_instance_get_info = [](abi::GpuInstance gi,
                                 abi::GpuInstanceInfo* info) {
    const abi::Device d = reinterpret_cast<abi::Device>(gi);
    const FakeMig& m = G(d).migs[H(d).mig];
    *info = {};
    info->id = m.gi_id;
    info->profile_id = m.profile_id;
    info->placement = {m.start, m.size};
    return abi::kSuccess;
  };
  api.device_get_nvlink_state = [](abi::Device d, unsigned int link,
                                   abi::EnableState* active) {
    if (G(d).nvlink_rc != abi::kSuccess) return G(d).nvlink_rc;
    if (link >= G(d).links.size()) return abi::kErrorInvalidArgument;
    *active = G(d).links[link].active ? abi::kFeatureEnabled : 0;
    return abi::kSuccess;
  };
  api.device_get_nvlink_remote_pci_info = [](abi::Device d, unsigned int link,
                                             abi::PciInfo* p) {
    *p = {};
    p->domain = G(d).links[link].domain;
    p->bus = G(d).links[link].bus;
    p->device = G(d).links[link].device;
    return abi::kSuccess;
  };
  api.device_get_total_ecc_errors = [](abi::Device d, int type, int counter,
                                       unsigned long long* n) {
    if (type != abi::kMemoryErrorTypeUncorrected ||
        counter != abi::kVolatileEcc) {
      return abi::kErrorInvalidArgument;
    }
    if (G(d).ecc_rc != abi::kSuccess) return G(d).ecc_rc;
    *n = G(d).ecc;
    return abi::kSuccess;
  };
  api.device_get_retired_pages_pending_status = [](abi::Device d,
                                                   abi::EnableState* p) {
    *p = G(d).retired_pending;
    return abi::kSuccess;
  };
  return api;
}

FakeGpu H100(unsigned int bus) {
  FakeGpu g;
  g.name = "NVIDIA H100 80GB HBM3";
  g.uuid = absl::StrCat("GPU-", bus);
  g.total_mib = 81559;
  g.bus = bus;
  g.pci_device_id = 0x233010DE;
  g.mig_rc = abi::kSuccess;
  g.ecc_rc = abi::kSuccess;
  return g;
}

FakeLink LinkTo(unsigned int bus) {
  FakeLink l;
  l.bus = bus;
  return l;
}

class NvmlTest : public ::testing::Test {
 protected:
  void SetUp() override { fake = &fake_; }
  void TearDown() override { fake = nullptr; }
  FakeNvml fake_;
};

TEST_F(NvmlTest, MissingLibraryIsAOneLineError) {
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib =
      NvmlLibrary::Load("libnvidia-ml-gpusched-test.so.1");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(lib.status().message(),
            "NVML not available: libnvidia-ml-gpusched-test.so.1 not found "
            "(no NVIDIA driver)");
}

TEST_F(NvmlTest, DefaultLibraryOnThisMachine) {
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Load();
  if (lib.ok()) GTEST_SKIP() << "this machine has an NVIDIA driver";
  EXPECT_EQ(lib.status().message(),
            "NVML not available: libnvidia-ml.so.1 not found (no NVIDIA "
            "driver)");
}

TEST_F(NvmlTest, InitFailures) {
  const NvmlApi api = FakeApi();
  fake_.init_rc = abi::kErrorDriverNotLoaded;
  EXPECT_EQ(DiscoverGpus(api).status().message(),
            "NVML not available: the NVIDIA driver is not loaded");
  EXPECT_EQ(fake_.shutdowns, 0);  // never initialised

  fake_.init_rc = abi::kSuccess;
  absl::StatusOr<std::vector<DiscoveredGpu>> none = DiscoverGpus(api);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(none.status().message(), "NVML not available: no GPU found");
  EXPECT_EQ(fake_.shutdowns, 1);

  NvmlApi partial = api;
  partial.device_get_uuid = nullptr;
  EXPECT_EQ(DiscoverGpus(partial).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NvmlTest, ReadsGpusMigNvLinkAndHealth) {
  FakeGpu g0 = H100(0x07);
  g0.used_mib = 1024;
  g0.util_gpu = 35;
  g0.util_mem = 12;
  g0.mig_current = 1;
  g0.mig_pending = 1;
  FakeMig big;
  big.name = "NVIDIA H100 80GB HBM3 MIG 3g.40gb";
  big.uuid = "MIG-a";
  big.total_mib = 40448;
  big.used_mib = 100;
  big.gi_id = 1;
  big.profile_id = 9;
  big.start = 4;
  big.size = 4;
  FakeMig small;  // a compute instance inside a 1g GI; placement hidden
  small.name = "NVIDIA H100 80GB HBM3 MIG 1c.1g.10gb";
  small.uuid = "MIG-b";
  small.total_mib = 9984;
  small.gi_id = 13;
  small.gi_rc = abi::kErrorNoPermission;
  g0.migs = {big, FakeMig{}, small};  // index 1 empty
  g0.links = {LinkTo(0x08), LinkTo(0x08), FakeLink{.active = false}};
  FakeGpu g1 = H100(0x08);
  g1.links = {LinkTo(0x07), LinkTo(0x07)};
  g1.ecc = 2;
  g1.util_rc = abi::kErrorNotSupported;
  FakeGpu g2 = H100(0x09);
  g2.retired_pending = abi::kFeatureEnabled;
  g2.nvlink_rc = abi::kErrorNotSupported;
  fake_.gpus = {g0, g1, g2};

  absl::StatusOr<std::vector<DiscoveredGpu>> gpus = DiscoverGpus(FakeApi());
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_EQ(fake_.inits, 1);
  EXPECT_EQ(fake_.shutdowns, 1);
  ASSERT_EQ(gpus->size(), 3u);

  const DiscoveredGpu& d0 = (*gpus)[0];
  EXPECT_EQ(d0.index, 0);
  EXPECT_EQ(d0.uuid, "GPU-7");
  EXPECT_EQ(d0.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d0.model, "H100-SXM-80GB");
  EXPECT_EQ(d0.pci_bus_id, "00000000:07:00.0");
  EXPECT_EQ(d0.pci_device_id, 0x233010DEu);
  EXPECT_EQ(d0.memory_total_mib, 81559);
  EXPECT_EQ(d0.memory_used_mib, 1024);
  EXPECT_EQ(d0.utilization_gpu_pct, 35);
  EXPECT_EQ(d0.utilization_memory_pct, 12);
  EXPECT_TRUE(d0.mig_enabled);
  EXPECT_TRUE(d0.mig_pending);
  ASSERT_EQ(d0.mig_instances.size(), 2u);
  const DiscoveredMigInstance& m0 = d0.mig_instances[0];
  EXPECT_EQ(m0.index, 0);
  EXPECT_EQ(m0.uuid, "MIG-a");
  EXPECT_EQ(m0.profile, "3g.40gb");
  EXPECT_EQ(m0.gpu_instance_id, 1);
  EXPECT_EQ(m0.profile_id, 9);
  EXPECT_EQ(m0.start, 4);
  EXPECT_EQ(m0.size, 4);
  EXPECT_EQ(m0.memory_total_mib, 40448);
  EXPECT_EQ(m0.memory_used_mib, 100);
  const DiscoveredMigInstance& m2 = d0.mig_instances[1];
  EXPECT_EQ(m2.index, 2);
  EXPECT_EQ(m2.profile, "1g.10gb");  // "1c." compute-instance prefix dropped
  EXPECT_EQ(m2.gpu_instance_id, 13);
  EXPECT_EQ(m2.profile_id, 19);  // from the catalog
  EXPECT_EQ(m2.start, -1);       // placement needs privileges
  EXPECT_EQ(m2.size, 1);         // from the catalog
  EXPECT_EQ(d0.nvlink_active_links, 2);
  EXPECT_THAT(d0.nvlink_peers, ElementsAre(1));
  EXPECT_FALSE(d0.nvswitch);
  EXPECT_EQ(d0.ecc_uncorrected_volatile, 0);
  EXPECT_TRUE(d0.healthy);

  const DiscoveredGpu& d1 = (*gpus)[1];
  EXPECT_EQ(d1.utilization_gpu_pct, -1);  // not supported: unknown
  EXPECT_THAT(d1.nvlink_peers, ElementsAre(0));
  EXPECT_EQ(d1.ecc_uncorrected_volatile, 2);
  EXPECT_FALSE(d1.healthy);
  EXPECT_THAT(
      d1.health_notes,
      ElementsAre("2 uncorrected ECC error(s) since the driver loaded"));

  const DiscoveredGpu& d2 = (*gpus)[2];
  EXPECT_EQ(d2.nvlink_active_links, 0);
  EXPECT_THAT(d2.nvlink_peers, IsEmpty());
  EXPECT_TRUE(d2.retired_pages_pending);
  EXPECT_FALSE(d2.healthy);

  EXPECT_EQ(NvLinkGroups(*gpus), (std::vector<int>{0, 0, 1}));
}

TEST_F(NvmlTest, LostAndUnknownGpus) {
  FakeGpu lost = H100(0x10);
  lost.handle_rc = abi::kErrorGpuIsLost;
  FakeGpu dying = H100(0x11);
  dying.memory_rc = abi::kErrorGpuIsLost;
  FakeGpu other;
  other.name = "NVIDIA GeForce RTX 4090";
  other.uuid = "GPU-x";
  other.total_mib = 24564;
  other.bus = 0x12;
  fake_.gpus = {lost, dying, other};
  absl::StatusOr<std::vector<DiscoveredGpu>> gpus = DiscoverGpus(FakeApi());
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_FALSE((*gpus)[0].healthy);
  EXPECT_THAT((*gpus)[0].health_notes,
              ElementsAre("cannot open GPU: GPU is lost"));
  EXPECT_FALSE((*gpus)[1].healthy);
  EXPECT_THAT((*gpus)[1].health_notes,
              ElementsAre("GPU is lost (memory: GPU is lost)"));
  EXPECT_EQ((*gpus)[2].model, "");  // not in the catalog
  EXPECT_FALSE((*gpus)[2].mig_enabled);
  EXPECT_TRUE((*gpus)[2].healthy);
}

TEST_F(NvmlTest, NvSwitchLinksFormOneDomain) {
  for (unsigned int bus = 1; bus <= 4; ++bus) {
    FakeGpu g = H100(bus);
    // Each GPU reaches two NVSwitches (PCI buses 0x80, 0x81), no GPU.
    g.links = {LinkTo(0x80), LinkTo(0x81)};
    fake_.gpus.push_back(g);
  }
  absl::StatusOr<std::vector<DiscoveredGpu>> gpus = DiscoverGpus(FakeApi());
  ASSERT_TRUE(gpus.ok());
  for (const DiscoveredGpu& g : *gpus) {
    EXPECT_TRUE(g.nvswitch);
    EXPECT_THAT(g.nvlink_peers, IsEmpty());
  }
  EXPECT_EQ(NvLinkGroups(*gpus), (std::vector<int>{0, 0, 0, 0}));
}

TEST(NvLinkGroupsTest, ConnectedComponents) {
  auto gpus = [](std::vector<std::vector<int>> peers) {
    std::vector<DiscoveredGpu> out(peers.size());
    for (size_t i = 0; i < peers.size(); ++i) {
      out[i].index = static_cast<int>(i);
      out[i].nvlink_peers = peers[i];
    }
    return out;
  };
  EXPECT_THAT(NvLinkGroups(gpus({{}, {}, {}})), IsEmpty());
  EXPECT_EQ(NvLinkGroups(gpus({{1}, {0}, {3}, {2}})),
            (std::vector<int>{0, 0, 1, 1}));
  // A chain is one domain; an unlinked GPU stands alone.
  EXPECT_EQ(NvLinkGroups(gpus({{}, {2}, {1, 3}, {2}})),
            (std::vector<int>{0, 1, 1, 1}));
  // Peers outside the list are ignored.
  EXPECT_EQ(NvLinkGroups(gpus({{9}, {0}})), (std::vector<int>{0, 0}));
}

TEST(LocalNodeSpecTest, BuildsARealNode) {
  std::vector<DiscoveredGpu> gpus(2);
  for (int i = 0; i < 2; ++i) {
    gpus[i].index = i;
    gpus[i].name = "NVIDIA H100 80GB HBM3";
    gpus[i].model = "H100-SXM-80GB";
    gpus[i].mig_enabled = true;
    gpus[i].nvlink_peers = {1 - i};
  }
  gpus[0].memory_total_mib = 81559;
  gpus[1].memory_total_mib = 81000;
  LocalNodeOptions opt;
  opt.name = "host";
  opt.cpu_milli = 16000;
  opt.memory_mib = 65536;
  absl::StatusOr<inventory::NodeSpec> spec = LocalNodeSpec(gpus, opt);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "host");
  EXPECT_FALSE(spec->simulated);
  EXPECT_EQ(spec->gpu_model, "H100-SXM-80GB");
  EXPECT_EQ(spec->gpu_count, 2);
  EXPECT_EQ(spec->gpu_memory_mib, 81000);  // the smallest
  // MIG mode with no instance: nothing to place MIG slices at (DiscoverGpus
  // marks such GPUs unhealthy).
  EXPECT_EQ(spec->mig_slots, 0);
  EXPECT_TRUE(spec->mig_instances.empty());
  EXPECT_EQ(spec->nvlink_group, (std::vector<int>{0, 0}));
  EXPECT_EQ(spec->cpu_milli, 16000);

  // GPU 0 in MIG mode with the instances NVML lists at their slots; GPU 1
  // whole: a static layout, exactly those.
  auto instance = [](const char* profile, int start) {
    DiscoveredMigInstance m;
    m.profile = profile;
    m.start = start;
    return m;
  };
  gpus[0].mig_instances = {instance("3g.40gb", 4), instance("1g.10gb", 0)};
  gpus[1].mig_enabled = false;
  absl::StatusOr<inventory::NodeSpec> mig = LocalNodeSpec(gpus, opt);
  ASSERT_TRUE(mig.ok()) << mig.status();
  EXPECT_EQ(mig->mig_slots, 8);
  ASSERT_EQ(mig->mig_instances.size(), 2u);
  EXPECT_EQ(mig->mig_instances[0], (std::vector<inventory::MigInstance>{
                                       {"1g.10gb", 0}, {"3g.40gb", 4}}));
  EXPECT_TRUE(mig->mig_instances[1].empty());
  inventory::ClusterState with_mig;
  ASSERT_TRUE(with_mig.AddNode(*mig).ok());
  EXPECT_TRUE(with_mig.state(0).gpus[0].mig_static);
  EXPECT_EQ(with_mig.state(0).idle_gpus, 1);
  // Without NVML's slots (no privileges): laid out canonically, same count.
  gpus[0].mig_instances = {instance("3g.40gb", -1), instance("1g.10gb", -1)};
  mig = LocalNodeSpec(gpus, opt);
  ASSERT_TRUE(mig.ok()) << mig.status();
  ASSERT_EQ(mig->mig_instances[0].size(), 2u);
  EXPECT_EQ(inventory::StaticMigSlices(*mig, "3g.40gb").size(), 1u);
  EXPECT_EQ(inventory::StaticMigSlices(*mig, "1g.10gb").size(), 1u);
  gpus[0].mig_instances.clear();
  gpus[1].mig_enabled = true;

  gpus[1].model = "";
  gpus[1].name = "NVIDIA GeForce RTX 4090";
  absl::StatusOr<inventory::NodeSpec> mixed = LocalNodeSpec(gpus, opt);
  EXPECT_THAT(mixed.status().message(),
              HasSubstr("node 'host' has GPUs of different models "
                        "(H100-SXM-80GB, NVIDIA GeForce RTX 4090)"));

  // A GPU the catalog does not know keeps its NVML name.
  absl::StatusOr<inventory::NodeSpec> one = LocalNodeSpec({gpus[1]}, opt);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->gpu_model, "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(one->mig_slots, 0);

  // No GPUs: a CPU-only node.
  absl::StatusOr<inventory::NodeSpec> cpu = LocalNodeSpec({}, opt);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->gpu_count, 0);
  EXPECT_TRUE(cpu->gpu_model.empty());

  inventory::ClusterState state;
  EXPECT_TRUE(state.AddNode(*spec).ok());
}

}  // namespace
}  // namespace gpusched::backends
