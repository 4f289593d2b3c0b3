// KubeLauncher: runs every replica as a Pod of a Kubernetes cluster, on the
// node and GPUs placement chose (docs/kubernetes.md). Kubernetes stays the
// distributed engine (kubelets, container runtime, RBAC, the API server's
// record of what runs); gpusched is the scheduler of these Pods:
//   - a Pod is created with `spec.schedulerName` set to gpusched's (no other
//     scheduler touches it) and bound with the `pods/binding` subresource to
//     the node placement chose; its GPUs are pinned with
//     NVIDIA_VISIBLE_DEVICES (the indexes placement chose; CUDA inside the
//     container counts them from 0, so gpusched's CUDA_VISIBLE_DEVICES is
//     dropped); the engine binds $(POD_IP), which Kubernetes expands from
//     the downward API, and gpusched learns the Pod IP from the Pod's status
//     and routes there;
//   - it is labelled app.kubernetes.io/managed-by=gpusched,
//     gpusched.io/instance, gpusched.io/deployment and gpusched.io/replica,
//     and annotated with the exact names, the GPUs and the launch tag, so
//     `kubectl get pods -l gpusched.io/deployment=chat` shows what serves
//     what and a restarted gpusched re-adopts its Pods by label;
//   - Stop is a delete with the grace period (the kubelet sends SIGTERM, then
//     SIGKILL); when the grace has passed and the Pod is still there (its
//     node does not answer), it is deleted with grace 0;
//   - Pods and Nodes are watched (KubeWatcher: list + watch, bookmarks,
//     relist on 410, backoff), never polled: a Pod deleted by someone else,
//     evicted or failed is an exit with Kubernetes' reason; a node whose
//     Ready condition is not True, cordoned, tainted or under pressure is
//     reported unusable; GPUs that other Pods request (`nvidia.com/gpu`) are
//     reported as foreign.
//
// Capacity on demand (docs/kubernetes.md, "Capacity on demand"), by the
// autoscalers' contract, never a cloud API: it is the CapacityManager of
// capacity(). Pools come from the options (kubernetes.pools), Karpenter
// NodePools and node labels (kube_pools.h). A replica placed on a pool
// (placement.pool, no node) is a Pod created unbound with real
// `nvidia.com/gpu` requests and limits and a nodeSelector for its pool and
// GPU product, whose PodScheduled condition is then set False/Unschedulable
// through `pods/status`: Cluster Autoscaler and Karpenter add a node for it.
// Bind() binds it once the node is up. A gang (AddNodes of several nodes)
// is a ProvisioningRequest (autoscaling.x-k8s.io/v1, class
// best-effort-atomic-scale-up.autoscaling.x-k8s.io) with its PodTemplate,
// consumed by the pool's Pods through the consume annotation. A node with a
// scale-down taint is reported kPoweringDown and not usable, so replicas
// move off first. SetEvictable() writes the safe-to-evict and
// do-not-disrupt annotations. ReleaseNode() checks that no Pod of gpusched's
// is left there: the autoscaler removes an empty node itself.
//
// API requests: two to start a replica (create, bind), one to stop it, one
// to clean up a Pod that ended; nothing per reconcile pass. On a pool: create
// and status to start, bind when the node is up.
//
// Like every launcher it owns no thread: the watchers' threads do the
// watching, and Sync() (the controller's loop, outside its lock) takes what
// they saw. Thread-compatible.
#ifndef GPUSCHED_BACKENDS_KUBERNETES_KUBE_LAUNCHER_H_
#define GPUSCHED_BACKENDS_KUBERNETES_KUBE_LAUNCHER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "backends/kubernetes/kube_client.h"
#include "backends/kubernetes/kube_nodes.h"
#include "backends/kubernetes/kube_pools.h"
#include "backends/kubernetes/kube_watch.h"
#include "backends/launcher.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace gpusched::backends {

inline constexpr char kKubeManagedBy[] = "app.kubernetes.io/managed-by";
inline constexpr char kKubeInstance[] = "gpusched.io/instance";

struct KubeLauncherOptions {
  std::string namespace_name = "gpusched";  // where its Pods are created
  // gpusched.io/instance: one per gpusched on a cluster; Pods are named
  // <instance>-<replica>-<run><n> (run: 4 letters, new at each start).
  std::string instance = "gpusched";
  std::string scheduler_name = "gpusched";
  // Taint keys its Pods tolerate (operator Exists), and that do not make a
  // node unusable.
  std::vector<std::string> tolerations;
  // Container image by engine template name; `image` for the others.
  absl::flat_hash_map<std::string, std::string> images;
  std::string image;
  std::string service_account;  // empty: the namespace's default
  std::string image_pull_policy = "IfNotPresent";
  int64_t default_memory_mib = 1024;  // request for a replica declaring none
  // How long Leftovers() waits for the first list of Pods.
  Micros sync_timeout = 30 * kMicrosPerSecond;
  // Capacity on demand: configured pools (kube_pools.h), the labels that
  // name a node's pool (empty: kKubePoolLabelKeys), and whether Karpenter
  // NodePools are read (one list at the first Sync; a 404 means none).
  std::vector<KubePoolSpec> pools;
  std::vector<std::string> pool_labels;
  bool karpenter_nodepools = true;
  // GFD product -> catalog model (kubernetes.productMap), for the NodeSpec
  // of a node an autoscaler adds (PoolNodeReport::spec).
  absl::flat_hash_map<std::string, std::string> product_map;
  // How often a pending ProvisioningRequest's status is read.
  Micros provisioning_check = 2 * kMicrosPerSecond;
};

// Pod annotations of the autoscalers' contract.
inline constexpr char kKubeSafeToEvict[] =
    "cluster-autoscaler.kubernetes.io/safe-to-evict";
inline constexpr char kKubeDoNotDisrupt[] = "karpenter.sh/do-not-disrupt";
inline constexpr char kKubeConsumeProvisioningRequest[] =
    "autoscaling.x-k8s.io/consume-provisioning-request";
inline constexpr char kKubeProvisioningClassAnnotation[] =
    "autoscaling.x-k8s.io/provisioning-class-name";
inline constexpr char kKubeAtomicScaleUp[] =
    "best-effort-atomic-scale-up.autoscaling.x-k8s.io";

class KubeLauncher : public Launcher, public CapacityManager {
 public:
  // `api` sends the requests; `pods` watches every Pod (gpusched's, and
  // others' GPU requests), `nodes` every Node; each has its own client (a
  // watcher's Stop cancels its client). The watchers are started here.
  // `nodes_at_start` are the nodes placement knows (names, GPU counts).
  KubeLauncher(KubeLauncherOptions options, std::unique_ptr<KubeClient> api,
               std::unique_ptr<KubeClient> pods_client,
               std::unique_ptr<KubeClient> nodes_client,
               std::vector<backends::KubeNode> nodes_at_start,
               std::vector<inventory::NodeSpec> specs = {});
  KubeLauncher(const KubeLauncher&) = delete;
  KubeLauncher& operator=(const KubeLauncher&) = delete;
  // Stops watching and leaves the Pods: the next gpusched (a restart, or
  // another instance taking over) finds and adopts them.
  ~KubeLauncher() override;

  absl::StatusOr<ProcessId> Start(const ProcessSpec& spec) override;
  void Sync() override;
  std::vector<ExitEvent> Poll() override;
  absl::Status Stop(ProcessId id, Micros grace, Micros now) override;
  absl::Status Kill(ProcessId id) override;
  Micros Tick(Micros now) override;
  bool IsAlive(ProcessId id) const override;
  int size() const override { return static_cast<int>(pods_.size()); }

  std::vector<GpuAssignment> Assignments() override;
  std::vector<NodeReport> NodeReports() override;
  std::vector<ManagerReport> ManagerReports() override;
  // A Pod's Ready condition: the kubelet runs the engine's readiness probe
  // too (the Pod's readinessProbe), and a node that stops answering marks
  // its Pods not Ready.
  bool ReportsReadiness() const override { return true; }
  std::vector<ReadinessReport> ReadinessReports() override;
  bool ProcessesOutliveGpusched() const override { return true; }
  std::vector<Leftover> Leftovers() override;
  absl::Status Adopt(const Leftover& leftover, const std::string& name,
                     const std::string& deployment,
                     const std::string& tag) override;

  CapacityManager* capacity() override { return this; }
  // A Pod created unbound for a pool gets its node: bound through
  // pods/binding when placement's GPUs are those it was created pinned to,
  // else created again pinned and bound (a Pod's spec cannot change).
  absl::Status Bind(ProcessId id, const ProcessPlacement& placement) override;
  absl::Status SetEvictable(ProcessId id, bool evictable) override;

  // CapacityManager.
  std::vector<PoolReport> Pools() override;
  std::vector<PoolNodeReport> PoolNodeReports() override;
  absl::StatusOr<std::vector<std::string>> AddNodes(
      const std::string& pool, int count, const std::string& request) override;
  absl::Status ReleaseNode(const std::string& node) override;

  // The Pod for a replica of a pool (public for tests): PodObject plus GPU
  // requests and limits, the nodeSelector, and the consume annotation when
  // `request` is set.
  nlohmann::json PoolPodObject(const ProcessSpec& spec,
                               const std::string& pod_name,
                               const PoolReport& pool,
                               const std::string& request) const;
  // The PodTemplate and ProvisioningRequest that ask for `count` nodes of
  // `pool` at once, named `name` (public for tests).
  nlohmann::json PodTemplateObject(const PoolReport& pool,
                                   const std::string& name) const;
  nlohmann::json ProvisioningRequestObject(const std::string& name,
                                           int count) const;

  // The Pod for `spec` (public for tests), named `pod_name`.
  nlohmann::json PodObject(const ProcessSpec& spec,
                           const std::string& pod_name) const;
  // A DNS-1123 label from `s`: lowercase letters, digits and '-', at most
  // `max` characters, starting and ending with a letter or digit.
  static std::string DnsLabel(const std::string& s, size_t max);

  struct Stats {
    int64_t api_requests = 0;  // by this launcher (watches not included)
    KubeWatcher::Stats pods;
    KubeWatcher::Stats nodes;
  };
  Stats stats() const;

 private:
  struct Pod {
    std::string key;   // namespace/name
    std::string name;  // the replica
    std::string deployment;
    std::string node;
    std::vector<int> gpus;
    std::vector<int> mig_starts;  // a MIG slice's instance, parallel to gpus
    bool assigned_reported = false;
    bool ready = false;  // the Pod's Ready condition, as last reported
    bool stop_requested = false;
    bool delete_sent = false;      // a delete with grace is in the API server
    bool deleted_outside = false;  // someone else's delete is (terminating)
    bool force_sent = false;       // grace 0 sent
    Micros grace_deadline = kNever;
    bool retry_delete = false;  // the last delete failed: send it again
    Micros retry_grace = 0;
    // Capacity on demand: the pool it waits on while unbound (node empty),
    // the spec it was created from (to create it again pinned), and the
    // ProvisioningRequest it consumes.
    std::string pool = {};
    ProcessSpec spec = {};
    std::string provisioning_request = {};
  };

  absl::StatusOr<ProcessId> StartOnPool(const ProcessSpec& spec);
  // Creates Pod `pod_name` and, when `node` is set, binds it there.
  absl::Status CreatePod(const nlohmann::json& object,
                         const std::string& pod_name, const std::string& node);
  absl::StatusOr<KubeResponse> Patch(const std::string& path,
                                     const nlohmann::json& patch,
                                     const std::string& what);
  std::string NewPodName(const std::string& replica, ProcessId id) const;
  void RefreshPools();
  void ReportPoolNode(const std::string& node, const std::string& pool,
                      PoolNodeState state, const std::string& reason);
  // Reads the status of pending ProvisioningRequests (at most every
  // options_.provisioning_check); returns when to look again.
  Micros CheckProvisioningRequests(Micros now);
  // Deletes ProvisioningRequest `name` and its PodTemplate.
  void DeleteProvisioningRequest(const std::string& name);
  // Karpenter's NodePools, once: a 404 means there is no Karpenter.
  void ReadNodePools();

  absl::Status Delete(Pod& pod, Micros grace);
  void HandlePod(const nlohmann::json& object);
  void HandlePodGone(const std::string& key);
  void HandleNode(const nlohmann::json& object);
  void Exit(ProcessId id, Pod& pod, ExitEvent e);
  bool Ours(const backends::KubePod& p) const;
  void RecountForeign(const std::string& node);
  // Labels and annotates Pod `key` as serving replica `name` now.
  void Relabel(const std::string& key, const std::string& name);
  void Report(const std::string& node);

  KubeLauncherOptions options_;
  std::unique_ptr<KubeClient> api_;
  std::unique_ptr<KubeClient> pods_client_;
  std::unique_ptr<KubeClient> nodes_client_;
  std::unique_ptr<KubeWatcher> pod_watch_;
  std::unique_ptr<KubeWatcher> node_watch_;

  std::string run_;  // 4 letters, new each run: part of every Pod name
  ProcessId next_id_ = 1;
  absl::flat_hash_map<ProcessId, Pod> pods_;
  absl::flat_hash_map<std::string, ProcessId> by_key_;
  // Pods of ours that this run did not start, until adopted or ended.
  absl::flat_hash_map<ProcessId, Pod> leftover_pods_;
  absl::flat_hash_map<std::string, backends::KubePod> ours_seen_;
  bool leftovers_taken_ = false;
  bool first_sync_done_ = false;
  std::vector<ExitEvent> exits_;
  std::vector<GpuAssignment> assignments_;
  std::vector<ReadinessReport> readiness_;

  struct NodeInfo {
    int gpus = 0;              // whole GPUs
    inventory::NodeSpec spec;  // placement's view (its MIG layout)
    // The single MIG strategy's profile: its nvidia.com/gpu are MIG devices.
    std::string single_profile;
    bool known = false;  // a Node object was seen
    bool usable = true;
    std::string state;
    std::string reason;
    int64_t foreign = 0;
    std::map<std::string, int64_t> foreign_mig;  // by profile
  };
  // The resource a MIG slice of `profile` asks the device plugin for.
  static std::string MigResource(const NodeInfo& node,
                                 const std::string& profile);
  absl::flat_hash_map<std::string, NodeInfo> nodes_;
  // Other Pods holding GPUs, by key.
  struct Foreign {
    std::string node;
    int64_t gpus = 0;
    std::vector<std::pair<std::string, int64_t>> mig;  // by profile
  };
  absl::flat_hash_map<std::string, Foreign> foreign_;
  absl::flat_hash_map<std::string, NodeReport> node_reports_;
  std::vector<NodeReport> changed_nodes_;
  bool pods_reachable_ = true;
  bool nodes_reachable_ = true;
  bool reachable_ = true;
  std::vector<ManagerReport> manager_reports_;
  int64_t api_requests_ = 0;

  // Capacity on demand.
  absl::flat_hash_map<std::string, KubeNode> all_nodes_;  // every Node seen
  std::vector<PoolReport> nodepools_;                     // Karpenter's
  bool nodepools_read_ = false;
  bool first_nodepools_try_ = false;
  std::vector<PoolReport> pools_;  // as of the last Sync
  bool pools_known_ = false;       // pools_ was computed once
  struct PoolNode {
    std::string pool;
    PoolNodeState state = PoolNodeState::kPoweredDown;
    std::string reason;
  };
  absl::flat_hash_map<std::string, PoolNode> pool_nodes_;
  std::vector<PoolNodeReport> changed_pool_nodes_;
  // ProvisioningRequests of this run, by name.
  struct Provisioning {
    std::string pool;
    int count = 0;
    int consumers = 0;  // Pods that carry its consume annotation
    bool done = false;  // Provisioned or Failed
  };
  std::map<std::string, Provisioning> provisioning_;
  Micros next_provisioning_check_ = 0;
};

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_KUBERNETES_KUBE_LAUNCHER_H_
