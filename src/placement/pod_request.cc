#include "placement/pod_request.h"

#include "absl/strings/str_cat.h"
#include "inventory/gpu_catalog.h"

namespace gpusched::placement {

using inventory::kMilliPerGpu;

absl::StatusOr<PodRequest> CompilePodRequest(
    const inventory::ResourceRequest& req, const ClusterState& cs,
    inventory::PodInfo info) {
  if (req.cpu_milli < 0 || req.memory_mib < 0 || req.gpu_memory_mib < 0) {
    return absl::InvalidArgumentError(
        "cpu_milli, memory_mib and gpu_memory_mib must not be negative");
  }
  PodRequest p;
  p.kind = req.kind;
  p.cpu_milli = req.cpu_milli;
  p.memory_mib = req.memory_mib;
  p.topology = req.topology;
  p.info = std::move(info);
  switch (req.kind) {
    case GpuKind::kNone:
      break;
    case GpuKind::kWhole:
      if (req.gpus <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("whole: needs at least 1 GPU, got ", req.gpus));
      }
      p.gpus = req.gpus;
      p.gpu_milli = kMilliPerGpu;
      p.gpu_memory_mib = req.gpu_memory_mib;
      break;
    case GpuKind::kFraction:
      if (req.gpu_milli <= 0 || req.gpu_milli > kMilliPerGpu) {
        return absl::InvalidArgumentError(absl::StrCat(
            "fraction: gpu_milli must be 1..1000, got ", req.gpu_milli));
      }
      p.gpus = 1;
      p.gpu_milli = req.gpu_milli;
      p.gpu_memory_mib = req.gpu_memory_mib;
      break;
    case GpuKind::kMig:
      if (req.mig_profile.empty()) {
        return absl::InvalidArgumentError("mig: no profile named");
      }
      p.gpus = 1;
      p.mig_profile = req.mig_profile;
      break;
  }
  if (!req.gpu_models.empty()) {
    p.any_model = false;
    p.model_mask = 0;
    for (const std::string& m : req.gpu_models) {
      const int id = cs.ModelId(m);
      if (id >= 0) p.model_mask |= uint64_t{1} << id;
    }
  }
  if (p.kind == GpuKind::kMig) {
    // A slice holds its profile's compute share (the same on every
    // MIG-capable model: compute comes in sevenths); quotas and scores
    // count that.
    for (int id = 0; id < static_cast<int>(cs.models().size()); ++id) {
      if (!p.ModelAllowed(id)) continue;
      const inventory::GpuModelSpec* model =
          inventory::GpuCatalog::Builtin().Find(cs.models()[id]);
      const inventory::MigProfile* profile =
          model != nullptr ? model->FindMigProfile(p.mig_profile) : nullptr;
      if (profile != nullptr) {
        p.gpu_milli = profile->milli;
        break;
      }
    }
  }
  return p;
}

PodShape ShapeOf(const PodRequest& p) {
  return {static_cast<int>(p.kind),
          p.gpus,
          p.gpu_milli,
          p.gpu_memory_mib,
          p.mig_profile,
          p.cpu_milli,
          p.memory_mib,
          p.model_mask,
          p.any_model,
          static_cast<int>(p.topology)};
}

}  // namespace gpusched::placement
