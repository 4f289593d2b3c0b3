#include "auth/audit_log.h"

#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace gpusched::auth {

using nlohmann::json;

absl::Status AuditLog::Record(store::AuditRecord r) {
  const Micros now = r.time;
  absl::StatusOr<store::AuditRecord> stored = store_->AppendAudit(r);
  bool prune = false;
  {
    absl::MutexLock lock(&mu_);
    if (!stored.ok()) ++failures_;
    prune = ++since_prune_ >= options_.prune_every;
    if (prune) since_prune_ = 0;
  }
  Export(stored.ok() ? *stored : r);
  if (prune) (void)Prune(now);
  return stored.status();
}

absl::StatusOr<int64_t> AuditLog::Prune(Micros now) {
  const Micros older_than = now - options_.max_age;
  return store_->PruneAudit(options_.max_records, older_than);
}

int64_t AuditLog::failures() const {
  absl::MutexLock lock(&mu_);
  return failures_;
}

void AuditLog::Export(const store::AuditRecord& r) {
  if (options_.export_path.empty()) return;
  const std::string line = absl::StrCat(
      store::AuditJson(r).dump(-1, ' ', false, json::error_handler_t::replace),
      "\n");
  absl::MutexLock lock(&mu_);
  if (out_bytes_ + line.size() > options_.max_export_bytes && out_.is_open()) {
    out_.close();
    std::error_code ec;
    std::filesystem::rename(options_.export_path, options_.export_path + ".1",
                            ec);
    out_bytes_ = 0;
  }
  if (!out_.is_open()) {
    out_.open(options_.export_path, std::ios::app | std::ios::binary);
    std::error_code ec;
    const auto size = std::filesystem::file_size(options_.export_path, ec);
    out_bytes_ = ec ? 0 : static_cast<size_t>(size);
  }
  out_ << line;
  out_.flush();
  out_bytes_ += line.size();
}

json ManifestDiff(const json& before, const json& after) {
  if (before == after) return json::object();
  if (!before.is_object() || !after.is_object()) {
    return {{"before", before}, {"after", after}};
  }
  json b = json::object(), a = json::object();
  for (auto it = before.begin(); it != before.end(); ++it) {
    auto other = after.find(it.key());
    if (other == after.end()) {
      b[it.key()] = it.value();
    } else if (*other != it.value()) {
      json d = ManifestDiff(it.value(), *other);
      b[it.key()] = d["before"];
      a[it.key()] = d["after"];
    }
  }
  for (auto it = after.begin(); it != after.end(); ++it) {
    if (!before.contains(it.key())) a[it.key()] = it.value();
  }
  return {{"before", b}, {"after", a}};
}

}  // namespace gpusched::auth
