// The audit log's record and chain (docs/access.md, "Audit log"): every
// control action, who did it, what changed, from where, and the outcome.
// Records are append-only and hash-chained: each carries the hash of the one
// before it (`prev_hash`) and its own (`hash`, SHA-256 over the previous hash
// and the record's canonical JSON), and sequence numbers run without gaps.
// Retention removes the oldest records and keeps the last removed record's
// sequence number and hash as the chain's anchor; the store also keeps the
// head (the newest record's), so that removing the newest records is seen
// too. VerifyAuditChain checks a chain read back from a store.
//
// Plain values and pure functions; thread-compatible.
#ifndef GPUSCHED_STORE_AUDIT_H_
#define GPUSCHED_STORE_AUDIT_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace gpusched::store {

struct AuditRecord {
  // Assigned by Store::AppendAudit, ignored on input: 1, 2, 3, ... in the
  // order the store committed them (across every instance of a shared store).
  int64_t seq = 0;
  Micros time = 0;
  std::string who;       // "key:ab12cd34" | "token:alice@example.com"
  std::string role;      // the roles it held ("tenant-admin@team-a")
  std::string verb;      // "apply", "delete", "scale", "rollout", ...
  std::string resource;  // "deployment/chat", "key/ab12cd34"
  std::string peer;      // the client's address
  std::string outcome;   // "ok", "denied" or "error"
  int status = 0;        // the HTTP status answered
  std::string message;   // the refusal or error (never a secret)
  // The change: for a manifest, {"before": ..., "after": ...} with only the
  // fields that differ; a scale {"replicas": N}; {} when none.
  nlohmann::json diff = nlohmann::json::object();
  std::string instance;   // the instance that recorded it (a shared store)
  std::string prev_hash;  // hex; "" for the first record ever
  std::string hash;       // hex SHA-256; assigned by AppendAudit
};

// Filters AND together; an empty field does not filter.
struct AuditFilter {
  Micros since = std::numeric_limits<Micros>::min();  // time >= since
  Micros until = kNever;                              // time < until
  std::string who;       // exact subject, or its key id / token subject
  std::string resource;  // exact "kind/name", or a kind ("deployment")
  std::string verb;
  std::string outcome;
  int64_t limit = 100;    // <= 0: no limit
  int64_t after_seq = 0;  // cursor: seq > after_seq (oldest first) or <
  bool oldest_first = false;
};

// The chain's ends: the last record retention removed (seq 0 and "" when
// none was) and the newest record (seq 0 when the log is empty).
struct AuditEnds {
  int64_t anchor_seq = 0;
  std::string anchor_hash;
  int64_t head_seq = 0;
  std::string head_hash;
};

// At most this many records are kept when no retention is configured
// lower; the store refuses nothing, the daemon prunes (docs/access.md).
inline constexpr size_t kMaxAuditMessageBytes = 4096;
inline constexpr size_t kMaxAuditDiffBytes = 64 * 1024;

// The record's hash given the previous one's: hex SHA-256 of
// prev_hash || "\n" || the canonical JSON of every field but `hash`.
std::string AuditHash(const AuditRecord& r);
// `r` with seq, prev_hash and hash set after `prev` (the head).
AuditRecord ChainAudit(AuditRecord r, int64_t prev_seq,
                       const std::string& prev_hash);
// Caps message and diff (a diff too large becomes {"truncated": bytes}).
void BoundAudit(AuditRecord* r);

nlohmann::json AuditJson(const AuditRecord& r);
absl::StatusOr<AuditRecord> AuditFromJson(const nlohmann::json& j);
bool AuditMatches(const AuditRecord& r, const AuditFilter& f);

// OK when `records` (oldest first, every record the store holds) chain
// from `ends.anchor_*` to `ends.head_*` without a gap and every hash
// holds; else DataLoss naming the first record that was changed, removed
// or added ("record 7: changed (its hash does not match its content)").
absl::Status VerifyAuditChain(const AuditEnds& ends,
                              const std::vector<AuditRecord>& records);

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_AUDIT_H_
