// Slurm inventory: parses what `scontrol show node -d --oneliner` and
// `scontrol show job -d --oneliner` print (Slurm 22.05 and later) into nodes
// and jobs, and turns Slurm nodes into ClusterState NodeSpecs through the GPU
// catalog and a configurable GRES type mapping (docs/slurm.md).
//
// The text format is the one every Slurm version prints and every admin
// reads: one record per line, `Key=Value` fields separated by spaces, where a
// value may itself hold spaces (`OS=Linux 6.1 #1 SMP`) and a node's
// `Reason=` (free text, printed last) takes the rest of the line. The first
// occurrence of a key wins, so a job comment written by someone else cannot
// override a field printed before it. Everything read is bounded (records, line
// length, GRES entries, indexes).
//
// Pure functions; thread-safe.
#ifndef GPUSCHED_BACKENDS_SLURM_SLURM_NODES_H_
#define GPUSCHED_BACKENDS_SLURM_SLURM_NODES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inventory/cluster_state.h"
#include "inventory/gpu_catalog.h"

namespace gpusched::backends {

// Bounds on what is read from Slurm.
inline constexpr int kMaxSlurmRecords = 100000;     // nodes or jobs
inline constexpr size_t kMaxSlurmLine = 64 * 1024;  // one record
inline constexpr int kMaxSlurmGresEntries = 64;     // per Gres= field
inline constexpr int kMaxSlurmGresIndex = 1023;     // a GPU index
inline constexpr int64_t kMaxSlurmGresCount = 1 << 20;
inline constexpr int kMaxSlurmFeatures = 64;  // per node

// The fields of one record, in the order printed.
using SlurmRecord = std::vector<std::pair<std::string, std::string>>;

// Splits one `--oneliner` line into fields; `rest_key`, when one is seen,
// takes the rest of the line as its value (a node's Reason=, free text).
SlurmRecord ParseSlurmRecord(absl::string_view line,
                             absl::string_view rest_key = "");
// The first value of `key` in `record`; empty when absent.
absl::string_view SlurmField(const SlurmRecord& record, absl::string_view key);

// "0-1,3" -> {0, 1, 3}; "N/A" or "" -> {}. Sorted, without duplicates.
absl::StatusOr<std::vector<int>> ParseSlurmIndexList(absl::string_view text);

// One entry of a Gres= or GresUsed= field: "gpu:h100:2(IDX:0-1)",
// "gpu:4(S:0-1)", "shard:40", "gpu:h100:0(IDX:N/A)".
struct SlurmGres {
  std::string name;  // "gpu", "shard", "mps", ...
  std::string type;  // "h100"; empty when untyped
  int64_t count = 0;
  std::vector<int> indexes;  // from "(IDX:...)"; empty when not printed
};
absl::StatusOr<std::vector<SlurmGres>> ParseSlurmGres(absl::string_view text);

// The MIG profile a GRES type names, as Slurm's MIG GRES are typed: the
// profile alone ("1g.10gb", "1g.10gb+me") or after the GPU's type and an
// underscore ("h100_1g.10gb", as AutoDetect=nvml writes them); lower case.
// Empty when the type names no MIG profile (a whole GPU's type).
std::string SlurmMigProfile(absl::string_view gres_type);

// One GRES type's GPUs on a node. Slurm numbers all of a node's gpu GRES,
// whole GPUs and MIG devices, in one index space: one block per type, in
// the order of the node's Gres= field (Slurm 22.05: `Gres=gpu:h100:2,
// gpu:1g.10gb:3` gives the H100s indexes 0-1 and the MIG devices 2-4,
// whatever order gres.conf lists their files in).
struct SlurmGpuBlock {
  std::string type;
  std::string mig_profile;  // SlurmMigProfile(type); empty: whole GPUs
  int first = 0;            // Slurm's index of its first GPU
  int count = 0;
};

struct SlurmNode {
  std::string name;
  std::string address;  // NodeAddr: where its engines are reached
  std::string state;    // as Slurm prints it, "MIXED+DRAIN"
  // Placeable: IDLE, MIXED or ALLOCATED, and none of DRAIN, FAIL, MAINT,
  // NOT_RESPONDING, REBOOT, POWER*, RESERVED, INVALID_REG (nor the "*" that
  // marks a node not responding).
  bool usable = false;
  int64_t cpus = 0;
  int64_t cpus_allocated = 0;
  int64_t memory_mib = 0;
  int64_t memory_allocated_mib = 0;
  std::string gpu_type;  // the GRES type of its whole GPUs; empty untyped
  int gpus = 0;          // whole GPUs
  // Every gpu GRES type's block, whole and MIG, in Slurm's index order.
  std::vector<SlurmGpuBlock> gpu_blocks;
  // gres/shard: shares of its GPUs that Slurm gives jobs ("shard:h100:400"),
  // 0 when the node has none. Assumed spread evenly over its GPUs.
  int64_t shards = 0;
  // Slurm's GPU indexes (SlurmGpuBlock) given to jobs, whole, as MIG
  // devices or as shards (every user's, gpusched's too).
  std::vector<int> gpus_used;
  std::vector<std::string> partitions;
  // AvailableFeatures, in order ("pool=h100", "spot"); empty for "(null)".
  std::vector<std::string> features;
  std::string reason;
};
// InvalidArgument naming the node and field for anything malformed (a node
// with whole GPUs of two GRES types among them).
absl::StatusOr<std::vector<SlurmNode>> ParseSlurmNodes(absl::string_view text);

struct SlurmJob {
  int64_t id = 0;
  std::string name;
  std::string user;   // "root" of "root(0)"
  std::string state;  // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...
  std::string reason;
  std::string comment;
  std::string partition;
  std::string node;  // BatchHost, else NodeList; empty while pending
  int exit_code = 0;
  int exit_signal = 0;
  // GPU indexes on `node`, whole ("GRES=gpu:h100:2(IDX:0-1)") or shared
  // ("GRES=shard:25(IDX:0)").
  std::vector<int> gpus;
  int64_t shards = 0;  // gres/shard held, on the GPUs in `gpus`
};
absl::StatusOr<std::vector<SlurmJob>> ParseSlurmJobs(absl::string_view text);

// True for states a job does not leave (COMPLETED, FAILED, CANCELLED,
// NODE_FAIL, PREEMPTED, TIMEOUT, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE).
bool SlurmJobFinished(absl::string_view state);

// NodeSpecs for `nodes`, in order: CPUs and memory as Slurm declares them,
// the GPU model from `gres_map` (GRES type -> catalog name or alias, matched
// case-insensitively) or else the catalog's own name for the type ("h100").
// MIG devices (typed GRES that name a profile) become GPUs with a static
// MIG layout after the whole GPUs (AddStaticMigGpus, inventory/mig.h); their
// model is `gres_map`'s for the MIG type, else the one the type's prefix
// names ("h100" of "h100_1g.10gb"), else the whole GPUs'.
// InvalidArgument naming every node whose GPU type is unknown, with the
// catalog's names and the `slurm.gresMap` setting that fixes it, or whose
// MIG devices its model has no profile for.
absl::StatusOr<std::vector<inventory::NodeSpec>> SlurmNodeSpecs(
    const std::vector<SlurmNode>& nodes,
    const absl::flat_hash_map<std::string, std::string>& gres_map,
    const inventory::GpuCatalog& catalog = inventory::GpuCatalog::Builtin());

// Where Slurm's GPU index `index` on `node` is in `spec`, the node's
// NodeSpec from SlurmNodeSpecs: a whole GPU (mig_start -1), or a MIG
// device's instance, the k-th device of its block being the k-th instance
// of its profile (StaticMigSlices). nullopt when no block holds it.
struct SlurmGpuSpot {
  int gpu = -1;
  int mig_start = -1;
  std::string mig_profile;  // the catalog's spelling; empty for a whole GPU
};
std::optional<SlurmGpuSpot> LocateSlurmGpu(const SlurmNode& node,
                                           const inventory::NodeSpec& spec,
                                           int index);

// The MIG GRES type of `profile` on `node` (its catalog spelling matched
// case-insensitively); empty when the node has no such devices.
std::string SlurmMigType(const SlurmNode& node, absl::string_view profile);

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_SLURM_SLURM_NODES_H_
