#include "store/store.h"

#include "absl/strings/str_cat.h"
#include "store/store_internal.h"

namespace gpusched::store {

const char* DocKindName(DocKind kind) {
  switch (kind) {
    case DocKind::kDeployment:
      return "deployment";
    case DocKind::kTenant:
      return "tenant";
    case DocKind::kRoute:
      return "route";
    case DocKind::kRole:
      return "role";
    case DocKind::kRoleBinding:
      return "rolebinding";
  }
  return "?";
}

absl::Status NotLeaderError(const Fence& fence, std::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(
      "store: ", absl::string_view(what.data(), what.size()),
      ": not the leader any more (the election key ", fence.key,
      " of revision ", fence.revision, " is gone); nothing was written"));
}

absl::Status CheckPut(DocKind kind, const std::string& name,
                      const std::string& manifest_json, int64_t generation) {
  const char* what = DocKindName(kind);
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: ", what, " name is empty"));
  }
  if (generation < 0) {
    return absl::InvalidArgumentError(absl::StrCat("store: ", what, " '", name,
                                                   "': generation ", generation,
                                                   " is negative"));
  }
  if (!nlohmann::json::accept(manifest_json)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store: ", what, " '", name, "': manifest is not valid JSON"));
  }
  return absl::OkStatus();
}

absl::Status CheckGeneration(DocKind kind, const std::string& name,
                             int64_t stored_generation,
                             const std::string& stored_json, int64_t generation,
                             const std::string& manifest_json) {
  const char* what = DocKindName(kind);
  if (generation < stored_generation) {
    return absl::FailedPreconditionError(
        absl::StrCat("store: ", what, " '", name, "': generation ", generation,
                     " is stale; the stored generation is ", stored_generation,
                     " (changed meanwhile: re-read and retry)"));
  }
  if (generation == stored_generation && manifest_json != stored_json) {
    return absl::FailedPreconditionError(absl::StrCat(
        "store: ", what, " '", name, "': generation ", generation,
        " was written meanwhile with another manifest (re-read and retry)"));
  }
  return absl::OkStatus();
}

absl::Status CheckStatus(const std::string& name, const std::string& json) {
  if (name.empty() || json.size() > kMaxStatusBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: status '", name,
                     "': the name is empty or the document is over ",
                     kMaxStatusBytes >> 20, " MiB"));
  }
  return absl::OkStatus();
}

bool EventMatches(const Event& e, const EventFilter& f) {
  if (e.time < f.since || e.time >= f.until) return false;
  if (!f.deployment.empty() && e.deployment != f.deployment) return false;
  if (!f.tenant.empty() && e.tenant != f.tenant) return false;
  if (!f.kinds.empty()) {
    bool any = false;
    for (const std::string& k : f.kinds) any = any || k == e.kind;
    if (!any) return false;
  }
  if (f.after_id != 0) {
    if (f.oldest_first ? e.id <= f.after_id : e.id >= f.after_id) return false;
  }
  return true;
}

}  // namespace gpusched::store
