// Kubernetes node pools, for capacity on demand (docs/kubernetes.md,
// "Capacity on demand"; docs/capacity.md): the sets of nodes that Cluster
// Autoscaler or Karpenter can add, as gpusched's PoolReports
// (backends/launcher.h).
//
// A pool comes from three places, merged by name:
//   - the serve config (`kubernetes.pools`): the only source for a pool that
//     has no node now (a GPU node group scaled to zero shows nothing in the
//     API: Cluster Autoscaler's node groups and their sizes live in the
//     cloud provider, not in Kubernetes objects);
//   - Karpenter NodePools (`karpenter.sh/v1`): their template labels,
//     requirements (capacity type, GPU product or count) and limits
//     (`nvidia.com/gpu` / GPUs per node gives the most nodes);
//   - Node labels: the node pool label a managed service sets
//     (`karpenter.sh/nodepool`, `cloud.google.com/gke-nodepool`,
//     `eks.amazonaws.com/nodegroup`, `kubernetes.azure.com/agentpool`), GPU
//     Feature Discovery's `nvidia.com/gpu.product`, the device plugin's
//     `nvidia.com/gpu`, and the spot labels (`karpenter.sh/capacity-type`,
//     `cloud.google.com/gke-spot`, `eks.amazonaws.com/capacityType`,
//     `kubernetes.azure.com/scalesetpriority`).
// What the config sets wins over a NodePool, which wins over what nodes
// show; a pool seen only on nodes can grow no further than the nodes it has
// (its maximum is not in the API).
//
// Scale-down: Cluster Autoscaler taints a node it is removing
// `ToBeDeletedByClusterAutoscaler` (NoSchedule), Karpenter
// `karpenter.sh/disrupted` (NoSchedule); such a node is going away.
//
// Pure functions; thread-safe. Everything read is bounded (kube_nodes.h).
#ifndef GPUSCHED_BACKENDS_KUBERNETES_KUBE_POOLS_H_
#define GPUSCHED_BACKENDS_KUBERNETES_KUBE_POOLS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/kubernetes/kube_nodes.h"
#include "backends/launcher.h"
#include "nlohmann/json.hpp"

namespace gpusched::backends {

// The labels that name a node's pool, in the order they are tried.
inline constexpr const char* kKubePoolLabelKeys[] = {
    "karpenter.sh/nodepool", "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup", "kubernetes.azure.com/agentpool"};
// The autoscalers' scale-down taints.
inline constexpr char kKubeCaScaleDownTaint[] =
    "ToBeDeletedByClusterAutoscaler";
inline constexpr char kKubeKarpenterDisruptedTaint[] = "karpenter.sh/disrupted";
// GPU Feature Discovery's product label.
inline constexpr char kKubeGpuProductLabel[] = "nvidia.com/gpu.product";
// Bounds.
inline constexpr int kMaxKubePools = 256;
inline constexpr int kMaxKubePoolNodes = 10000;  // max_nodes of one pool

// A pool as the serve config gives it (kubernetes.pools).
struct KubePoolSpec {
  std::string name;
  // The node labels that select its nodes (a Pod's nodeSelector); empty:
  // {karpenter.sh/nodepool: name}. On GKE {cloud.google.com/gke-nodepool:
  // name}, on EKS {eks.amazonaws.com/nodegroup: name}.
  std::vector<std::pair<std::string, std::string>> labels;
  std::string gpu_product;  // nvidia.com/gpu.product of its nodes
  int gpus_per_node = 0;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  bool spot = false;
  int max_nodes = 0;
};

// The pool label of `node` (key, value) among `keys` (kKubePoolLabelKeys
// when empty); both empty when it has none.
std::pair<std::string, std::string> KubeNodePoolLabel(
    const KubeNode& node, const std::vector<std::string>& keys = {});
// Whether `node` is spot (or preemptible) capacity, by its labels.
bool KubeNodeIsSpot(const KubeNode& node);
// The scale-down taint `node` carries (kKubeCaScaleDownTaint or
// kKubeKarpenterDisruptedTaint), or "" when none.
std::string KubeScaleDownTaint(const KubeNode& node);
// Whether `node` carries every label of `selector`.
bool KubeNodeMatches(
    const KubeNode& node,
    const std::vector<std::pair<std::string, std::string>>& selector);

// One Karpenter NodePool (karpenter.sh/v1) as a pool: its name; selector
// {karpenter.sh/nodepool: name} plus the template's labels; spot when its
// karpenter.sh/capacity-type requirement allows spot only; the GPU product
// from a requirement on nvidia.com/gpu.product (operator In, one value) or
// its template labels; GPUs per node from karpenter.k8s.aws/instance-gpu-count
// (In, one value); max nodes from limits["nvidia.com/gpu"] / GPUs per node.
// InvalidArgument naming the field when malformed.
absl::StatusOr<PoolReport> ParseKarpenterNodePool(const nlohmann::json& pool);
// A NodePoolList.
absl::StatusOr<std::vector<PoolReport>> ParseKarpenterNodePoolList(
    const nlohmann::json& list);

// The pools: `configured`, then `nodepools`, then pools seen on `nodes` by
// their pool label, merged by name (fields the earlier source left 0 or
// empty are filled by the later ones). Sorted by name. `keys`: as for
// KubeNodePoolLabel.
std::vector<PoolReport> KubePools(const std::vector<KubePoolSpec>& configured,
                                  const std::vector<PoolReport>& nodepools,
                                  const std::vector<KubeNode>& nodes,
                                  const std::vector<std::string>& keys = {});

// The pool `node` belongs to among `pools` (its selector matches), or "".
std::string KubePoolOfNode(const KubeNode& node,
                           const std::vector<PoolReport>& pools);

// The state of a pool's node: kPoweringDown with a scale-down taint, kUp
// when Ready (its NodeReport says whether placement may use it), else
// kPoweringUp (registered, not Ready yet); `reason`: the node's problems in
// Kubernetes' words.
PoolNodeState KubePoolNodeState(const KubeNode& node, std::string* reason);

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_KUBERNETES_KUBE_POOLS_H_
