// The JSON readers of outside data, through their file entry points (the
// bytes sit in a memfd): Mooncake JSONL request traces (first byte even)
// and ServeGen length datasets.
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "sim/serve_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static gpusched::fuzz::MemFile file;
  const std::string& path =
      file.Write(gpusched::fuzz::AsText(data + 1, size - 1));
  if (data[0] % 2 == 0) {
    auto t = gpusched::sim::ReadMooncakeTrace(path);
    if (t.ok()) {
      for (size_t i = 1; i < t->requests.size(); ++i) {
        gpusched::fuzz::Require(
            t->requests[i - 1].arrival <= t->requests[i].arrival,
            "a trace not sorted by arrival");
      }
    }
  } else {
    (void)gpusched::sim::ReadServeGenDataset(path);
  }
  return 0;
}
