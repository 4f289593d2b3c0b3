// KubeLauncher's capacity on demand (kube_launcher.h; docs/kubernetes.md,
// "Capacity on demand"): replicas waiting unbound on a pool, bound when the
// autoscaler's node is up; ProvisioningRequests for gangs; the pools and
// their nodes' states; the annotations that tell the autoscalers what they
// may remove.
#include <time.h>

#include <algorithm>
#include <ctime>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/kubernetes/kube_launcher.h"
#include "common/status.h"

namespace gpusched::backends {

using nlohmann::json;

namespace {

constexpr char kMergePatch[] = "application/merge-patch+json";
constexpr char kStrategicMergePatch[] =
    "application/strategic-merge-patch+json";
// The most nodes one AddNodes asks for.
constexpr int kMaxAddNodes = 1000;
// ProvisioningRequests of this run still followed.
constexpr size_t kMaxProvisioningRequests = 256;

std::string NowRfc3339() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The condition `type` of an object's status.conditions (null when absent).
const json& Condition(const json& object, const std::string& type) {
  static const json kNull;
  const json& conds = KubeField(KubeField(object, "status"), "conditions");
  if (!conds.is_array()) return kNull;
  for (const json& c : conds) {
    if (KubeStr(c, "type") == type) return c;
  }
  return kNull;
}

}  // namespace

json KubeLauncher::PoolPodObject(const ProcessSpec& spec,
                                 const std::string& pod_name,
                                 const PoolReport& pool,
                                 const std::string& request) const {
  const ProcessPlacement& p = spec.placement;
  json pod = PodObject(spec, pod_name);
  // Real requests: the autoscalers size a node from them (the kubelet's
  // accounting then counts them too). A fraction needs a GPU of the node.
  json& resources = pod["spec"]["containers"][0]["resources"];
  if (p.mig_profile.empty()) {
    const int gpus = p.fraction ? 1 : static_cast<int>(p.gpus.size());
    if (gpus > 0) {
      resources["requests"][kKubeGpuResource] = absl::StrCat(gpus);
      resources["limits"][kKubeGpuResource] = absl::StrCat(gpus);
    }
  }
  json selector = json::object();
  for (const auto& [k, v] : pool.selector) selector[k] = v;
  if (!pool.gpu_model.empty() && !selector.contains(kKubeGpuProductLabel)) {
    selector[kKubeGpuProductLabel] = pool.gpu_model;
  }
  pod["spec"]["nodeSelector"] = selector;
  pod["metadata"]["annotations"]["gpusched.io/pool"] = pool.pool;
  if (!request.empty()) {
    pod["metadata"]["annotations"][kKubeConsumeProvisioningRequest] = request;
    pod["metadata"]["annotations"][kKubeProvisioningClassAnnotation] =
        kKubeAtomicScaleUp;
  }
  return pod;
}

absl::StatusOr<KubeResponse> KubeLauncher::Patch(const std::string& path,
                                                 const json& patch,
                                                 const std::string& what) {
  ++api_requests_;
  const bool status = path.ends_with("/status");
  absl::StatusOr<KubeResponse> r = api_->Request(
      "PATCH", path, patch.dump(), status ? kStrategicMergePatch : kMergePatch);
  if (!r.ok()) return r.status();
  RETURN_IF_ERROR(KubeStatusError(*r, what));
  return r;
}

absl::StatusOr<ProcessId> KubeLauncher::StartOnPool(const ProcessSpec& spec) {
  const ProcessPlacement& p = spec.placement;
  if (!pools_known_) RefreshPools();
  auto pool =
      std::find_if(pools_.begin(), pools_.end(),
                   [&](const PoolReport& r) { return r.pool == p.pool; });
  if (pool == pools_.end()) {
    return absl::NotFoundError(absl::StrCat(
        spec.name, ": no node pool '", p.pool,
        "' (pools come from kubernetes.pools, Karpenter NodePools and the "
        "nodes' pool labels)"));
  }
  const int gpus = p.fraction ? 1 : static_cast<int>(p.gpus.size());
  if (pool->gpus_per_node > 0 && gpus > pool->gpus_per_node) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.name, ": ", gpus, " GPUs do not fit a node of pool '",
                     p.pool, "' (", pool->gpus_per_node, " per node)"));
  }
  // A ProvisioningRequest of the pool with room takes this Pod.
  std::string request;
  for (auto& [name, pr] : provisioning_) {
    if (pr.pool == p.pool && pr.consumers < pr.count) {
      request = name;
      break;
    }
  }
  const ProcessId id = next_id_++;
  const std::string pod_name = NewPodName(spec.name, id);
  const std::string ns = options_.namespace_name;
  RETURN_IF_ERROR(
      CreatePod(PoolPodObject(spec, pod_name, *pool, request), pod_name, ""));
  Pod pod{.key = absl::StrCat(ns, "/", pod_name),
          .name = spec.name,
          .deployment = p.deployment,
          .node = "",
          .gpus = p.gpus,
          .mig_starts = {}};
  std::sort(pod.gpus.begin(), pod.gpus.end());
  if (!p.mig_profile.empty()) pod.mig_starts = {p.mig_start};
  pod.pool = p.pool;
  pod.spec = spec;
  pod.provisioning_request = request;
  // What a scheduler writes of a Pod it cannot place: Cluster Autoscaler
  // and Karpenter act on PodScheduled False with reason Unschedulable.
  const json status = {
      {"status",
       {{"conditions",
         {{{"type", "PodScheduled"},
           {"status", "False"},
           {"reason", "Unschedulable"},
           {"lastTransitionTime", NowRfc3339()},
           {"message",
            absl::StrCat("0/", nodes_.size(),
                         " nodes are available: gpusched waits for a node "
                         "of pool ",
                         p.pool, " (", gpus, " ", kKubeGpuResource, ")")}}}}}}};
  absl::StatusOr<KubeResponse> r = Patch(
      absl::StrCat("/api/v1/namespaces/", ns, "/pods/", pod_name, "/status"),
      status, absl::StrCat("mark Pod ", pod_name, " Unschedulable"));
  if (!r.ok()) {
    (void)Delete(pod, 0);  // an ask nobody sees is not left behind
    return r.status();
  }
  if (!request.empty()) ++provisioning_[request].consumers;
  by_key_[pod.key] = id;
  pods_.emplace(id, std::move(pod));
  return id;
}

absl::Status KubeLauncher::Bind(ProcessId id,
                                const ProcessPlacement& placement) {
  auto it = pods_.find(id);
  if (it == pods_.end()) return absl::NotFoundError(absl::StrCat("pod ", id));
  Pod& pod = it->second;
  if (!pod.node.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Pod ", pod.key, " is bound to node ", pod.node));
  }
  if (pod.stop_requested) {
    return absl::FailedPreconditionError(
        absl::StrCat("Pod ", pod.key, " is being stopped"));
  }
  if (placement.node.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bind Pod ", pod.key, ": no node"));
  }
  std::vector<int> gpus = placement.gpus;
  std::sort(gpus.begin(), gpus.end());
  const bool same_mig =
      placement.mig_profile == pod.spec.placement.mig_profile &&
      (placement.mig_profile.empty() ||
       placement.mig_start == pod.spec.placement.mig_start);
  const size_t slash = pod.key.find('/');
  const std::string ns = pod.key.substr(0, slash);
  std::string name = pod.key.substr(slash + 1);
  if (pod.spec.argv.empty() && (gpus != pod.gpus || !same_mig)) {
    // Adopted from a previous run: its spec is not known here.
    return absl::FailedPreconditionError(
        absl::StrCat("Pod ", pod.key, " was adopted waiting for a node; it ",
                     "can be bound only to the GPUs it was created pinned to"));
  }
  if (gpus == pod.gpus && same_mig) {
    // Created pinned to these GPUs: bound as a scheduler binds.
    const json binding = {
        {"apiVersion", "v1"},
        {"kind", "Binding"},
        {"metadata", {{"name", name}, {"namespace", ns}}},
        {"target",
         {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", placement.node}}}};
    ++api_requests_;
    absl::StatusOr<KubeResponse> r = api_->Request(
        "POST",
        absl::StrCat("/api/v1/namespaces/", ns, "/pods/", name, "/binding"),
        binding.dump());
    RETURN_IF_ERROR(
        r.ok() ? KubeStatusError(*r, absl::StrCat("bind Pod ", name,
                                                  " to node ", placement.node))
               : r.status());
  } else {
    // Other GPUs than it was created pinned to: a Pod's spec cannot change,
    // so a new one is created pinned there and bound, and the ask goes.
    ProcessSpec spec = pod.spec;
    spec.placement = placement;
    spec.placement.pool.clear();
    const std::string fresh = NewPodName(spec.name, next_id_++);
    RETURN_IF_ERROR(CreatePod(PodObject(spec, fresh), fresh, placement.node));
    Pod ask;
    ask.key = pod.key;
    (void)Delete(ask, 0);
    by_key_.erase(pod.key);
    pod.key = absl::StrCat(ns, "/", fresh);
    by_key_[pod.key] = id;
    pod.gpus = gpus;
    pod.mig_starts.clear();
    if (!placement.mig_profile.empty()) pod.mig_starts = {placement.mig_start};
    name = fresh;
  }
  pod.node = placement.node;
  if (nodes_.contains(placement.node)) Report(placement.node);
  return absl::OkStatus();
}

absl::Status KubeLauncher::SetEvictable(ProcessId id, bool evictable) {
  auto it = pods_.find(id);
  if (it == pods_.end()) return absl::NotFoundError(absl::StrCat("pod ", id));
  const std::string& key = it->second.key;
  const size_t slash = key.find('/');
  // Cluster Autoscaler removes no node under a Pod without a controller
  // unless it is safe to evict; Karpenter disrupts no node under a Pod that
  // says do-not-disrupt. A serving replica says both; a drained one lets go.
  const json patch = {
      {"metadata",
       {{"annotations",
         {{kKubeSafeToEvict, evictable ? "true" : "false"},
          {kKubeDoNotDisrupt, evictable ? json(nullptr) : json("true")}}}}}};
  absl::StatusOr<KubeResponse> r =
      Patch(absl::StrCat("/api/v1/namespaces/", key.substr(0, slash), "/pods/",
                         key.substr(slash + 1)),
            patch,
            absl::StrCat("annotate Pod ", key,
                         evictable ? " evictable" : " not evictable"));
  return r.status();
}

void KubeLauncher::RefreshPools() {
  std::vector<KubeNode> nodes;
  nodes.reserve(all_nodes_.size());
  for (const auto& [name, n] : all_nodes_) nodes.push_back(n);
  std::sort(
      nodes.begin(), nodes.end(),
      [](const KubeNode& a, const KubeNode& b) { return a.name < b.name; });
  pools_ = KubePools(options_.pools, nodepools_, nodes, options_.pool_labels);
  pools_known_ = true;
  for (const KubeNode& n : nodes) {
    const std::string pool = KubePoolOfNode(n, pools_);
    if (pool.empty()) continue;
    std::string reason;
    const PoolNodeState state = KubePoolNodeState(n, &reason);
    ReportPoolNode(n.name, pool, state, reason);
  }
}

void KubeLauncher::ReportPoolNode(const std::string& node,
                                  const std::string& pool, PoolNodeState state,
                                  const std::string& reason) {
  PoolNode& known = pool_nodes_[node];
  if (!known.pool.empty() && known.pool == pool && known.state == state &&
      known.reason == reason) {
    return;
  }
  known = {.pool = pool, .state = state, .reason = reason};
  PoolNodeReport report{
      .node = node, .pool = pool, .state = state, .reason = reason};
  // What the node is, for a controller that has not seen it (an autoscaler
  // named it just now): its GPUs as KubeNodeSpecs reads them at start.
  if (auto n = all_nodes_.find(node);
      n != all_nodes_.end() && state != PoolNodeState::kPoweredDown) {
    absl::StatusOr<std::vector<inventory::NodeSpec>> spec =
        KubeNodeSpecs({n->second}, options_.product_map);
    if (spec.ok() && spec->size() == 1) {
      report.spec = std::move(spec->front());
    } else if (!spec.ok()) {
      report.reason = std::string(spec.status().message());
    }
  }
  changed_pool_nodes_.push_back(std::move(report));
}

void KubeLauncher::ReadNodePools() {
  ++api_requests_;
  absl::StatusOr<KubeResponse> r =
      api_->Request("GET", "/apis/karpenter.sh/v1/nodepools");
  if (!r.ok()) return;  // tried again at the next check
  absl::Status st = KubeStatusError(*r, "list Karpenter NodePools");
  // Tried again only while the API server is away or busy; a 404 (no
  // Karpenter) or a 403 (not granted) is an answer.
  if (absl::IsUnavailable(st) || absl::IsResourceExhausted(st)) return;
  nodepools_read_ = true;
  if (!st.ok()) return;
  const json list = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  absl::StatusOr<std::vector<PoolReport>> pools =
      ParseKarpenterNodePoolList(list);
  if (!pools.ok()) return;  // malformed: the pools come from elsewhere
  nodepools_ = *std::move(pools);
  RefreshPools();
}

std::vector<PoolReport> KubeLauncher::Pools() {
  if (!pools_known_) RefreshPools();
  return pools_;
}

std::vector<PoolNodeReport> KubeLauncher::PoolNodeReports() {
  return std::exchange(changed_pool_nodes_, {});
}

json KubeLauncher::PodTemplateObject(const PoolReport& pool,
                                     const std::string& name) const {
  // One Pod per node: the whole node's GPUs, so that the autoscaler adds
  // `count` nodes of the pool.
  ProcessSpec spec;
  spec.name = name;
  spec.argv = {"gpusched", "engine"};
  spec.placement.deployment = "capacity";
  spec.placement.pool = pool.pool;
  spec.placement.gpus.resize(std::max(pool.gpus_per_node, 1));
  for (size_t i = 0; i < spec.placement.gpus.size(); ++i) {
    spec.placement.gpus[i] = static_cast<int>(i);
  }
  spec.placement.cpu_milli = 0;
  const json pod = PoolPodObject(spec, name, pool, "");
  json labels = pod["metadata"]["labels"];
  labels.erase("gpusched.io/replica");
  labels.erase("gpusched.io/deployment");
  return {{"apiVersion", "v1"},
          {"kind", "PodTemplate"},
          {"metadata",
           {{"name", name},
            {"namespace", options_.namespace_name},
            {"labels", labels}}},
          {"template",
           {{"metadata", {{"labels", labels}}}, {"spec", pod["spec"]}}}};
}

json KubeLauncher::ProvisioningRequestObject(const std::string& name,
                                             int count) const {
  return {
      {"apiVersion", "autoscaling.x-k8s.io/v1"},
      {"kind", "ProvisioningRequest"},
      {"metadata",
       {{"name", name},
        {"namespace", options_.namespace_name},
        {"labels",
         {{kKubeManagedBy, "gpusched"},
          {kKubeInstance, DnsLabel(options_.instance, 63)}}}}},
      {"spec",
       {{"provisioningClassName", kKubeAtomicScaleUp},
        {"podSets", json::array({{{"count", count},
                                  {"podTemplateRef", {{"name", name}}}}})}}}};
}

absl::StatusOr<std::vector<std::string>> KubeLauncher::AddNodes(
    const std::string& pool_name, int count, const std::string& request) {
  if (count < 1 || count > kMaxAddNodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "add nodes: count ", count, " is not within 1..", kMaxAddNodes));
  }
  if (!pools_known_) RefreshPools();
  auto pool =
      std::find_if(pools_.begin(), pools_.end(),
                   [&](const PoolReport& r) { return r.pool == pool_name; });
  if (pool == pools_.end()) {
    return absl::NotFoundError(
        absl::StrCat("add nodes: no node pool '", pool_name, "'"));
  }
  int have = 0;
  for (const auto& [node, pn] : pool_nodes_) {
    if (pn.pool == pool_name && pn.state != PoolNodeState::kPoweringDown) {
      ++have;
    }
  }
  if (have + count > pool->max_nodes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("add nodes: pool '", pool_name, "' has ", have, " of its ",
                     pool->max_nodes, " nodes; ", count, " more do not fit"));
  }
  // One node is what one unschedulable Pod asks for: the Pod is the ask.
  if (count == 1) return std::vector<std::string>{};
  // Several at once: a ProvisioningRequest, which the autoscaler fills all
  // or nothing.
  const std::string name = DnsLabel(
      absl::StrCat(options_.instance, "-", pool_name, "-", request), 63);
  if (provisioning_.contains(name)) return std::vector<std::string>{};
  if (provisioning_.size() >= kMaxProvisioningRequests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("add nodes: ", provisioning_.size(),
                     " ProvisioningRequests are pending already"));
  }
  const std::string ns = options_.namespace_name;
  for (const auto& [path, object, kind] :
       {std::tuple{absl::StrCat("/api/v1/namespaces/", ns, "/podtemplates"),
                   PodTemplateObject(*pool, name), "PodTemplate"},
        std::tuple{absl::StrCat("/apis/autoscaling.x-k8s.io/v1/namespaces/", ns,
                                "/provisioningrequests"),
                   ProvisioningRequestObject(name, count),
                   "ProvisioningRequest"}}) {
    ++api_requests_;
    absl::StatusOr<KubeResponse> r = api_->Request("POST", path, object.dump());
    if (!r.ok()) return r.status();
    absl::Status st =
        KubeStatusError(*r, absl::StrCat("create ", kind, " ", name));
    if (!st.ok() && !absl::IsAlreadyExists(st)) return st;  // repeated: same
  }
  Provisioning& pr = provisioning_[name];
  pr.pool = pool_name;
  pr.count = count;
  // Pods of the pool already waiting consume it.
  for (auto& [id, pod] : pods_) {
    if (pr.consumers >= count) break;
    if (pod.pool != pool_name || !pod.node.empty() ||
        !pod.provisioning_request.empty() || pod.stop_requested) {
      continue;
    }
    const size_t slash = pod.key.find('/');
    const json patch = {
        {"metadata",
         {{"annotations",
           {{kKubeConsumeProvisioningRequest, name},
            {kKubeProvisioningClassAnnotation, kKubeAtomicScaleUp}}}}}};
    if (Patch(absl::StrCat("/api/v1/namespaces/", pod.key.substr(0, slash),
                           "/pods/", pod.key.substr(slash + 1)),
              patch, absl::StrCat("annotate Pod ", pod.key))
            .ok()) {
      pod.provisioning_request = name;
      ++pr.consumers;
    }
  }
  return std::vector<std::string>{};
}

void KubeLauncher::DeleteProvisioningRequest(const std::string& name) {
  const std::string ns = options_.namespace_name;
  for (const std::string& path :
       {absl::StrCat("/apis/autoscaling.x-k8s.io/v1/namespaces/", ns,
                     "/provisioningrequests/", name),
        absl::StrCat("/api/v1/namespaces/", ns, "/podtemplates/", name)}) {
    ++api_requests_;
    (void)api_->Request("DELETE", path);  // a 404 is gone already
  }
  provisioning_.erase(name);
}

Micros KubeLauncher::CheckProvisioningRequests(Micros now) {
  // Requests that are done and whose Pods are all bound or gone are
  // deleted: the autoscaler's booking is no longer needed.
  std::vector<std::string> finished;
  for (const auto& [name, pr] : provisioning_) {
    if (!pr.done) continue;
    bool waiting = false;
    for (const auto& [id, pod] : pods_) {
      waiting = waiting || (pod.provisioning_request == name &&
                            pod.node.empty() && !pod.stop_requested);
    }
    if (!waiting) finished.push_back(name);
  }
  for (const std::string& name : finished) DeleteProvisioningRequest(name);
  bool pending = !nodepools_read_ && options_.karpenter_nodepools;
  for (const auto& [name, pr] : provisioning_) pending = pending || !pr.done;
  if (!pending) return kNever;
  if (now < next_provisioning_check_) return next_provisioning_check_;
  next_provisioning_check_ = now + options_.provisioning_check;
  if (!nodepools_read_ && options_.karpenter_nodepools) ReadNodePools();
  const std::string ns = options_.namespace_name;
  for (auto& [name, pr] : provisioning_) {
    if (pr.done) continue;
    ++api_requests_;
    absl::StatusOr<KubeResponse> r = api_->Request(
        "GET", absl::StrCat("/apis/autoscaling.x-k8s.io/v1/namespaces/", ns,
                            "/provisioningrequests/", name));
    if (!r.ok() || !KubeStatusError(*r, "get ProvisioningRequest").ok()) {
      continue;
    }
    const json object =
        json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    if (KubeStr(Condition(object, "Provisioned"), "status") == "True") {
      pr.done = true;  // its nodes come through the Node watch
    } else if (const json& failed = Condition(object, "Failed");
               KubeStr(failed, "status") == "True") {
      pr.done = true;
      // No node is named: the pool could not grow.
      changed_pool_nodes_.push_back(
          {.node = "",
           .pool = pr.pool,
           .state = PoolNodeState::kFailed,
           .reason = absl::StrCat("ProvisioningRequest ", ns, "/", name,
                                  " failed: ", KubeStr(failed, "reason"), ": ",
                                  KubeStr(failed, "message"))});
    }
  }
  return next_provisioning_check_;
}

absl::Status KubeLauncher::ReleaseNode(const std::string& node) {
  std::vector<std::string> left;
  for (const auto& [id, pod] : pods_) {
    if (pod.node == node) left.push_back(pod.key);
  }
  if (!left.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("release node ", node,
                     ": Pods of gpusched's are still "
                     "there (",
                     absl::StrJoin(left, ", "), "); stop them first"));
  }
  // Nothing to send: Cluster Autoscaler removes a node that has been
  // unneeded for its scale-down-unneeded-time, Karpenter an empty node
  // after its NodePool's consolidateAfter. gpusched leaves nothing there
  // that would keep it (its Pods are gone, so are their safe-to-evict and
  // do-not-disrupt annotations), and asks for no removal of its own.
  return absl::OkStatus();
}

}  // namespace gpusched::backends
