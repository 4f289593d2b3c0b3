// The etcd store's API keys and event log.
#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "store/api_keys.h"
#include "store/etcd_store.h"
#include "store/etcd_store_internal.h"
#include "store/store_internal.h"

namespace gpusched::store {

// --- API keys ---------------------------------------------------------------

absl::StatusOr<bool> EtcdStore::InsertKey(std::string_view secret,
                                          const KeyInfo& info) {
  KeyRecord k;
  k.info = info;
  ASSIGN_OR_RETURN(k.salt, RandomBytes(kSaltBytes));
  ASSIGN_OR_RETURN(k.hash, HashSecret(k.salt, secret));
  const std::string rel = absl::StrCat("keys/", info.key_id);
  const std::string tenant = absl::StrCat("tenants/", info.tenant);
  json compare = json::array({Absent(Key(rel))});
  if (!info.tenant.empty()) compare.push_back(Exists(Key(tenant)));
  ASSIGN_OR_RETURN(
      json r,
      Txn(compare, json::array({PutOp(Key(rel), DumpJson(KeyValue(k)))})));
  if (EtcdBool(r, "succeeded")) {
    Visible(EtcdInt(r["header"], "revision"));
    return true;
  }
  if (!info.tenant.empty()) {
    ASSIGN_OR_RETURN(std::optional<EtcdKv> t, Fresh(tenant));
    if (!t.has_value()) {
      return absl::NotFoundError(
          absl::StrCat("tenant '", info.tenant, "' not found"));
    }
  }
  return false;  // the id was taken meanwhile
}

absl::StatusOr<NewApiKey> EtcdStore::CreateApiKey(const std::string& tenant,
                                                  const std::string& name,
                                                  Micros now, bool admin) {
  if (tenant.empty() && !admin) {
    return absl::InvalidArgumentError(
        "store: an API key that is not an admin key needs a tenant");
  }
  for (int attempt = 0; attempt < kKeyIdAttempts; ++attempt) {
    ASSIGN_OR_RETURN(std::string secret, GenerateApiKeySecret());
    const std::string key_id = *KeyIdOf(secret);
    ASSIGN_OR_RETURN(
        const bool put,
        InsertKey(secret, {key_id, tenant, name, admin, now, std::nullopt}));
    if (put) return NewApiKey{key_id, std::move(secret)};
    // The key id was taken: draw again.
  }
  return absl::InternalError("store: could not draw an unused API key id");
}

absl::StatusOr<KeyInfo> EtcdStore::AuthenticateKey(std::string_view secret) {
  const std::optional<std::string> key_id = KeyIdOf(secret);
  if (!key_id.has_value()) return InvalidKeyError();
  std::optional<EtcdKv> kv = Cached(absl::StrCat("keys/", *key_id));
  std::optional<KeyRecord> k =
      kv.has_value() ? ParseKey(*key_id, *kv) : std::nullopt;
  if (!k.has_value() || !SecretMatches(k->salt, k->hash, secret)) {
    return InvalidKeyError();
  }
  // A tenant key belongs to the tenant object it was made under: one
  // deleted (and perhaps made again since) takes its keys with it.
  if (!k->info.tenant.empty()) {
    std::optional<EtcdKv> t = Cached(absl::StrCat("tenants/", k->info.tenant));
    if (!t.has_value() || t->create_revision > kv->create_revision) {
      return InvalidKeyError();
    }
  }
  if (k->info.revoked.has_value()) {
    return absl::UnauthenticatedError(
        absl::StrCat("API key ", k->info.key_id, " has been revoked"));
  }
  return k->info;
}

absl::Status EtcdStore::RevokeApiKey(const std::string& key_id, Micros now) {
  const std::string rel = absl::StrCat("keys/", key_id);
  std::optional<EtcdKv> cur = Cached(rel);
  for (int attempt = 0; attempt < kCasAttempts; ++attempt) {
    if (!cur.has_value()) {
      ASSIGN_OR_RETURN(cur, Fresh(rel));
      if (!cur.has_value()) {
        return absl::NotFoundError(
            absl::StrCat("API key ", key_id, " not found"));
      }
    }
    std::optional<KeyRecord> k = ParseKey(key_id, *cur);
    if (!k.has_value()) {
      return absl::DataLossError(
          absl::StrCat("store: API key ", key_id, " in etcd is malformed"));
    }
    if (k->info.revoked.has_value()) return absl::OkStatus();
    k->info.revoked = now;
    ASSIGN_OR_RETURN(
        json r, Txn(json::array({ModIs(Key(rel), cur->mod_revision)}),
                    json::array({PutOp(Key(rel), DumpJson(KeyValue(*k)))})));
    if (EtcdBool(r, "succeeded")) {
      Visible(EtcdInt(r["header"], "revision"));
      return absl::OkStatus();
    }
    cur.reset();
  }
  return absl::AbortedError(
      absl::StrCat("store: API key ", key_id, " kept changing; retry"));
}

absl::StatusOr<std::vector<KeyInfo>> EtcdStore::ListApiKeys(
    const std::string& tenant) {
  std::vector<KeyInfo> out;
  for (const EtcdKv& kv : Range("keys/")) {
    std::optional<KeyRecord> k = ParseKey(kv.key.substr(5), kv);
    if (!k.has_value()) continue;
    if (!tenant.empty() && k->info.tenant != tenant) continue;
    if (!k->info.tenant.empty()) {
      std::optional<EtcdKv> t =
          Cached(absl::StrCat("tenants/", k->info.tenant));
      if (!t.has_value() || t->create_revision > kv.create_revision) continue;
    }
    out.push_back(k->info);
  }
  return out;
}

absl::StatusOr<KeyInfo> EtcdStore::EnsureKey(std::string_view secret,
                                             const std::string& tenant,
                                             const std::string& name,
                                             bool admin, Micros now) {
  std::string what;
  ASSIGN_OR_RETURN(const std::string id,
                   EnsureKeyId(secret, tenant, admin, &what));
  const std::optional<std::string> key_id = id;
  for (int attempt = 0; attempt < kCasAttempts; ++attempt) {
    bool retry = false;
    absl::StatusOr<KeyInfo> k =
        EnsureKeyOnce(secret, *key_id, tenant, name, admin, now, what, &retry);
    if (!retry) return k;
  }
  return absl::AbortedError(
      absl::StrCat("store: ", what, " kept changing; retry"));
}

absl::StatusOr<KeyInfo> EtcdStore::EnsureKeyOnce(
    std::string_view secret, const std::string& key_id,
    const std::string& tenant, const std::string& name, bool admin, Micros now,
    const std::string& what, bool* retry) {
  const std::string rel = absl::StrCat("keys/", key_id);
  ASSIGN_OR_RETURN(std::optional<EtcdKv> cur, Fresh(rel));
  if (!cur.has_value()) {
    const KeyInfo info{key_id, tenant, name, admin, now, std::nullopt};
    ASSIGN_OR_RETURN(const bool put, InsertKey(secret, info));
    if (put) return info;
    *retry = true;  // another instance registered it meanwhile
    return absl::AbortedError("retry");
  }
  std::optional<KeyRecord> k = ParseKey(key_id, *cur);
  if (!k.has_value()) {
    return absl::DataLossError(
        absl::StrCat("store: API key ", key_id, " in etcd is malformed"));
  }
  RETURN_IF_ERROR(
      CheckEnsuredKey(k->info, k->salt, k->hash, secret, tenant, admin, what));
  return k->info;
}

// --- Events -----------------------------------------------------------------

absl::StatusOr<int64_t> EtcdStore::AppendEvent(const Event& event,
                                               const Fence* fence) {
  if (event.kind.empty()) {
    return absl::InvalidArgumentError("store: event kind is empty");
  }
  int64_t seq = 0;
  {
    absl::MutexLock l(&mu_);
    seq = ++event_seq_;
  }
  // Keys sort by time (pruning by age is a range), then by who wrote them.
  const std::string rel =
      absl::StrFormat("events/%016x-%s-%08x",
                      static_cast<uint64_t>(std::max<Micros>(event.time, 0)),
                      options_.instance, static_cast<uint64_t>(seq));
  const json value = {{"time", event.time},
                      {"kind", event.kind},
                      {"deployment", event.deployment},
                      {"tenant", event.tenant},
                      {"message", event.message},
                      {"details", event.details},
                      {"instance", event.instance.empty() ? options_.instance
                                                          : event.instance}};
  json compare = json::array();
  if (fence != nullptr) compare.push_back(FenceCompare(*fence));
  ASSIGN_OR_RETURN(
      json r, Txn(compare, json::array({PutOp(Key(rel), DumpJson(value))})));
  if (!EtcdBool(r, "succeeded")) {
    if (fence == nullptr)
      return absl::InternalError("store: an event put failed");
    return NotLeaderError(*fence, absl::StrCat("recording event ", event.kind));
  }
  const int64_t rev = EtcdInt(r["header"], "revision");
  Visible(rev);
  return rev;
}

absl::StatusOr<std::vector<Event>> EtcdStore::QueryEvents(
    const EventFilter& filter) {
  std::vector<Event> out;
  const size_t limit =
      filter.limit > 0 ? static_cast<size_t>(filter.limit) : SIZE_MAX;
  absl::MutexLock l(&mu_);
  auto take = [&](const Event& e) {
    if (EventMatches(e, filter)) out.push_back(e);
    return out.size() < limit;
  };
  if (filter.oldest_first) {
    for (auto it = copy_->events.begin(); it != copy_->events.end(); ++it) {
      if (!take(it->second)) break;
    }
  } else {
    for (auto it = copy_->events.rbegin(); it != copy_->events.rend(); ++it) {
      if (!take(it->second)) break;
    }
  }
  return out;
}

absl::StatusOr<int64_t> EtcdStore::PruneEvents(int64_t max_rows,
                                               Micros older_than) {
  std::vector<std::string> doomed;
  {
    absl::MutexLock l(&mu_);
    // By id, newest first: the first max_rows stay (when bounded by count),
    // and any older than `older_than` go.
    int64_t kept = 0;
    for (auto it = copy_->events.rbegin(); it != copy_->events.rend(); ++it) {
      const bool too_old = it->second.time < older_than;
      const bool too_many = max_rows >= 0 && kept >= max_rows;
      if (too_old || too_many) {
        auto k = copy_->event_keys.find(it->first);
        if (k != copy_->event_keys.end()) {
          doomed.insert(doomed.end(), k->second.begin(), k->second.end());
        }
      } else {
        ++kept;
      }
    }
  }
  int64_t deleted = 0;
  for (size_t i = 0; i < doomed.size(); i += kMaxTxnOps) {
    json ops = json::array();
    for (size_t j = i; j < std::min(doomed.size(), i + kMaxTxnOps); ++j) {
      ops.push_back(DelOp(Key(doomed[j])));
    }
    ASSIGN_OR_RETURN(json r, Txn(json::array(), ops));
    for (const json& resp : r.contains("responses") ? r["responses"] : json()) {
      deleted += EtcdInt(resp.contains("response_delete_range")
                             ? resp["response_delete_range"]
                             : json(),
                         "deleted");
    }
    Visible(EtcdInt(r["header"], "revision"));
  }
  return deleted;
}

}  // namespace gpusched::store
