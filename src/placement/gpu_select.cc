#include "placement/gpu_select.h"

#include <algorithm>
#include <map>

#include "inventory/mig.h"

namespace gpusched::placement {

using inventory::GpuState;
using inventory::kMilliPerGpu;
using inventory::NodeSpec;
using inventory::NodeState;

bool ShareFits(const PodRequest& pod, const GpuState& g) {
  return g.healthy && !g.Partitioned() && g.milli_free >= pod.gpu_milli &&
         g.memory_free_mib >= pod.gpu_memory_mib;
}

bool WholeFits(const PodRequest& pod, const GpuState& g) {
  return g.healthy && g.Idle() && g.memory_free_mib >= pod.gpu_memory_mib;
}

int BestFitGpu(const PodRequest& pod, const NodeState& st) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(st.gpus.size()); ++i) {
    if (!ShareFits(pod, st.gpus[i])) continue;
    if (best < 0 || st.gpus[i].milli_free < st.gpus[best].milli_free) best = i;
  }
  return best;
}

int RandomFitGpu(const PodRequest& pod, const NodeState& st, Rng& rng) {
  int chosen = -1, seen = 0;
  for (int i = 0; i < static_cast<int>(st.gpus.size()); ++i) {
    if (!ShareFits(pod, st.gpus[i])) continue;
    if (rng.Uniform(++seen) == 0) chosen = i;
  }
  return chosen;
}

namespace {

// Idle GPUs fitting `pod`, grouped by NVLink domain.
std::map<int, std::vector<int>> IdleByDomain(const PodRequest& pod,
                                             const NodeSpec& spec,
                                             const NodeState& st) {
  std::map<int, std::vector<int>> by_domain;
  for (int i = 0; i < static_cast<int>(st.gpus.size()); ++i) {
    if (WholeFits(pod, st.gpus[i]))
      by_domain[spec.nvlink_group[i]].push_back(i);
  }
  return by_domain;
}

}  // namespace

bool HasNvlinkGang(const PodRequest& pod, const NodeSpec& spec,
                   const NodeState& st) {
  if (spec.nvlink_group.empty()) {
    return pod.gpus <= 1 && st.idle_gpus >= pod.gpus;
  }
  for (const auto& [domain, gpus] : IdleByDomain(pod, spec, st)) {
    if (static_cast<int>(gpus.size()) >= pod.gpus) return true;
  }
  return false;
}

std::vector<int> ChooseWholeGpus(const PodRequest& pod, const NodeSpec& spec,
                                 const NodeState& st) {
  const size_t need = pod.gpus;
  std::vector<int> out;
  if (spec.nvlink_group.empty()) {
    for (int i = 0; i < static_cast<int>(st.gpus.size()) && out.size() < need;
         ++i) {
      if (WholeFits(pod, st.gpus[i])) out.push_back(i);
    }
    if (out.size() < need) out.clear();
    return out;
  }
  const auto by_domain = IdleByDomain(pod, spec, st);
  const std::vector<int>* best = nullptr;
  for (const auto& [domain, gpus] : by_domain) {
    if (gpus.size() >= need &&
        (best == nullptr || gpus.size() < best->size())) {
      best = &gpus;
    }
  }
  if (best != nullptr) {
    return std::vector<int>(best->begin(), best->begin() + need);
  }
  if (pod.topology == inventory::Topology::kRequired) return out;
  // Spill over domains, largest first, to use as few domains as possible.
  std::vector<const std::vector<int>*> domains;
  for (const auto& [domain, gpus] : by_domain) domains.push_back(&gpus);
  std::stable_sort(domains.begin(), domains.end(),
                   [](auto* a, auto* b) { return a->size() > b->size(); });
  for (const auto* gpus : domains) {
    for (int g : *gpus) {
      if (out.size() < need) out.push_back(g);
    }
  }
  if (out.size() < need) out.clear();
  std::sort(out.begin(), out.end());
  return out;
}

const inventory::MigProfile* MigProfileFor(
    const NodeSpec& spec, const std::string& profile,
    const inventory::GpuModelSpec** model) {
  const inventory::GpuModelSpec* m =
      inventory::GpuCatalog::Builtin().Find(spec.gpu_model);
  if (m == nullptr || !m->mig_capable() || spec.mig_slots == 0) return nullptr;
  if (model != nullptr) *model = m;
  return m->FindMigProfile(profile);
}

const char* MigSpecRejection(const NodeSpec& spec, const std::string& profile) {
  const inventory::GpuModelSpec* model = nullptr;
  if (MigProfileFor(spec, profile, &model) != nullptr) return nullptr;
  return model == nullptr ? "GPU model not MIG-capable"
                          : "no such MIG profile on this GPU model";
}

std::vector<inventory::GpuShare> ChooseMigSlice(const PodRequest& pod,
                                                const NodeSpec& spec,
                                                const NodeState& st) {
  const inventory::GpuModelSpec* model = nullptr;
  const inventory::MigProfile* profile =
      MigProfileFor(spec, pod.mig_profile, &model);
  if (profile == nullptr) return {};
  int best = -1, best_start = -1;
  if (!spec.mig_instances.empty()) {
    // A static layout: the first free instance of the profile, GPUs and
    // starts ascending (the order a cluster manager's first fit takes them).
    for (const auto& [gpu, start] :
         inventory::StaticMigSlices(spec, profile->name)) {
      const GpuState& g = st.gpus[gpu];
      if (!g.healthy ||
          (g.MigTaken() &
           inventory::MigSlotMask(start, profile->memory_slots)) ||
          g.memory_free_mib < profile->memory_mib ||
          g.milli_free < profile->milli ||
          (profile->media_extensions && g.mig_media > 0)) {
        continue;
      }
      best = gpu;
      best_start = start;
      break;
    }
  }
  for (int i = 0;
       spec.mig_instances.empty() && i < static_cast<int>(st.gpus.size());
       ++i) {
    const GpuState& g = st.gpus[i];
    // Not time-shared, enough memory, a valid start.
    if (!g.healthy || g.milli_free + g.mig_milli != kMilliPerGpu ||
        g.milli_free < profile->milli ||
        g.memory_free_mib < profile->memory_mib) {
      continue;
    }
    // One slice per GPU may hold the media engines (max_count 1 for "+me";
    // for every other profile the slot rules already imply max_count).
    if (profile->media_extensions && g.mig_media > 0) continue;
    const int start = inventory::ChooseMigStart(*model, *profile, g.mig_used);
    if (start < 0) continue;
    if (best < 0 || (g.mig_used != 0 && st.gpus[best].mig_used == 0)) {
      best = i;
      best_start = start;
    }
  }
  if (best < 0) return {};
  inventory::GpuShare s;
  s.gpu = best;
  s.milli = profile->milli;
  s.memory_mib = profile->memory_mib;
  s.mig_start = best_start;
  s.mig_size = profile->memory_slots;
  s.mig_profile = profile->name;
  return {s};
}

std::vector<inventory::GpuShare> MakeShares(const PodRequest& pod,
                                            const NodeSpec& spec,
                                            const std::vector<int>& gpus) {
  std::vector<inventory::GpuShare> shares;
  for (int g : gpus) {
    inventory::GpuShare s;
    s.gpu = g;
    if (pod.kind == GpuKind::kWhole) {
      s.milli = kMilliPerGpu;
      s.memory_mib = spec.gpu_memory_mib;
    } else {
      s.milli = pod.gpu_milli;
      s.memory_mib = pod.gpu_memory_mib;
    }
    shares.push_back(s);
  }
  return shares;
}

}  // namespace gpusched::placement
