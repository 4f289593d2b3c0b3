// latency-predictive: the replica with the lowest predicted time to first
// token (PredictTtftSeconds, documented in serving/router.h and
// docs/routing.md). No allocation.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>

#include "serving/latency_model.h"
#include "serving/router.h"
#include "serving/routers/routers.h"

namespace gpusched::serving {

double PredictTtftSeconds(const LatencyModel& model, const Request& request,
                          const ReplicaLoad& replica,
                          const TtftPredictorOptions& options) {
  const int64_t chunk = std::max<int64_t>(1, options.prefill_chunk_tokens);
  const int64_t ahead = std::max<int64_t>(0, replica.pending_prefill_tokens) +
                        std::max<int32_t>(0, request.input_tokens);
  const int64_t running =
      replica.running >= 0 ? replica.running : std::max(0, replica.outstanding);
  const int64_t capacity = model.kv_capacity_tokens;
  int64_t kv = 0;
  if (replica.kv_tokens >= 0) {
    kv = replica.kv_tokens;
  } else if (replica.kv_used_fraction >= 0 && capacity > 0) {
    kv = std::llround(replica.kv_used_fraction * static_cast<double>(capacity));
  }

  const double step = model.DecodeSeconds(running, kv);
  const int64_t chunks = (ahead + chunk - 1) / chunk;
  double ttft =
      model.PrefillSeconds(ahead) + static_cast<double>(chunks) * step;

  bool full = false;
  if (replica.kv_used_fraction >= 0) {
    full = replica.kv_used_fraction >= options.kv_full_fraction;
  } else if (replica.kv_tokens >= 0 && capacity > 0) {
    full = static_cast<double>(replica.kv_tokens) >=
           options.kv_full_fraction * static_cast<double>(capacity);
  }
  if (capacity > 0 && kv + ahead > capacity) full = true;
  if (full) {
    // Admission waits until waiting + 1 running sequences finish; with
    // remaining outputs spread evenly over [0, L] the k-th of `running`
    // finishes after about k * L / (running + 1) decode steps.
    const int64_t waiting =
        replica.waiting >= 0
            ? replica.waiting
            : std::max<int64_t>(0, replica.outstanding - running);
    const double output = request.max_output_tokens > 0
                              ? request.max_output_tokens
                              : options.default_output_tokens;
    const double steps = static_cast<double>(waiting + 1) * output /
                         static_cast<double>(running + 1);
    ttft += steps * model.DecodeSeconds(std::max<int64_t>(1, running), kv);
  }
  return ttft;
}

namespace internal {
namespace {

class LatencyPredictiveRouter : public Router {
 public:
  LatencyPredictiveRouter(const RouterConfig& config, const LatencyModel& model)
      : options_(config.ttft), model_(model) {}

  const char* name() const override { return "latency-predictive"; }

  int Pick(const Request& request, std::span<const ReplicaLoad> replicas,
           Micros now) override {
    int best = 0;
    double best_ttft = std::numeric_limits<double>::infinity();
    for (int i = 0; i < static_cast<int>(replicas.size()); ++i) {
      const double ttft =
          PredictTtftSeconds(model_, request, replicas[i], options_);
      if (ttft < best_ttft ||
          (ttft == best_ttft &&
           replicas[i].outstanding < replicas[best].outstanding)) {
        best = i;
        best_ttft = ttft;
      }
    }
    return best;
  }

 private:
  const TtftPredictorOptions options_;
  const LatencyModel model_;
};

}  // namespace

std::unique_ptr<Router> NewLatencyPredictiveRouter(const RouterConfig& config,
                                                   const LatencyModel& model) {
  return std::make_unique<LatencyPredictiveRouter>(config, model);
}

}  // namespace internal
}  // namespace gpusched::serving
