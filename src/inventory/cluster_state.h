// ClusterState: the nodes, their GPUs, and every reservation on them.
//
// Owned by the policy core (one per scheduler); not thread-safe — callers on
// other threads read immutable Snapshot()s instead. Contract:
//   * Assume(pod, allocation) reserves; a pod id can hold one allocation.
//     An allocation that does not fit (a GPU share handed out twice, CPU or
//     memory overcommitted, MIG slots overlapping) is a CHECK failure: the
//     placement engine must never produce one. Callers with untrusted input
//     check Fits() first.
//   * Forget(pod) undoes Assume or a bind; idempotent.
//   * Bind(pod) marks an assumed pod as running (the Launcher has it).
//   * Nodes with identical specs and identical free resources form one
//     NodeClass. Placement scores a class once instead of every node in it,
//     so candidate search costs the number of distinct node states, not the
//     number of nodes (12,500 empty 8-GPU nodes are one class).
//   * Node index order is the tie-break order of placement: among equally
//     good nodes the lowest index wins (add nodes in a shuffled order for a
//     seeded random tie-break).
#ifndef GPUSCHED_INVENTORY_CLUSTER_STATE_H_
#define GPUSCHED_INVENTORY_CLUSTER_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inventory/resources.h"

namespace gpusched::inventory {

// One MIG instance a cluster manager created: its profile ("1g.10gb", the
// catalog's spelling) and first memory slot.
struct MigInstance {
  std::string profile;
  int start = 0;

  bool operator==(const MigInstance&) const = default;
};

struct NodeSpec {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string gpu_model;  // empty for CPU-only nodes
  int gpu_count = 0;
  int64_t gpu_memory_mib = 0;  // per GPU
  // MIG memory slots per GPU (8 on A100/H100/H200/B200); 0 = not MIG-capable.
  int mig_slots = 0;
  // A static MIG layout (inventory/mig.h, AddStaticMigGpus): the instances a
  // cluster manager created, per GPU. Empty: gpusched lays out MIG slices
  // itself (dynamic), or no MIG. Else one entry per GPU: a GPU with
  // instances runs MIG slices only, exactly at them; a GPU without is a
  // whole GPU, and takes no MIG slice.
  std::vector<std::vector<MigInstance>> mig_instances;
  // nvlink_group[i]: NVLink domain of GPU i. GPUs in one domain are fully
  // connected. Empty = no NVLink (PCIe only).
  std::vector<int> nvlink_group;
  // True when declared rather than discovered on real hardware.
  bool simulated = true;
  // Where engines on this node are reached (a cluster manager's node
  // address); empty: this machine, 127.0.0.1.
  std::string address;
};

struct GpuState {
  int32_t milli_free = kMilliPerGpu;
  int64_t memory_free_mib = 0;
  uint32_t mig_used = 0;  // bit i set: MIG memory slot i taken
  int32_t mig_milli = 0;  // compute milli held by MIG slices
  int32_t mig_media = 0;  // MIG slices holding the media engines ("+me")
  // In MIG mode with a static layout (NodeSpec::mig_instances): never a
  // whole GPU or a fraction.
  bool mig_static = false;
  // MIG slots held by work gpusched did not start (a cluster manager's
  // other jobs or Pods); like mig_used, they take no slice.
  uint32_t mig_foreign = 0;
  bool healthy = true;

  // Taken by MIG slices (gpusched's or others') or in MIG mode: no whole GPU
  // and no fraction goes there.
  bool Partitioned() const {
    return mig_static || mig_used != 0 || mig_foreign != 0;
  }
  uint32_t MigTaken() const { return mig_used | mig_foreign; }
  bool Idle() const { return milli_free == kMilliPerGpu && !Partitioned(); }
  bool operator==(const GpuState&) const = default;
};

struct NodeState {
  int64_t cpu_free = 0;
  int64_t memory_free_mib = 0;
  std::vector<GpuState> gpus;
  // Derived, kept up to date by ClusterState.
  int idle_gpus = 0;           // healthy GPUs with nothing on them
  int32_t max_milli_free = 0;  // largest free share on a healthy, non-MIG GPU
  int64_t gpu_milli_free = 0;  // sum of free milli over healthy GPUs
};

// Scheduling metadata kept with each reservation (used by preemption).
struct PodInfo {
  std::string tenant;
  // A pod that names no priority class runs as "standard" (500; see
  // placement/priority.h).
  int priority = 500;
  bool preemptible = true;
};

struct PodRecord {
  Allocation allocation;
  PodInfo info;
  bool bound = false;
};

// Nodes with the same spec and the same free resources.
struct NodeClass {
  int spec_id = -1;
  uint32_t generation = 0;       // bumped each time this slot is reused
  absl::btree_set<int> members;  // node indexes, ascending
};

// An immutable copy for readers on other threads (API, dashboard).
struct ClusterSnapshot {
  uint64_t version = 0;
  std::vector<NodeSpec> nodes;
  std::vector<NodeState> states;
  std::vector<std::pair<std::string, PodRecord>> pods;  // sorted by id
};

class ClusterState {
 public:
  // GPU-model constraints are 64-bit masks over model ids.
  static constexpr size_t kMaxGpuModels = 64;
  // Per node; placement keeps per-GPU state in fixed-size arrays.
  static constexpr int kMaxGpusPerNode = 16;
  static constexpr int kMaxMigSlots = 16;

  ClusterState() = default;
  ClusterState(const ClusterState&) = delete;
  ClusterState& operator=(const ClusterState&) = delete;

  // Adds a node; returns its index. Error on a duplicate name or bad spec.
  absl::StatusOr<int> AddNode(NodeSpec spec);

  int num_nodes() const { return static_cast<int>(specs_.size()); }
  const NodeSpec& spec(int node) const { return specs_[node]; }
  const NodeState& state(int node) const { return states_[node]; }
  int FindNode(const std::string& name) const;
  // Small dense id per GPU model name seen on nodes; -1 if unknown.
  int ModelId(const std::string& model) const;
  const std::vector<std::string>& models() const { return model_names_; }
  int node_model_id(int node) const { return node_model_[node]; }

  // Empty string when `alloc` fits on its node now; else the first reason.
  std::string Fits(const Allocation& alloc) const;
  // Reserves. Error if the pod already holds an allocation or the node
  // index is unknown; CHECK-fails if the allocation does not fit.
  absl::Status Assume(const std::string& pod, const Allocation& alloc,
                      PodInfo info = {});
  // Releases whatever the pod holds. Returns false if it held nothing.
  bool Forget(const std::string& pod);
  // Marks an assumed pod as bound. NotFound if unknown.
  absl::Status Bind(const std::string& pod);
  const PodRecord* FindPod(const std::string& pod) const;
  const std::vector<std::string>& PodsOnNode(int node) const {
    return pods_on_node_[node];
  }
  size_t num_pods() const { return pods_.size(); }

  // Marks a GPU (un)healthy; an unhealthy GPU takes no new allocation.
  absl::Status SetGpuHealth(int node, int gpu, bool healthy);
  // The MIG slots of a GPU that other work holds (GpuState::mig_foreign);
  // they take no new slice. Slices already placed there keep their slots.
  absl::Status SetMigForeign(int node, int gpu, uint32_t slots);

  // Node classes (see the file comment). Live class ids, in no order.
  const std::vector<int>& live_classes() const { return live_classes_; }
  const NodeClass& node_class(int id) const { return classes_[id]; }
  int class_of(int node) const { return class_of_[node]; }
  // Monotonic count of state changes; snapshots and caches key on it.
  uint64_t version() const { return version_; }
  // Moves when a cluster-wide quantity changes (a node joins, a GPU's
  // health flips): largest node spec, total CPU and healthy GPU. Scores
  // normalised by those are cached only within one cluster_epoch().
  uint64_t cluster_epoch() const { return cluster_epoch_; }

  // Largest node spec seen (policies normalise by it).
  int64_t max_node_cpu_milli() const { return max_cpu_milli_; }
  int max_node_gpus() const { return max_gpus_; }
  int64_t total_cpu_milli() const { return total_cpu_milli_; }

  // GPU milli of healthy GPUs, and GPU milli held by allocations (including
  // those on GPUs marked unhealthy since, which keep their shares until
  // they are forgotten).
  int64_t total_gpu_milli() const { return total_gpu_milli_; }
  int64_t allocated_gpu_milli() const { return allocated_gpu_milli_; }
  // Node types: nodes with the same spec (all but the name) share a small
  // dense id. Free GPU milli on healthy GPUs of the nodes of one type, and
  // of the whole cluster, kept up to date on every change.
  int node_spec_id(int node) const { return node_spec_[node]; }
  int num_node_specs() const { return static_cast<int>(spec_ids_.size()); }
  int64_t free_gpu_milli_of_spec(int spec) const {
    return spec >= 0 && spec < static_cast<int>(free_by_spec_.size())
               ? free_by_spec_[spec]
               : 0;
  }
  int64_t free_gpu_milli() const { return free_gpu_milli_; }

  std::shared_ptr<const ClusterSnapshot> Snapshot() const;

 private:
  void Apply(const Allocation& alloc, int sign);
  void Recompute(int node);
  void Reclassify(int node);
  void DetachFromClass(int node);
  int SpecId(const NodeSpec& spec);

  std::vector<NodeSpec> specs_;
  std::vector<NodeState> states_;
  std::vector<int> node_model_;
  std::vector<int> node_spec_;
  absl::flat_hash_map<std::string, int> node_by_name_;
  std::vector<std::string> model_names_;
  absl::flat_hash_map<std::string, int> model_ids_;
  absl::flat_hash_map<std::string, int> spec_ids_;

  absl::flat_hash_map<std::string, PodRecord> pods_;
  std::vector<std::vector<std::string>> pods_on_node_;

  // Class index: key (spec + free resources) -> class slot.
  absl::flat_hash_map<std::vector<int64_t>, int> class_by_key_;
  std::vector<std::vector<int64_t>> class_key_;
  std::vector<NodeClass> classes_;
  std::vector<int> free_class_slots_;
  std::vector<int> live_classes_;
  std::vector<int> live_pos_;  // class id -> position in live_classes_
  std::vector<int> class_of_;

  int64_t max_cpu_milli_ = 0;
  int64_t total_cpu_milli_ = 0;
  int max_gpus_ = 0;
  int64_t total_gpu_milli_ = 0;
  int64_t allocated_gpu_milli_ = 0;
  std::vector<int64_t> free_by_spec_;  // by node spec id
  int64_t free_gpu_milli_ = 0;
  uint64_t version_ = 0;
  uint64_t cluster_epoch_ = 0;
  mutable std::shared_ptr<const ClusterSnapshot> snapshot_;
};

}  // namespace gpusched::inventory

#endif  // GPUSCHED_INVENTORY_CLUSTER_STATE_H_
