// Wiring of `gpusched serve`'s state: the store the config names (SQLite, or
// etcd for an HA installation) and the election over it (docs/ha.md).
#ifndef GPUSCHED_MAIN_SERVE_STATE_H_
#define GPUSCHED_MAIN_SERVE_STATE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "config/serve_config.h"
#include "store/election.h"
#include "store/etcd_store.h"
#include "store/store.h"

namespace gpusched {

struct ServeState {
  std::unique_ptr<store::Store> store;
  store::EtcdStore* etcd = nullptr;  // the store, when it is etcd
};

// This instance's id: ha.instance_id, else "<hostname>-<port>" (the pid
// when the port is chosen by the system).
std::string InstanceId(const config::ServeConfig& cfg);
// The URL other instances reach this one at: ha.advertise, else from the
// listening address (the hostname when it listens on every address).
std::string AdvertiseUrl(const config::ServeConfig& cfg, uint16_t port);

// Opens the config's store: FailedPrecondition-like errors name the field
// (unreadable files), Unavailable when etcd does not answer in time.
absl::StatusOr<ServeState> OpenServeState(const config::ServeConfig& cfg,
                                          const std::string& instance);
// The election of the config's store: over etcd, or this instance alone.
absl::StatusOr<std::unique_ptr<store::Election>> MakeElection(
    const config::ServeConfig& cfg, const ServeState& state,
    store::InstanceInfo self);

}  // namespace gpusched

#endif  // GPUSCHED_MAIN_SERVE_STATE_H_
