// The etcd store's copy of its prefix: what a list and a watch's events
// make of it, and the values' JSON (etcd_store_internal.h). Everything here
// reads what etcd sent without trusting it (fuzz/etcd_watch_fuzz.cc).
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "store/etcd_store_internal.h"

namespace gpusched::store {

namespace {

// One key of a kv/range answer or a watch event under `prefix`, the
// prefix taken off; nullopt for a key outside it.
std::optional<EtcdKv> ReadKv(const std::string& prefix, const json& kv) {
  EtcdKv k;
  k.key = UnB64(kv, "key");
  if (!absl::StartsWith(k.key, prefix)) return std::nullopt;
  k.key.erase(0, prefix.size());
  k.value = UnB64(kv, "value");
  k.create_revision = EtcdInt(kv, "create_revision");
  k.mod_revision = EtcdInt(kv, "mod_revision");
  k.lease = EtcdInt(kv, "lease");
  return k;
}

// Takes events/ key `key` (create revision `rev`) out of the event index;
// another key of that revision, if any, gives the index its event.
void Unindex(EtcdCopy* copy, int64_t rev, const std::string& key) {
  auto it = copy->event_keys.find(rev);
  if (it == copy->event_keys.end() || it->second.erase(key) == 0) return;
  if (it->second.empty()) {
    copy->event_keys.erase(it);
    copy->events.erase(rev);
    return;
  }
  // The other keys parsed when they came, and their values have not changed.
  copy->events[rev] = *ParseEvent(copy->kvs.at(*it->second.rbegin()));
}

// Stores `k` in `copy`. A key put again (never by gpusched; a range answer
// that names a key twice) replaces its event in the index.
void Put(EtcdKv k, EtcdCopy* copy) {
  if (absl::StartsWith(k.key, "events/")) {
    auto old = copy->kvs.find(k.key);
    if (old != copy->kvs.end()) {
      Unindex(copy, old->second.create_revision, k.key);
    }
    if (std::optional<Event> e = ParseEvent(k)) {
      std::set<std::string>& keys = copy->event_keys[e->id];
      keys.insert(k.key);
      if (*keys.rbegin() == k.key) copy->events[e->id] = *std::move(e);
    }
  }
  std::string key = k.key;
  copy->kvs[key] = std::move(k);
}

}  // namespace

EtcdCopy CopyFromRange(const std::string& prefix, const json& range) {
  EtcdCopy out;
  if (!range.is_object() || !range.contains("kvs") ||
      !range["kvs"].is_array()) {
    return out;
  }
  for (const json& kv : range["kvs"]) {
    std::optional<EtcdKv> k = ReadKv(prefix, kv);
    if (k.has_value()) Put(*std::move(k), &out);
  }
  return out;
}

WatchApplied ApplyWatchEvents(const std::string& prefix, const json& events,
                              EtcdCopy* copy) {
  WatchApplied out;
  if (!events.is_array()) return out;
  for (const json& ev : events) {
    if (!ev.is_object() || !ev.contains("kv")) continue;
    std::optional<EtcdKv> k = ReadKv(prefix, ev["kv"]);
    if (!k.has_value()) continue;
    const std::string key = k->key;
    const bool del = ev.contains("type") && ev["type"] == "DELETE";
    auto old = copy->kvs.find(key);
    out.desired_changed =
        out.desired_changed || absl::StartsWith(key, "deployments/") ||
        absl::StartsWith(key, "tenants/") || absl::StartsWith(key, "routes/") ||
        absl::StartsWith(key, "roles/") ||
        absl::StartsWith(key, "rolebindings/");
    if (del) {
      if (old == copy->kvs.end()) continue;
      if (absl::StartsWith(key, "events/")) {
        Unindex(copy, old->second.create_revision, key);
      }
      out.keys_changed = out.keys_changed || absl::StartsWith(key, "keys/") ||
                         absl::StartsWith(key, "tenants/");
      copy->kvs.erase(old);
      continue;
    }
    // A key that changed may have been revoked.
    if (absl::StartsWith(key, "keys/") && old != copy->kvs.end()) {
      out.keys_changed = true;
    }
    Put(*std::move(k), copy);
  }
  return out;
}

std::optional<KeyRecord> ParseKey(const std::string& id, const EtcdKv& kv) {
  const json j = json::parse(kv.value, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  KeyRecord k;
  k.info.key_id = id;
  if (j.contains("tenant") && j["tenant"].is_string()) {
    k.info.tenant = j["tenant"].get<std::string>();
  }
  if (j.contains("name") && j["name"].is_string()) {
    k.info.name = j["name"].get<std::string>();
  }
  k.info.admin = EtcdBool(j, "admin");
  k.info.created = EtcdInt(j, "created");
  if (j.contains("revoked") && !j["revoked"].is_null()) {
    k.info.revoked = EtcdInt(j, "revoked");
  }
  k.salt = UnB64(j, "salt");
  k.hash = UnB64(j, "hash");
  if (k.salt.empty() || k.hash.empty()) return std::nullopt;
  return k;
}

json KeyValue(const KeyRecord& k) {
  json j = {{"tenant", k.info.tenant}, {"name", k.info.name},
            {"admin", k.info.admin},   {"salt", B64(k.salt)},
            {"hash", B64(k.hash)},     {"created", k.info.created},
            {"revoked", nullptr}};
  if (k.info.revoked) j["revoked"] = *k.info.revoked;
  return j;
}

}  // namespace gpusched::store
