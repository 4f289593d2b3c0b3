// SlurmLauncher: runs every replica as a Slurm batch job on the node
// placement chose (docs/slurm.md). Slurm stays the arbiter of the cluster:
// it assigns the GPU indexes (read back and reported through Assignments()),
// counts the job for accounting, and kills it when its node fails. gpusched
// talks to it only through its commands (sbatch, scontrol, scancel), run
// through the SlurmClient seam, never a protocol or agent of its own.
//
// A job is `sbatch --parsable` with the node (--nodelist), --gres=gpu:T:N
// (whole GPUs) or --gres=shard:N (a fraction: N of the GPU's shards, its
// share of the GPU rounded down, so that shares placement fits onto one GPU
// fit into its shards), CPUs, memory, --no-requeue, output files under the
// replica's log directory (on a filesystem the nodes share) and a script on
// stdin that exports the engine's environment and execs its argv (each word
// quoted). Slurm sets CUDA_VISIBLE_DEVICES for the GPUs it gave, so the
// launcher drops gpusched's own. Jobs are named "<prefix>.<replica>" and
// commented
// "<prefix>:<deployment>/<replica>:<tag>", so `squeue` says what serves what
// and a restarted gpusched finds its own and what it needs to adopt them.
//
// Capacity on demand (docs/capacity.md): with pool nodes (State=CLOUD or a
// `pool=` feature, backends/slurm/slurm_pools.h) among the nodes it was
// given, it is the CapacityManager of Slurm's power saving: AddNodes powers
// up powered-down nodes of a pool (`scontrol update NodeName=... State=
// POWER_UP`), ReleaseNode powers one down once its jobs are gone
// (State=POWER_DOWN_ASAP), and Sync reads their states with the nodes. A
// node that does not register by Slurm's ResumeTimeout is reported kFailed
// with Slurm's reason. Slurm's ResumeProgram and SuspendProgram, the
// cluster's own, do the rest; gpusched never starts a machine itself.
//
// Like every launcher it never sleeps and owns no thread; Sync() queries
// Slurm (jobs and nodes) at most once per poll interval, on the
// controller's loop outside its lock, each command bounded by its timeout;
// Poll() only hands over what Sync() found.
// Thread-compatible.
#ifndef GPUSCHED_BACKENDS_SLURM_SLURM_LAUNCHER_H_
#define GPUSCHED_BACKENDS_SLURM_SLURM_LAUNCHER_H_

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "backends/launcher.h"
#include "backends/slurm/slurm_nodes.h"
#include "common/clock.h"

namespace gpusched::backends {

// Runs one Slurm command (argv[0] is "sbatch", "scontrol", "scancel", ...)
// with `input` on stdin; its stdout, or an error when it cannot run, times
// out or exits non-zero.
class SlurmClient {
 public:
  virtual ~SlurmClient() = default;
  virtual absl::StatusOr<std::string> Run(const std::vector<std::string>& argv,
                                          const std::string& input) = 0;
};

// Slurm's own commands from `bin_dir` (empty: PATH), each within `timeout`.
std::unique_ptr<SlurmClient> SystemSlurmClient(std::string bin_dir,
                                               Micros timeout);

// `scontrol show node|job -d --oneliner`, run and parsed.
absl::StatusOr<std::vector<backends::SlurmNode>> ReadSlurmNodes(
    SlurmClient& client);
absl::StatusOr<std::vector<backends::SlurmJob>> ReadSlurmJobs(
    SlurmClient& client);

struct SlurmLauncherOptions {
  std::string partition;  // empty: the cluster's default
  std::string account;
  std::string qos;
  // Names this gpusched's jobs: one prefix per gpusched on a cluster.
  std::string job_prefix = "gpusched";
  // How often Slurm is asked about jobs and nodes.
  Micros poll_interval = 1 * kMicrosPerSecond;
  // Memory asked for a replica that declares none (Slurm's default may be
  // the whole node).
  int64_t default_memory_mib = 1024;
};

class SlurmLauncher : public Launcher, public CapacityManager {
 public:
  // `nodes` is the inventory read at start (names, GRES types) and `specs`
  // what placement knows of them (backends::SlurmNodeSpecs, the same
  // order: it lays out their MIG devices); `clock` paces the queries and
  // outlives the launcher.
  SlurmLauncher(SlurmLauncherOptions options,
                std::unique_ptr<SlurmClient> client,
                std::vector<backends::SlurmNode> nodes,
                std::vector<inventory::NodeSpec> specs, const Clock* clock);
  SlurmLauncher(const SlurmLauncher&) = delete;
  SlurmLauncher& operator=(const SlurmLauncher&) = delete;
  // Leaves the jobs running: the next gpusched (a restart, or another
  // instance taking over) finds and adopts them.
  ~SlurmLauncher() override = default;

  absl::StatusOr<ProcessId> Start(const ProcessSpec& spec) override;
  void Sync() override { Refresh(/*force=*/false); }
  std::vector<ExitEvent> Poll() override;
  absl::Status Stop(ProcessId id, Micros grace, Micros now) override;
  absl::Status Kill(ProcessId id) override;
  Micros Tick(Micros now) override;
  bool IsAlive(ProcessId id) const override;
  int size() const override { return static_cast<int>(jobs_.size()); }

  std::vector<GpuAssignment> Assignments() override;
  std::vector<NodeReport> NodeReports() override;
  std::vector<ManagerReport> ManagerReports() override;
  bool ProcessesOutliveGpusched() const override { return true; }
  std::vector<Leftover> Leftovers() override;
  absl::Status Adopt(const Leftover& leftover, const std::string& name,
                     const std::string& deployment,
                     const std::string& tag) override;

  // The pools' capacity, when the nodes include pool nodes that form valid
  // pools (pool_error() says why not otherwise).
  CapacityManager* capacity() override {
    return pools_.empty() ? nullptr : this;
  }
  std::vector<PoolReport> Pools() override { return pools_; }
  std::vector<PoolNodeReport> PoolNodeReports() override;
  // Powers up `count` (1..the pool's size) powered-down nodes of `pool`, as
  // many as it has when fewer (ResourceExhausted when none). The same
  // `request` (1..128 printable characters) again returns the nodes it
  // asked for and runs nothing; the last kMaxCapacityRequests are kept.
  absl::StatusOr<std::vector<std::string>> AddNodes(
      const std::string& pool, int count, const std::string& request) override;
  // Powers `node` down once its jobs end (POWER_DOWN_ASAP); nothing to do
  // when it is powered down or going. FailedPrecondition while it powers up
  // (Slurm would power it up again after the power down) and for a node
  // that is not a pool node; NotFound for a node Slurm does not have.
  absl::Status ReleaseNode(const std::string& node) override;
  static constexpr int kMaxCapacityRequests = 1024;
  const std::string& pool_error() const { return pool_error_; }

  // The batch script for `spec` (public for tests).
  static std::string Script(const ProcessSpec& spec);
  // The shards a fraction taking `share` of a GPU asks for, of
  // `shards_per_gpu`: rounded down, at least 1.
  static int64_t Shards(double share, int64_t shards_per_gpu);
  // The last Slurm error seen by a query (empty when the last one worked).
  const std::string& last_error() const { return last_error_; }

 private:
  struct Job {
    std::string name;
    std::string node;
    bool running_reported = false;
    bool stop_requested = false;
    bool killed = false;
    Micros kill_deadline = kNever;
  };

  // Reads jobs and nodes from Slurm when the poll interval has passed.
  void Refresh(bool force);
  absl::Status Cancel(ProcessId id, const char* signal);
  // Records the outcome of a query: `error` empty when it worked.
  void QueryDone(std::string error);
  std::string Comment(const std::string& deployment, const std::string& name,
                      const std::string& tag) const;
  bool Ours(const backends::SlurmJob& j) const;

  SlurmLauncherOptions options_;
  std::unique_ptr<SlurmClient> client_;
  const Clock* clock_;
  struct NodeGres {
    backends::SlurmNode node;    // as read at start: GRES types and blocks
    inventory::NodeSpec spec;    // placement's view (MIG layout)
    int64_t shards_per_gpu = 0;  // gres/shard per GPU; 0: none
  };
  // Slurm's GPU indexes on `node` as GPUs and MIG instances of its spec.
  void Locate(const NodeGres& node, const std::vector<int>& indexes,
              std::vector<int>* gpus, std::vector<int>* mig_starts) const;
  absl::flat_hash_map<std::string, NodeGres> gres_;  // by node name
  absl::flat_hash_map<ProcessId, Job> jobs_;
  std::vector<ExitEvent> exits_;
  std::vector<GpuAssignment> assignments_;
  // The last report per node, and the nodes whose report changed.
  absl::flat_hash_map<std::string, NodeReport> node_reports_;
  std::vector<NodeReport> changed_nodes_;
  bool queried_ = false;
  Micros last_refresh_ = 0;
  std::string last_error_;
  std::vector<ManagerReport> manager_reports_;

  // Records a pool node's state; a change is reported by PoolNodeReports.
  void SetPoolNode(const std::string& node, PoolNodeState state,
                   std::string reason);
  std::vector<PoolReport> pools_;
  std::string pool_error_;
  absl::flat_hash_map<std::string, std::string> pool_of_;  // node -> pool
  absl::flat_hash_map<std::string, PoolNodeReport> pool_nodes_;
  std::vector<PoolNodeReport> changed_pool_nodes_;
  // AddNodes' requests and the nodes each asked for, oldest first.
  absl::flat_hash_map<std::string, std::vector<std::string>> requests_;
  std::deque<std::string> request_order_;
};

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_SLURM_SLURM_LAUNCHER_H_
