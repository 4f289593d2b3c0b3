#include "backends/kubernetes/kube_launcher.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "inventory/mig.h"

namespace gpusched::backends {

using nlohmann::json;

namespace {

constexpr char kDeploymentLabel[] = "gpusched.io/deployment";
constexpr char kReplicaLabel[] = "gpusched.io/replica";
constexpr char kTagAnnotation[] = "gpusched.io/tag";
constexpr char kGpusAnnotation[] = "gpusched.io/gpus";
constexpr char kShareAnnotation[] = "gpusched.io/gpu-share";
// A MIG slice's instance: "<profile>@<start>".
constexpr char kMigAnnotation[] = "gpusched.io/mig";
// Why a Pod of gpusched's ended that gpusched did not delete.
constexpr char kDeletedOutside[] =
    " deleted outside gpusched (kubectl delete, an eviction or the node's "
    "removal)";

// A label value: at most 63 of [A-Za-z0-9_.-], starting and ending with a
// letter or digit.
std::string LabelValue(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (out.size() == 63) break;
    out.push_back(
        absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ? c : '-');
  }
  while (!out.empty() && !absl::ascii_isalnum(out.back())) out.pop_back();
  while (!out.empty() && !absl::ascii_isalnum(out.front())) out.erase(0, 1);
  return out;
}

std::string Annotation(const json& pod, const char* key) {
  return KubeStr(KubeField(KubeField(pod, "metadata"), "annotations"), key);
}

std::vector<int> ParseGpus(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int g = 0;
    if (absl::SimpleAtoi(part, &g) && g >= 0 && g < 1024) out.push_back(g);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// How the Pod's (first) container ended, from its status.
void Terminated(const json& pod, ExitEvent* e) {
  const json& cs = KubeField(KubeField(pod, "status"), "containerStatuses");
  if (!cs.is_array() || cs.empty()) return;
  const json& t = KubeField(KubeField(cs[0], "state"), "terminated");
  if (!t.is_object()) return;
  const int64_t code = std::clamp<int64_t>(KubeInt(t, "exitCode"), -255, 255);
  const int64_t sig = std::clamp<int64_t>(KubeInt(t, "signal"), 0, 64);
  if (sig > 0) {
    e->signaled = true;
    e->signal = static_cast<int>(sig);
  } else if (code > 128 && code < 160) {
    e->signaled = true;
    e->signal = static_cast<int>(code - 128);
  } else {
    e->exit_code = static_cast<int>(code);
  }
}

}  // namespace

std::string KubeLauncher::DnsLabel(const std::string& s, size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() == max) break;
    const char l = absl::ascii_tolower(c);
    out.push_back(absl::ascii_isalnum(l) ? l : '-');
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  while (!out.empty() && out.front() == '-') out.erase(0, 1);
  return out.empty() ? "x" : out;
}

KubeLauncher::KubeLauncher(KubeLauncherOptions options,
                           std::unique_ptr<KubeClient> api,
                           std::unique_ptr<KubeClient> pods_client,
                           std::unique_ptr<KubeClient> nodes_client,
                           std::vector<backends::KubeNode> nodes_at_start,
                           std::vector<inventory::NodeSpec> specs)
    : options_(std::move(options)),
      api_(std::move(api)),
      pods_client_(std::move(pods_client)),
      nodes_client_(std::move(nodes_client)) {
  std::random_device seed;
  static constexpr char kChars[] = "bcdfghjklmnpqrstvwxz";
  for (int i = 0; i < 4; ++i) run_.push_back(kChars[seed() % 20]);
  for (size_t i = 0; i < nodes_at_start.size(); ++i) {
    const backends::KubeNode& n = nodes_at_start[i];
    NodeInfo& info = nodes_[n.name];
    info.single_profile = backends::KubeSingleStrategyProfile(n);
    info.gpus = info.single_profile.empty() ? n.gpus : 0;
    if (i < specs.size()) info.spec = std::move(specs[i]);
  }
  KubeWatcher::Options po;
  po.path = "/api/v1/pods";
  pod_watch_ = std::make_unique<KubeWatcher>(pods_client_.get(), po);
  KubeWatcher::Options no;
  no.path = "/api/v1/nodes";
  node_watch_ = std::make_unique<KubeWatcher>(nodes_client_.get(), no);
  pod_watch_->Start();
  node_watch_->Start();
}

KubeLauncher::~KubeLauncher() {
  pod_watch_->Stop();
  node_watch_->Stop();
}

std::string KubeLauncher::MigResource(const NodeInfo& node,
                                      const std::string& profile) {
  return node.single_profile == absl::AsciiStrToLower(profile)
             ? std::string(backends::kKubeGpuResource)
             : absl::StrCat(backends::kKubeMigResourcePrefix,
                            absl::AsciiStrToLower(profile));
}

json KubeLauncher::PodObject(const ProcessSpec& spec,
                             const std::string& pod_name) const {
  const ProcessPlacement& p = spec.placement;
  const bool mig = !p.mig_profile.empty();
  json env = json::array();
  std::vector<std::pair<std::string, std::string>> vars(spec.env.begin(),
                                                        spec.env.end());
  std::sort(vars.begin(), vars.end());
  for (const auto& [k, v] : vars) {
    // The container sees only its GPUs, counted from 0.
    if (k == "CUDA_VISIBLE_DEVICES" || k == "NVIDIA_VISIBLE_DEVICES") continue;
    env.push_back({{"name", k}, {"value", v}});
  }
  // A MIG slice is the device plugin's: it sets the variable to the
  // instance it allocates. Other GPUs are pinned by index.
  if (!mig) {
    env.push_back({{"name", "NVIDIA_VISIBLE_DEVICES"},
                   {"value", p.gpus.empty() ? std::string("void")
                                            : absl::StrJoin(p.gpus, ",")}});
  }
  env.push_back({{"name", "POD_IP"},
                 {"valueFrom",
                  {{"fieldRef",
                    {{"apiVersion", "v1"}, {"fieldPath", "status.podIP"}}}}}});
  json requests = json::object();
  if (p.cpu_milli > 0) requests["cpu"] = absl::StrCat(p.cpu_milli, "m");
  requests["memory"] = absl::StrCat(
      p.memory_mib > 0 ? p.memory_mib : options_.default_memory_mib, "Mi");
  json resources = json::object();
  if (mig) {
    auto node = nodes_.find(p.node);
    const std::string name = MigResource(
        node != nodes_.end() ? node->second : NodeInfo{}, p.mig_profile);
    requests[name] = "1";
    resources["limits"] = {{name, "1"}};  // extended resources: limits
  }
  resources["requests"] = requests;
  auto image = options_.images.find(spec.engine);
  json container = {{"name", "engine"},
                    {"image", image != options_.images.end() ? image->second
                                                             : options_.image},
                    {"imagePullPolicy", options_.image_pull_policy},
                    {"command", spec.argv},
                    {"env", env},
                    {"resources", resources}};
  if (!spec.cwd.empty()) container["workingDir"] = spec.cwd;
  // The kubelet probes the engine as gpusched does, so the Pod's Ready
  // condition (and Services, and `kubectl get pods`) says what gpusched
  // routes to.
  if (spec.port > 0 && !spec.readiness_path.empty()) {
    container["readinessProbe"] = {
        {"httpGet", {{"path", spec.readiness_path}, {"port", spec.port}}},
        {"periodSeconds", 1},
        {"timeoutSeconds", 5},
        {"failureThreshold", 3}};
  }
  json tolerations = json::array();
  for (const std::string& key : options_.tolerations) {
    tolerations.push_back({{"key", key}, {"operator", "Exists"}});
  }
  json labels = {{kKubeManagedBy, "gpusched"},
                 {"app.kubernetes.io/component", "engine"},
                 {kKubeInstance, LabelValue(options_.instance)},
                 {kDeploymentLabel, LabelValue(p.deployment)},
                 {kReplicaLabel, LabelValue(spec.name)}};
  // A replica that starts or serves keeps its node: neither Cluster
  // Autoscaler nor Karpenter removes the node under it (SetEvictable lifts
  // this once it drains).
  json annotations = {{kDeploymentLabel, p.deployment},
                      {kReplicaLabel, spec.name},
                      {kTagAnnotation, spec.tag},
                      {kGpusAnnotation, absl::StrJoin(p.gpus, ",")},
                      {kKubeSafeToEvict, "false"},
                      {kKubeDoNotDisrupt, "true"}};
  if (mig) {
    annotations[kMigAnnotation] = absl::StrCat(p.mig_profile, "@", p.mig_start);
  } else if (p.fraction) {
    annotations[kShareAnnotation] = absl::StrCat(p.gpu_share);
  }
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", pod_name},
                {"namespace", options_.namespace_name},
                {"labels", labels},
                {"annotations", annotations}}},
              {"spec",
               {{"schedulerName", options_.scheduler_name},
                {"restartPolicy", "Never"},
                {"terminationGracePeriodSeconds", 30},
                {"containers", json::array({container})}}}};
  if (!tolerations.empty()) pod["spec"]["tolerations"] = tolerations;
  if (!options_.service_account.empty()) {
    pod["spec"]["serviceAccountName"] = options_.service_account;
  }
  return pod;
}

std::string KubeLauncher::NewPodName(const std::string& replica,
                                     ProcessId id) const {
  // The run's tag keeps a name from meeting a Pod a previous run left
  // (still terminating, or adopted under another replica name).
  return absl::StrCat(DnsLabel(options_.instance, 20), "-",
                      DnsLabel(replica, 32), "-", run_, id);
}

absl::Status KubeLauncher::CreatePod(const json& object,
                                     const std::string& pod_name,
                                     const std::string& node) {
  const std::string ns = options_.namespace_name;
  ++api_requests_;
  absl::StatusOr<KubeResponse> r = api_->Request(
      "POST", absl::StrCat("/api/v1/namespaces/", ns, "/pods"), object.dump());
  if (!r.ok()) return r.status();
  RETURN_IF_ERROR(KubeStatusError(*r, "create Pod " + pod_name));
  if (node.empty()) return absl::OkStatus();
  const json binding = {
      {"apiVersion", "v1"},
      {"kind", "Binding"},
      {"metadata", {{"name", pod_name}, {"namespace", ns}}},
      {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  ++api_requests_;
  r = api_->Request(
      "POST",
      absl::StrCat("/api/v1/namespaces/", ns, "/pods/", pod_name, "/binding"),
      binding.dump());
  absl::Status bound =
      r.ok() ? KubeStatusError(
                   *r, absl::StrCat("bind Pod ", pod_name, " to node ", node))
             : r.status();
  if (!bound.ok()) {
    // Not left behind unbound.
    Pod gone;
    gone.key = absl::StrCat(ns, "/", pod_name);
    (void)Delete(gone, 0);
  }
  return bound;
}

absl::StatusOr<ProcessId> KubeLauncher::Start(const ProcessSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("empty argv");
  const ProcessPlacement& p = spec.placement;
  if (p.node.empty() && p.pool.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        spec.name,
        ": on Kubernetes a replica runs on a node placement chose; "
        "this one has none (a replica without GPUs needs a node "
        "with CPU room in the inventory)"));
  }
  if (spec.engine.empty() || !options_.images.contains(spec.engine)) {
    if (options_.image.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          spec.name, ": no container image for engine template \"", spec.engine,
          "\" (set kubernetes.images.", spec.engine, " or kubernetes.image)"));
    }
  }
  if (p.node.empty()) return StartOnPool(spec);
  const ProcessId id = next_id_++;
  const std::string pod_name = NewPodName(spec.name, id);
  RETURN_IF_ERROR(CreatePod(PodObject(spec, pod_name), pod_name, p.node));
  Pod pod{.key = absl::StrCat(options_.namespace_name, "/", pod_name),
          .name = spec.name,
          .deployment = p.deployment,
          .node = p.node,
          .gpus = p.gpus,
          .mig_starts = {}};
  std::sort(pod.gpus.begin(), pod.gpus.end());
  if (!p.mig_profile.empty()) pod.mig_starts = {p.mig_start};
  by_key_[pod.key] = id;
  pods_.emplace(id, std::move(pod));
  return id;
}

absl::Status KubeLauncher::Delete(Pod& pod, Micros grace) {
  const size_t slash = pod.key.find('/');
  const std::string ns = pod.key.substr(0, slash);
  const std::string name = pod.key.substr(slash + 1);
  const int64_t seconds =
      grace <= 0 ? 0 : (grace + kMicrosPerSecond - 1) / kMicrosPerSecond;
  ++api_requests_;
  absl::StatusOr<KubeResponse> r = api_->Request(
      "DELETE", absl::StrCat("/api/v1/namespaces/", ns, "/pods/", name,
                             "?gracePeriodSeconds=", seconds));
  absl::Status st =
      r.ok() ? KubeStatusError(*r, "delete Pod " + pod.key) : r.status();
  if (absl::IsNotFound(st)) st = absl::OkStatus();  // gone already
  pod.retry_delete = !st.ok();
  pod.retry_grace = grace;
  return st;
}

absl::Status KubeLauncher::Stop(ProcessId id, Micros grace, Micros now) {
  auto it = pods_.find(id);
  if (it == pods_.end()) return absl::NotFoundError(absl::StrCat("pod ", id));
  Pod& pod = it->second;
  pod.stop_requested = true;
  if (pod.delete_sent) return absl::OkStatus();  // the earlier deadline holds
  pod.delete_sent = true;
  pod.grace_deadline = now + grace;
  (void)Delete(pod, grace);
  return absl::OkStatus();
}

absl::Status KubeLauncher::Kill(ProcessId id) {
  auto it = pods_.find(id);
  if (it == pods_.end()) return absl::NotFoundError(absl::StrCat("pod ", id));
  Pod& pod = it->second;
  pod.stop_requested = true;
  pod.delete_sent = true;
  pod.force_sent = true;
  (void)Delete(pod, 0);
  return absl::OkStatus();
}

Micros KubeLauncher::Tick(Micros now) {
  Micros next = CheckProvisioningRequests(now);
  for (auto& [id, pod] : pods_) {
    if (!pod.delete_sent || pod.force_sent) continue;
    if (now >= pod.grace_deadline) {
      // Still there after its grace (its node does not answer): removed
      // from the API server at once.
      pod.force_sent = true;
      (void)Delete(pod, 0);
    } else {
      next = std::min(next, pod.grace_deadline);
    }
  }
  return next;
}

bool KubeLauncher::IsAlive(ProcessId id) const { return pods_.contains(id); }

bool KubeLauncher::Ours(const backends::KubePod& p) const {
  return p.namespace_name == options_.namespace_name &&
         backends::KubeLabel(p, kKubeManagedBy) == "gpusched" &&
         backends::KubeLabel(p, kKubeInstance) == LabelValue(options_.instance);
}

void KubeLauncher::Exit(ProcessId id, Pod& pod, ExitEvent e) {
  e.id = id;
  e.name = pod.name;
  e.stop_requested = pod.stop_requested;
  exits_.push_back(std::move(e));
  by_key_.erase(pod.key);
  pods_.erase(id);
}

void KubeLauncher::HandlePod(const json& object) {
  absl::StatusOr<backends::KubePod> parsed = backends::ParseKubePod(object);
  if (!parsed.ok()) return;
  const backends::KubePod& p = *parsed;
  const std::string key = absl::StrCat(p.namespace_name, "/", p.name);
  if (!Ours(p)) {
    const bool holds =
        backends::KubePodHoldsResources(p) && (p.gpus > 0 || !p.mig.empty());
    auto old = foreign_.find(key);
    std::string old_node = old != foreign_.end() ? old->second.node : "";
    if (holds) {
      foreign_[key] = {.node = p.node, .gpus = p.gpus, .mig = p.mig};
    } else {
      foreign_.erase(key);
    }
    if (!old_node.empty()) RecountForeign(old_node);
    if (holds && p.node != old_node) RecountForeign(p.node);
    return;
  }
  ours_seen_[key] = p;
  auto known = by_key_.find(key);
  if (known == by_key_.end()) return;  // a leftover, or one that ended
  const ProcessId id = known->second;
  Pod& pod = pods_.at(id);
  if (p.terminating && !pod.delete_sent && !pod.deleted_outside) {
    // Someone else's delete: the Pod leaves the rotation now, as Kubernetes
    // takes a terminating Pod out of a Service's endpoints, and its exit
    // (a terminal phase or the object gone, whichever is seen first) says
    // why.
    pod.deleted_outside = true;
    if (pod.ready) {
      pod.ready = false;
      readiness_.push_back(
          {.id = id,
           .ready = false,
           .reason = absl::StrCat("Pod ", key, kDeletedOutside)});
    }
  }
  if (p.phase == "Succeeded" || p.phase == "Failed") {
    ExitEvent e;
    Terminated(object, &e);
    e.reason =
        absl::StrCat("Pod ", key, pod.deleted_outside ? kDeletedOutside : "",
                     pod.deleted_outside ? ", then " : " ", p.phase,
                     p.reason.empty() ? "" : ": ", p.reason,
                     p.node.empty() ? "" : " on node ", p.node);
    if (!pod.delete_sent) {
      // Cleaned up: a finished Pod of gpusched's is not kept.
      pod.delete_sent = true;
      (void)Delete(pod, 0);
    }
    Exit(id, pod, std::move(e));
    return;
  }
  if (p.ready != pod.ready && !pod.delete_sent && !pod.deleted_outside) {
    pod.ready = p.ready;
    readiness_.push_back(
        {.id = id,
         .ready = p.ready,
         .reason = p.ready
                       ? std::string()
                       : absl::StrCat("Pod ", key, " is not Ready",
                                      p.reason.empty() ? "" : ": ", p.reason)});
  }
  if (!pod.assigned_reported && p.phase == "Running" && !p.pod_ip.empty()) {
    pod.assigned_reported = true;
    assignments_.push_back({.id = id,
                            .node = p.node,
                            .gpus = pod.gpus,
                            .mig_starts = pod.mig_starts,
                            .address = p.pod_ip});
  }
}

void KubeLauncher::HandlePodGone(const std::string& key) {
  if (foreign_.contains(key)) {
    const std::string node = foreign_[key].node;
    foreign_.erase(key);
    RecountForeign(node);
    return;
  }
  ours_seen_.erase(key);
  auto known = by_key_.find(key);
  if (known == by_key_.end()) return;
  const ProcessId id = known->second;
  Pod& pod = pods_.at(id);
  ExitEvent e;
  e.signaled = true;
  e.signal = 15;
  e.reason = pod.stop_requested ? absl::StrCat("Pod ", key, " deleted")
                                : absl::StrCat("Pod ", key, kDeletedOutside);
  Exit(id, pod, std::move(e));
}

void KubeLauncher::RecountForeign(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  NodeInfo& info = it->second;
  int64_t n = 0;
  std::map<std::string, int64_t> mig;
  for (const auto& [key, held] : foreign_) {
    if (held.node != node) continue;
    // On a node of the single strategy, nvidia.com/gpu are its MIG devices.
    if (info.single_profile.empty()) {
      n += held.gpus;
    } else if (held.gpus > 0) {
      mig[info.single_profile] += held.gpus;
    }
    for (const auto& [profile, count] : held.mig) {
      mig[absl::AsciiStrToLower(profile)] += count;
    }
  }
  if (info.foreign == n && info.foreign_mig == mig) return;
  info.foreign = n;
  info.foreign_mig = std::move(mig);
  Report(node);
}

void KubeLauncher::HandleNode(const json& object) {
  absl::StatusOr<backends::KubeNode> parsed =
      backends::ParseKubeNode(object, options_.tolerations);
  if (!parsed.ok()) return;
  all_nodes_[parsed->name] = *parsed;
  auto it = nodes_.find(parsed->name);
  if (it == nodes_.end()) {
    // Not one placement knew at start: a node an autoscaler added to a
    // pool is followed from now on (its GPUs are its allocatable ones).
    if (KubePoolOfNode(*parsed, pools_).empty()) return;
    NodeInfo fresh;
    fresh.single_profile = backends::KubeSingleStrategyProfile(*parsed);
    fresh.gpus = fresh.single_profile.empty() ? parsed->gpus : 0;
    it = nodes_.emplace(parsed->name, std::move(fresh)).first;
  }
  NodeInfo& info = it->second;
  info.known = true;
  // A node the autoscaler is removing is left first, even where its taint
  // is tolerated.
  info.usable = parsed->usable && KubeScaleDownTaint(*parsed).empty();
  info.state = parsed->ready ? "Ready" : "NotReady";
  if (parsed->unschedulable)
    absl::StrAppend(&info.state, ",SchedulingDisabled");
  info.reason = absl::StrJoin(parsed->problems, "; ");
  Report(parsed->name);
}

void KubeLauncher::Report(const std::string& node) {
  const NodeInfo& info = nodes_.at(node);
  NodeReport r;
  r.node = node;
  r.usable = info.usable;
  r.state = info.known ? info.state : "unknown";
  r.reason = info.reason;
  // The device plugin gives other Pods a count, not indexes: the highest
  // indexes that gpusched's own Pods do not hold stand for them.
  if (info.foreign > 0) {
    std::vector<bool> ours(std::max(info.gpus, 0), false);
    for (const auto& [id, pod] : pods_) {
      if (pod.node != node) continue;
      for (int g : pod.gpus) {
        if (g >= 0 && g < info.gpus) ours[g] = true;
      }
    }
    for (int g = info.gpus - 1;
         g >= 0 && static_cast<int64_t>(r.foreign_gpus.size()) < info.foreign;
         --g) {
      if (!ours[g]) r.foreign_gpus.push_back(g);
    }
    std::sort(r.foreign_gpus.begin(), r.foreign_gpus.end());
  }
  // MIG devices too come as counts per profile: the last instances of the
  // profile that gpusched's own Pods do not hold stand for them.
  for (const auto& [profile, count] : info.foreign_mig) {
    const std::vector<std::pair<int, int>> slices =
        inventory::StaticMigSlices(info.spec, profile);
    int64_t left = count;
    for (auto s = slices.rbegin(); s != slices.rend() && left > 0; ++s) {
      bool held = false;
      for (const auto& [id, pod] : pods_) {
        if (pod.node != node || pod.mig_starts.empty()) continue;
        held =
            held || (pod.gpus[0] == s->first && pod.mig_starts[0] == s->second);
      }
      if (held) continue;
      r.foreign_mig.push_back(*s);
      --left;
    }
  }
  std::sort(r.foreign_mig.begin(), r.foreign_mig.end());
  auto old = node_reports_.find(node);
  if (old != node_reports_.end() && old->second.usable == r.usable &&
      old->second.state == r.state && old->second.reason == r.reason &&
      old->second.foreign_gpus == r.foreign_gpus &&
      old->second.foreign_mig == r.foreign_mig) {
    return;
  }
  node_reports_[node] = r;
  changed_nodes_.push_back(std::move(r));
}

void KubeLauncher::Sync() {
  if (!first_sync_done_) {
    // What the cluster holds (other users' GPUs, node states) is known before
    // the first placement; bounded, and later Syncs never wait.
    first_sync_done_ = true;
    (void)node_watch_->WaitSynced(options_.sync_timeout);
    (void)pod_watch_->WaitSynced(options_.sync_timeout);
  }
  KubeWatcher::Changes nodes = node_watch_->Take();
  if (!first_nodepools_try_ && options_.karpenter_nodepools) {
    first_nodepools_try_ = true;  // then every provisioning_check (Tick)
    ReadNodePools();
  }
  if (!pools_known_ || !nodes.upserted.empty() || !nodes.deleted.empty()) {
    // Pools first from what was known, so that a node of a pool is
    // followed; then again with the nodes' own labels.
    for (const json& n : nodes.upserted) {
      absl::StatusOr<backends::KubeNode> parsed =
          backends::ParseKubeNode(n, options_.tolerations);
      if (parsed.ok()) all_nodes_[parsed->name] = *std::move(parsed);
    }
    for (const std::string& key : nodes.deleted) all_nodes_.erase(key);
    RefreshPools();
  }
  for (const json& n : nodes.upserted) HandleNode(n);
  for (const std::string& key : nodes.deleted) {
    if (auto pn = pool_nodes_.find(key); pn != pool_nodes_.end()) {
      ReportPoolNode(key, pn->second.pool, PoolNodeState::kPoweredDown,
                     "the Node object was deleted (the autoscaler removed "
                     "it)");
      pool_nodes_.erase(pn);
    }
    auto it = nodes_.find(key);
    if (it == nodes_.end()) continue;
    it->second.known = true;
    it->second.usable = false;
    it->second.state = "deleted";
    it->second.reason = "the Node object was deleted";
    Report(key);
  }
  KubeWatcher::Changes pods = pod_watch_->Take();
  for (const json& p : pods.upserted) HandlePod(p);
  for (const std::string& key : pods.deleted) HandlePodGone(key);
  // Deletes that failed (the API server did not answer) are sent again.
  for (auto& [id, pod] : pods_) {
    if (pod.retry_delete) (void)Delete(pod, pod.retry_grace);
  }
  for (const ManagerReport& m : pod_watch_->TakeReports()) {
    pods_reachable_ = m.reachable;
    if (!m.reachable && reachable_) {
      reachable_ = false;
      manager_reports_.push_back(m);
    }
  }
  for (const ManagerReport& m : node_watch_->TakeReports()) {
    nodes_reachable_ = m.reachable;
    if (!m.reachable && reachable_) {
      reachable_ = false;
      manager_reports_.push_back(m);
    }
  }
  if (!reachable_ && pods_reachable_ && nodes_reachable_) {
    reachable_ = true;
    manager_reports_.push_back({.reachable = true, .message = ""});
  }
}

std::vector<ExitEvent> KubeLauncher::Poll() {
  return std::exchange(exits_, {});
}

std::vector<GpuAssignment> KubeLauncher::Assignments() {
  return std::exchange(assignments_, {});
}

std::vector<ReadinessReport> KubeLauncher::ReadinessReports() {
  return std::exchange(readiness_, {});
}

std::vector<NodeReport> KubeLauncher::NodeReports() {
  return std::exchange(changed_nodes_, {});
}

std::vector<ManagerReport> KubeLauncher::ManagerReports() {
  return std::exchange(manager_reports_, {});
}

std::vector<Leftover> KubeLauncher::Leftovers() {
  std::vector<Leftover> out;
  if (leftovers_taken_) return out;
  if (!pod_watch_->WaitSynced(options_.sync_timeout)) return out;
  leftovers_taken_ = true;
  Sync();
  const absl::flat_hash_map<std::string, json> all = pod_watch_->Snapshot();
  for (const auto& [key, object] : all) {
    auto seen = ours_seen_.find(key);
    if (seen == ours_seen_.end() || by_key_.contains(key)) continue;
    const backends::KubePod& p = seen->second;
    if (p.terminating) continue;
    Pod pod{.key = key,
            .name = Annotation(object, kReplicaLabel),
            .deployment = Annotation(object, kDeploymentLabel),
            .node = p.node,
            .gpus = ParseGpus(Annotation(object, kGpusAnnotation)),
            .mig_starts = {}};
    // A Pod that still waits for a node of its pool.
    if (p.node.empty()) pod.pool = Annotation(object, "gpusched.io/pool");
    // "<profile>@<start>" on a MIG slice's Pod.
    const std::string mig = Annotation(object, kMigAnnotation);
    int start = -1;
    if (const size_t at = mig.rfind('@');
        at != std::string::npos && pod.gpus.size() == 1 &&
        absl::SimpleAtoi(mig.substr(at + 1), &start) && start >= 0 &&
        start < inventory::ClusterState::kMaxMigSlots) {
      pod.mig_starts = {start};
    }
    Leftover l;
    l.id = next_id_++;
    l.name = pod.name;
    l.deployment = pod.deployment;
    l.tag = Annotation(object, kTagAnnotation);
    l.running = p.phase == "Running" && !p.pod_ip.empty();
    l.node = p.node;
    l.gpus = pod.gpus;
    l.mig_starts = pod.mig_starts;
    l.address = p.pod_ip;
    l.description =
        absl::StrCat("Pod ", key, " (", p.phase.empty() ? "Pending" : p.phase,
                     p.node.empty() ? "" : " on ", p.node, ")");
    leftover_pods_.emplace(l.id, std::move(pod));
    out.push_back(std::move(l));
  }
  std::sort(out.begin(), out.end(),
            [](const Leftover& a, const Leftover& b) { return a.id < b.id; });
  return out;
}

absl::Status KubeLauncher::Adopt(const Leftover& leftover,
                                 const std::string& name,
                                 const std::string& deployment,
                                 const std::string& tag) {
  auto it = leftover_pods_.find(leftover.id);
  if (it == leftover_pods_.end()) {
    return absl::NotFoundError(absl::StrCat("no leftover Pod ", leftover.id));
  }
  Pod pod = std::move(it->second);
  leftover_pods_.erase(it);
  if (!ours_seen_.contains(pod.key)) {
    return absl::NotFoundError(absl::StrCat("Pod ", pod.key, " is gone"));
  }
  if (pod.name != name) Relabel(pod.key, name);
  pod.name = name;
  pod.deployment = deployment;
  pod.assigned_reported = true;  // its GPUs and address came with it
  pod.ready = ours_seen_.at(pod.key).ready;
  if (pod.ready)
    readiness_.push_back({.id = leftover.id, .ready = true, .reason = ""});
  by_key_[pod.key] = leftover.id;
  pods_.emplace(leftover.id, std::move(pod));
  (void)tag;
  return absl::OkStatus();
}

void KubeLauncher::Relabel(const std::string& key, const std::string& name) {
  const absl::flat_hash_map<std::string, json> all = pod_watch_->Snapshot();
  auto it = all.find(key);
  if (it == all.end()) return;
  json pod = it->second;
  if (!KubeField(pod, "metadata").is_object() ||
      !KubeField(pod["metadata"], "labels").is_object() ||
      !KubeField(pod["metadata"], "annotations").is_object()) {
    return;  // not as gpusched wrote it: left as it is
  }
  pod["metadata"]["labels"][kReplicaLabel] = LabelValue(name);
  pod["metadata"]["annotations"][kReplicaLabel] = name;
  pod.erase("status");
  pod["apiVersion"] = "v1";  // list items carry no kind
  pod["kind"] = "Pod";
  // The resourceVersion it carries makes a concurrent change a 409
  // Conflict: then the label stays as it was (the annotation says the
  // replica it served), which costs nothing but `kubectl get -l` accuracy.
  ++api_requests_;
  const size_t slash = key.find('/');
  (void)api_->Request("PUT",
                      absl::StrCat("/api/v1/namespaces/", key.substr(0, slash),
                                   "/pods/", key.substr(slash + 1)),
                      pod.dump());
}

KubeLauncher::Stats KubeLauncher::stats() const {
  return {.api_requests = api_requests_,
          .pods = pod_watch_->stats(),
          .nodes = node_watch_->stats()};
}

}  // namespace gpusched::backends
