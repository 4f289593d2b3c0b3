// Slurm node pools: the nodes Slurm's power saving can add (docs/capacity.md,
// "Slurm power saving"), read from `scontrol show node -d --oneliner`.
//
// A pool node is a node with State=CLOUD in slurm.conf (its State words
// carry the CLOUD flag) or one with a `pool=<name>` feature (a static node
// under power saving). Its pool is the `pool=<name>` feature, else the first
// of its partitions that holds pool nodes only, else its first partition.
// Every node of a pool must be alike (GPU GRES type and count, CPUs,
// memory). A `spot` feature on every node makes the pool spot.
//
// A pool node's capacity state comes from Slurm's State words, which
// `sinfo` abbreviates as suffixes:
//   POWERED_DOWN (idle~)                      -> kPoweredDown
//   POWER_UP, POWERING_UP (idle#, alloc#)     -> kPoweringUp
//   POWER_DOWN, POWERING_DOWN (idle!, idle%)  -> kPoweringDown
//   DOWN or FAIL not powering up (down~)      -> kFailed, Slurm's reason
//                                                ("ResumeTimeout reached")
//   anything else (idle, mix, alloc, drain)   -> kUp
// Only kUp nodes can take work; the node reader (SlurmNode::usable) already
// refuses every POWER* flag, so a powered-down node's GPUs are never offered
// to placement.
//
// Pure functions; thread-safe.
#ifndef GPUSCHED_BACKENDS_SLURM_SLURM_POOLS_H_
#define GPUSCHED_BACKENDS_SLURM_SLURM_POOLS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/launcher.h"
#include "backends/slurm/slurm_nodes.h"

namespace gpusched::backends {

inline constexpr int kMaxSlurmPools = 256;
// Longest pool name (a feature's value or a partition name).
inline constexpr size_t kMaxSlurmPoolName = 63;

// Whether Slurm's power saving can add or remove `node`.
bool SlurmPoolNode(const SlurmNode& node);

struct SlurmPoolNodeState {
  PoolNodeState state = PoolNodeState::kPoweredDown;
  // Slurm's Reason= (it may outlive the failure it tells of); for kFailed
  // without one, the state words.
  std::string reason;
};
// The capacity state of a pool node from its State= words ("IDLE+CLOUD+
// POWERED_DOWN") and Reason= text.
SlurmPoolNodeState SlurmPoolState(absl::string_view state,
                                  absl::string_view reason);

// The pools of `nodes` (PoolReport::nodes in Slurm's order), sorted by name;
// none when no node is a pool node. InvalidArgument naming the pool and the
// node for a pool whose nodes differ, a pool name that is empty, too long or
// not letters, digits and "._-", or more than kMaxSlurmPools pools.
absl::StatusOr<std::vector<PoolReport>> SlurmPools(
    const std::vector<SlurmNode>& nodes);

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_SLURM_SLURM_POOLS_H_
