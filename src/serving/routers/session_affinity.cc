// session-affinity: requests of one session go to the replica the session
// was last dispatched to while that replica is a candidate. A session not
// pinned here goes to its home: the candidate with the highest rendezvous
// score hash(session, replica key) among those within the load bound
// (1 + load_bound_epsilon) x the mean, so that every gateway of an HA
// installation sends a new session to the same replica without talking to
// the others. Requests without a session go to the fallback router; every
// dispatch re-pins the session. Pins live in a bounded LRU map.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <span>
#include <utility>

#include "common/random.h"
#include "serving/router.h"
#include "serving/routers/lru_map.h"
#include "serving/routers/routers.h"

namespace gpusched::serving::internal {
namespace {

class SessionAffinityRouter : public Router {
 public:
  SessionAffinityRouter(const RouterConfig& config,
                        std::unique_ptr<Router> fallback)
      : fallback_(std::move(fallback)),
        epsilon_(config.load_bound_epsilon),
        sessions_(config.session_capacity) {}

  const char* name() const override { return "session-affinity"; }

  int Pick(const Request& request, std::span<const ReplicaLoad> replicas,
           Micros now) override {
    if (request.session != 0) {
      if (const std::optional<ReplicaId> pinned =
              sessions_.Get(request.session);
          pinned.has_value()) {
        for (int i = 0; i < static_cast<int>(replicas.size()); ++i) {
          if (replicas[i].id == *pinned) return i;
        }
      }
      return Home(request.session, replicas);
    }
    return fallback_->Pick(request, replicas, now);
  }

  void OnDispatched(const Request& request, ReplicaId replica) override {
    if (request.session != 0) sessions_.Put(request.session, replica);
    fallback_->OnDispatched(request, replica);
  }

  // Pins to the removed replica are not erased: ids are never reused, so
  // such a pin never matches a candidate again and is re-pinned on the
  // session's next dispatch (or ages out of the LRU).
  void OnReplicaRemoved(ReplicaId replica) override {
    fallback_->OnReplicaRemoved(replica);
  }

 private:
  // The rendezvous winner among the candidates within the load bound (the
  // least loaded always is, so there is one).
  int Home(uint64_t session, std::span<const ReplicaLoad> replicas) const {
    int64_t total = 1;  // the new request counts toward the mean
    for (const ReplicaLoad& r : replicas) total += std::max(0, r.outstanding);
    const double mean =
        static_cast<double>(total) / static_cast<double>(replicas.size());
    const double x = (1 + epsilon_) * mean;
    const int64_t bound =
        static_cast<int64_t>(std::ceil(x - 1e-9 * std::max(1.0, x)));
    int best = -1;
    uint64_t best_score = 0;
    for (int i = 0; i < static_cast<int>(replicas.size()); ++i) {
      if (std::max(0, replicas[i].outstanding) > bound) continue;
      const uint64_t key =
          replicas[i].key != 0 ? replicas[i].key : replicas[i].id;
      const uint64_t score = Mix64(session ^ Mix64(key));
      if (best < 0 || score > best_score) {
        best = i;
        best_score = score;
      }
    }
    return best >= 0 ? best : 0;
  }

  std::unique_ptr<Router> fallback_;
  const double epsilon_;
  LruMap sessions_;
};

}  // namespace

std::unique_ptr<Router> NewSessionAffinityRouter(
    const RouterConfig& config, std::unique_ptr<Router> fallback) {
  return std::make_unique<SessionAffinityRouter>(config, std::move(fallback));
}

}  // namespace gpusched::serving::internal
