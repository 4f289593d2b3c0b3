// Election: which gpusched instance of an installation leads (runs the
// controller), over the installation's store (docs/ha.md).
//   - LocalElection: one instance (the SQLite store): it always leads.
//   - EtcdElection (etcd_election.h): every instance keeps an etcd lease and
//     registers itself under it; the one that creates the election key
//     (with its lease) leads until the lease ends. The key's create revision
//     is the term, and the Fence of every write the leader makes.
//
// Self-fencing: a leader may act only while it can prove its lease lives:
// `valid_until` is the send time of the last renewal etcd answered, plus
// the lease's TTL, less a margin for the clocks' rates and for a write in
// flight. A leader that cannot renew stops acting (Current().acting false)
// before its lease can have expired in etcd, and so before another
// instance can have been elected; its writes are fenced besides.
//
// Thread-safety: thread-safe. EtcdElection renews and campaigns on a thread
// of its own; callbacks run there.
#ifndef GPUSCHED_STORE_ELECTION_H_
#define GPUSCHED_STORE_ELECTION_H_

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "store/store.h"

namespace gpusched::store {

struct InstanceInfo {
  std::string id;       // unique in the installation (flag or config)
  std::string address;  // where its API answers ("http://10.0.0.5:8080")
  std::string version;  // gpusched's
  Micros started = 0;   // wall clock, microseconds since the epoch
  int64_t lease = 0;    // its lease (etcd), 0 for a local one
};

struct LeaderInfo {
  InstanceInfo instance;
  // Grows with every new leadership (the election key's create revision).
  int64_t term = 0;
};

struct Leadership {
  // This instance holds the election (as far as it knows).
  bool leader = false;
  // ... and may act now: its lease was renewed recently enough.
  bool acting = false;
  Fence fence;  // for its writes while acting
  int64_t term = 0;
  // Steady clock: acting until then unless the lease is renewed.
  Micros valid_until = 0;
};

struct ElectionStats {
  Micros lease_ttl = 0;          // granted by the store; 0 for local
  int64_t elected = 0;           // times this instance became leader
  int64_t lost = 0;              // times it stopped being leader
  int64_t renewals = 0;          // renewals answered
  int64_t renewal_failures = 0;  // renewals that got no answer
  double last_renewal_s = 0;     // the last renewal's round trip
  Micros last_renewal = 0;       // steady: when it was sent
};

class Election {
 public:
  virtual ~Election() = default;
  // Starts campaigning (and keeping the lease).
  virtual absl::Status Start() = 0;
  // Stops. With `resign`, a leader gives the election up at once (another
  // instance takes over without waiting for its lease to end) and its
  // registration goes; without, it is left to expire (as after a crash).
  virtual void Stop(bool resign) = 0;
  // This instance's standing now.
  virtual Leadership Current() const = 0;
  // Who leads, as the store says (absent between leaders).
  virtual std::optional<LeaderInfo> Leader() const = 0;
  // The instances registered now, by id.
  virtual std::vector<InstanceInfo> Instances() const = 0;
  virtual const InstanceInfo& self() const = 0;
  // Where this instance answers, once its server listens; before Start.
  virtual void SetAddress(const std::string& address) = 0;
  virtual ElectionStats Stats() const = 0;
  // Called when this instance's standing changes (elected, lost, acting or
  // not). Set before Start.
  virtual void SetChangeCallback(std::function<void()> callback) = 0;
  // Every renewal: its round trip and whether it was answered. Set before
  // Start.
  virtual void SetRenewalObserver(
      std::function<void(double seconds, bool ok)> observer) = 0;
  // Something in the store changed (the election key may be gone): look
  // now rather than at the next renewal.
  virtual void Wake() = 0;

  // What each instance says of itself (its load, its tenants' demand),
  // kept under its own lease: it goes when the instance goes. `name` is a
  // word ("load"); `json` at most 1 MiB. Unavailable while this instance
  // has no lease (the store is away): try again later.
  virtual absl::Status Publish(const std::string& name,
                               const std::string& json) = 0;
  // Every live instance's document `name` (this one's too), by instance id.
  virtual std::map<std::string, std::string> Collect(
      const std::string& name) const = 0;
};

// The one instance of a single-instance store: it leads from Start.
class LocalElection final : public Election {
 public:
  explicit LocalElection(InstanceInfo self) : self_(std::move(self)) {}
  absl::Status Start() override {
    started_ = true;
    if (on_change_) on_change_();
    return absl::OkStatus();
  }
  void Stop(bool resign) override { started_ = false; }
  Leadership Current() const override {
    Leadership l;
    l.leader = l.acting = started_;
    l.fence = {"local", 1};
    l.term = 1;
    l.valid_until = kNever;
    return l;
  }
  std::optional<LeaderInfo> Leader() const override {
    if (!started_) return std::nullopt;
    return LeaderInfo{self_, 1};
  }
  std::vector<InstanceInfo> Instances() const override { return {self_}; }
  const InstanceInfo& self() const override { return self_; }
  void SetAddress(const std::string& address) override {
    self_.address = address;
  }
  ElectionStats Stats() const override {
    ElectionStats s;
    s.elected = started_ ? 1 : 0;
    return s;
  }
  void SetChangeCallback(std::function<void()> callback) override {
    on_change_ = std::move(callback);
  }
  void SetRenewalObserver(
      std::function<void(double seconds, bool ok)> observer) override {}
  void Wake() override {}
  absl::Status Publish(const std::string& name,
                       const std::string& json) override {
    absl::MutexLock l(&mu_);
    own_[name] = json;
    return absl::OkStatus();
  }
  std::map<std::string, std::string> Collect(
      const std::string& name) const override {
    absl::MutexLock l(&mu_);
    auto it = own_.find(name);
    if (it == own_.end()) return {};
    return {{self_.id, it->second}};
  }

 private:
  InstanceInfo self_;  // address set before Start
  std::atomic<bool> started_{false};
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> own_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_change_;
};

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_ELECTION_H_
