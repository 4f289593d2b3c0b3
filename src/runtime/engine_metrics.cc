#include "runtime/engine_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gpusched::runtime {

std::optional<EngineMetricNames> MetricNamesFor(absl::string_view prefix) {
  // vLLM (and the reference engine): vllm/engine/metrics.py. Newer vLLM
  // renamed the KV gauge to kv_cache_usage_perc; both are read. The prefix
  // cache counters (tokens) are vLLM v1's; v0 had only a hit-rate gauge.
  if (prefix == "vllm:") {
    return EngineMetricNames{
        "vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:gpu_cache_usage_perc|vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"};
  }
  if (prefix == "sglang:") {
    return EngineMetricNames{"sglang:num_running_reqs", "sglang:num_queue_reqs",
                             "sglang:token_usage"};
  }
  if (prefix == "llamacpp:") {
    return EngineMetricNames{"llamacpp:requests_processing",
                             "llamacpp:requests_deferred",
                             "llamacpp:kv_cache_usage_ratio"};
  }
  if (prefix == "tgi_") {
    return EngineMetricNames{"tgi_batch_current_size", "tgi_queue_size", ""};
  }
  if (prefix == "nv_") {
    return EngineMetricNames{"", "nv_inference_pending_request_count", ""};
  }
  return std::nullopt;
}

namespace {

bool Matches(absl::string_view name, absl::string_view wanted) {
  if (wanted.empty()) return false;
  for (absl::string_view w : absl::StrSplit(wanted, '|')) {
    if (name == w) return true;
  }
  return false;
}

}  // namespace

EngineSignals ParseEngineSignals(absl::string_view text,
                                 const EngineMetricNames& names) {
  constexpr double kMaxSum = 1e300;  // sums stay finite
  double sums[5] = {0, 0, 0, 0, 0};
  bool seen[5] = {false, false, false, false, false};
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == absl::string_view::npos) continue;
    const absl::string_view name = line.substr(0, name_end);
    int which = Matches(name, names.running)          ? 0
                : Matches(name, names.waiting)        ? 1
                : Matches(name, names.kv_usage)       ? 2
                : Matches(name, names.prefix_queries) ? 3
                : Matches(name, names.prefix_hits)    ? 4
                                                      : -1;
    if (which < 0) continue;
    size_t value_at = name_end;
    if (line[name_end] == '{') {
      const size_t close = line.find('}', name_end);
      if (close == absl::string_view::npos) continue;
      value_at = close + 1;
    }
    absl::string_view rest =
        absl::StripLeadingAsciiWhitespace(line.substr(value_at));
    const std::string value(rest.substr(0, rest.find(' ')));
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    // Counts, usage and counters are never negative: such a sample is
    // malformed, like one that is not a number.
    if (end == value.c_str() || !std::isfinite(v) || v < 0) continue;
    sums[which] = std::min(sums[which] + v, kMaxSum);
    seen[which] = true;
  }
  EngineSignals s;
  // Bounded before the conversion (an engine's text is outside input).
  constexpr double kMaxCount = 1e9;
  if (seen[0])
    s.running = static_cast<int>(std::lround(std::min(sums[0], kMaxCount)));
  if (seen[1])
    s.waiting = static_cast<int>(std::lround(std::min(sums[1], kMaxCount)));
  if (seen[2]) s.kv_used_fraction = std::min(sums[2], 1.0);
  if (seen[3]) s.prefix_cache_queries = sums[3];
  if (seen[4]) s.prefix_cache_hits = sums[4];
  return s;
}

}  // namespace gpusched::runtime
