// Launcher: starts and stops engine processes for replicas.
//
// `Launcher` is the seam (DESIGN.md sections 1 and 10) between the live
// driver and a cluster manager: local/local_launcher.h runs local processes,
// slurm/slurm_launcher.h Slurm jobs, kubernetes/kube_launcher.h Pods. A
// launcher never sleeps and owns no thread: the runtime loop calls Poll() for
// exits and Tick(now) for deadlines (SIGKILL after a stop's grace period).
// Thread-compatible: one loop (strand) owns a launcher.
//
// The restart policy is control::RestartBackoff (control/backoff.h).
#ifndef GPUSCHED_BACKENDS_LAUNCHER_H_
#define GPUSCHED_BACKENDS_LAUNCHER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "inventory/cluster_state.h"

namespace gpusched::backends {

// Identifies a started process; for LocalLauncher it is the pid, which is
// also its process group id.
using ProcessId = int64_t;

// Where placement put a process, for launchers that run it on another
// machine (a cluster manager's job or Pod); LocalLauncher ignores it.
struct ProcessPlacement {
  std::string node;  // the node's name; empty: this machine, no GPU
  std::string deployment;
  std::vector<int> gpus;  // GPU indexes placement chose on `node`
  bool fraction = false;  // a share of one GPU rather than whole GPUs
  // For a fraction: the part of its GPU it takes, the larger of its memory
  // and compute shares, in (0, 1].
  double gpu_share = 0;
  // For a MIG slice (then `fraction` and one GPU): its profile ("1g.10gb")
  // and first memory slot on gpus[0]; empty and -1 otherwise.
  std::string mig_profile;
  int mig_start = -1;
  // Capacity on demand (Kubernetes): no node yet (`node` empty); the
  // process waits for a node of this pool (PoolReport::pool).
  std::string pool;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};

struct ProcessSpec {
  // Replica name; names the log files. Letters, digits and "._-" only.
  std::string name;
  // argv[0] is an absolute or relative path (with a '/', relative to `cwd`)
  // or a name looked up in PATH (the child's PATH when `env` sets one).
  // Never run through a shell.
  std::vector<std::string> argv;
  // Overrides on top of the inherited environment (or the whole environment
  // when inherit_env is false).
  absl::flat_hash_map<std::string, std::string> env;
  bool inherit_env = true;
  // Working directory; empty keeps the launcher's.
  std::string cwd;
  // stdout and stderr are appended to <log_dir>/<name>.out and .err (the
  // directory is created when missing); empty sends them to /dev/null.
  std::string log_dir;
  ProcessPlacement placement;
  // The engine template it runs ("reference", "vllm"): a launcher that runs
  // containers picks the image by it.
  std::string engine;
  // Opaque to the launcher: one whose processes outlive gpusched (a Slurm
  // job) keeps it with the process and gives it back in Leftovers().
  std::string tag;
  // The engine's port and readiness path (the template's probe), for a
  // cluster manager that probes too (a Pod's readinessProbe); 0: none.
  int port = 0;
  std::string readiness_path;
};

struct ExitEvent {
  ProcessId id = 0;
  std::string name;
  // Exactly one of these is meaningful: exit_code when !signaled.
  bool signaled = false;
  int exit_code = 0;
  int signal = 0;
  // Stop() or Kill() was called: an exit the runtime asked for, not a crash.
  bool stop_requested = false;
  // What a cluster manager said about the end ("Slurm job 12 NODE_FAIL on
  // node2"); empty for local processes.
  std::string reason;
};

// The GPUs a cluster manager gave a process once it runs: placement's choice
// is a request there, and this is what the process holds.
struct GpuAssignment {
  ProcessId id = 0;
  std::string node;
  std::vector<int> gpus;  // indexes on `node`; empty: as placement chose
  // For MIG slices, parallel to `gpus`: the instance's first slot on each
  // (a static layout, NodeSpec::mig_instances); empty otherwise.
  std::vector<int> mig_starts;
  // Where the process listens, when the manager chose it (a Pod's IP);
  // empty: the planned host.
  std::string address;
};

// A process a previous run of gpusched left running (a cluster manager's
// job outlives gpusched).
struct Leftover {
  ProcessId id = 0;
  std::string name;  // the replica it served
  std::string deployment;
  std::string tag;       // ProcessSpec::tag it was started with
  bool running = false;  // runs now (else waits to start)
  std::string node;
  std::vector<int> gpus;        // the GPUs it holds on `node`
  std::vector<int> mig_starts;  // as GpuAssignment::mig_starts
  std::string address;          // where it listens; empty: the node's address
  std::string description;  // for the event log ("Slurm job 12 (...) RUNNING")
};

// A node as a cluster manager sees it, reported when it changes.
struct NodeReport {
  std::string node;
  bool usable = true;  // new processes may be placed there and old ones stay
  std::string state;   // the manager's words ("MIXED+DRAIN")
  std::string reason;
  // GPU indexes held by work the launcher did not start (other users' jobs).
  std::vector<int> foreign_gpus;
  // MIG instances of a static layout held by such work, as (GPU, start),
  // sorted.
  std::vector<std::pair<int, int>> foreign_mig;
};

// The cluster manager's own readiness of a process (a Pod's Ready
// condition), when it changes.
struct ReadinessReport {
  ProcessId id = 0;
  bool ready = false;
  std::string reason;  // the manager's words when not ready
};

// The cluster manager stopped answering, or answers again.
struct ManagerReport {
  bool reachable = true;
  std::string message;  // the manager's error; empty when reachable
};

// --- Capacity on demand (DESIGN.md section 10, docs/capacity.md) ----------
// A cluster manager that can add nodes (Slurm's power saving: CLOUD nodes
// and ResumeProgram; Kubernetes: Cluster Autoscaler or Karpenter node pools)
// reports its pools. gpusched decides when and which pool; the manager and
// the user's own programs do the rest. gpusched never calls a cloud API.

// A set of nodes the manager can add, all alike.
struct PoolReport {
  std::string pool;  // Slurm: the CLOUD nodes' feature or partition;
                     // Kubernetes: the node pool's label value
  // The GPU product as the manager names it ("h100" from Slurm's GRES type,
  // "NVIDIA-H100-80GB-HBM3" from nvidia.com/gpu.product); the core maps it
  // to the catalog (inventory/gpu_catalog.h).
  std::string gpu_model;
  int gpus_per_node = 0;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  bool spot = false;  // Kubernetes: karpenter.sh/capacity-type or
                      // cloud.google.com/gke-spot; Slurm: a "spot" feature
  int max_nodes = 0;  // how many nodes the pool can have in all
  // Slurm: every node name of the pool, up or not; Kubernetes: empty (the
  // autoscaler names nodes when it adds them).
  std::vector<std::string> nodes;
  // Kubernetes: the node labels that select the pool (a Pod's nodeSelector).
  std::vector<std::pair<std::string, std::string>> selector;
};

// A node of a pool, as far as capacity goes. Only kUp nodes are placement's
// (they also come as NodeReports with their GPUs); the others are capacity
// that can come, or is going.
enum class PoolNodeState {
  kPoweredDown,   // Slurm: idle~ (powered off); counts as capacity only
  kPoweringUp,    // asked for; not registered yet (Slurm: #, CONFIGURING)
  kUp,            // registered, usable
  kPoweringDown,  // going away (Slurm: %; Kubernetes: a scale-down taint)
  kFailed,        // did not come up (Slurm: DOWN~ after ResumeTimeout)
};
const char* PoolNodeStateName(PoolNodeState s);

struct PoolNodeReport {
  std::string node;
  std::string pool;
  PoolNodeState state = PoolNodeState::kPoweredDown;
  std::string reason;  // the manager's words ("ResumeTimeout reached")
  // The node as placement sees it (GPUs, model, memory, address), where the
  // manager knows it: Kubernetes names a pool's nodes only when its
  // autoscaler adds them, so the controller learns them from this
  // (controller_capacity.cc). Slurm leaves it empty: its CLOUD nodes are
  // known at start.
  std::optional<inventory::NodeSpec> spec;
};

class CapacityManager {
 public:
  virtual ~CapacityManager() = default;
  // The pools as the manager describes them now (after a Sync).
  virtual std::vector<PoolReport> Pools() = 0;
  // Pool nodes whose state changed since the last call (every one at first).
  virtual std::vector<PoolNodeReport> PoolNodeReports() = 0;
  // Asks for `count` more nodes of `pool`; `request` identifies the ask
  // (repeating it with the same id is harmless). Returns the nodes asked
  // for where the manager names them (Slurm), else none (Kubernetes: the
  // unschedulable Pods are the ask).
  virtual absl::StatusOr<std::vector<std::string>> AddNodes(
      const std::string& pool, int count, const std::string& request) = 0;
  // Gives a node back (Slurm: power_down_asap). Its replicas are gone first.
  virtual absl::Status ReleaseNode(const std::string& node) = 0;
};

class Launcher {
 public:
  virtual ~Launcher() = default;

  virtual absl::StatusOr<ProcessId> Start(const ProcessSpec& spec) = 0;
  // Exits since the last call, each reported once. Non-blocking.
  virtual std::vector<ExitEvent> Poll() = 0;
  // Asks the process to stop now (SIGTERM to its group); Tick() forces it
  // (SIGKILL) once `now + grace` has passed. Stopping again keeps the
  // earlier deadline. NotFound for an unknown or already reported id.
  virtual absl::Status Stop(ProcessId id, Micros grace, Micros now) = 0;
  // Forces the process (and its group) to stop now.
  virtual absl::Status Kill(ProcessId id) = 0;
  // Applies deadlines due at `now`; returns the next one (kNever if none).
  virtual Micros Tick(Micros now) = 0;
  // True from Start until the process has exited (even before Poll reports
  // it).
  virtual bool IsAlive(ProcessId id) const = 0;
  // Processes started and not yet reported by Poll.
  virtual int size() const = 0;

  // Launchers in front of a cluster manager (Slurm, Kubernetes) say more;
  // a local launcher has nothing to add.
  // Talks to the cluster manager (the slow part: commands, requests) and
  // buffers what it says for Poll, Assignments and NodeReports. The
  // controller calls it outside its own lock.
  virtual void Sync() {}
  // GPUs assigned since the last call, each process once.
  virtual std::vector<GpuAssignment> Assignments() { return {}; }
  // Nodes whose report changed since the last call (every node at first).
  virtual std::vector<NodeReport> NodeReports() { return {}; }
  // Each time the cluster manager stops answering or answers again.
  virtual std::vector<ManagerReport> ManagerReports() { return {}; }
  // Whether the cluster manager says when a process is ready (Kubernetes'
  // Pod Ready condition). Then a process counts as not ready to it until a
  // ReadinessReport says otherwise, and a replica serves only while both
  // the manager and gpusched's own probe say ready.
  virtual bool ReportsReadiness() const { return false; }
  // Readiness changes since the last call (ReportsReadiness launchers).
  virtual std::vector<ReadinessReport> ReadinessReports() { return {}; }
  // Whether its processes keep running when gpusched stops (a cluster
  // manager's jobs and Pods), so that the next gpusched (a restart, or
  // another instance taking over) adopts them; local processes die with
  // gpusched.
  virtual bool ProcessesOutliveGpusched() const { return false; }
  // What a previous run of gpusched left running through this launcher.
  virtual std::vector<Leftover> Leftovers() { return {}; }
  // Takes a leftover over as if this run had started it, now serving
  // replica `name` of `deployment` with `tag` (Poll, Stop and Kill apply).
  virtual absl::Status Adopt(const Leftover& leftover, const std::string& name,
                             const std::string& deployment,
                             const std::string& tag) {
    return absl::UnimplementedError("this launcher leaves nothing behind");
  }

  // The launcher's capacity on demand, when its manager can add nodes
  // (Slurm with CLOUD nodes, Kubernetes with an autoscaler); null: a fixed
  // set of nodes.
  virtual CapacityManager* capacity() { return nullptr; }
  // Kubernetes: a process started with an empty placement.node and a
  // placement.pool is a Pod that waits, unbound and Unschedulable, for the
  // autoscaler to add a node of the pool; Bind gives it its node and GPUs
  // once the node is up. Unimplemented elsewhere.
  virtual absl::Status Bind(ProcessId id, const ProcessPlacement& placement) {
    return absl::UnimplementedError("this launcher places at start");
  }
  // Whether the manager's autoscaler may remove the process's node now
  // (Kubernetes: cluster-autoscaler.kubernetes.io/safe-to-evict and
  // karpenter.sh/do-not-disrupt on its Pod): false while it serves or
  // starts, true once it drains.
  virtual absl::Status SetEvictable(ProcessId id, bool evictable) {
    return absl::OkStatus();
  }
};

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_LAUNCHER_H_
