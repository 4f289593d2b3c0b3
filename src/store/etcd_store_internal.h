// Internal to the etcd store (etcd_store.cc, etcd_store_keys.cc): the
// pieces of transactions and the values' JSON.
#ifndef GPUSCHED_STORE_ETCD_STORE_INTERNAL_H_
#define GPUSCHED_STORE_ETCD_STORE_INTERNAL_H_

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "nlohmann/json.hpp"
#include "store/etcd_client.h"
#include "store/etcd_store.h"
#include "store/store.h"

namespace gpusched::store {

using json = nlohmann::json;

// The copy of the prefix and its index of events.
struct EtcdCopy {
  std::map<std::string, EtcdKv> kvs;  // by key relative to the prefix
  std::map<int64_t, Event> events;    // by id (create revision)
  // The events/ keys that parse, by create revision: etcd gives two keys
  // one create revision only when one transaction made both, and the index
  // then holds the event of the greatest key while any is left.
  std::map<int64_t, std::set<std::string>> event_keys;
};

// etcd's default --max-txn-ops.
constexpr size_t kMaxTxnOps = 128;
// Attempts of a compare-and-swap that keeps losing to other writers.
constexpr int kCasAttempts = 8;
// After a call that got no answer, writes fail at once for this long (the
// election's renewals keep asking, and the first answer lifts it): a store
// that is away costs a caller one timeout, not one per write.
constexpr Micros kFailFastFor = 1 * kMicrosPerSecond;
// How long the store's calls keep trying the members (through an etcd
// leader election).
constexpr Micros kWriteRetryFor = 3 * kMicrosPerSecond;

inline Micros SteadyNow() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline const char* DocDir(DocKind kind) {
  switch (kind) {
    case DocKind::kDeployment:
      return "deployments/";
    case DocKind::kTenant:
      return "tenants/";
    case DocKind::kRoute:
      return "routes/";
    case DocKind::kRole:
      return "roles/";
    case DocKind::kRoleBinding:
      return "rolebindings/";
  }
  return "?/";
}

inline std::string DumpJson(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

inline json PutOp(const std::string& key, const std::string& value) {
  return {{"request_put", {{"key", B64(key)}, {"value", B64(value)}}}};
}
inline json DelOp(const std::string& key) {
  return {{"request_delete_range", {{"key", B64(key)}}}};
}
inline json Exists(const std::string& key) {
  return {{"key", B64(key)},
          {"target", "VERSION"},
          {"result", "GREATER"},
          {"version", "0"}};
}
inline json Absent(const std::string& key) {
  return {{"key", B64(key)},
          {"target", "CREATE"},
          {"result", "EQUAL"},
          {"create_revision", "0"}};
}
inline json ModIs(const std::string& key, int64_t mod) {
  return {{"key", B64(key)},
          {"target", "MOD"},
          {"result", "EQUAL"},
          {"mod_revision", std::to_string(mod)}};
}

inline std::optional<Document> ParseDoc(const std::string& name,
                                        const EtcdKv& kv) {
  const json j = json::parse(kv.value, nullptr, false);
  if (!j.is_object() || !j.contains("manifest") || !j["manifest"].is_string()) {
    return std::nullopt;
  }
  return Document{name, j["manifest"].get<std::string>(),
                  EtcdInt(j, "generation"), EtcdInt(j, "created"),
                  EtcdInt(j, "updated")};
}

inline std::optional<Event> ParseEvent(const EtcdKv& kv) {
  const json j = json::parse(kv.value, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  Event e;
  e.id = kv.create_revision;
  e.time = EtcdInt(j, "time");
  auto str = [&j](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
  };
  e.kind = str("kind");
  e.deployment = str("deployment");
  e.tenant = str("tenant");
  e.message = str("message");
  e.instance = str("instance");
  if (j.contains("details")) e.details = j["details"];
  return e;
}

// What a watch response's events changed.
struct WatchApplied {
  bool keys_changed = false;     // a key changed or went, or a tenant went
  bool desired_changed = false;  // a deployment, tenant or route
};

// Applies a watch response's `events` (etcd's JSON: base64 keys and values)
// for keys under `prefix` to `copy`. Whatever etcd sent, nothing throws:
// malformed events are skipped (fuzz/etcd_watch_fuzz.cc). etcd_copy.cc.
WatchApplied ApplyWatchEvents(const std::string& prefix, const json& events,
                              EtcdCopy* copy);
// A copy of the keys under `prefix` in a kv/range answer.
EtcdCopy CopyFromRange(const std::string& prefix, const json& range);

// An API key as the etcd store keeps it.
struct KeyRecord {
  KeyInfo info;
  std::string salt, hash;
};
std::optional<KeyRecord> ParseKey(const std::string& id, const EtcdKv& kv);
json KeyValue(const KeyRecord& k);

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_ETCD_STORE_INTERNAL_H_
