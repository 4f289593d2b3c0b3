// The stand-in API server's objects, resourceVersions, history and watches
// (apiserver.h). Everything happens under one mutex: a change is committed,
// appended to the history and written to every matching watch in one step,
// so each watch sees events in resourceVersion order with no gap.
#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/kube/apiserver.h"

namespace gpusched::kubetest {

namespace {

constexpr char kDeleted[] = "DELETED";

}  // namespace

Store::Store(Options options, std::function<void()> on_change)
    : options_(options), on_change_(std::move(on_change)), rng_(options.seed) {}

absl::Status Store::LoadNodes(const json& list) {
  if (!list.is_object() || list.value("kind", "") != "NodeList" ||
      !list.contains("items") || !list["items"].is_array()) {
    return absl::InvalidArgumentError(
        "nodes: want a NodeList {\"kind\":\"NodeList\",\"items\":[...]}");
  }
  if (list["items"].size() > 254) {
    return absl::InvalidArgumentError(
        "nodes: at most 254 nodes (each has a 127.0.N.0/24 block of Pod IPs)");
  }
  absl::MutexLock l(&mu_);
  for (const json& item : list["items"]) {
    if (!item.is_object() || !item.contains("metadata") ||
        !item["metadata"].is_object() ||
        !item["metadata"].value("name", json()).is_string()) {
      return absl::InvalidArgumentError("nodes: an item has no metadata.name");
    }
    json node = item;
    const std::string name = node["metadata"]["name"];
    if (objects_[1].contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("nodes: \"", name, "\" is listed twice"));
    }
    node["kind"] = "Node";
    node["apiVersion"] = "v1";
    node["metadata"]["uid"] = RandomUid(rng_);
    node["metadata"]["creationTimestamp"] = NowRfc3339();
    if (!node.contains("spec")) node["spec"] = json::object();
    if (!node.contains("status")) node["status"] = json::object();
    node_order_.push_back(name);
    Commit(Kind::kNode, name, std::move(node), "ADDED");
  }
  return absl::OkStatus();
}

void Store::Commit(Kind kind, const std::string& key, json object,
                   const char* type) {
  ++rv_;
  object["metadata"]["resourceVersion"] = std::to_string(rv_);
  Objects& objs = objects_[static_cast<int>(kind)];
  std::shared_ptr<const json> prev;
  if (auto it = objs.find(key); it != objs.end()) prev = it->second;
  auto obj = std::make_shared<const json>(std::move(object));
  const bool deleted = absl::string_view(type) == kDeleted;
  if (deleted) {
    objs.erase(key);
  } else {
    objs[key] = obj;
  }
  if (kind == Kind::kPod) {
    const std::string uid = (*obj)["metadata"].value("uid", "");
    if (deleted) {
      pod_key_by_uid_.erase(uid);
    } else {
      pod_key_by_uid_[uid] = key;
    }
  }
  history_.push_back(Event{rv_, kind, type, obj, prev});
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    if (it->second.out->client_gone()) {
      it = watchers_.erase(it);
      continue;
    }
    if (it->second.req.kind == kind) Send(it->second, history_.back());
    it->second.last_rv = rv_;
    ++it;
  }
  while (history_.size() > options_.history) {
    floor_ = history_.front().rv;
    history_.pop_front();
  }
  if (on_change_) on_change_();
}

void Store::Send(Watcher& w, const Event& e) {
  const Filter& f = w.req.filter;
  const bool deleted = absl::string_view(e.type) == kDeleted;
  const bool now_ok = !deleted && f.Matches(*e.object);
  const bool was_ok = e.prev != nullptr && f.Matches(*e.prev);
  const absl::string_view type = e.type;
  if (type == "ADDED" || (type == "MODIFIED" && now_ok)) {
    if (!now_ok) return;
    SendLine(w,
             {{"type", was_ok ? "MODIFIED" : "ADDED"}, {"object", *e.object}});
  } else if (type == "MODIFIED" && was_ok) {
    // It stopped matching: to this watch it is gone (the real server sends
    // the previous state with the event's version).
    json gone = *e.prev;
    gone["metadata"]["resourceVersion"] = std::to_string(e.rv);
    SendLine(w, {{"type", kDeleted}, {"object", std::move(gone)}});
  } else if (deleted && was_ok) {
    SendLine(w, {{"type", kDeleted}, {"object", *e.object}});
  }
}

void Store::SendLine(Watcher& w, const json& event) {
  if (event["type"] == "BOOKMARK") {
    ++bookmarks_sent_;
  } else {
    ++events_sent_;
  }
  w.out->SendChunk(event.dump() + "\n");
}

json Store::Bookmark(Kind kind, bool initial_end) const {
  // The real server's bookmark is an empty object of the kind with only
  // its resourceVersion set (and the initial-events-end annotation after
  // sendInitialEvents).
  json meta = {{"resourceVersion", std::to_string(rv_)},
               {"creationTimestamp", nullptr}};
  if (initial_end) {
    meta["annotations"] = {{"k8s.io/initial-events-end", "true"}};
  }
  json object = {{"kind", KindName(kind)},
                 {"apiVersion", "v1"},
                 {"metadata", std::move(meta)},
                 {"spec", kind == Kind::kPod ? json{{"containers", nullptr}}
                                             : json::object()},
                 {"status", json::object()}};
  return {{"type", "BOOKMARK"}, {"object", std::move(object)}};
}

json Store::Expired(int64_t requested) const {
  return {{"type", "ERROR"},
          {"object", StatusReply(410, "Expired",
                                 absl::StrCat("too old resource version: ",
                                              requested, " (", floor_, ")"))
                         .body}};
}

std::optional<Reply> Store::Watch(WatchRequest req,
                                  std::shared_ptr<net::Responder> out) {
  int64_t from = -1;  // -1: the current state first
  if (!req.send_initial_events && !req.resource_version.empty() &&
      req.resource_version != "0") {
    if (!absl::SimpleAtoi(req.resource_version, &from) || from < 0) {
      return BadRequest(absl::StrCat("invalid resource version: \"",
                                     req.resource_version, "\""));
    }
  }
  absl::MutexLock l(&mu_);
  if (closed_) {
    return StatusReply(503, "ServiceUnavailable",
                       "the server is shutting down");
  }
  net::HttpResponse head{net::http::status::ok, 11};
  head.set(net::http::field::content_type, "application/json");
  head.set(net::http::field::cache_control, "no-cache, private");
  out->StartStream(std::move(head));
  const SteadyTime now = std::chrono::steady_clock::now();
  Watcher w{req, out, now + req.timeout, now + options_.bookmark_every, rv_};
  if (from < 0) {
    for (const auto& [key, obj] : objects_[static_cast<int>(req.kind)]) {
      if (req.filter.Matches(*obj)) {
        SendLine(w, {{"type", "ADDED"}, {"object", *obj}});
      }
    }
    if (req.send_initial_events) SendLine(w, Bookmark(req.kind, true));
  } else if (from < floor_) {
    SendLine(w, Expired(from));
    out->EndStream();
    return std::nullopt;
  } else {
    for (const Event& e : history_) {
      if (e.rv > from && e.kind == req.kind) Send(w, e);
    }
  }
  watchers_.emplace(next_watcher_++, std::move(w));
  return std::nullopt;
}

SteadyTime Store::TickWatches(SteadyTime now) {
  SteadyTime next = now + std::chrono::seconds(1);
  absl::MutexLock l(&mu_);
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    Watcher& w = it->second;
    if (w.out->client_gone()) {
      it = watchers_.erase(it);
      continue;
    }
    if (now >= w.deadline) {  // timeoutSeconds: a clean end
      w.out->EndStream();
      it = watchers_.erase(it);
      continue;
    }
    if (w.req.bookmarks) {
      if (now >= w.next_bookmark) {
        SendLine(w, Bookmark(w.req.kind, false));
        w.next_bookmark = now + options_.bookmark_every;
      }
      next = std::min(next, w.next_bookmark);
    }
    next = std::min(next, w.deadline);
    ++it;
  }
  return next;
}

void Store::CloseWatches() {
  absl::MutexLock l(&mu_);
  closed_ = true;
  for (auto& [id, w] : watchers_) w.out->EndStream();
  watchers_.clear();
}

void Store::ExpireWatches() {
  absl::MutexLock l(&mu_);
  history_.clear();
  floor_ = rv_;
  token_floor_ = rv_ + 1;
  for (auto& [id, w] : watchers_) {
    SendLine(w, Expired(w.last_rv));
    w.out->EndStream();
  }
  watchers_.clear();
}

int64_t Store::watch_events_sent() const {
  absl::MutexLock l(&mu_);
  return events_sent_;
}

int64_t Store::watch_bookmarks_sent() const {
  absl::MutexLock l(&mu_);
  return bookmarks_sent_;
}

int Store::open_watches() const {
  absl::MutexLock l(&mu_);
  return static_cast<int>(watchers_.size());
}

Store::Objects Store::StateAt(Kind kind, int64_t rv) const {
  Objects state = objects_[static_cast<int>(kind)];
  for (auto it = history_.rbegin(); it != history_.rend() && it->rv > rv;
       ++it) {
    if (it->kind != kind) continue;
    const json& meta = (*it->object)["metadata"];
    const std::string name = meta.value("name", "");
    const std::string key =
        kind == Kind::kNode ? name : PodKey(meta.value("namespace", ""), name);
    if (absl::string_view(it->type) == "ADDED") {
      state.erase(key);
    } else {
      state[key] = it->prev;
    }
  }
  return state;
}

size_t Store::object_count() const {
  size_t n = 0;
  for (const Objects& o : objects_) n += o.size();
  return n;
}

Reply Store::List(Kind kind, const Filter& filter, const Query& query) {
  auto get = [&](const char* k) {
    auto it = query.find(k);
    return it == query.end() ? std::string() : it->second;
  };
  int64_t limit = 0;
  if (!get("limit").empty() &&
      (!absl::SimpleAtoi(get("limit"), &limit) || limit < 0)) {
    return BadRequest(absl::StrCat("invalid limit: \"", get("limit"), "\""));
  }
  const std::string cont = get("continue");
  const std::string version = get("resourceVersion");
  const std::string match = get("resourceVersionMatch");
  absl::MutexLock l(&mu_);
  int64_t at = rv_;
  std::string start;
  if (!cont.empty()) {
    std::string raw;
    json token;
    if (absl::WebSafeBase64Unescape(cont, &raw)) {
      token = json::parse(raw, nullptr, /*allow_exceptions=*/false);
    }
    if (!token.is_object() || token.value("v", "") != "meta.k8s.io/v1" ||
        !token.value("rv", json()).is_number_integer() ||
        !token.value("start", json()).is_string()) {
      return BadRequest(
          "continue key is not valid: incorrect encoded start "
          "resourceVersion (version meta.k8s.io/v1)");
    }
    at = token["rv"].get<int64_t>();
    start = token["start"].get<std::string>();
    if (at < floor_ || at < token_floor_) {
      return StatusReply(
          410, "Expired",
          "The provided continue parameter is too old to display a "
          "consistent list result. You can start a new list without the "
          "continue parameter.");
    }
  } else if (!version.empty() && version != "0") {
    int64_t n = 0;
    if (!absl::SimpleAtoi(version, &n) || n < 0) {
      return BadRequest(
          absl::StrCat("invalid resource version: \"", version, "\""));
    }
    if (n > rv_) {
      return StatusReply(
          504, "Timeout",
          absl::StrCat("Too large resource version: ", n, ", current: ", rv_),
          {{"causes",
            {{{"reason", "ResourceVersionTooLarge"},
              {"message", "Too large resource version"}}}},
           {"retryAfterSeconds", 1}});
    }
    if (match == "Exact") {
      if (n < floor_) {
        return StatusReply(
            410, "Expired",
            absl::StrCat("too old resource version: ", n, " (", floor_, ")"));
      }
      at = n;
    } else if (!match.empty() && match != "NotOlderThan") {
      return InvalidReply(
          "ListOptions", "",
          {{{"reason", "FieldValueNotSupported"},
            {"field", "resourceVersionMatch"},
            {"message", absl::StrCat("Unsupported value: \"", match, "\"")}}});
    }
  }
  Objects past;
  const Objects* objs = &objects_[static_cast<int>(kind)];
  if (at != rv_) {
    past = StateAt(kind, at);
    objs = &past;
  }
  json items = json::array();
  std::string last;
  bool more = false;
  int64_t remaining = 0;
  const bool counted = filter.labels.empty() && filter.fields.empty();
  for (auto it = objs->lower_bound(start); it != objs->end(); ++it) {
    if (!filter.Matches(*it->second)) continue;
    if (limit > 0 && static_cast<int64_t>(items.size()) == limit) {
      more = true;
      ++remaining;
      if (!counted) break;
      continue;
    }
    // As from the real server: list items carry no kind or apiVersion
    // (kubernetes/kubernetes#3030); the list does.
    json item = *it->second;
    item.erase("kind");
    item.erase("apiVersion");
    items.push_back(std::move(item));
    last = it->first;
  }
  json meta = {{"resourceVersion", std::to_string(at)}};
  if (more) {
    const json token = {{"v", "meta.k8s.io/v1"},
                        {"rv", at},
                        {"start", last + std::string(1, '\0')}};
    meta["continue"] = absl::WebSafeBase64Escape(token.dump());
    if (counted) meta["remainingItemCount"] = remaining;
  }
  return OkReply(200, {{"kind", absl::StrCat(KindName(kind), "List")},
                       {"apiVersion", "v1"},
                       {"metadata", std::move(meta)},
                       {"items", std::move(items)}});
}

Reply Store::GetNode(const std::string& name) {
  absl::MutexLock l(&mu_);
  auto it = objects_[1].find(name);
  if (it == objects_[1].end()) return NotFound(Kind::kNode, name);
  return OkReply(200, *it->second);
}

Reply Store::GetPod(const std::string& ns, const std::string& name) {
  absl::MutexLock l(&mu_);
  auto it = objects_[0].find(PodKey(ns, name));
  if (it == objects_[0].end()) return NotFound(Kind::kPod, name);
  return OkReply(200, *it->second);
}

void Store::RemovePodLocked(const std::string& key) {
  auto it = objects_[0].find(key);
  if (it == objects_[0].end()) return;
  json last = *it->second;
  Commit(Kind::kPod, key, std::move(last), kDeleted);
}

Reply Store::ModifyNode(const std::string& name,
                        const std::function<void(json&)>& fn) {
  auto it = objects_[1].find(name);
  if (it == objects_[1].end()) return NotFound(Kind::kNode, name);
  json node = *it->second;
  fn(node);
  if (node != *it->second)
    Commit(Kind::kNode, name, std::move(node), "MODIFIED");
  return OkReply(200, *objects_[1][name]);
}

void Store::ReconcileNodeTaints(json& node) {
  // The node lifecycle controller's taints (TaintNodesByCondition and
  // taint-based eviction): not-ready / unreachable while Ready is False /
  // Unknown, unschedulable while spec.unschedulable.
  const std::string ready = NodeReadyStatus(node);
  const bool unschedulable = node["spec"].value("unschedulable", false);
  const std::vector<std::pair<std::string, std::string>> managed = {
      {"node.kubernetes.io/not-ready", "NoSchedule"},
      {"node.kubernetes.io/not-ready", "NoExecute"},
      {"node.kubernetes.io/unreachable", "NoSchedule"},
      {"node.kubernetes.io/unreachable", "NoExecute"},
      {"node.kubernetes.io/unschedulable", "NoSchedule"}};
  auto wanted = [&](const std::string& key) {
    if (key == "node.kubernetes.io/not-ready") return ready == "False";
    if (key == "node.kubernetes.io/unreachable") return ready == "Unknown";
    return unschedulable;
  };
  json taints = node["spec"].value("taints", json::array());
  if (!taints.is_array()) taints = json::array();
  json out = json::array();
  for (const json& t : taints) {
    const std::string key = t.is_object() ? t.value("key", "") : "";
    const bool is_managed =
        std::any_of(managed.begin(), managed.end(),
                    [&](const auto& m) { return m.first == key; });
    if (!is_managed || wanted(key)) out.push_back(t);
  }
  for (const auto& m : managed) {
    const std::string& key = m.first;
    const std::string& effect = m.second;
    if (!wanted(key)) continue;
    const bool has = std::any_of(out.begin(), out.end(), [&](const json& t) {
      return t.value("key", "") == key && t.value("effect", "") == effect;
    });
    if (!has) {
      json t = {{"key", key}, {"effect", effect}};
      if (effect == "NoExecute") t["timeAdded"] = NowRfc3339();
      out.push_back(std::move(t));
    }
  }
  if (out.empty()) {
    node["spec"].erase("taints");
  } else {
    node["spec"]["taints"] = std::move(out);
  }
}

Reply Store::SetNodeReady(const std::string& name, const std::string& status) {
  if (status != "True" && status != "False" && status != "Unknown") {
    return BadRequest("status: want True, False or Unknown");
  }
  absl::MutexLock l(&mu_);
  auto it = objects_[1].find(name);
  if (it == objects_[1].end()) return NotFound(Kind::kNode, name);
  const bool was_ready = NodeReadyStatus(*it->second) != "False" &&
                         NodeReadyStatus(*it->second) != "Unknown";
  Reply r = ModifyNode(name, [&](json& node) {
    json& conds = node["status"]["conditions"];
    if (!conds.is_array()) conds = json::array();
    json* c = nullptr;
    for (json& x : conds) {
      if (x.value("type", "") == "Ready") c = &x;
    }
    if (c == nullptr) {
      conds.push_back({{"type", "Ready"}});
      c = &conds.back();
    }
    const std::string now = NowRfc3339();
    if (c->value("status", "") != status) (*c)["lastTransitionTime"] = now;
    (*c)["status"] = status;
    (*c)["lastHeartbeatTime"] = now;
    if (status == "True") {
      (*c)["reason"] = "KubeletReady";
      (*c)["message"] = "kubelet is posting ready status";
    } else if (status == "False") {
      (*c)["reason"] = "KubeletNotReady";
      (*c)["message"] = "kubelet is not ready (set by the test)";
    } else {
      (*c)["reason"] = "NodeStatusUnknown";
      (*c)["message"] = "Kubelet stopped posting node status.";
    }
    ReconcileNodeTaints(node);
  });
  if (was_ready && status != "True") {
    // The node lifecycle controller marks the node's pods not ready.
    std::vector<std::string> keys;
    for (const auto& [key, pod] : objects_[0]) {
      if ((*pod)["spec"].value("nodeName", "") == name) keys.push_back(key);
    }
    for (const std::string& key : keys) {
      json pod = *objects_[0][key];
      bool had = false;
      for (const json& c : pod["status"].value("conditions", json::array())) {
        if (c.value("type", "") == "Ready")
          had = c.value("status", "") == "True";
      }
      if (!had) continue;
      SetCondition(pod["status"], "Ready", "False");
      Commit(Kind::kPod, key, std::move(pod), "MODIFIED");
    }
  }
  return r;
}

Reply Store::SetNodeTaints(const std::string& name, const json& taints) {
  if (!taints.is_array()) return BadRequest("taints: want a JSON array");
  for (const json& t : taints) {
    if (!t.is_object() || t.value("key", "").empty() ||
        t.value("effect", "").empty()) {
      return BadRequest("taints: each needs a key and an effect");
    }
  }
  absl::MutexLock l(&mu_);
  return ModifyNode(name, [&](json& node) {
    if (taints.empty()) {
      node["spec"].erase("taints");
    } else {
      node["spec"]["taints"] = taints;
    }
  });
}

Reply Store::SetNodeUnschedulable(const std::string& name, bool value) {
  absl::MutexLock l(&mu_);
  return ModifyNode(name, [&](json& node) {
    if (value) {
      node["spec"]["unschedulable"] = true;
    } else {
      node["spec"].erase("unschedulable");
    }
    ReconcileNodeTaints(node);
  });
}

std::vector<PodBrief> Store::PodBriefs() const {
  absl::MutexLock l(&mu_);
  std::vector<PodBrief> out;
  out.reserve(objects_[0].size());
  for (const auto& [key, pod] : objects_[0]) {
    const json& meta = (*pod)["metadata"];
    PodBrief b;
    b.uid = meta.value("uid", "");
    b.ns = meta.value("namespace", "");
    b.name = meta.value("name", "");
    b.node = (*pod)["spec"].value("nodeName", "");
    b.phase = (*pod)["status"].value("phase", "");
    b.deleting = meta.contains("deletionTimestamp");
    b.grace_seconds = meta.value("deletionGracePeriodSeconds", int64_t{0});
    out.push_back(std::move(b));
  }
  return out;
}

std::optional<json> Store::PodByUid(const std::string& uid) const {
  absl::MutexLock l(&mu_);
  auto it = pod_key_by_uid_.find(uid);
  if (it == pod_key_by_uid_.end()) return std::nullopt;
  return *objects_[0].at(it->second);
}

std::optional<json> Store::NodeByName(const std::string& name) const {
  absl::MutexLock l(&mu_);
  auto it = objects_[1].find(name);
  if (it == objects_[1].end()) return std::nullopt;
  return *it->second;
}

int Store::NodeIndex(const std::string& name) const {
  absl::MutexLock l(&mu_);
  auto it = std::find(node_order_.begin(), node_order_.end(), name);
  return it == node_order_.end() ? -1
                                 : static_cast<int>(it - node_order_.begin());
}

std::map<std::string, std::string> Store::NodeReadiness() const {
  absl::MutexLock l(&mu_);
  std::map<std::string, std::string> out;
  for (const auto& [name, node] : objects_[1])
    out[name] = NodeReadyStatus(*node);
  return out;
}

bool Store::UpdatePod(const std::string& uid,
                      const std::function<void(json&)>& fn) {
  absl::MutexLock l(&mu_);
  auto it = pod_key_by_uid_.find(uid);
  if (it == pod_key_by_uid_.end()) return false;
  const std::string key = it->second;
  json pod = *objects_[0][key];
  fn(pod);
  if (pod != *objects_[0][key])
    Commit(Kind::kPod, key, std::move(pod), "MODIFIED");
  return true;
}

void Store::RemovePod(const std::string& uid) {
  absl::MutexLock l(&mu_);
  auto it = pod_key_by_uid_.find(uid);
  if (it == pod_key_by_uid_.end()) return;
  RemovePodLocked(it->second);
}

}  // namespace gpusched::kubetest
