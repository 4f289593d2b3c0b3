#include "store/etcd_election.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace gpusched::store {

using nlohmann::json;

namespace {

constexpr Micros kRetry = 100 * kMicrosPerMilli;

// 5/8 of the TTL: etcd revokes a lease about TTL + 0.5 s after its last
// renewal (it checks for expired leases twice a second; measured in
// docs/ha.md), so a crashed leader's lease ends on average that, less half
// an interval, after the crash; a renewal that gets no answer (half an
// interval) still leaves time for a second one within the TTL.
Micros DefaultInterval(Micros ttl) { return ttl * 5 / 8; }

bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                    c == '-' || c == ':';
    if (!ok) return false;
  }
  return true;
}

std::optional<InstanceInfo> ParseInstance(const EtcdKv& kv) {
  const json j = json::parse(kv.value, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  InstanceInfo i;
  auto str = [&j](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
  };
  i.id = str("id");
  i.address = str("address");
  i.version = str("version");
  i.started = EtcdInt(j, "started");
  i.lease = kv.lease;
  return i;
}

// The "result" of a streamed answer (keepalive), or the answer itself.
const json& Result(const json& r) {
  return r.contains("result") ? r["result"] : r;
}

}  // namespace

absl::Status ValidateElectionOptions(const ElectionOptions& o) {
  if (!ValidId(o.self.id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ha.instance_id: '", o.self.id,
                     "' must be 1-128 letters, digits or '._-:'"));
  }
  if (o.lease_ttl < kMicrosPerSecond || o.lease_ttl > 3600 * kMicrosPerSecond) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ha.lease_ttl_s: must be within 1..3600, got ", o.lease_ttl / 1e6));
  }
  const Micros interval =
      o.renew_interval > 0 ? o.renew_interval : DefaultInterval(o.lease_ttl);
  // A renewal that gets no answer (it waits half an interval) leaves time
  // for a second one within the TTL.
  if (interval * 3 >= o.lease_ttl * 2) {
    return absl::InvalidArgumentError(
        "ha.renew_interval_ms: must leave time for a second renewal within "
        "the lease TTL (less than two thirds of it)");
  }
  if (o.clock_margin < 0 || o.clock_margin >= 0.5) {
    return absl::InvalidArgumentError("clock margin: must be within [0, 0.5)");
  }
  return absl::OkStatus();
}

EtcdElection::EtcdElection(EtcdStore* store, ElectionOptions options)
    : store_(store),
      options_(std::move(options)),
      leader_key_(store->Key("leader")),
      instance_key_(store->Key(absl::StrCat("instances/", options_.self.id))) {}

EtcdElection::~EtcdElection() { Stop(/*resign=*/false); }

Micros EtcdElection::Interval() const {
  return options_.renew_interval > 0 ? options_.renew_interval
                                     : DefaultInterval(options_.lease_ttl);
}

Micros EtcdElection::Now() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string EtcdElection::SelfJson() const {
  return json{{"id", options_.self.id},
              {"address", options_.self.address},
              {"version", options_.self.version},
              {"started", options_.self.started}}
      .dump();
}

absl::StatusOr<json> EtcdElection::Call(std::string_view method,
                                        const json& body) {
  return store_->Call(method, body, client_.get());
}

absl::Status EtcdElection::Start() {
  RETURN_IF_ERROR(ValidateElectionOptions(options_));
  if (client_ == nullptr) {
    // Its own client: a renewal waits at most half an interval for a
    // member, so that the next try (another member) still fits the lease.
    EtcdOptions o = store_->options().etcd;
    o.request_timeout = std::max<Micros>(
        50 * kMicrosPerMilli, std::min(o.request_timeout, Interval() / 2));
    ASSIGN_OR_RETURN(client_, EtcdClient::Create(std::move(o)));
  }
  absl::MutexLock l(&mu_);
  if (running_) return absl::FailedPreconditionError("already started");
  running_ = true;
  stopping_ = false;
  stats_.lease_ttl = options_.lease_ttl;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void EtcdElection::Stop(bool resign) {
  int64_t lease = 0;
  Fence fence;
  bool leader = false;
  {
    absl::MutexLock l(&mu_);
    if (!running_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  {
    absl::MutexLock l(&mu_);
    running_ = false;
    lease = lease_;
    fence = fence_;
    leader = leader_;
    if (resign) {
      if (leader_) Lose("resigned");
      lease_ = 0;
    }
  }
  if (!resign) return;
  // Give the election up at once: the key only if it is still ours, then
  // the lease (and with it the registration).
  if (leader) {
    (void)Call(
        "kv/txn",
        {{"compare",
          json::array({{{"key", B64(leader_key_)},
                        {"target", "CREATE"},
                        {"result", "EQUAL"},
                        {"create_revision", std::to_string(fence.revision)}}})},
         {"success", json::array({{{"request_delete_range",
                                    {{"key", B64(leader_key_)}}}}})}});
  }
  if (lease != 0) {
    (void)Call("lease/revoke", {{"ID", std::to_string(lease)}});
  }
  Changed();
}

void EtcdElection::Changed() {
  std::function<void()> callback;
  {
    absl::MutexLock l(&callbacks_mu_);
    callback = on_change_;
  }
  if (callback) callback();
}

void EtcdElection::Wake() {
  absl::MutexLock l(&mu_);
  woken_ = true;
}

void EtcdElection::Lose(const std::string& why) {
  if (!leader_) return;
  leader_ = false;
  fence_ = Fence{};
  valid_until_ = 0;
  ++stats_.lost;
  std::fprintf(stderr, "gpusched: election: %s no longer leads: %s\n",
               options_.self.id.c_str(), why.c_str());
}

bool EtcdElection::Grant() {
  const Micros sent = Now();
  const int64_t ttl_s = static_cast<int64_t>(
      std::ceil(static_cast<double>(options_.lease_ttl) / kMicrosPerSecond));
  absl::StatusOr<json> r =
      Call("lease/grant", {{"TTL", std::to_string(ttl_s)}});
  const int64_t id = r.ok() ? EtcdInt(*r, "ID") : 0;
  const int64_t granted = r.ok() ? EtcdInt(*r, "TTL") : 0;
  if (id == 0 || granted <= 0) return false;
  absl::StatusOr<json> put = Call("kv/put", {{"key", B64(instance_key_)},
                                             {"value", B64(SelfJson())},
                                             {"lease", std::to_string(id)}});
  if (!put.ok()) {
    (void)Call("lease/revoke", {{"ID", std::to_string(id)}});
    return false;
  }
  absl::MutexLock l(&mu_);
  lease_ = id;
  granted_ttl_ = granted * kMicrosPerSecond;
  stats_.lease_ttl = granted_ttl_;
  stats_.last_renewal = sent;
  next_renewal_ = sent + Interval();
  return true;
}

bool EtcdElection::Renew() {
  int64_t lease = 0;
  {
    absl::MutexLock l(&mu_);
    lease = lease_;
  }
  const Micros sent = Now();
  absl::StatusOr<json> r =
      Call("lease/keepalive", {{"ID", std::to_string(lease)}});
  const double seconds = (Now() - sent) / 1e6;
  std::function<void(double, bool)> observer;
  {
    absl::MutexLock l(&callbacks_mu_);
    observer = on_renewal_;
  }
  if (observer) observer(seconds, r.ok());
  const Micros interval = Interval();
  absl::MutexLock l(&mu_);
  if (!r.ok()) {
    ++stats_.renewal_failures;
    next_renewal_ = std::min(sent + interval, Now() + kRetry);
    return false;
  }
  const int64_t ttl = EtcdInt(Result(*r), "TTL");
  if (ttl <= 0) {
    // etcd ended the lease (it expired while we could not renew): whatever
    // we held went with it.
    Lose("its lease expired");
    lease_ = 0;
    return true;
  }
  ++stats_.renewals;
  stats_.last_renewal_s = seconds;
  stats_.last_renewal = sent;
  granted_ttl_ = ttl * kMicrosPerSecond;
  if (leader_) {
    valid_until_ =
        sent + static_cast<Micros>(granted_ttl_ * (1 - options_.clock_margin)) -
        options_.write_margin;
  }
  next_renewal_ = sent + interval;
  return true;
}

void EtcdElection::Campaign() {
  int64_t lease = 0;
  Micros renewed = 0;
  {
    absl::MutexLock l(&mu_);
    lease = lease_;
    renewed = stats_.last_renewal;
  }
  // Someone leads as far as the copy says: no need to ask.
  for (const EtcdKv& kv : store_->Range("leader")) {
    if (kv.key == "leader") return;
  }
  absl::StatusOr<json> r = Call(
      "kv/txn",
      {{"compare", json::array({{{"key", B64(leader_key_)},
                                 {"target", "CREATE"},
                                 {"result", "EQUAL"},
                                 {"create_revision", "0"}}})},
       {"success", json::array({{{"request_put",
                                  {{"key", B64(leader_key_)},
                                   {"value", B64(SelfJson())},
                                   {"lease", std::to_string(lease)}}}}})}});
  if (!r.ok() || !EtcdBool(*r, "succeeded")) return;
  const int64_t revision = EtcdInt((*r)["header"], "revision");
  absl::MutexLock l(&mu_);
  if (lease_ != lease) return;  // the lease went meanwhile
  leader_ = true;
  fence_ = Fence{leader_key_, revision};
  valid_until_ =
      renewed +
      static_cast<Micros>(granted_ttl_ * (1 - options_.clock_margin)) -
      options_.write_margin;
  ++stats_.elected;
  std::fprintf(stderr, "gpusched: election: %s leads (term %lld)\n",
               options_.self.id.c_str(), static_cast<long long>(revision));
}

void EtcdElection::CheckKey() {
  const int64_t seen = store_->Health().revision;
  std::optional<EtcdKv> key;
  for (EtcdKv& kv : store_->Range("leader")) {
    if (kv.key == "leader") key = std::move(kv);
  }
  absl::MutexLock l(&mu_);
  if (!leader_ || seen < fence_.revision) return;
  if (!key.has_value()) {
    Lose("the election key is gone");
  } else if (key->create_revision != fence_.revision) {
    Lose("another instance holds the election key");
  }
}

void EtcdElection::Loop() {
  bool was_leader = false, was_acting = false;
  while (true) {
    Micros now = Now();
    bool need_grant = false, need_renewal = false, leader = false;
    {
      absl::MutexLock l(&mu_);
      if (stopping_) break;
      need_grant = lease_ == 0;
      need_renewal = !need_grant && now >= next_renewal_;
    }
    bool answered = true;
    if (need_grant) {
      answered = Grant();
    } else if (need_renewal) {
      Renew();
    }
    {
      absl::MutexLock l(&mu_);
      leader = leader_;
      need_grant = lease_ == 0;
    }
    if (!need_grant && !leader) Campaign();
    if (leader) CheckKey();
    bool is_leader = false, is_acting = false;
    Micros wake_at = 0;
    {
      absl::MutexLock l(&mu_);
      now = Now();
      is_leader = leader_;
      is_acting = leader_ && now < valid_until_;
      wake_at = lease_ == 0 ? now + (answered ? 0 : kRetry) : next_renewal_;
      if (is_acting) wake_at = std::min(wake_at, valid_until_);
    }
    if (is_leader != was_leader || is_acting != was_acting) {
      was_leader = is_leader;
      was_acting = is_acting;
      Changed();
    }
    absl::MutexLock l(&mu_);
    auto due = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || woken_;
    };
    mu_.AwaitWithTimeout(
        absl::Condition(&due),
        absl::Microseconds(std::max<Micros>(kMicrosPerMilli, wake_at - Now())));
    woken_ = false;
  }
}

Leadership EtcdElection::Current() const {
  absl::MutexLock l(&mu_);
  Leadership out;
  out.leader = leader_;
  out.acting = leader_ && Now() < valid_until_;
  out.fence = fence_;
  out.term = fence_.revision;
  out.valid_until = valid_until_;
  return out;
}

std::optional<LeaderInfo> EtcdElection::Leader() const {
  for (const EtcdKv& kv : store_->Range("leader")) {
    if (kv.key != "leader") continue;
    std::optional<InstanceInfo> i = ParseInstance(kv);
    if (!i.has_value()) return std::nullopt;
    return LeaderInfo{*i, kv.create_revision};
  }
  return std::nullopt;
}

std::vector<InstanceInfo> EtcdElection::Instances() const {
  std::vector<InstanceInfo> out;
  for (const EtcdKv& kv : store_->Range("instances/")) {
    if (std::optional<InstanceInfo> i = ParseInstance(kv)) out.push_back(*i);
  }
  return out;
}

ElectionStats EtcdElection::Stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

// Under "own/<instance>/<name>", attached to the instance's lease.
absl::Status EtcdElection::Publish(const std::string& name,
                                   const std::string& json_text) {
  if (name.empty() || name.find('/') != std::string::npos ||
      json_text.size() > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("election: document '", name,
                     "' needs a name of one word and at "
                     "most 1 MiB"));
  }
  int64_t lease = 0;
  {
    absl::MutexLock l(&mu_);
    lease = lease_;
  }
  if (lease == 0) {
    return absl::UnavailableError("election: no lease yet (etcd is away?)");
  }
  absl::StatusOr<json> r =
      Call("kv/put", {{"key", B64(store_->Key(absl::StrCat(
                                  "own/", options_.self.id, "/", name)))},
                      {"value", B64(json_text)},
                      {"lease", std::to_string(lease)}});
  return r.ok() ? absl::OkStatus() : r.status();
}

std::map<std::string, std::string> EtcdElection::Collect(
    const std::string& name) const {
  std::map<std::string, std::string> out;
  const std::string suffix = absl::StrCat("/", name);
  for (const EtcdKv& kv : store_->Range("own/")) {
    // "own/<instance>/<name>"
    if (kv.key.size() <= 4 + suffix.size() ||
        kv.key.compare(kv.key.size() - suffix.size(), suffix.size(), suffix) !=
            0) {
      continue;
    }
    const std::string id = kv.key.substr(4, kv.key.size() - 4 - suffix.size());
    if (id.find('/') == std::string::npos) out[id] = kv.value;
  }
  return out;
}

}  // namespace gpusched::store
