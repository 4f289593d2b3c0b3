// Capacity on demand in the stand-in API server (apiserver.h): the Store's
// PodTemplates, ProvisioningRequests, pods/status and node additions, and
// the minimal cluster autoscaler of the drills.
#include <algorithm>
#include <ctime>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/kube/apiserver.h"

namespace gpusched::kubetest {
namespace {

constexpr char kScaleDownTaint[] = "ToBeDeletedByClusterAutoscaler";
constexpr char kConsume[] = "autoscaling.x-k8s.io/consume-provisioning-request";
constexpr char kAtomic[] = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";
constexpr size_t kMaxNotes = 200;

bool IsDnsSubdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && c != '-' && c != '.') return false;
    if ((i == 0 || i + 1 == s.size()) && !alnum) return false;
  }
  return true;
}

json Cause(const std::string& reason, const std::string& field,
           const std::string& message) {
  return {{"reason", reason}, {"field", field}, {"message", message}};
}

// What the real server requires of a ProvisioningRequest (its CRD's
// required fields and bounds) and of a PodTemplate (a template with
// containers); the schemas are checked again by the test (validate.mjs).
std::vector<json> ValidateObject(Kind kind, const json& o) {
  std::vector<json> causes;
  const std::string name = o["metadata"].value("name", "");
  if (!IsDnsSubdomain(name)) {
    causes.push_back(Cause("FieldValueInvalid", "metadata.name",
                           "a lowercase RFC 1123 subdomain is required"));
  }
  if (kind == Kind::kPodTemplate) {
    const json t = o.value("template", json::object());
    const json containers =
        t.is_object()
            ? t.value("spec", json::object()).value("containers", json())
            : json();
    if (!containers.is_array() || containers.empty()) {
      causes.push_back(Cause("FieldValueRequired", "template.spec.containers",
                             "Required value"));
    }
    return causes;
  }
  const json spec = o.value("spec", json());
  if (!spec.is_object()) {
    causes.push_back(Cause("FieldValueRequired", "spec", "Required value"));
    return causes;
  }
  if (!spec.value("provisioningClassName", json()).is_string()) {
    causes.push_back(Cause("FieldValueRequired", "spec.provisioningClassName",
                           "Required value"));
  }
  const json sets = spec.value("podSets", json());
  if (!sets.is_array() || sets.empty() || sets.size() > 32) {
    causes.push_back(Cause("FieldValueInvalid", "spec.podSets",
                           "1 to 32 podSets are required"));
    return causes;
  }
  for (size_t i = 0; i < sets.size(); ++i) {
    const json& s = sets[i];
    const std::string at = absl::StrCat("spec.podSets[", i, "]");
    if (!s.is_object() || !s.value("count", json()).is_number_integer() ||
        s["count"].get<int64_t>() < 1) {
      causes.push_back(Cause("FieldValueInvalid", at + ".count",
                             "should be greater than or equal to 1"));
    }
    if (!s.is_object() || !s.value("podTemplateRef", json::object())
                               .value("name", json())
                               .is_string()) {
      causes.push_back(Cause("FieldValueRequired", at + ".podTemplateRef.name",
                             "Required value"));
    }
  }
  return causes;
}

// A Pod's GPUs: the sum over its containers of nvidia.com/gpu (limits,
// else requests).
int64_t PodGpus(const json& pod_spec) {
  int64_t total = 0;
  for (const json& c : pod_spec.value("containers", json::array())) {
    const json res = c.value("resources", json::object());
    for (const char* which : {"limits", "requests"}) {
      const json m = res.value(which, json::object());
      if (m.is_object() && m.contains("nvidia.com/gpu")) {
        total += ParseQuantityMilli(m["nvidia.com/gpu"]).value_or(0) / 1000;
        break;
      }
    }
  }
  return total;
}

// Whether a Pod with `pod_spec` may run on a node of `pool`: its
// nodeSelector is among the pool's labels, its GPUs fit one node, and it
// tolerates the pool's NoSchedule and NoExecute taints.
bool Fits(const json& pod_spec, const AutoscalerPool& pool) {
  const json selector = pod_spec.value("nodeSelector", json::object());
  if (selector.is_object()) {
    for (const auto& [k, v] : selector.items()) {
      if (!pool.labels.contains(k) || pool.labels[k] != v) return false;
    }
  }
  if (PodGpus(pod_spec) > pool.gpus_per_node) return false;
  const json tolerations = pod_spec.value("tolerations", json::array());
  for (const json& t : pool.taints) {
    const std::string key = t.value("key", "");
    bool ok = false;
    for (const json& tol : tolerations) {
      if (!tol.is_object()) continue;
      const std::string op = tol.value("operator", "Equal");
      const std::string tkey = tol.value("key", "");
      ok = ok || (op == "Exists" && (tkey.empty() || tkey == key)) ||
           (op == "Equal" && tkey == key &&
            tol.value("value", "") == t.value("value", ""));
    }
    if (!ok) return false;
  }
  return true;
}

bool Unschedulable(const json& pod) {
  if (!pod["spec"].value("nodeName", "").empty()) return false;
  if (pod["metadata"].contains("deletionTimestamp")) return false;
  for (const json& c :
       pod.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == "PodScheduled") {
      return c.value("status", "") == "False" &&
             c.value("reason", "") == "Unschedulable";
    }
  }
  return false;
}

bool Matches(const json& node, const AutoscalerPool& pool) {
  const json labels = node["metadata"].value("labels", json::object());
  for (const auto& [k, v] : pool.labels.items()) {
    if (!labels.contains(k) || labels[k] != v) return false;
  }
  return true;
}

bool HasTaint(const json& node, const std::string& key) {
  for (const json& t : node["spec"].value("taints", json::array())) {
    if (t.value("key", "") == key) return true;
  }
  return false;
}

void SetObjectCondition(json& object, const std::string& type,
                        const std::string& status, const std::string& reason,
                        const std::string& message) {
  if (!object.contains("status") || !object["status"].is_object()) {
    object["status"] = json::object();
  }
  SetCondition(object["status"], type, status, reason, message);
  // metav1.Condition has no lastProbeTime (core/v1's conditions have).
  for (json& c : object["status"]["conditions"]) c.erase("lastProbeTime");
}

}  // namespace

// ---- Store ----

Reply Store::PatchPodStatus(const std::string& ns, const std::string& name,
                            const std::string& type, const json& patch) {
  const bool strategic =
      type.starts_with("application/strategic-merge-patch+json");
  const bool merge = type.starts_with("application/merge-patch+json");
  if (!strategic && !merge) {
    return StatusReply(415, "UnsupportedMediaType",
                       absl::StrCat("the body of the request was in an "
                                    "unknown format - accepted media types "
                                    "include: application/merge-patch+json, "
                                    "application/strategic-merge-patch+json "
                                    "(got \"",
                                    type, "\")"));
  }
  if (!patch.is_object() ||
      (patch.contains("status") && !patch["status"].is_object())) {
    return BadRequest("pods/status: the patch is not an object with a status");
  }
  absl::MutexLock l(&mu_);
  const std::string key = PodKey(ns, name);
  auto it = objects_[0].find(key);
  if (it == objects_[0].end()) return NotFound(Kind::kPod, name);
  json pod = *it->second;
  const json status = patch.value("status", json::object());
  for (const auto& [k, v] : status.items()) {
    if (k == "conditions" && strategic && v.is_array()) {
      // Merged by type (the patch merge key).
      for (const json& c : v) {
        if (!c.is_object() || !c.value("type", json()).is_string()) {
          return InvalidReply(
              "Pod", name,
              {Cause("FieldValueRequired", "status.conditions.type",
                     "Required value")});
        }
        json& conds = pod["status"]["conditions"];
        if (!conds.is_array()) conds = json::array();
        auto same = std::find_if(
            conds.begin(), conds.end(),
            [&](const json& x) { return x.value("type", "") == c["type"]; });
        if (same != conds.end()) {
          same->merge_patch(c);
        } else {
          conds.push_back(c);
        }
      }
    } else if (v.is_null()) {
      pod["status"].erase(k);
    } else {
      pod["status"][k] = v;
    }
  }
  if (pod != *it->second) Commit(Kind::kPod, key, std::move(pod), "MODIFIED");
  return OkReply(200, *objects_[0][key]);
}

Reply Store::CreateObject(Kind kind, const std::string& ns, const json& body) {
  const std::string want_version =
      kind == Kind::kPodTemplate ? "v1" : "autoscaling.x-k8s.io/v1";
  if (!body.is_object() || body.value("kind", "") != KindName(kind) ||
      body.value("apiVersion", "") != want_version) {
    return BadRequest(absl::StrCat("the object provided is unrecognized (must ",
                                   "be of type ", KindName(kind), ", ",
                                   want_version, ")"));
  }
  json o = body;
  json& meta = o["metadata"];
  if (!meta.is_object()) meta = json::object();
  if (!meta.value("namespace", "").empty() && meta["namespace"] != ns) {
    return BadRequest(
        "the namespace of the provided object does not match the namespace "
        "sent on the request");
  }
  meta["namespace"] = ns;
  const std::string name = meta.value("name", "");
  if (std::vector<json> causes = ValidateObject(kind, o); !causes.empty()) {
    return InvalidReply(KindName(kind), name, causes);
  }
  absl::MutexLock l(&mu_);
  const std::string key = PodKey(ns, name);
  Objects& objs = objects_[static_cast<int>(kind)];
  if (objs.contains(key)) {
    return StatusReply(
        409, "AlreadyExists",
        absl::StrCat(ResourceName(kind), " \"", name, "\" already exists"),
        {{"name", name}, {"kind", ResourceName(kind)}});
  }
  if (object_count() >= options_.max_objects) {
    return StatusReply(403, "Forbidden", "exceeded quota of this stand-in");
  }
  meta["uid"] = RandomUid(rng_);
  meta["creationTimestamp"] = NowRfc3339();
  meta["generation"] = 1;
  if (kind == Kind::kProvisioningRequest) o.erase("status");  // a subresource
  Commit(kind, key, o, "ADDED");
  return OkReply(201, *objs[key]);
}

Reply Store::GetObject(Kind kind, const std::string& ns,
                       const std::string& name) {
  absl::MutexLock l(&mu_);
  const Objects& objs = objects_[static_cast<int>(kind)];
  auto it = objs.find(PodKey(ns, name));
  if (it == objs.end()) {
    return StatusReply(
        404, "NotFound",
        absl::StrCat(ResourceName(kind), " \"", name, "\" not found"),
        {{"name", name}, {"kind", ResourceName(kind)}});
  }
  return OkReply(200, *it->second);
}

Reply Store::DeleteObject(Kind kind, const std::string& ns,
                          const std::string& name) {
  absl::MutexLock l(&mu_);
  const std::string key = PodKey(ns, name);
  Objects& objs = objects_[static_cast<int>(kind)];
  auto it = objs.find(key);
  if (it == objs.end()) {
    return StatusReply(
        404, "NotFound",
        absl::StrCat(ResourceName(kind), " \"", name, "\" not found"),
        {{"name", name}, {"kind", ResourceName(kind)}});
  }
  json gone = *it->second;
  Commit(kind, key, gone, "DELETED");
  return OkReply(200, gone);
}

Reply Store::ListObjects(Kind kind, const std::string& ns) {
  absl::MutexLock l(&mu_);
  json items = json::array();
  for (const auto& [key, o] : objects_[static_cast<int>(kind)]) {
    if (ns.empty() || (*o)["metadata"].value("namespace", "") == ns) {
      items.push_back(*o);
    }
  }
  return OkReply(
      200, {{"apiVersion",
             kind == Kind::kPodTemplate ? "v1" : "autoscaling.x-k8s.io/v1"},
            {"kind", absl::StrCat(KindName(kind), "List")},
            {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
            {"items", items}});
}

std::vector<json> Store::Snapshot(Kind kind) const {
  absl::MutexLock l(&mu_);
  std::vector<json> out;
  for (const auto& [key, o] : objects_[static_cast<int>(kind)]) {
    out.push_back(*o);
  }
  return out;
}

absl::Status Store::AddNode(json node) {
  absl::MutexLock l(&mu_);
  const std::string name = node["metadata"].value("name", "");
  if (objects_[1].contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("node ", name));
  }
  if (node_order_.size() >= 254) {
    return absl::ResourceExhaustedError("at most 254 nodes");
  }
  node["kind"] = "Node";
  node["apiVersion"] = "v1";
  node["metadata"]["uid"] = RandomUid(rng_);
  node["metadata"]["creationTimestamp"] = NowRfc3339();
  node_order_.push_back(name);
  Commit(Kind::kNode, name, std::move(node), "ADDED");
  return absl::OkStatus();
}

bool Store::DeleteNode(const std::string& name) {
  absl::MutexLock l(&mu_);
  auto it = objects_[1].find(name);
  if (it == objects_[1].end()) return false;
  json gone = *it->second;
  Commit(Kind::kNode, name, std::move(gone), "DELETED");
  // Its Pod IP block stays reserved: node_order_ keeps the name.
  return true;
}

Reply Store::UpdateNode(const std::string& name,
                        const std::function<void(json&)>& fn) {
  absl::MutexLock l(&mu_);
  return ModifyNode(name, [&](json& node) {
    fn(node);
    ReconcileNodeTaints(node);
  });
}

bool Store::UpdateObject(Kind kind, const std::string& ns,
                         const std::string& name,
                         const std::function<void(json&)>& fn) {
  absl::MutexLock l(&mu_);
  const std::string key = PodKey(ns, name);
  Objects& objs = objects_[static_cast<int>(kind)];
  auto it = objs.find(key);
  if (it == objs.end()) return false;
  json o = *it->second;
  fn(o);
  if (o != *it->second) Commit(kind, key, std::move(o), "MODIFIED");
  return true;
}

// ---- Autoscaler ----

absl::StatusOr<std::vector<AutoscalerPool>> ParseAutoscalerPools(
    const json& config) {
  const json pools =
      config.is_object() ? config.value("pools", json()) : json();
  if (!pools.is_array() || pools.empty() || pools.size() > 16) {
    return absl::InvalidArgumentError(
        "autoscaler: want {\"pools\": [...]} with 1 to 16 pools");
  }
  std::vector<AutoscalerPool> out;
  for (size_t i = 0; i < pools.size(); ++i) {
    const json& p = pools[i];
    const std::string at = absl::StrCat("autoscaler: pools[", i, "]");
    if (!p.is_object())
      return absl::InvalidArgumentError(at + ": not an object");
    AutoscalerPool a;
    a.name = p.value("name", "");
    if (!IsDnsSubdomain(a.name)) {
      return absl::InvalidArgumentError(at +
                                        ".name: a DNS subdomain is needed");
    }
    a.labels = p.value("labels", json::object());
    a.taints = p.value("taints", json::array());
    if (!a.labels.is_object() || !a.taints.is_array()) {
      return absl::InvalidArgumentError(
          at + ": labels must be a map and taints a list");
    }
    a.gpu_product = p.value("gpuProduct", "");
    if (!a.gpu_product.empty())
      a.labels["nvidia.com/gpu.product"] = a.gpu_product;
    a.gpus_per_node = p.value("gpusPerNode", 0);
    a.max_nodes = p.value("maxNodes", 0);
    a.cpu = p.value("cpu", a.cpu);
    a.memory = p.value("memory", a.memory);
    const int64_t delay = p.value("provisionDelayMs", int64_t{1000});
    const int64_t down = p.value("scaleDownAfterMs", int64_t{3000});
    const int64_t del = p.value("deleteAfterMs", int64_t{1000});
    if (a.gpus_per_node < 0 || a.gpus_per_node > 64 || a.max_nodes < 0 ||
        a.max_nodes > 64 || delay < 0 || down < 0 || del < 0) {
      return absl::InvalidArgumentError(
          at + ": gpusPerNode 0..64, maxNodes 0..64 and delays >= 0");
    }
    a.provision_delay = std::chrono::milliseconds(delay);
    a.scale_down_after = std::chrono::milliseconds(down);
    a.delete_after = std::chrono::milliseconds(del);
    out.push_back(std::move(a));
  }
  return out;
}

Autoscaler::Autoscaler(Store* store, std::vector<AutoscalerPool> pools)
    : store_(store), pools_(std::move(pools)) {}

Autoscaler::~Autoscaler() { Stop(); }

void Autoscaler::Start() {
  absl::MutexLock l(&mu_);
  started_ = true;
  loop_ = std::thread([this] { Loop(); });
}

void Autoscaler::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (!started_) return;
    started_ = false;
    stop_ = true;
  }
  loop_.join();
}

void Autoscaler::Wake() {
  absl::MutexLock l(&mu_);
  wake_ = true;
}

void Autoscaler::Note(const std::string& what) {
  notes_.push_back(absl::StrCat(NowRfc3339(), " ", what));
  while (notes_.size() > kMaxNotes) notes_.pop_front();
}

json Autoscaler::Describe() const {
  absl::MutexLock l(&mu_);
  json planned = json::array();
  for (const Planned& p : planned_) {
    planned.push_back({{"node", p.node},
                       {"pool", p.pool},
                       {"provisioningRequest", p.provisioning_request}});
  }
  json added = json::object();
  for (const auto& [node, pool] : added_) added[node] = pool;
  json pools = json::array();
  for (const AutoscalerPool& p : pools_) {
    pools.push_back({{"name", p.name},
                     {"labels", p.labels},
                     {"gpusPerNode", p.gpus_per_node},
                     {"maxNodes", p.max_nodes}});
  }
  return {
      {"pools", pools},
      {"planned", planned},
      {"added", added},
      {"notes", json(std::vector<std::string>(notes_.begin(), notes_.end()))}};
}

json Autoscaler::NodeObject(const AutoscalerPool& pool, const std::string& name,
                            int index) const {
  json labels = pool.labels;
  labels["kubernetes.io/hostname"] = name;
  labels["nvidia.com/gpu.count"] = std::to_string(pool.gpus_per_node);
  json res = {{"cpu", pool.cpu},
              {"memory", pool.memory},
              {"pods", "110"},
              {"nvidia.com/gpu", std::to_string(pool.gpus_per_node)}};
  json node = {{"metadata", {{"name", name}, {"labels", labels}}},
               {"spec", json::object()},
               {"status",
                {{"capacity", res},
                 {"allocatable", res},
                 {"addresses",
                  {{{"type", "InternalIP"},
                    {"address",
                     absl::StrCat("10.9.", index / 250, ".", index % 250 + 1)}},
                   {{"type", "Hostname"}, {"address", name}}}},
                 {"conditions",
                  {{{"type", "Ready"},
                    {"status", "True"},
                    {"reason", "KubeletReady"},
                    {"message", "kubelet is posting ready status"},
                    {"lastHeartbeatTime", NowRfc3339()},
                    {"lastTransitionTime", NowRfc3339()}}}}}}};
  if (!pool.taints.empty()) node["spec"]["taints"] = pool.taints;
  return node;
}

void Autoscaler::Loop() {
  while (true) {
    const SteadyTime now = std::chrono::steady_clock::now();
    const SteadyTime next = Pass(now);
    absl::MutexLock l(&mu_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || wake_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&woken),
                         absl::FromChrono(std::clamp<SteadyTime::duration>(
                             next - now, std::chrono::milliseconds(20),
                             std::chrono::milliseconds(200))));
    if (stop_) return;
    wake_ = false;
  }
}

SteadyTime Autoscaler::Pass(SteadyTime now) {
  const std::vector<json> nodes = store_->Snapshot(Kind::kNode);
  const std::vector<json> pods = store_->Snapshot(Kind::kPod);
  const std::vector<json> requests =
      store_->Snapshot(Kind::kProvisioningRequest);
  const std::vector<json> templates = store_->Snapshot(Kind::kPodTemplate);
  SteadyTime next = now + std::chrono::milliseconds(200);
  std::vector<json> add;  // nodes to add, outside the lock
  std::vector<std::pair<std::string, std::string>> provisioned;  // ns, name
  std::vector<std::tuple<std::string, std::string, std::string>> failed;
  std::vector<std::pair<std::string, std::string>> accepted;
  std::vector<std::string> taint, untaint, remove;
  {
    absl::MutexLock l(&mu_);
    auto pool_of = [&](const std::string& name) -> const AutoscalerPool* {
      for (const AutoscalerPool& p : pools_) {
        if (p.name == name) return &p;
      }
      return nullptr;
    };
    // Each pool's nodes that are up (and not going) with their free GPUs.
    std::map<std::string, int64_t> used;  // node -> GPUs of its Pods
    std::map<std::string, int> on_node;   // node -> live Pods
    for (const json& p : pods) {
      const std::string node = p["spec"].value("nodeName", "");
      const std::string phase = p["status"].value("phase", "");
      if (node.empty() || phase == "Succeeded" || phase == "Failed") continue;
      used[node] += PodGpus(p["spec"]);
      ++on_node[node];
    }
    std::map<std::string, int> count;  // pool -> nodes up or coming
    std::map<std::string, std::vector<std::pair<std::string, int64_t>>> free;
    std::set<std::string> present;
    for (const json& n : nodes) {
      const std::string name = n["metadata"].value("name", "");
      present.insert(name);
      for (const AutoscalerPool& pool : pools_) {
        if (!Matches(n, pool)) continue;
        if (HasTaint(n, kScaleDownTaint)) break;
        ++count[pool.name];
        if (NodeReadyStatus(n) == "True") {
          free[pool.name].emplace_back(name, pool.gpus_per_node - used[name]);
        }
        break;
      }
    }
    for (const Planned& p : planned_) ++count[p.pool];
    // Pods the scheduler could not place, not consuming a request.
    std::set<std::string> pending_uids;
    std::vector<const json*> pending;
    for (const json& p : pods) {
      if (!Unschedulable(p)) continue;
      pending.push_back(&p);
      pending_uids.insert(p["metadata"].value("uid", ""));
    }
    for (auto it = planned_for_.begin(); it != planned_for_.end();) {
      it = pending_uids.contains(it->first) ? std::next(it)
                                            : planned_for_.erase(it);
    }
    for (const json* pp : pending) {
      const json& p = *pp;
      const std::string uid = p["metadata"].value("uid", "");
      const json ann = p["metadata"].value("annotations", json::object());
      if (ann.is_object() && ann.contains(kConsume)) continue;
      if (planned_for_.contains(uid)) continue;
      const int64_t gpus = PodGpus(p["spec"]);
      const AutoscalerPool* fit = nullptr;
      for (const AutoscalerPool& pool : pools_) {
        if (Fits(p["spec"], pool)) {
          fit = &pool;
          break;
        }
      }
      const std::string what =
          absl::StrCat("Pod ", p["metadata"].value("namespace", ""), "/",
                       p["metadata"].value("name", ""));
      if (fit == nullptr) continue;  // NotTriggerScaleUp: fits no pool
      // A node that is up and has room: the scheduler's to use.
      bool room = false;
      for (auto& [node, left] : free[fit->name]) {
        if (left >= gpus) {
          room = true;
          left -= gpus;
          break;
        }
      }
      if (room) continue;
      for (Planned& planned : planned_) {
        if (planned.pool == fit->name && planned.provisioning_request.empty() &&
            planned.free_gpus >= gpus) {
          planned.free_gpus -= gpus;
          planned_for_[uid] = planned.node;
          room = true;
          break;
        }
      }
      if (room) continue;
      if (count[fit->name] >= fit->max_nodes) {
        Note(absl::StrCat("NotTriggerScaleUp ", what, ": pool ", fit->name,
                          " has its ", fit->max_nodes, " nodes"));
        continue;
      }
      Planned planned{.node = absl::StrCat(fit->name, "-", next_node_++),
                      .pool = fit->name,
                      .provisioning_request = "",
                      .ready_at = now + fit->provision_delay,
                      .free_gpus = fit->gpus_per_node - gpus};
      ++count[fit->name];
      planned_for_[uid] = planned.node;
      Note(absl::StrCat("TriggeredScaleUp ", what, ": node ", planned.node,
                        " of pool ", fit->name));
      planned_.push_back(std::move(planned));
    }
    // ProvisioningRequests: all their nodes or none.
    for (const json& r : requests) {
      const std::string ns = r["metadata"].value("namespace", "");
      const std::string name = r["metadata"].value("name", "");
      const std::string key = PodKey(ns, name);
      if (requests_.contains(key)) continue;
      bool decided = false;
      for (const json& c : r.value("status", json::object())
                               .value("conditions", json::array())) {
        const std::string type = c.value("type", "");
        decided = decided || type == "Provisioned" || type == "Failed";
      }
      if (decided) continue;
      const json spec = r["spec"];
      if (spec.value("provisioningClassName", "") != kAtomic) {
        failed.emplace_back(
            ns, name,
            "this autoscaler serves class " + std::string(kAtomic) + " only");
        requests_[key] = {};
        continue;
      }
      // Nodes per pod set, all of one pool.
      std::map<std::string, int> want;  // pool -> nodes
      std::string why;
      for (const json& set : spec.value("podSets", json::array())) {
        const std::string tname =
            set.value("podTemplateRef", json::object()).value("name", "");
        const json* tmpl = nullptr;
        for (const json& t : templates) {
          if (t["metadata"].value("namespace", "") == ns &&
              t["metadata"].value("name", "") == tname) {
            tmpl = &t;
          }
        }
        if (tmpl == nullptr) {
          why = absl::StrCat("PodTemplate ", ns, "/", tname, " not found");
          break;
        }
        const json pspec = (*tmpl)
                               .value("template", json::object())
                               .value("spec", json::object());
        const AutoscalerPool* fit = nullptr;
        for (const AutoscalerPool& pool : pools_) {
          if (Fits(pspec, pool)) {
            fit = &pool;
            break;
          }
        }
        if (fit == nullptr) {
          why = absl::StrCat("the Pods of PodTemplate ", tname,
                             " fit no node group");
          break;
        }
        const int64_t gpus = std::max<int64_t>(PodGpus(pspec), 1);
        const int64_t per_node =
            std::max<int64_t>(fit->gpus_per_node / gpus, 1);
        const int64_t pods_wanted = set.value("count", 1);
        want[fit->name] +=
            static_cast<int>((pods_wanted + per_node - 1) / per_node);
      }
      for (const auto& [pool, n] : want) {
        const AutoscalerPool* p = pool_of(pool);
        if (why.empty() && count[pool] + n > p->max_nodes) {
          why = absl::StrCat("pool ", pool, " cannot grow by ", n, " nodes (",
                             count[pool], " of ", p->max_nodes, ")");
        }
      }
      if (!why.empty()) {
        failed.emplace_back(ns, name, why);
        requests_[key] = {};
        Note(absl::StrCat("ProvisioningRequest ", key, " failed: ", why));
        continue;
      }
      std::vector<std::string>& its = requests_[key];
      for (const auto& [pool, n] : want) {
        const AutoscalerPool* p = pool_of(pool);
        for (int i = 0; i < n; ++i) {
          Planned planned{.node = absl::StrCat(pool, "-", next_node_++),
                          .pool = pool,
                          .provisioning_request = key,
                          .ready_at = now + p->provision_delay,
                          .free_gpus = 0};
          ++count[pool];
          its.push_back(planned.node);
          planned_.push_back(std::move(planned));
        }
      }
      accepted.emplace_back(ns, name);
      Note(absl::StrCat("ProvisioningRequest ", key, " accepted: ", its.size(),
                        " nodes"));
    }
    // Nodes whose time has come.
    for (auto it = planned_.begin(); it != planned_.end();) {
      if (it->ready_at > now) {
        next = std::min(next, it->ready_at);
        ++it;
        continue;
      }
      const AutoscalerPool* p = pool_of(it->pool);
      add.push_back(NodeObject(*p, it->node, next_node_));
      added_[it->node] = it->pool;
      present.insert(it->node);
      Note(absl::StrCat("node ", it->node, " of pool ", it->pool, " added"));
      it = planned_.erase(it);
    }
    for (auto& [key, its] : requests_) {
      if (its.empty()) continue;
      const bool all = std::all_of(its.begin(), its.end(), [&](const auto& n) {
        return present.contains(n);
      });
      if (!all) continue;
      const size_t slash = key.find('/');
      provisioned.emplace_back(key.substr(0, slash), key.substr(slash + 1));
      its.clear();
    }
    // Scale-down of the nodes it added: empty, and needed by no pending Pod.
    for (const json& n : nodes) {
      const std::string name = n["metadata"].value("name", "");
      auto a = added_.find(name);
      if (a == added_.end()) continue;
      const AutoscalerPool* p = pool_of(a->second);
      bool needed = on_node[name] > 0;
      for (const json* pp : pending) {
        needed = needed || Fits((*pp)["spec"], *p);
      }
      const bool tainted = HasTaint(n, kScaleDownTaint);
      if (needed) {
        empty_since_.erase(name);
        // Its own taint only (a scale-down it gives up); one that someone
        // else set (a drill's) stays.
        if (tainted && on_node[name] > 0 && tainted_at_.contains(name)) {
          untaint.push_back(name);
          tainted_at_.erase(name);
        }
        continue;
      }
      auto since = empty_since_.try_emplace(name, now).first->second;
      if (!tainted) {
        if (now - since >= p->scale_down_after) {
          taint.push_back(name);
          tainted_at_[name] = now;
          Note(absl::StrCat("ScaleDown: node ", name, " empty, tainted"));
        } else {
          next = std::min(next, since + p->scale_down_after);
        }
        continue;
      }
      auto at = tainted_at_.try_emplace(name, now).first->second;
      if (now - at >= p->delete_after) {
        remove.push_back(name);
        added_.erase(a);
        empty_since_.erase(name);
        tainted_at_.erase(name);
        Note(absl::StrCat("ScaleDown: node ", name, " deleted"));
      } else {
        next = std::min(next, at + p->delete_after);
      }
    }
  }
  for (json& node : add) (void)store_->AddNode(std::move(node));
  for (const auto& [ns, name] : accepted) {
    store_->UpdateObject(Kind::kProvisioningRequest, ns, name, [](json& o) {
      SetObjectCondition(o, "Accepted", "True", "Accepted",
                         "Provisioning Request was accepted");
    });
  }
  for (const auto& [ns, name] : provisioned) {
    store_->UpdateObject(Kind::kProvisioningRequest, ns, name, [](json& o) {
      SetObjectCondition(o, "Provisioned", "True", "CapacityIsProvisioned",
                         "Capacity is found in the cluster");
    });
  }
  for (const auto& [ns, name, why] : failed) {
    store_->UpdateObject(Kind::kProvisioningRequest, ns, name, [&](json& o) {
      SetObjectCondition(o, "Failed", "True", "FailedToCreateNodes", why);
    });
  }
  const std::string stamp = std::to_string(std::time(nullptr));
  for (const std::string& name : taint) {
    store_->UpdateNode(name, [&](json& node) {
      json taints = node["spec"].value("taints", json::array());
      taints.push_back({{"key", kScaleDownTaint},
                        {"value", stamp},
                        {"effect", "NoSchedule"}});
      node["spec"]["taints"] = taints;
    });
  }
  for (const std::string& name : untaint) {
    store_->UpdateNode(name, [&](json& node) {
      json out = json::array();
      for (const json& t : node["spec"].value("taints", json::array())) {
        if (t.value("key", "") != kScaleDownTaint) out.push_back(t);
      }
      node["spec"]["taints"] = out;
      if (out.empty()) node["spec"].erase("taints");
    });
  }
  for (const std::string& name : remove) store_->DeleteNode(name);
  return next;
}

}  // namespace gpusched::kubetest
