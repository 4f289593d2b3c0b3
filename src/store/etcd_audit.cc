// The etcd store's audit log (store/audit.h): each record under
// audit/<seq, 16 hex digits>, the anchor and head in one key (auditends),
// every append and prune a transaction that compares that key's revision, so
// that instances appending at once each get the next seq in turn.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "store/etcd_store.h"
#include "store/etcd_store_internal.h"

namespace gpusched::store {

namespace {

constexpr const char* kEndsKey = "auditends";

std::string AuditKey(int64_t seq) {
  return absl::StrFormat("audit/%016x", static_cast<uint64_t>(seq));
}

AuditEnds ParseEnds(const std::optional<EtcdKv>& kv) {
  AuditEnds e;
  if (!kv.has_value()) return e;
  const json j = json::parse(kv->value, nullptr, false);
  if (!j.is_object()) return e;
  auto str = [&j](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
  };
  e.anchor_seq = EtcdInt(j, "anchorSeq");
  e.anchor_hash = str("anchorHash");
  e.head_seq = EtcdInt(j, "headSeq");
  e.head_hash = str("headHash");
  return e;
}

std::string EndsValue(const AuditEnds& e) {
  return DumpJson({{"anchorSeq", e.anchor_seq},
                   {"anchorHash", e.anchor_hash},
                   {"headSeq", e.head_seq},
                   {"headHash", e.head_hash}});
}

json EndsCompare(const std::string& key, const std::optional<EtcdKv>& kv) {
  return kv.has_value() ? ModIs(key, kv->mod_revision) : Absent(key);
}

}  // namespace

absl::StatusOr<AuditRecord> EtcdStore::AppendAudit(const AuditRecord& record) {
  if (record.verb.empty() || record.who.empty()) {
    return absl::InvalidArgumentError(
        "store: audit record verb and who must not be empty");
  }
  AuditRecord r = record;
  BoundAudit(&r);
  if (r.instance.empty()) r.instance = options_.instance;
  std::optional<EtcdKv> ends_kv = Cached(kEndsKey);
  for (int attempt = 0; attempt < kCasAttempts * 4; ++attempt) {
    AuditEnds ends = ParseEnds(ends_kv);
    AuditRecord out = ChainAudit(r, ends.head_seq, ends.head_hash);
    ends.head_seq = out.seq;
    ends.head_hash = out.hash;
    ASSIGN_OR_RETURN(json resp,
                     Txn(json::array({EndsCompare(Key(kEndsKey), ends_kv)}),
                         json::array({PutOp(Key(AuditKey(out.seq)),
                                            DumpJson(AuditJson(out))),
                                      PutOp(Key(kEndsKey), EndsValue(ends))})));
    if (EtcdBool(resp, "succeeded")) {
      Visible(EtcdInt(resp["header"], "revision"));
      return out;
    }
    ASSIGN_OR_RETURN(ends_kv, Fresh(kEndsKey));
  }
  return absl::AbortedError(
      "store: the audit log kept moving under concurrent appends; retry");
}

absl::StatusOr<std::vector<AuditRecord>> EtcdStore::QueryAudit(
    const AuditFilter& filter) {
  std::vector<EtcdKv> kvs = Range("audit/");
  if (!filter.oldest_first) std::reverse(kvs.begin(), kvs.end());
  std::vector<AuditRecord> out;
  for (const EtcdKv& kv : kvs) {
    if (filter.limit > 0 && static_cast<int64_t>(out.size()) >= filter.limit) {
      break;
    }
    ASSIGN_OR_RETURN(AuditRecord r,
                     AuditFromJson(json::parse(kv.value, nullptr, false)));
    if (AuditMatches(r, filter)) out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<AuditEnds> EtcdStore::GetAuditEnds() {
  return ParseEnds(Cached(kEndsKey));
}

absl::StatusOr<int64_t> EtcdStore::PruneAudit(int64_t max_rows,
                                              Micros older_than) {
  for (int attempt = 0; attempt < kCasAttempts; ++attempt) {
    const std::optional<EtcdKv> ends_kv = Cached(kEndsKey);
    AuditEnds ends = ParseEnds(ends_kv);
    // Oldest first: cut after the last record too old, or beyond the newest
    // `max_rows`.
    const std::vector<EtcdKv> kvs = Range("audit/");
    const int64_t total = static_cast<int64_t>(kvs.size());
    int64_t cut_index = -1;
    for (int64_t i = 0; i < total; ++i) {
      const json j = json::parse(kvs[i].value, nullptr, false);
      const bool too_old = EtcdInt(j, "time") < older_than;
      const bool too_many = max_rows >= 0 && total - i > max_rows;
      if (too_old || too_many) cut_index = i;
    }
    if (cut_index < 0) return 0;
    ASSIGN_OR_RETURN(
        AuditRecord cut,
        AuditFromJson(json::parse(kvs[cut_index].value, nullptr, false)));
    ends.anchor_seq = cut.seq;
    ends.anchor_hash = cut.hash;
    const json del = {{"request_delete_range",
                       {{"key", B64(Key("audit/"))},
                        {"range_end", B64(Key(AuditKey(cut.seq + 1)))}}}};
    ASSIGN_OR_RETURN(
        json resp,
        Txn(json::array({EndsCompare(Key(kEndsKey), ends_kv)}),
            json::array({del, PutOp(Key(kEndsKey), EndsValue(ends))})));
    if (EtcdBool(resp, "succeeded")) {
      Visible(EtcdInt(resp["header"], "revision"));
      return cut_index + 1;
    }
    RETURN_IF_ERROR(Fresh(kEndsKey).status());
  }
  return absl::AbortedError(
      "store: the audit log kept moving while it was pruned; retry");
}

}  // namespace gpusched::store
