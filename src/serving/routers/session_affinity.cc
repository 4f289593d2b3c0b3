// session-affinity: requests of one session go to the replica the session
// was last dispatched to while that replica is a candidate; otherwise (and
// for requests without a session) the fallback router picks, and the
// dispatch re-pins the session. Pins live in a bounded LRU map.
#include <memory>
#include <optional>
#include <span>
#include <utility>

#include "serving/router.h"
#include "serving/routers/lru_map.h"
#include "serving/routers/routers.h"

namespace gpusched::serving::internal {
namespace {

class SessionAffinityRouter : public Router {
 public:
  SessionAffinityRouter(const RouterConfig& config,
                        std::unique_ptr<Router> fallback)
      : fallback_(std::move(fallback)), sessions_(config.session_capacity) {}

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
  std::unique_ptr<Router> fallback_;
  LruMap sessions_;
};

}  // namespace

std::unique_ptr<Router> NewSessionAffinityRouter(
    const RouterConfig& config, std::unique_ptr<Router> fallback) {
  return std::make_unique<SessionAffinityRouter>(config, std::move(fallback));
}

}  // namespace gpusched::serving::internal
