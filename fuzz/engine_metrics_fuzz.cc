// An engine's Prometheus text exposition as the controller scrapes it
// (ParseEngineSignals) with vLLM's and SGLang's metric names.
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "runtime/engine_metrics.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto vllm = gpusched::runtime::MetricNamesFor("vllm:");
  static const auto sglang = gpusched::runtime::MetricNamesFor("sglang:");
  const auto text = gpusched::fuzz::AsText(data, size);
  for (const auto* names : {&*vllm, &*sglang}) {
    const gpusched::runtime::EngineSignals s =
        gpusched::runtime::ParseEngineSignals(text, *names);
    gpusched::fuzz::Require(s.running >= -1 && s.waiting >= -1,
                            "a negative request count");
  }
  return 0;
}
