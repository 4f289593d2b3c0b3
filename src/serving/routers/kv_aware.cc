// kv-aware: the least loaded replica by engine-reported KV-cache use and
// queue length, as llm-d's inference scheduler (kv-cache-utilization and
// queue scorers) and AIBrix's least-kv-cache router do. No allocation.
//
//   cost = kv_weight * kv + queue_weight * (q - q_min) / (q_max - q_min)
//
//   kv  = kv_used_fraction (clamped to [0, 1]); if unknown, kv_tokens / the
//         largest kv_tokens among the candidates; if that is unknown too,
//         outstanding / max_outstanding (clamped; a cap <= 0 counts as 1).
//   q   = waiting; if unknown, outstanding. The queue term is min-max
//         normalised over the candidates (0 when they are all equal).
//
// Lowest cost wins; then fewer outstanding; then the lowest index.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>

#include "serving/router.h"
#include "serving/routers/routers.h"

namespace gpusched::serving::internal {
namespace {

int64_t QueueSignal(const ReplicaLoad& r) {
  return r.waiting >= 0 ? r.waiting : std::max(0, r.outstanding);
}

double KvSignal(const ReplicaLoad& r, int64_t max_kv_tokens) {
  if (r.kv_used_fraction >= 0) return std::clamp(r.kv_used_fraction, 0.0, 1.0);
  if (r.kv_tokens >= 0) {
    return max_kv_tokens > 0 ? static_cast<double>(r.kv_tokens) /
                                   static_cast<double>(max_kv_tokens)
                             : 0.0;
  }
  const int cap = r.max_outstanding > 0 ? r.max_outstanding : 1;
  return std::clamp(static_cast<double>(r.outstanding) / cap, 0.0, 1.0);
}

class KvAwareRouter : public Router {
 public:
  explicit KvAwareRouter(const RouterConfig& config)
      : kv_weight_(config.kv_weight), queue_weight_(config.queue_weight) {}

  const char* name() const override { return "kv-aware"; }

  int Pick(const Request& request, std::span<const ReplicaLoad> replicas,
           Micros now) override {
    int64_t max_kv_tokens = 0;
    int64_t q_min = std::numeric_limits<int64_t>::max();
    int64_t q_max = std::numeric_limits<int64_t>::min();
    for (const ReplicaLoad& r : replicas) {
      max_kv_tokens = std::max(max_kv_tokens, r.kv_tokens);
      const int64_t q = QueueSignal(r);
      q_min = std::min(q_min, q);
      q_max = std::max(q_max, q);
    }
    const double q_range = static_cast<double>(q_max - q_min);
    int best = 0;
    double best_cost = std::numeric_limits<double>::infinity();
    for (int i = 0; i < static_cast<int>(replicas.size()); ++i) {
      const ReplicaLoad& r = replicas[i];
      const double queue =
          q_range > 0 ? static_cast<double>(QueueSignal(r) - q_min) / q_range
                      : 0.0;
      const double cost =
          kv_weight_ * KvSignal(r, max_kv_tokens) + queue_weight_ * queue;
      if (cost < best_cost ||
          (cost == best_cost && r.outstanding < replicas[best].outstanding)) {
        best = i;
        best_cost = cost;
      }
    }
    return best;
  }

 private:
  const double kv_weight_;
  const double queue_weight_;
};

}  // namespace

std::unique_ptr<Router> NewKvAwareRouter(const RouterConfig& config) {
  return std::make_unique<KvAwareRouter>(config);
}

}  // namespace gpusched::serving::internal
