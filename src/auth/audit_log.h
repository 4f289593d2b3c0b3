// AuditLog: records control actions in the Store's hash-chained audit log
// (store/audit.h), exports each record as one JSON line to a file for log
// shippers, and keeps the log within its retention (a count and an age,
// pruned every `prune_every` records). Records are built by the control API
// from what it already knows (the Principal, the route, the manifests):
// they carry key ids and token subjects, never a secret.
//
// Thread-safety: thread-safe (the export file under a mutex; the Store is
// thread-safe). A record the store refuses (it is away) is still exported
// and counted in failures(); the action it describes has happened.
#ifndef GPUSCHED_AUTH_AUDIT_LOG_H_
#define GPUSCHED_AUTH_AUDIT_LOG_H_

#include <cstdint>
#include <fstream>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"
#include "store/store.h"

namespace gpusched::auth {

struct AuditOptions {
  std::string export_path;                           // "": no export file
  int64_t max_records = 100000;                      // kept; >= 1
  Micros max_age = 90LL * 86400 * kMicrosPerSecond;  // kept; > 0
  int64_t prune_every = 1000;                        // records between prunes
  size_t max_export_bytes = 256 << 20;  // then the file moves to .1
};

class AuditLog {
 public:
  AuditLog(store::Store* store, AuditOptions options)
      : store_(store), options_(std::move(options)) {}

  // Appends `r` (time set by the caller) and exports it.
  absl::Status Record(store::AuditRecord r);
  // Applies the retention now: records older than now - max_age and beyond
  // the newest max_records go.
  absl::StatusOr<int64_t> Prune(Micros now);
  int64_t failures() const;

 private:
  void Export(const store::AuditRecord& r);

  store::Store* const store_;
  const AuditOptions options_;
  mutable absl::Mutex mu_;
  std::ofstream out_ ABSL_GUARDED_BY(mu_);
  size_t out_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t since_prune_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
};

// The difference between two manifests as JSON (either may be null:
// created or deleted): {"before": {...}, "after": {...}} holding only the
// fields that differ, recursively through objects.
nlohmann::json ManifestDiff(const nlohmann::json& before,
                            const nlohmann::json& after);

}  // namespace gpusched::auth

#endif  // GPUSCHED_AUTH_AUDIT_LOG_H_
