// Routing signals from an engine's Prometheus metrics: requests running and
// waiting inside the engine, KV-cache usage, and the prefix cache's
// counters (queried and hit tokens, for the hit rate in /metrics). The names
// differ per engine; the template's metrics prefix chooses the set ("vllm:" for
// vLLM and the reference engine, "sglang:", "llamacpp:", "tgi_", "nv_" for
// Triton). Values of one metric with several label sets are summed (one
// engine may serve several models). Pure functions; thread-safe.
#ifndef GPUSCHED_RUNTIME_ENGINE_METRICS_H_
#define GPUSCHED_RUNTIME_ENGINE_METRICS_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace gpusched::runtime {

struct EngineSignals {
  // -1 where the engine does not export it.
  int running = -1;
  int waiting = -1;
  double kv_used_fraction = -1;  // 0..1
  // Counters since the engine started (they restart with it).
  double prefix_cache_queries = -1;
  double prefix_cache_hits = -1;
};

// The metric names an engine with `prefix` exports, or nullopt when
// gpusched knows none for it.
struct EngineMetricNames {
  std::string running, waiting, kv_usage;
  std::string prefix_queries, prefix_hits;  // "" where unknown
};
std::optional<EngineMetricNames> MetricNamesFor(absl::string_view prefix);

// Reads the signals from a Prometheus text exposition. Malformed lines and
// negative samples are skipped; counts are bounded (1e9) and the KV usage
// is at most 1; a metric that is absent stays -1.
EngineSignals ParseEngineSignals(absl::string_view text,
                                 const EngineMetricNames& names);

}  // namespace gpusched::runtime

#endif  // GPUSCHED_RUNTIME_ENGINE_METRICS_H_
