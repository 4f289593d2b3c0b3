#include "store/etcd_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "store/api_keys.h"
#include "store/etcd_store_internal.h"
#include "store/store_internal.h"

namespace gpusched::store {

EtcdStore::EtcdStore(EtcdStoreOptions options)
    : options_(std::move(options)), copy_(std::make_unique<EtcdCopy>()) {}

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(
    EtcdStoreOptions options) {
  RETURN_IF_ERROR(ValidateEtcdOptions(options.etcd));
  std::unique_ptr<EtcdStore> s(new EtcdStore(std::move(options)));
  // Its calls wait through an etcd leader election (a second or two at
  // etcd's defaults) rather than fail; the election's renewals do not.
  EtcdOptions calls = s->options_.etcd;
  calls.retry_for = std::max(calls.retry_for, kWriteRetryFor);
  ASSIGN_OR_RETURN(s->client_, EtcdClient::Create(std::move(calls)));
  s->watcher_ = std::thread([p = s.get()] { p->WatchLoop(); });
  bool listed = false;
  std::string why;
  {
    absl::MutexLock l(&s->mu_);
    EtcdStore* p = s.get();
    auto done = [p]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
      return p->listed_;
    };
    listed = s->mu_.AwaitWithTimeout(
        absl::Condition(&done),
        absl::Microseconds(s->options_.connect_timeout));
    why = s->last_error_;
  }
  if (!listed) {
    const Micros timeout = s->options_.connect_timeout;
    s.reset();  // stops the watch
    return absl::UnavailableError(
        absl::StrCat("store: etcd did not answer a list of the prefix within ",
                     absl::FormatDuration(absl::Microseconds(timeout)),
                     why.empty() ? "" : ": ", why));
  }
  return s;
}

EtcdStore::~EtcdStore() {
  std::shared_ptr<EtcdClient> watch;
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  {
    absl::MutexLock l(&watch_mu_);
    watch = watch_;
  }
  if (watch) watch->Cancel();
  if (watcher_.joinable()) watcher_.join();
}

std::string EtcdStore::Key(std::string_view relative) const {
  return absl::StrCat(options_.etcd.prefix,
                      absl::string_view(relative.data(), relative.size()));
}

void EtcdStore::SetChangeCallback(std::function<void()> callback) {
  on_change_.Set(std::move(callback));
}

void EtcdStore::SetRoundTripObserver(RoundTripObserver observer) {
  absl::MutexLock l(&callbacks_mu_);
  observer_ = std::move(observer);
}

void EtcdStore::Observe(std::string_view op, Micros start, bool ok) {
  const Micros now = SteadyNow();
  {
    absl::MutexLock l(&mu_);
    if (ok) {
      last_ok_ = now;
    }
  }
  RoundTripObserver observer;
  {
    absl::MutexLock l(&callbacks_mu_);
    observer = observer_;
  }
  if (observer) observer(op, (now - start) / 1e6, ok);
}

absl::StatusOr<json> EtcdStore::Call(std::string_view method, const json& body,
                                     EtcdClient* via) {
  const Micros start = SteadyNow();
  absl::StatusOr<json> r =
      (via != nullptr ? via : client_.get())->Call(method, body);
  // An answer that is an error (a compare that failed is not one) still
  // means etcd is there, but for errors that say it cannot serve.
  const bool reached =
      r.ok() || (r.status().code() != absl::StatusCode::kUnavailable &&
                 r.status().code() != absl::StatusCode::kDeadlineExceeded);
  if (!reached) {
    absl::MutexLock l(&mu_);
    last_error_ = std::string(r.status().message());
    last_error_at_ = SteadyNow();
  }
  Observe(method, start, reached);
  return r;
}

StoreHealth EtcdStore::Health() const {
  StoreHealth h;
  h.kind = "etcd";
  for (const std::string& e : options_.etcd.endpoints) {
    absl::StrAppend(&h.where, h.where.empty() ? "" : ",", e);
  }
  absl::MutexLock l(&mu_);
  h.reachable = listed_ && last_ok_ >= last_error_at_;
  if (!h.reachable) h.error = last_error_;
  h.last_ok = last_ok_;
  h.revision = copy_revision_;
  h.resyncing = resyncing_;
  return h;
}

double EtcdStore::last_watch_lag_s() const {
  absl::MutexLock l(&mu_);
  return watch_lag_s_;
}

// --- The copy and its watch -------------------------------------------------

absl::StatusOr<int64_t> EtcdStore::List() {
  const std::string& prefix = options_.etcd.prefix;
  ASSIGN_OR_RETURN(json r,
                   Call("kv/range", {{"key", B64(prefix)},
                                     {"range_end", B64(PrefixEnd(prefix))}}));
  auto fresh = std::make_unique<EtcdCopy>(CopyFromRange(prefix, r));
  const int64_t rev =
      EtcdInt(r.contains("header") ? r["header"] : json(), "revision");
  {
    absl::MutexLock l(&mu_);
    copy_ = std::move(fresh);
    copy_revision_ = rev;
    resyncing_ = false;
    // Whatever a cache held of keys may be stale after a gap.
    keys_version_.fetch_add(1, std::memory_order_acq_rel);
    revision_.store(rev, std::memory_order_release);
    desired_revision_.store(rev, std::memory_order_release);
  }
  Notify();
  absl::MutexLock l(&mu_);
  notified_revision_ = std::max(notified_revision_, rev);
  listed_ = true;
  return rev;
}

void EtcdStore::Apply(const json& events, int64_t header_revision) {
  {
    absl::MutexLock l(&mu_);
    const WatchApplied applied =
        ApplyWatchEvents(options_.etcd.prefix, events, copy_.get());
    copy_revision_ = std::max(copy_revision_, header_revision);
    last_ok_ = SteadyNow();
    if (applied.keys_changed) {
      keys_version_.fetch_add(1, std::memory_order_acq_rel);
    }
    revision_.store(copy_revision_, std::memory_order_release);
    if (applied.desired_changed) {
      desired_revision_.store(copy_revision_, std::memory_order_release);
    }
  }
  // Waiters (a write of this instance) return once the callback has seen
  // the change too.
  Notify();
  absl::MutexLock l(&mu_);
  notified_revision_ = std::max(notified_revision_, header_revision);
}

void EtcdStore::Notify() { on_change_.Notify(); }

void EtcdStore::WatchLoop() {
  Micros backoff = 50 * kMicrosPerMilli;
  bool need_list = true;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
    }
    if (need_list) {
      {
        absl::MutexLock l(&mu_);
        resyncing_ = listed_;
      }
      absl::StatusOr<int64_t> listed = List();
      if (!listed.ok()) {
        absl::MutexLock l(&mu_);
        last_error_ = std::string(listed.status().message());
        last_error_at_ = SteadyNow();
        mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                             absl::Microseconds(backoff));
        backoff = std::min<Micros>(backoff * 2, 2 * kMicrosPerSecond);
        continue;
      }
      need_list = false;
    }
    absl::StatusOr<std::unique_ptr<EtcdClient>> made =
        EtcdClient::Create(options_.etcd);
    if (!made.ok()) return;  // the options were validated: cannot happen
    std::shared_ptr<EtcdClient> watch(std::move(*made));
    int64_t from = 0;
    {
      absl::MutexLock l(&watch_mu_);
      watch_ = watch;
    }
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      from = copy_revision_ + 1;
    }
    const std::string& prefix = options_.etcd.prefix;
    const json request = {{"key", B64(prefix)},
                          {"range_end", B64(PrefixEnd(prefix))},
                          {"start_revision", std::to_string(from)}};
    bool compacted = false;
    bool delivered = false;  // the watch was created: etcd answered
    absl::Status st =
        watch->Watch(request, options_.watch_idle, [&](const json& r) {
          if (r.contains("error")) return false;
          delivered = true;
          if (EtcdBool(r, "canceled")) {
            compacted = EtcdInt(r, "compact_revision") > 0;
            return false;
          }
          const int64_t rev =
              EtcdInt(r.contains("header") ? r["header"] : json(), "revision");
          if (r.contains("events") && r["events"].is_array()) {
            Apply(r["events"], rev);
          } else {
            absl::MutexLock l(&mu_);
            last_ok_ = SteadyNow();
          }
          backoff = 50 * kMicrosPerMilli;
          return true;
        });
    {
      absl::MutexLock l(&watch_mu_);
      watch_.reset();
    }
    if (compacted) {
      need_list = true;
      continue;
    }
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    // A stream that broke after it was created (its member went away)
    // says nothing of the others: it is opened again at once. One that no
    // member accepted means etcd is away.
    if (!st.ok() && !delivered &&
        st.code() != absl::StatusCode::kDeadlineExceeded &&
        st.code() != absl::StatusCode::kCancelled) {
      last_error_ = std::string(st.message());
      last_error_at_ = SteadyNow();
    }
    if (delivered) backoff = 50 * kMicrosPerMilli;
    // A watch that ended (a member went away, an idle stream, or a restart
    // asked for by a lagging write) resumes from the last revision seen.
    mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                         absl::Microseconds(backoff));
    backoff = std::min<Micros>(backoff * 2, 2 * kMicrosPerSecond);
  }
}

bool EtcdStore::AwaitRevision(int64_t revision, Micros timeout) {
  absl::MutexLock l(&mu_);
  auto seen = [this, revision]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return notified_revision_ >= revision || stopping_;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&seen),
                              absl::Microseconds(timeout)) &&
         notified_revision_ >= revision;
}

void EtcdStore::Visible(int64_t revision) {
  const Micros start = SteadyNow();
  const bool seen = AwaitRevision(revision, options_.etcd.request_timeout);
  {
    absl::MutexLock l(&mu_);
    watch_lag_s_ = (SteadyNow() - start) / 1e6;
  }
  if (!seen) {
    // The watch is stuck (a member that stopped sending): open it again.
    std::shared_ptr<EtcdClient> watch;
    {
      absl::MutexLock l(&watch_mu_);
      watch = watch_;
    }
    if (watch) watch->Cancel();
  }
}

std::vector<EtcdKv> EtcdStore::Range(const std::string& relative_prefix) const {
  absl::MutexLock l(&mu_);
  std::vector<EtcdKv> out;
  for (auto it = copy_->kvs.lower_bound(relative_prefix);
       it != copy_->kvs.end() && absl::StartsWith(it->first, relative_prefix);
       ++it) {
    out.push_back(it->second);
  }
  return out;
}

std::optional<EtcdKv> EtcdStore::Cached(const std::string& relative) const {
  absl::MutexLock l(&mu_);
  auto it = copy_->kvs.find(relative);
  if (it == copy_->kvs.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::optional<EtcdKv>> EtcdStore::Fresh(
    const std::string& relative) {
  RETURN_IF_ERROR(FailFast());
  ASSIGN_OR_RETURN(json r, Call("kv/range", {{"key", B64(Key(relative))}}));
  if (!r.contains("kvs") || !r["kvs"].is_array() || r["kvs"].empty()) {
    return std::optional<EtcdKv>();
  }
  const json& kv = r["kvs"][0];
  EtcdKv k;
  k.key = relative;
  k.value = UnB64(kv, "value");
  k.create_revision = EtcdInt(kv, "create_revision");
  k.mod_revision = EtcdInt(kv, "mod_revision");
  k.lease = EtcdInt(kv, "lease");
  return std::optional<EtcdKv>(std::move(k));
}

absl::Status EtcdStore::FailFast() const {
  absl::MutexLock l(&mu_);
  if (last_error_at_ > last_ok_ &&
      SteadyNow() - last_error_at_ < kFailFastFor) {
    return absl::UnavailableError(
        absl::StrCat("store: etcd is unreachable (", last_error_,
                     "); writes are refused until it answers again"));
  }
  return absl::OkStatus();
}

absl::StatusOr<json> EtcdStore::Txn(const json& compare, const json& success,
                                    const json& failure) {
  RETURN_IF_ERROR(FailFast());
  json body = {{"compare", compare}, {"success", success}};
  if (!failure.is_null()) body["failure"] = failure;
  return Call("kv/txn", body);
}

json EtcdStore::FenceCompare(const Fence& fence) const {
  return {{"key", B64(fence.key)},
          {"target", "CREATE"},
          {"result", "EQUAL"},
          {"create_revision", std::to_string(fence.revision)}};
}

// --- Documents --------------------------------------------------------------

absl::Status EtcdStore::Put(DocKind kind, const std::string& name,
                            const std::string& manifest_json,
                            int64_t generation, Micros now) {
  RETURN_IF_ERROR(CheckPut(kind, name, manifest_json, generation));
  const std::string rel = absl::StrCat(DocDir(kind), name);
  std::optional<EtcdKv> cur = Cached(rel);
  for (int attempt = 0; attempt < kCasAttempts; ++attempt) {
    Micros created = now;
    json compare;
    if (cur.has_value()) {
      std::optional<Document> d = ParseDoc(name, *cur);
      if (!d.has_value()) {
        return absl::DataLossError(absl::StrCat("store: ", DocKindName(kind),
                                                " '", name,
                                                "' in etcd is malformed"));
      }
      RETURN_IF_ERROR(CheckGeneration(kind, name, d->generation,
                                      d->manifest_json, generation,
                                      manifest_json));
      created = d->created;
      compare = json::array({ModIs(Key(rel), cur->mod_revision)});
    } else {
      compare = json::array({Absent(Key(rel))});
    }
    const json value = {{"manifest", manifest_json},
                        {"generation", generation},
                        {"created", created},
                        {"updated", now}};
    ASSIGN_OR_RETURN(
        json r, Txn(compare, json::array({PutOp(Key(rel), DumpJson(value))})));
    if (EtcdBool(r, "succeeded")) {
      Visible(EtcdInt(r["header"], "revision"));
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(cur, Fresh(rel));
  }
  return absl::AbortedError(
      absl::StrCat("store: ", DocKindName(kind), " '", name,
                   "' kept changing under concurrent writes; retry"));
}

absl::StatusOr<Document> EtcdStore::Get(DocKind kind, const std::string& name) {
  std::optional<EtcdKv> kv = Cached(absl::StrCat(DocDir(kind), name));
  std::optional<Document> d =
      kv.has_value() ? ParseDoc(name, *kv) : std::nullopt;
  if (!d.has_value()) {
    return absl::NotFoundError(
        absl::StrCat(DocKindName(kind), " '", name, "' not found"));
  }
  return *d;
}

absl::StatusOr<std::vector<Document>> EtcdStore::List(DocKind kind) {
  const std::string dir = DocDir(kind);
  std::vector<Document> out;
  for (const EtcdKv& kv : Range(dir)) {
    if (std::optional<Document> d = ParseDoc(kv.key.substr(dir.size()), kv)) {
      out.push_back(*std::move(d));
    }
  }
  return out;
}

absl::Status EtcdStore::Delete(DocKind kind, const std::string& name) {
  const std::string rel = absl::StrCat(DocDir(kind), name);
  json ops = json::array({DelOp(Key(rel))});
  switch (kind) {
    case DocKind::kDeployment:
      ops.push_back(DelOp(Key(absl::StrCat("desired/", name))));
      break;
    case DocKind::kRoute:
      ops.push_back(DelOp(Key(absl::StrCat("routestate/", name))));
      break;
    case DocKind::kRole:
    case DocKind::kRoleBinding:
      break;
    case DocKind::kTenant: {
      // Its keys, as etcd has them now (a key made meanwhile on another
      // instance belongs to this tenant object and authenticates no more:
      // AuthenticateKey).
      ASSIGN_OR_RETURN(
          json keys,
          Call("kv/range", {{"key", B64(Key("keys/"))},
                            {"range_end", B64(PrefixEnd(Key("keys/")))}}));
      if (keys.contains("kvs") && keys["kvs"].is_array()) {
        for (const json& kv : keys["kvs"]) {
          const json v = json::parse(UnB64(kv, "value"), nullptr, false);
          if (v.is_object() && v.contains("tenant") && v["tenant"] == name &&
              ops.size() < kMaxTxnOps) {
            ops.push_back(DelOp(UnB64(kv, "key")));
          }
        }
      }
      break;
    }
  }
  ASSIGN_OR_RETURN(json r, Txn(json::array({Exists(Key(rel))}), ops));
  if (!EtcdBool(r, "succeeded")) {
    return absl::NotFoundError(
        absl::StrCat(DocKindName(kind), " '", name, "' not found"));
  }
  Visible(EtcdInt(r["header"], "revision"));
  return absl::OkStatus();
}

absl::Status EtcdStore::PutKey(const std::string& relative,
                               const std::string& value, const Fence* fence,
                               const std::string& must_exist,
                               std::string_view what) {
  json compare = json::array();
  if (fence != nullptr) compare.push_back(FenceCompare(*fence));
  if (!must_exist.empty()) compare.push_back(Exists(Key(must_exist)));
  ASSIGN_OR_RETURN(json r,
                   Txn(compare, json::array({PutOp(Key(relative), value)})));
  if (EtcdBool(r, "succeeded")) {
    Visible(EtcdInt(r["header"], "revision"));
    return absl::OkStatus();
  }
  // Which compare failed: the fence, or what must exist.
  if (fence != nullptr) {
    absl::StatusOr<json> l = Call("kv/range", {{"key", B64(fence->key)}});
    const bool holds =
        l.ok() && l->contains("kvs") && (*l)["kvs"].is_array() &&
        !(*l)["kvs"].empty() &&
        EtcdInt((*l)["kvs"][0], "create_revision") == fence->revision;
    if (!holds) return NotLeaderError(*fence, what);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("store: ", absl::string_view(what.data(), what.size()), ": ",
                   must_exist, " is not stored"));
}

absl::Status EtcdStore::PutRouteState(const std::string& name,
                                      const std::string& state_json, Micros now,
                                      const Fence* fence) {
  if (!json::accept(state_json)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: route '", name, "': state is not valid JSON"));
  }
  return PutKey(absl::StrCat("routestate/", name),
                DumpJson({{"state", state_json}, {"updated", now}}), fence,
                absl::StrCat("routes/", name),
                absl::StrCat("putting the state of route '", name, "'"));
}

absl::StatusOr<std::string> EtcdStore::GetRouteState(const std::string& name) {
  std::optional<EtcdKv> kv = Cached(absl::StrCat("routestate/", name));
  const json j =
      kv.has_value() ? json::parse(kv->value, nullptr, false) : json();
  if (!j.is_object() || !j.contains("state") || !j["state"].is_string()) {
    return absl::NotFoundError(
        absl::StrCat("route '", name, "' has no stored state"));
  }
  return j["state"].get<std::string>();
}

absl::Status EtcdStore::PutDesiredReplicas(const std::string& deployment,
                                           int replicas, Micros now,
                                           const Fence* fence) {
  if (replicas < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: deployment '", deployment, "': desired count ",
                     replicas, " is negative"));
  }
  return PutKey(absl::StrCat("desired/", deployment),
                DumpJson({{"replicas", replicas}, {"updated", now}}), fence,
                absl::StrCat("deployments/", deployment),
                absl::StrCat("putting the desired count of deployment '",
                             deployment, "'"));
}

absl::StatusOr<std::map<std::string, int>> EtcdStore::ListDesiredReplicas() {
  std::map<std::string, int> out;
  for (const EtcdKv& kv : Range("desired/")) {
    const json j = json::parse(kv.value, nullptr, false);
    if (j.is_object()) {
      out[kv.key.substr(8)] = static_cast<int>(EtcdInt(j, "replicas"));
    }
  }
  return out;
}

// --- Status -----------------------------------------------------------------

absl::Status EtcdStore::PutStatus(const std::string& name,
                                  const std::string& json_text,
                                  const Fence* fence) {
  RETURN_IF_ERROR(CheckStatus(name, json_text));
  return PutKey(absl::StrCat("status/", name), json_text, fence, "",
                absl::StrCat("publishing status ", name));
}

absl::Status EtcdStore::DeleteStatus(const std::string& name,
                                     const Fence* fence) {
  const std::string rel = absl::StrCat("status/", name);
  json compare = json::array({Exists(Key(rel))});
  if (fence != nullptr) compare.push_back(FenceCompare(*fence));
  ASSIGN_OR_RETURN(json r, Txn(compare, json::array({DelOp(Key(rel))})));
  if (!EtcdBool(r, "succeeded")) {
    if (!Cached(rel).has_value()) {
      return absl::NotFoundError(absl::StrCat("status '", name, "' not found"));
    }
    if (fence == nullptr) return absl::InternalError("store: a delete failed");
    return NotLeaderError(*fence, absl::StrCat("deleting status ", name));
  }
  Visible(EtcdInt(r["header"], "revision"));
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> EtcdStore::ListStatus(
    const std::string& prefix) {
  std::map<std::string, std::string> out;
  for (const EtcdKv& kv : Range(absl::StrCat("status/", prefix))) {
    out[kv.key.substr(7)] = kv.value;
  }
  return out;
}

}  // namespace gpusched::store
