// A fake NVIDIA Management Library for live tests: built as
// libnvidia-ml.so.1 (tests/CMakeLists.txt) and found by `gpusched serve`
// through LD_LIBRARY_PATH, it answers the NVML calls gpusched makes
// (src/backends/local/nvml.cc) from a state file that the test rewrites
// while gpusched runs. Each call to nvmlInit_v2 reads the file named by
// GPUSCHED_FAKE_NVML_STATE again; one GPU per line:
//
//   <uuid> <total MiB> <used MiB> <utilization %> <uncorrected ECC errors>
//
// (the GPU is an "NVIDIA H100 80GB HBM3"; ECC errors > 0 make gpusched call
// it unhealthy). At most 16 GPUs; a malformed line ends the list. Test code
// only: it is never installed.

#include <cstdio>
#include <cstdlib>

namespace {

constexpr unsigned int kMaxGpus = 16;
constexpr int kSuccess = 0;
constexpr int kErrorInvalidArgument = 2;
constexpr int kErrorNotSupported = 3;
constexpr int kErrorDriverNotLoaded = 9;

struct FakeGpu {
  char uuid[80];
  unsigned long long total_mib, used_mib;
  unsigned int util;
  unsigned long long ecc;
};

FakeGpu gpus[kMaxGpus];
unsigned int count = 0;

struct Memory {
  unsigned long long total, free, used;
};
struct Utilization {
  unsigned int gpu, memory;
};

}  // namespace

extern "C" {

int nvmlInit_v2(void) {
  const char* path = std::getenv("GPUSCHED_FAKE_NVML_STATE");
  std::FILE* f = path ? std::fopen(path, "r") : nullptr;
  if (f == nullptr) return kErrorDriverNotLoaded;
  count = 0;
  while (count < kMaxGpus) {
    FakeGpu* g = &gpus[count];
    if (std::fscanf(f, "%79s %llu %llu %u %llu", g->uuid, &g->total_mib,
                    &g->used_mib, &g->util, &g->ecc) != 5) {
      break;
    }
    ++count;
  }
  std::fclose(f);
  return kSuccess;
}

int nvmlShutdown(void) { return kSuccess; }

int nvmlDeviceGetCount_v2(unsigned int* n) {
  *n = count;
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** dev) {
  if (i >= count) return kErrorInvalidArgument;
  *dev = &gpus[i];
  return kSuccess;
}

int nvmlDeviceGetName(void* dev, char* buf, unsigned int len) {
  (void)dev;
  std::snprintf(buf, len, "%s", "NVIDIA H100 80GB HBM3");
  return kSuccess;
}

int nvmlDeviceGetUUID(void* dev, char* buf, unsigned int len) {
  std::snprintf(buf, len, "%s", static_cast<FakeGpu*>(dev)->uuid);
  return kSuccess;
}

int nvmlDeviceGetMemoryInfo(void* dev, Memory* m) {
  const FakeGpu* g = static_cast<const FakeGpu*>(dev);
  m->total = g->total_mib * 1024ull * 1024ull;
  m->used = g->used_mib * 1024ull * 1024ull;
  m->free = m->total - m->used;
  return kSuccess;
}

int nvmlDeviceGetUtilizationRates(void* dev, Utilization* u) {
  u->gpu = static_cast<FakeGpu*>(dev)->util;
  u->memory = 0;
  return kSuccess;
}

int nvmlDeviceGetTotalEccErrors(void* dev, int type, int counter,
                                unsigned long long* n) {
  (void)type;
  (void)counter;
  *n = static_cast<FakeGpu*>(dev)->ecc;
  return kSuccess;
}

int nvmlDeviceGetMigMode(void* dev, unsigned int* current,
                         unsigned int* pending) {
  (void)dev;
  (void)current;
  (void)pending;
  return kErrorNotSupported;
}

const char* nvmlErrorString(int rc) {
  return rc == kSuccess ? "Success" : "fake NVML error";
}

}  // extern "C"
