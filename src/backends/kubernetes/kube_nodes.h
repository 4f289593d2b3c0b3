// Kubernetes inventory: Node and Pod objects (core/v1, JSON as the API
// server returns them) read into what gpusched places onto, and turned into
// ClusterState NodeSpecs through the GPU catalog (docs/kubernetes.md).
//
// A node's GPUs are what the NVIDIA device plugin advertises
// (`status.allocatable["nvidia.com/gpu"]`, and `nvidia.com/mig-<profile>` in
// the mixed MIG strategy); their model and memory come from the labels GPU
// Feature Discovery sets (`nvidia.com/gpu.product`, `nvidia.com/gpu.memory`,
// `nvidia.com/gpu.count`, `nvidia.com/mig.strategy`). A node is usable when
// its Ready condition is True, no pressure condition is True, it is not
// cordoned (`spec.unschedulable`) and it has no NoSchedule or NoExecute taint
// other than the tolerated ones. GPUs requested by Pods gpusched did not
// create are counted per node: the device plugin does not say which indexes
// they got, only how many.
//
// Everything read is bounded (items per list, labels, taints, conditions,
// containers, string lengths); a malformed object is an InvalidArgument that
// names the object and the field.
//
// Pure functions; thread-safe.
#ifndef GPUSCHED_BACKENDS_KUBERNETES_KUBE_NODES_H_
#define GPUSCHED_BACKENDS_KUBERNETES_KUBE_NODES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "inventory/cluster_state.h"
#include "inventory/gpu_catalog.h"
#include "nlohmann/json.hpp"

namespace gpusched::backends {

// Bounds on what is read from the Kubernetes API.
inline constexpr int kMaxKubeItems = 100000;    // objects in one list
inline constexpr int kMaxKubeLabels = 512;      // labels of one object
inline constexpr int kMaxKubeEntries = 256;     // taints, conditions,
                                                // addresses, containers
inline constexpr size_t kMaxKubeString = 4096;  // one name, label or value
inline constexpr int64_t kMaxKubeGpus = 1024;   // GPUs of one node or pod

// The device plugin's resource names.
inline constexpr char kKubeGpuResource[] = "nvidia.com/gpu";
inline constexpr char kKubeMigResourcePrefix[] = "nvidia.com/mig-";

struct KubeNode {
  std::string name;
  std::string uid;
  std::string resource_version;
  // status.addresses: InternalIP, else Hostname, else the name.
  std::string address;
  bool ready = false;
  bool unschedulable = false;
  // Why it is not usable, in Kubernetes' words: "NotReady (KubeletNotReady:
  // ...)", "MemoryPressure", "cordoned", "taint gpu=broken:NoSchedule".
  std::vector<std::string> problems;
  bool usable = false;
  int64_t cpu_milli = 0;   // allocatable
  int64_t memory_mib = 0;  // allocatable
  int gpus = 0;            // allocatable nvidia.com/gpu (whole GPUs)
  // Allocatable MIG devices by profile ("1g.10gb" -> 7), mixed strategy.
  std::vector<std::pair<std::string, int>> mig;
  // GPU Feature Discovery: "NVIDIA-H100-80GB-HBM3", MiB, the physical count
  // (0 when not labelled), "none" | "single" | "mixed" (empty when absent).
  std::string gpu_product;
  int64_t gpu_memory_mib = 0;
  int gpu_count_label = 0;
  std::string mig_strategy;
  std::vector<std::pair<std::string, std::string>> labels;  // sorted by key
  // spec.taints' keys, every effect (a cluster autoscaler's scale-down
  // taint is one; kube_pools.h).
  std::vector<std::string> taint_keys;
};

// One Node object; `tolerated` lists taint keys that do not make a node
// unusable (gpusched's own Pods tolerate them).
absl::StatusOr<KubeNode> ParseKubeNode(
    const nlohmann::json& node, const std::vector<std::string>& tolerated = {});
// A NodeList ({"kind": "NodeList", "items": [...]}).
absl::StatusOr<std::vector<KubeNode>> ParseKubeNodeList(
    const nlohmann::json& list, const std::vector<std::string>& tolerated = {});

struct KubePod {
  std::string namespace_name;
  std::string name;
  std::string uid;
  std::string resource_version;
  std::string node;          // spec.nodeName; empty while unbound
  std::string phase;         // Pending, Running, Succeeded, Failed, Unknown
  bool terminating = false;  // metadata.deletionTimestamp is set
  bool ready = false;        // condition Ready is True
  std::string pod_ip;
  std::string reason;  // status.reason ("Evicted"), else status.message
  std::vector<std::pair<std::string, std::string>> labels;  // sorted by key
  // nvidia.com/gpu the Pod holds: the sum over its containers (limits, else
  // requests), or its largest init container's when that is more.
  int64_t gpus = 0;
  std::vector<std::pair<std::string, int64_t>> mig;  // by profile
};
absl::StatusOr<KubePod> ParseKubePod(const nlohmann::json& pod);
absl::StatusOr<std::vector<KubePod>> ParseKubePodList(
    const nlohmann::json& list);

// Whether a Pod still holds its node's resources: bound, and neither
// Succeeded nor Failed.
bool KubePodHoldsResources(const KubePod& pod);

// The label value of `key` on `pod`; empty when absent.
std::string KubeLabel(const KubePod& pod, const std::string& key);

// GPUs that Pods other than gpusched's hold, per node name: Pods that hold
// resources and do not carry the label `ours_key`=`ours_value`.
struct KubeForeignUse {
  int64_t gpus = 0;
  std::vector<std::pair<std::string, int64_t>> mig;  // by profile, sorted
};
absl::flat_hash_map<std::string, KubeForeignUse> KubeForeignGpuUse(
    const std::vector<KubePod>& pods, const std::string& ours_key,
    const std::string& ours_value);

// The MIG profile of a node of the single MIG strategy, whose
// nvidia.com/gpu are MIG devices and whose product label names their
// profile ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb" -> "1g.5gb"); empty for other
// nodes.
std::string KubeSingleStrategyProfile(const KubeNode& node);

// NodeSpecs for `nodes`, in order: allocatable CPU and memory, whole GPUs
// (allocatable nvidia.com/gpu) of the model `product_map` (GFD product ->
// catalog name or alias, matched case-insensitively) or the catalog itself
// names for the product label. GPU memory is the catalog's, or the
// nvidia.com/gpu.memory label when smaller. MIG devices (the mixed
// strategy's nvidia.com/mig-<profile>, or the single strategy's
// nvidia.com/gpu) become GPUs with a static MIG layout after the whole ones
// (AddStaticMigGpus, inventory/mig.h): the GPU Operator's MIG manager made
// them, and the device plugin hands them out (docs/kubernetes.md, "MIG").
// InvalidArgument naming every node with GPUs but no known product, with
// the catalog's names and the setting that fixes it, or with MIG devices
// its model has no profile for.
absl::StatusOr<std::vector<inventory::NodeSpec>> KubeNodeSpecs(
    const std::vector<KubeNode>& nodes,
    const absl::flat_hash_map<std::string, std::string>& product_map,
    const inventory::GpuCatalog& catalog = inventory::GpuCatalog::Builtin());

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_KUBERNETES_KUBE_NODES_H_
