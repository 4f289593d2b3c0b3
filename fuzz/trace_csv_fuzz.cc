// The CSV readers of outside data, through their file entry points (the
// bytes sit in a memfd): request traces (Azure, VTC, Aegaeon), the Alibaba
// pod and node lists, ServeGen client traces. The first byte picks one.
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "inventory/alibaba_nodes.h"
#include "sim/alibaba_trace.h"
#include "sim/serve_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static gpusched::fuzz::MemFile file;
  const std::string& path =
      file.Write(gpusched::fuzz::AsText(data + 1, size - 1));
  switch (data[0] % 6) {
    case 0:
      (void)gpusched::sim::ReadAzureTrace(path);
      break;
    case 1:
      (void)gpusched::sim::ReadVtcTrace(path);
      break;
    case 2:
      (void)gpusched::sim::ReadAegaeonTrace(path);
      break;
    case 3:
      (void)gpusched::sim::ReadAlibabaPods(path);
      break;
    case 4:
      (void)gpusched::inventory::ReadAlibabaNodes(path);
      break;
    default:
      (void)gpusched::sim::ReadServeGenTrace(path);
      break;
  }
  return 0;
}
