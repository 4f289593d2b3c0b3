// MIG slot placement and layout planning, following NVIDIA's rules for the
// catalog's GPU models.
//
// A MIG-capable GPU has M memory slots (8 on A100/H100/H200/B200). A GPU
// instance of profile P takes P.memory_slots consecutive slots starting at
// one of P.starts, and no two instances may overlap. GpuState::mig_used
// (cluster_state.h) is the bit mask of taken slots, bit i = slot i.
//
// Rules checked here (gpu_catalog.cc cites the sources):
//   * start in the profile's allowed starts; slots inside the GPU, no overlap;
//   * at most max_count instances of a profile; at most one "+me" instance
//     (a "+me" instance takes the GPU's only media-engine set);
//   * compute slices in use never exceed the model's total (on 8x7 models
//     the allowed starts already guarantee it; checked anyway);
//   * optionally, the pre-R510 driver rule: a 4-memory/4-compute profile and
//     a 4-memory/3-compute profile cannot share a GPU (MIG User Guide,
//     "Partitioning": "prior to NVIDIA driver release R510 ... not
//     supported. This restriction no longer applies on newer drivers").
// A slot mask alone does not say which profiles hold the slots, so the
// mask-only functions (ValidMigStarts, ChooseMigStart) check the first rule
// only; ValidateMigLayout and the planner check all of them.
//
// NVIDIA's known issue ("create the 3g instance first, otherwise you can get
// Insufficient Resources") is fragmentation: earlier instances sitting where
// a later 3g would need to start. Plans are returned in a creation order that
// creates 3g instances first, then the rest largest first, and
// ChooseMigStart avoids the fragmentation in the first place.
//
// Pure functions over catalog data; thread-safe.
#ifndef GPUSCHED_INVENTORY_MIG_H_
#define GPUSCHED_INVENTORY_MIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inventory/cluster_state.h"
#include "inventory/gpu_catalog.h"

namespace gpusched::inventory {

// Slots [start, start + size) as a bit mask.
uint32_t MigSlotMask(int start, int size);

struct MigRules {
  // Apply the pre-R510 rule (4g and 3g profiles never share a GPU).
  bool pre_r510_driver = false;
};

// One GPU instance on one GPU.
struct MigSlice {
  const MigProfile* profile = nullptr;  // points into the catalog
  int start = 0;                        // first memory slot

  bool operator==(const MigSlice&) const = default;
};

// Allowed starts of `profile` on a GPU whose taken slots are `used`, in
// ascending order. Empty if the model is not MIG-capable.
std::vector<int> ValidMigStarts(const GpuModelSpec& model,
                                const MigProfile& profile, uint32_t used);

// The start to place `profile` at, or -1 if it does not fit. Among the valid
// starts it keeps the largest contiguous free region that a profile can still
// use: it maximises, after placing, (1) the memory slots of the largest
// profile that still fits, then (2) the number of (profile, start)
// placements still possible, then (3) prefers the higher start (NVIDIA's
// driver also fills from the top, e.g. a first 1g lands on slot 6), so 1g
// slices pack at the end and the 4g/3g starts at 0 and 4 stay open.
int ChooseMigStart(const GpuModelSpec& model, const MigProfile& profile,
                   uint32_t used);

// OK if `slices` (with nothing else on the GPU) is a layout the driver
// accepts under `rules`; else InvalidArgument naming the first broken rule.
absl::Status ValidateMigLayout(const GpuModelSpec& model,
                               const std::vector<MigSlice>& slices,
                               MigRules rules = {});

// How much of a profile is wanted.
struct MigDemand {
  std::string profile;  // profile name, e.g. "3g.40gb"
  int count = 0;        // instances wanted (across all GPUs planned)
  double weight = 1.0;  // value of one unit of this profile (see objective)
};

enum class MigObjective {
  kCompute,  // value of an instance = weight x compute slices
  kMemory,   // value of an instance = weight x memory slots
};

struct MigPlanOptions {
  MigObjective objective = MigObjective::kCompute;
  MigRules rules;
  // Slots already taken on the GPU (single-GPU planning only); the plan
  // only adds instances around them.
  uint32_t used = 0;
};

// A layout for one GPU.
struct MigPlan {
  std::vector<MigSlice> slices;  // in creation order (see file comment)
  double value = 0;              // objective value of `slices`
  uint32_t used = 0;             // slot mask after the plan (incl. `used`)
};

// Exhaustive search for the layout on one GPU that maximises the objective
// value of satisfied demand (never more instances of a profile than asked).
// Ties go to the layout that leaves the most room (as ChooseMigStart), then
// to the first found in a fixed order, so results are deterministic.
// InvalidArgument if the model is not MIG-capable, a profile is unknown, or a
// count or weight is negative.
absl::StatusOr<MigPlan> PlanMigLayout(const GpuModelSpec& model,
                                      const std::vector<MigDemand>& demand,
                                      const MigPlanOptions& options = {});

// Plans `num_gpus` empty GPUs of one model greedily: each GPU gets the best
// single-GPU layout for the demand still unmet. `options.used` is ignored.
// GPUs left once the demand is met get empty plans.
absl::StatusOr<std::vector<MigPlan>> PlanMigLayouts(
    const GpuModelSpec& model, const std::vector<MigDemand>& demand,
    int num_gpus, const MigPlanOptions& options = {});

// MIG devices that a cluster manager created and advertises by profile and
// count only (Slurm's typed MIG GRES, the GPU Operator's mixed strategy):
// neither says which GPU holds which instance. They are laid onto the
// fewest GPUs that hold them (PlanMigLayouts, by memory slots), each GPU's
// instances by ascending start. The result depends only on the counts, so
// every run and every reader computes the same layout. What is exact is
// the node, the profile and the count; the GPU and slot of one instance are
// gpusched's canonical choice (docs/inventory.md, "Static MIG layouts").
// InvalidArgument naming the profile when the model has no such profile, a
// count is negative or over kMaxStaticMigInstances in all, or they do not
// fit on `max_gpus` GPUs.
inline constexpr int kMaxStaticMigInstances = 16 * 7;
absl::StatusOr<std::vector<std::vector<MigSlice>>> LayOutMigDevices(
    const GpuModelSpec& model,
    const std::vector<std::pair<std::string, int>>& counts, int max_gpus);

// Appends to `spec` (whose gpu_model is `model`) the GPUs that hold MIG
// devices `counts` (LayOutMigDevices), after its whole GPUs, and sets
// mig_instances and mig_slots; a node with no MIG device is left as it is.
// Errors as LayOutMigDevices, with at most ClusterState::kMaxGpusPerNode
// GPUs in all.
absl::Status AddStaticMigGpus(
    NodeSpec& spec, const GpuModelSpec& model,
    const std::vector<std::pair<std::string, int>>& counts);

// The instances of `profile` (matched as GpuModelSpec::FindMigProfile does)
// on a node with a static layout, as (GPU, start): GPUs ascending, starts
// ascending. The n-th device of that profile a cluster manager numbers is
// the n-th entry here.
std::vector<std::pair<int, int>> StaticMigSlices(const NodeSpec& spec,
                                                 absl::string_view profile);

// The slots of the instance at `start` on GPU `gpu` of a node with a static
// layout; 0 when there is none.
uint32_t StaticMigMask(const NodeSpec& spec, int gpu, int start);

// "3g.40gb@4" style description of a layout, in the given order.
std::string MigLayoutString(const std::vector<MigSlice>& slices);

}  // namespace gpusched::inventory

#endif  // GPUSCHED_INVENTORY_MIG_H_
