#include "store/audit.h"

#include <openssl/evp.h>

#include <array>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpusched::store {

using nlohmann::json;

namespace {

std::string Sha256Hex(const std::string& data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest.data(), &len, EVP_sha256(),
                 nullptr) != 1) {
    return "";
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), len));
}

std::string Str(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

int64_t Int(const json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

}  // namespace

json AuditJson(const AuditRecord& r) {
  return {{"seq", r.seq},
          {"time", r.time},
          {"who", r.who},
          {"role", r.role},
          {"verb", r.verb},
          {"resource", r.resource},
          {"peer", r.peer},
          {"outcome", r.outcome},
          {"status", r.status},
          {"message", r.message},
          {"diff", r.diff},
          {"instance", r.instance},
          {"prevHash", r.prev_hash},
          {"hash", r.hash}};
}

absl::StatusOr<AuditRecord> AuditFromJson(const json& j) {
  if (!j.is_object() || !j.contains("seq")) {
    return absl::DataLossError("store: an audit record is malformed");
  }
  AuditRecord r;
  r.seq = Int(j, "seq");
  r.time = Int(j, "time");
  r.who = Str(j, "who");
  r.role = Str(j, "role");
  r.verb = Str(j, "verb");
  r.resource = Str(j, "resource");
  r.peer = Str(j, "peer");
  r.outcome = Str(j, "outcome");
  r.status = static_cast<int>(Int(j, "status"));
  r.message = Str(j, "message");
  if (j.contains("diff")) r.diff = j["diff"];
  r.instance = Str(j, "instance");
  r.prev_hash = Str(j, "prevHash");
  r.hash = Str(j, "hash");
  return r;
}

std::string AuditHash(const AuditRecord& r) {
  json j = AuditJson(r);
  j.erase("hash");
  // nlohmann's object keys are sorted: the dump is canonical.
  return Sha256Hex(
      absl::StrCat(r.prev_hash, "\n",
                   j.dump(-1, ' ', true, json::error_handler_t::replace)));
}

AuditRecord ChainAudit(AuditRecord r, int64_t prev_seq,
                       const std::string& prev_hash) {
  r.seq = prev_seq + 1;
  r.prev_hash = prev_hash;
  r.hash = AuditHash(r);
  return r;
}

void BoundAudit(AuditRecord* r) {
  if (r->message.size() > kMaxAuditMessageBytes) {
    r->message.resize(kMaxAuditMessageBytes);
  }
  const std::string d =
      r->diff.dump(-1, ' ', false, json::error_handler_t::replace);
  if (d.size() > kMaxAuditDiffBytes) {
    r->diff = {{"truncated", d.size()}};
  }
}

bool AuditMatches(const AuditRecord& r, const AuditFilter& f) {
  if (r.time < f.since || r.time >= f.until) return false;
  if (!f.who.empty() && r.who != f.who &&
      r.who != absl::StrCat("key:", f.who) &&
      r.who != absl::StrCat("token:", f.who)) {
    return false;
  }
  if (!f.resource.empty() && r.resource != f.resource &&
      r.resource.rfind(absl::StrCat(f.resource, "/"), 0) != 0) {
    return false;
  }
  if (!f.verb.empty() && r.verb != f.verb) return false;
  if (!f.outcome.empty() && r.outcome != f.outcome) return false;
  if (f.after_seq > 0) {
    if (f.oldest_first ? r.seq <= f.after_seq : r.seq >= f.after_seq) {
      return false;
    }
  }
  return true;
}

absl::Status VerifyAuditChain(const AuditEnds& ends,
                              const std::vector<AuditRecord>& records) {
  int64_t seq = ends.anchor_seq;
  std::string hash = ends.anchor_hash;
  for (const AuditRecord& r : records) {
    if (r.seq != seq + 1) {
      return absl::DataLossError(
          r.seq > seq + 1
              ? absl::StrCat("record ", seq + 1,
                             ": removed (the chain goes from record ", seq,
                             " to record ", r.seq, ")")
              : absl::StrCat("record ", r.seq,
                             ": out of order or repeated "
                             "after record ",
                             seq));
    }
    if (r.prev_hash != hash) {
      return absl::DataLossError(absl::StrCat(
          "record ", r.seq, ": does not follow record ", seq,
          " (its previous hash differs: a record before it was changed or "
          "replaced)"));
    }
    if (AuditHash(r) != r.hash) {
      return absl::DataLossError(absl::StrCat(
          "record ", r.seq, ": changed (its hash does not match its content)"));
    }
    seq = r.seq;
    hash = r.hash;
  }
  if (seq != ends.head_seq || hash != ends.head_hash) {
    return absl::DataLossError(
        seq < ends.head_seq
            ? absl::StrCat("records ", seq + 1, "..", ends.head_seq,
                           ": removed (the log's head is record ",
                           ends.head_seq, ")")
            : absl::StrCat("the log's head (record ", ends.head_seq,
                           ") does not match its newest record ", seq));
  }
  return absl::OkStatus();
}

}  // namespace gpusched::store
