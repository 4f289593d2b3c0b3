// The HA installation as the control API shows it (GET /api/v1/cluster,
// docs/control-api.md): this instance, who leads, the instances that are
// registered, the store's health and this instance's lease. Also what
// /readyz answers. Thread-safe (it only reads the election and the store).
#ifndef GPUSCHED_API_CLUSTER_VIEW_H_
#define GPUSCHED_API_CLUSTER_VIEW_H_

#include <optional>
#include <string>

#include "nlohmann/json.hpp"
#include "store/election.h"
#include "store/store.h"

namespace gpusched::api {

// The control API's view of the installation; both pointers outlive it.
struct ClusterView {
  store::Election* election = nullptr;
  store::Store* store = nullptr;

  nlohmann::json Json() const;
  // The leader's address when another instance leads (for requests only
  // the leader can answer), nullopt when this one does or none does.
  std::optional<std::string> LeaderAddress() const;
  // What GET /readyz answers: ready unless this instance has no copy of
  // the state yet. A store that is away makes no instance unready: each
  // serves from its last known state (fail-static), and says so here.
  bool Ready(nlohmann::json* body) const;
};

}  // namespace gpusched::api

#endif  // GPUSCHED_API_CLUSTER_VIEW_H_
