#include "backends/kubernetes/kube_watch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace gpusched::backends {

using nlohmann::json;

KubeWatcher::KubeWatcher(KubeClient* client, Options options)
    : client_(client), options_(std::move(options)) {}

KubeWatcher::~KubeWatcher() { Stop(); }

void KubeWatcher::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void KubeWatcher::Stop() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  client_->Cancel();
  if (thread_.joinable()) thread_.join();
}

std::string KubeWatcher::Key(const json& object) {
  if (!object.is_object()) return "";
  const auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return "";
  const auto name = m->find("name");
  if (name == m->end() || !name->is_string()) return "";
  const auto ns = m->find("namespace");
  if (ns != m->end() && ns->is_string() && !ns->get<std::string>().empty()) {
    return absl::StrCat(ns->get<std::string>(), "/", name->get<std::string>());
  }
  return name->get<std::string>();
}

namespace {

std::string VersionOf(const json& object) {
  if (!object.is_object()) return "";
  const auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return "";
  const auto rv = m->find("resourceVersion");
  return rv != m->end() && rv->is_string() ? rv->get<std::string>() : "";
}

}  // namespace

std::string KubeWatcher::Query(bool watch, const std::string& cont) const {
  std::string q = absl::StrCat(options_.path, "?");
  if (!options_.label_selector.empty()) {
    absl::StrAppend(
        &q, "labelSelector=", KubeQueryEscape(options_.label_selector), "&");
  }
  if (watch) {
    absl::StrAppend(
        &q, "watch=true&allowWatchBookmarks=true&resourceVersion=",
        KubeQueryEscape(version_), "&timeoutSeconds=",
        std::max<Micros>(1, options_.watch_timeout / kMicrosPerSecond));
  } else {
    absl::StrAppend(&q, "limit=", options_.page_size);
    if (!cont.empty()) absl::StrAppend(&q, "&continue=", KubeQueryEscape(cont));
  }
  return q;
}

void KubeWatcher::Run() {
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (backoff_ > 0) {
        // Interruptible: Stop() sets stop_.
        mu_.AwaitWithTimeout(absl::Condition(&stop_),
                             absl::Microseconds(backoff_));
      }
      if (stop_) return;
    }
    if (need_list_) {
      if (!List()) continue;
      need_list_ = false;
    }
    Watch();
  }
}

bool KubeWatcher::List() {
  absl::flat_hash_map<std::string, json> fresh;
  std::string cont, version;
  for (int page = 0; page < 10000; ++page) {
    {
      absl::MutexLock l(&mu_);
      ++stats_.lists;
    }
    absl::StatusOr<KubeResponse> r =
        client_->Request("GET", Query(false, cont));
    if (!r.ok()) {
      Failed(std::string(r.status().message()), 0);
      return false;
    }
    if (absl::Status st = KubeStatusError(*r, "list " + options_.path);
        !st.ok()) {
      if (r->status == 410) cont.clear();  // a stale continue token
      Failed(std::string(st.message()), r->retry_after);
      return false;
    }
    json list = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    if (!list.is_object() || !list.contains("items") ||
        !list["items"].is_array()) {
      Failed(absl::StrCat("list ", options_.path, ": not a list"), 0);
      return false;
    }
    for (json& item : list["items"]) {
      std::string key = Key(item);
      if (key.empty()) continue;
      fresh[std::move(key)] = std::move(item);
      if (fresh.size() > 100000) {
        Failed(absl::StrCat("list ", options_.path, ": over 100,000 objects"),
               0);
        return false;
      }
    }
    const json& meta = KubeField(list, "metadata");
    version = KubeStr(meta, "resourceVersion");
    cont = KubeStr(meta, "continue");
    if (cont.empty()) break;
  }
  Succeeded();
  absl::MutexLock l(&mu_);
  // Only what differs from the copy is a change.
  for (const auto& [key, obj] : objects_) {
    if (!fresh.contains(key)) pending_[key] = std::nullopt;
  }
  for (auto& [key, obj] : fresh) {
    auto old = objects_.find(key);
    if (old == objects_.end() || VersionOf(old->second) != VersionOf(obj)) {
      pending_[key] = obj;
    }
  }
  objects_ = std::move(fresh);
  version_ = version;
  synced_ = true;
  return true;
}

void KubeWatcher::Watch() {
  {
    absl::MutexLock l(&mu_);
    ++stats_.watches;
  }
  bool any = false;
  KubeResponse error;
  const absl::Status st = client_->Stream(
      Query(true, ""), options_.idle_timeout,
      [&](absl::string_view line) {
        json ev = json::parse(line.begin(), line.end(), nullptr,
                              /*allow_exceptions=*/false);
        if (!ev.is_object() || !ev.contains("type") ||
            !ev["type"].is_string() || !ev.contains("object")) {
          return true;  // not an event: skipped
        }
        if (!any) {
          any = true;
          Succeeded();
        }
        const std::string type = ev["type"].get<std::string>();
        json& obj = ev["object"];
        if (type == "ERROR") {
          const int64_t code = KubeInt(obj, "code");
          if (code == 410) {
            absl::MutexLock l(&mu_);
            ++stats_.relists;
            need_list_ = true;
          } else {
            Failed(absl::StrCat("watch ", options_.path, ": ",
                                KubeStr(obj, "message")),
                   0);
          }
          return false;
        }
        const std::string rv = VersionOf(obj);
        if (!rv.empty()) version_ = rv;
        if (type == "BOOKMARK") {
          absl::MutexLock l(&mu_);
          ++stats_.bookmarks;
        } else if (type == "ADDED" || type == "MODIFIED") {
          Put(std::move(obj));
        } else if (type == "DELETED") {
          Erase(Key(obj));
        }
        return true;
      },
      &error);
  if (!st.ok()) {
    if (!absl::IsCancelled(st)) Failed(std::string(st.message()), 0);
    return;
  }
  if (error.status != 0) {
    if (error.status == 410) {
      absl::MutexLock l(&mu_);
      ++stats_.relists;
      need_list_ = true;
      return;
    }
    Failed(
        std::string(KubeStatusError(error, "watch " + options_.path).message()),
        error.retry_after);
    return;
  }
  if (!any) Succeeded();
  // Ended by the server (timeoutSeconds): watch again from version_ at
  // once.
  backoff_ = 0;
}

void KubeWatcher::Put(json object) {
  std::string key = Key(object);
  if (key.empty()) return;
  absl::MutexLock l(&mu_);
  ++stats_.events;
  pending_[key] = object;
  objects_[std::move(key)] = std::move(object);
}

void KubeWatcher::Erase(const std::string& key) {
  if (key.empty()) return;
  absl::MutexLock l(&mu_);
  ++stats_.events;
  objects_.erase(key);
  pending_[key] = std::nullopt;
}

void KubeWatcher::Failed(const std::string& error, Micros retry_after) {
  // Exponential with jitter in [0.5, 1.0) of the step, at least Retry-After.
  const Micros step = backoff_ == 0
                          ? options_.min_backoff
                          : std::min(options_.max_backoff, 2 * backoff_);
  jitter_ = jitter_ * 6364136223846793005ull + 1442695040888963407ull;
  const double f = 0.5 + static_cast<double>(jitter_ >> 11) * 0x1.0p-54;
  backoff_ = std::max(static_cast<Micros>(static_cast<double>(step) * f),
                      std::min(retry_after, options_.max_backoff));
  absl::MutexLock l(&mu_);
  ++stats_.failures;
  if (reachable_ && !stop_) {
    reachable_ = false;
    reports_.push_back({.reachable = false, .message = error});
  }
}

void KubeWatcher::Succeeded() {
  backoff_ = 0;
  absl::MutexLock l(&mu_);
  if (!reachable_) {
    reachable_ = true;
    reports_.push_back({.reachable = true, .message = ""});
  }
}

KubeWatcher::Changes KubeWatcher::Take() {
  absl::MutexLock l(&mu_);
  Changes out;
  for (auto& [key, obj] : pending_) {
    if (obj) {
      out.upserted.push_back(std::move(*obj));
    } else {
      out.deleted.push_back(key);
    }
  }
  pending_.clear();
  return out;
}

std::vector<ManagerReport> KubeWatcher::TakeReports() {
  absl::MutexLock l(&mu_);
  return std::exchange(reports_, {});
}

bool KubeWatcher::synced() const {
  absl::MutexLock l(&mu_);
  return synced_;
}

bool KubeWatcher::WaitSynced(Micros timeout) {
  absl::MutexLock l(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&synced_), absl::Microseconds(timeout));
  return synced_;
}

absl::flat_hash_map<std::string, json> KubeWatcher::Snapshot() const {
  absl::MutexLock l(&mu_);
  return objects_;
}

KubeWatcher::Stats KubeWatcher::stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

}  // namespace gpusched::backends
