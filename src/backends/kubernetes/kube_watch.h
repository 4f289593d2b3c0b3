// KubeWatcher: keeps a copy of one collection of Kubernetes objects (Pods of
// a namespace with a label selector, or Nodes) up to date by list + watch,
// as Kubernetes' own clients do (client-go's reflector), never by polling:
//   - a list (paged with `limit` and `continue`) gives the objects and the
//     collection's resourceVersion; a watch from that version streams what
//     changes after it, with bookmarks (allowWatchBookmarks) that move the
//     version on while nothing changes;
//   - a watch that ends (its timeoutSeconds, the server closing it) is
//     started again from the last version seen, without a list;
//   - `410 Gone` / `Expired` (the version was compacted away) relists, and
//     the new list is compared with the copy: only what really changed is
//     reported, so a relist never reports an object twice;
//   - a failure (connection refused, 429, 5xx) waits with exponential backoff
//     and jitter (honouring Retry-After), then resumes.
//
// The watcher's thread (owned, joined by Stop and the destructor) does the
// I/O; the controller's loop takes what changed with Take(). Thread-safe.
#ifndef GPUSCHED_BACKENDS_KUBERNETES_KUBE_WATCH_H_
#define GPUSCHED_BACKENDS_KUBERNETES_KUBE_WATCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "backends/kubernetes/kube_client.h"
#include "backends/launcher.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace gpusched::backends {

class KubeWatcher {
 public:
  struct Options {
    // The collection: "/api/v1/nodes", "/api/v1/namespaces/NS/pods".
    std::string path;
    std::string label_selector;  // empty: all
    // Sent as timeoutSeconds: the server ends each watch after this.
    Micros watch_timeout = 300 * kMicrosPerSecond;
    // No byte (event or bookmark) for this long ends a watch as broken.
    Micros idle_timeout = 330 * kMicrosPerSecond;
    int64_t page_size = 500;  // list `limit`
    Micros min_backoff = 200 * kMicrosPerMilli;
    Micros max_backoff = 30 * kMicrosPerSecond;
  };

  // What changed since the last Take(), each object once (its latest
  // version), by "namespace/name" (or "name" for cluster objects).
  struct Changes {
    std::vector<nlohmann::json> upserted;
    std::vector<std::string> deleted;
  };

  struct Stats {
    int64_t lists = 0;    // list requests (pages included)
    int64_t watches = 0;  // watch requests
    int64_t events = 0;   // ADDED, MODIFIED, DELETED handled
    int64_t bookmarks = 0;
    int64_t relists = 0;   // after 410 Gone
    int64_t failures = 0;  // requests that failed
  };

  // `client` outlives the watcher.
  KubeWatcher(KubeClient* client, Options options);
  ~KubeWatcher();
  KubeWatcher(const KubeWatcher&) = delete;
  KubeWatcher& operator=(const KubeWatcher&) = delete;

  void Start();
  // Ends the watch in progress (through the client's Cancel: call it before
  // the client is used again elsewhere) and joins the thread.
  void Stop();

  Changes Take();
  // Each time the API server stops answering, or answers again.
  std::vector<ManagerReport> TakeReports();
  // The first list has arrived.
  bool synced() const;
  // Waits up to `timeout` for the first list; whether it arrived.
  bool WaitSynced(Micros timeout);
  // The objects now, by key (a copy).
  absl::flat_hash_map<std::string, nlohmann::json> Snapshot() const;
  Stats stats() const;

  // "namespace/name" of an object, "name" without a namespace; empty when
  // it has no name.
  static std::string Key(const nlohmann::json& object);

 private:
  void Run();
  // One list (all pages) into the copy; false on failure (backoff set).
  bool List();
  // One watch from `version_`; returns when it ends.
  void Watch();
  void Failed(const std::string& error, Micros retry_after);
  void Succeeded();
  void Put(nlohmann::json object);
  void Erase(const std::string& key);
  std::string Query(bool watch, const std::string& cont) const;

  KubeClient* client_;
  const Options options_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, nlohmann::json> objects_
      ABSL_GUARDED_BY(mu_);
  // Changed since the last Take: the object, or nullopt when deleted.
  absl::flat_hash_map<std::string, std::optional<nlohmann::json>> pending_
      ABSL_GUARDED_BY(mu_);
  bool reachable_ ABSL_GUARDED_BY(mu_) = true;
  std::vector<ManagerReport> reports_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);

  // The watcher thread's own state.
  std::string version_;
  bool need_list_ = true;
  Micros backoff_ = 0;
  uint64_t jitter_ = 0x9e3779b97f4a7c15ull;
};

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_KUBERNETES_KUBE_WATCH_H_
