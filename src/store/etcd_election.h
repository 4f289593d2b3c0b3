// EtcdElection: leader election over an EtcdStore (election.h), with
// etcd's own mechanisms only: a lease kept alive by one renewal per
// interval (POST /v3/lease/keepalive, one request each: etcd #8237), the
// instance's registration "instances/<id>" and the election key "leader"
// both attached to it, and a transaction that creates the election key
// only when it does not exist. Whoever created it leads until its lease
// ends (a crash: after the TTL) or it resigns (deletes the key: at once).
// Standbys see the key go through the store's watch (Wake()) and campaign
// at once.
//
// Timing (docs/ha.md has the measurements): etcd grants whole seconds, and
// at its default election timeout (1 s) no lease shorter than 2 s. The
// default TTL is 2 s with a renewal every 1.25 s, each renewal bounded by
// half that (a member that stopped answering costs the renewal, and the
// next one goes to another member, within the lease): a leader that cannot
// renew stops acting 1.6 s after its last renewal was sent (10% of the TTL
// as a margin for clock rates, and a further 200 ms for a write in
// flight); a standby takes over when etcd revokes the lease, about 2.5 s
// after the last renewal (etcd checks for expired leases every 500 ms):
// 1.25 to 2.5 s after a crash.
//
// Thread-safety: thread-safe; one thread of its own.
#ifndef GPUSCHED_STORE_ETCD_ELECTION_H_
#define GPUSCHED_STORE_ETCD_ELECTION_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "store/election.h"
#include "store/etcd_store.h"

namespace gpusched::store {

struct ElectionOptions {
  InstanceInfo self;
  // The lease's TTL (rounded up to whole seconds; etcd may grant more).
  Micros lease_ttl = 2 * kMicrosPerSecond;
  // How often the lease is renewed; 0: 5/8 of the TTL (docs/ha.md: the
  // longer the interval, the sooner a crashed leader's lease ends; it must
  // leave time for a second renewal, so less than 2/3 of the TTL).
  Micros renew_interval = 0;
  // A leader stops acting this fraction of the TTL before its lease could
  // end by its own clock (clock rates), and `write_margin` earlier still.
  double clock_margin = 0.1;
  Micros write_margin = 200 * kMicrosPerMilli;
};

// InvalidArgument naming the field: an id that is empty, too long or not
// letters, digits and "._-:"; a TTL under 1 s or over 1 h; a renewal
// interval that leaves no second try before the TTL.
absl::Status ValidateElectionOptions(const ElectionOptions& options);

class EtcdElection final : public Election {
 public:
  // `store` outlives the election.
  EtcdElection(EtcdStore* store, ElectionOptions options);
  ~EtcdElection() override;  // Stop(false) if running

  absl::Status Start() override;
  void Stop(bool resign) override;
  Leadership Current() const override;
  std::optional<LeaderInfo> Leader() const override;
  std::vector<InstanceInfo> Instances() const override;
  const InstanceInfo& self() const override { return options_.self; }
  void SetAddress(const std::string& address) override {
    options_.self.address = address;
  }
  ElectionStats Stats() const override;
  void SetChangeCallback(std::function<void()> callback) override {
    absl::MutexLock l(&callbacks_mu_);
    on_change_ = std::move(callback);
  }
  void SetRenewalObserver(
      std::function<void(double seconds, bool ok)> observer) override {
    absl::MutexLock l(&callbacks_mu_);
    on_renewal_ = std::move(observer);
  }
  void Wake() override;
  absl::Status Publish(const std::string& name,
                       const std::string& json) override;
  std::map<std::string, std::string> Collect(
      const std::string& name) const override;

 private:
  void Loop();
  // One step each; false when etcd did not answer.
  bool Grant();
  bool Renew();
  void Campaign();
  // The election key as the store's copy has it now ours or not: lost when
  // another instance's key (or none, once the copy has caught up) is there.
  void CheckKey();
  void Lose(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<nlohmann::json> Call(std::string_view method,
                                      const nlohmann::json& body);
  std::string SelfJson() const;
  Micros Now() const;
  Micros Interval() const;  // between renewals

  EtcdStore* store_;
  std::unique_ptr<EtcdClient> client_;  // made at Start
  ElectionOptions options_;             // self.address set before Start
  const std::string leader_key_;
  const std::string instance_key_;

  mutable absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  Micros granted_ttl_ ABSL_GUARDED_BY(mu_) = 0;
  bool leader_ ABSL_GUARDED_BY(mu_) = false;
  Fence fence_ ABSL_GUARDED_BY(mu_);
  Micros valid_until_ ABSL_GUARDED_BY(mu_) = 0;
  Micros next_renewal_ ABSL_GUARDED_BY(mu_) = 0;
  ElectionStats stats_ ABSL_GUARDED_BY(mu_);
  // Callbacks, under a lock of their own (a leaf), called without it.
  absl::Mutex callbacks_mu_;
  std::function<void()> on_change_ ABSL_GUARDED_BY(callbacks_mu_);
  std::function<void(double, bool)> on_renewal_ ABSL_GUARDED_BY(callbacks_mu_);
  void Changed();  // calls on_change_
  std::thread thread_;
};

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_ETCD_ELECTION_H_
