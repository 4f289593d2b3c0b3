#include "inventory/mig.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpusched::inventory {
namespace {

bool Fits(const GpuModelSpec& model, const MigProfile& p, int start,
          uint32_t used) {
  if (start < 0 || start + p.memory_slots > model.mig_memory_slots) {
    return false;
  }
  return (used & MigSlotMask(start, p.memory_slots)) == 0;
}

// How much room a slot mask leaves: the largest profile that still fits,
// then how many placements are still possible. Larger is roomier.
std::pair<int, int> Room(const GpuModelSpec& model, uint32_t used) {
  int largest = 0;
  int placements = 0;
  for (const MigProfile& p : model.mig_profiles) {
    for (int s : p.starts) {
      if (Fits(model, p, s, used)) {
        ++placements;
        largest = std::max(largest, p.memory_slots);
      }
    }
  }
  return {largest, placements};
}

int ProfileIndex(const GpuModelSpec& model, const MigProfile* p) {
  for (size_t i = 0; i < model.mig_profiles.size(); ++i) {
    if (&model.mig_profiles[i] == p) return static_cast<int>(i);
  }
  return -1;
}

bool Is4g4m(const MigProfile& p) {
  return p.memory_slots == 4 && p.compute_slices == 4;
}
bool Is3g4m(const MigProfile& p) {
  return p.memory_slots == 4 && p.compute_slices == 3;
}

// Creation order: 3g first (NVIDIA's known issue), then larger first.
void SortForCreation(std::vector<MigSlice>& slices) {
  std::sort(slices.begin(), slices.end(),
            [](const MigSlice& a, const MigSlice& b) {
              auto key = [](const MigSlice& s) {
                return std::make_tuple(s.profile->compute_slices != 3,
                                       -s.profile->memory_slots,
                                       -s.profile->compute_slices, s.start);
              };
              return key(a) < key(b);
            });
}

// Exhaustive search state for PlanMigLayout.
struct Candidate {
  int profile = 0;  // index into model.mig_profiles
  int start = 0;
  double value = 0;
};

class Planner {
 public:
  Planner(const GpuModelSpec& model, const MigPlanOptions& options,
          std::vector<Candidate> candidates, std::vector<int> wanted)
      : model_(model),
        options_(options),
        candidates_(std::move(candidates)),
        wanted_(std::move(wanted)),
        count_(model.mig_profiles.size(), 0) {}

  MigPlan Run() {
    best_used_ = options_.used;
    best_room_ = Room(model_, options_.used);
    Search(0, options_.used, 0, 0.0);
    MigPlan plan;
    for (const Candidate* c : best_) {
      plan.slices.push_back({&model_.mig_profiles[c->profile], c->start});
    }
    SortForCreation(plan.slices);
    plan.value = best_value_;
    plan.used = best_used_;
    return plan;
  }

 private:
  void Search(size_t next, uint32_t used, int compute, double value) {
    Consider(used, value);
    for (size_t i = next; i < candidates_.size(); ++i) {
      const Candidate& c = candidates_[i];
      const MigProfile& p = model_.mig_profiles[c.profile];
      if (count_[c.profile] >= wanted_[c.profile]) continue;
      if (count_[c.profile] >= p.max_count) continue;
      if (!Fits(model_, p, c.start, used)) continue;
      if (compute + p.compute_slices > model_.mig_compute_slices) continue;
      if (p.media_extensions && media_) continue;
      if (options_.rules.pre_r510_driver &&
          ((Is4g4m(p) && has3g_) || (Is3g4m(p) && has4g_))) {
        continue;
      }
      const bool media = media_, has4g = has4g_, has3g = has3g_;
      media_ = media_ || p.media_extensions;
      has4g_ = has4g_ || Is4g4m(p);
      has3g_ = has3g_ || Is3g4m(p);
      ++count_[c.profile];
      chosen_.push_back(&c);
      Search(i + 1, used | MigSlotMask(c.start, p.memory_slots),
             compute + p.compute_slices, value + c.value);
      chosen_.pop_back();
      --count_[c.profile];
      media_ = media;
      has4g_ = has4g;
      has3g_ = has3g;
    }
  }

  void Consider(uint32_t used, double value) {
    constexpr double kEps = 1e-9;
    if (value < best_value_ - kEps) return;
    const std::pair<int, int> room = Room(model_, used);
    if (value <= best_value_ + kEps && room <= best_room_) return;
    best_value_ = value;
    best_room_ = room;
    best_used_ = used;
    best_ = chosen_;
  }

  const GpuModelSpec& model_;
  const MigPlanOptions& options_;
  const std::vector<Candidate> candidates_;
  const std::vector<int> wanted_;
  std::vector<int> count_;
  bool media_ = false;
  bool has4g_ = false;
  bool has3g_ = false;
  std::vector<const Candidate*> chosen_;

  std::vector<const Candidate*> best_;
  double best_value_ = 0;
  std::pair<int, int> best_room_;
  uint32_t best_used_ = 0;
};

}  // namespace

uint32_t MigSlotMask(int start, int size) {
  if (size <= 0 || start < 0 || start >= 32) return 0;
  const uint64_t bits = ((uint64_t{1} << size) - 1) << start;
  return static_cast<uint32_t>(bits);
}

std::vector<int> ValidMigStarts(const GpuModelSpec& model,
                                const MigProfile& profile, uint32_t used) {
  std::vector<int> out;
  if (!model.mig_capable()) return out;
  for (int s : profile.starts) {
    if (Fits(model, profile, s, used)) out.push_back(s);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int ChooseMigStart(const GpuModelSpec& model, const MigProfile& profile,
                   uint32_t used) {
  int best = -1;
  std::pair<int, int> best_room;
  for (int s : ValidMigStarts(model, profile, used)) {
    const std::pair<int, int> room =
        Room(model, used | MigSlotMask(s, profile.memory_slots));
    // Starts ascend, so ">=" prefers the higher start on ties.
    if (best < 0 || room >= best_room) {
      best = s;
      best_room = room;
    }
  }
  return best;
}

absl::Status ValidateMigLayout(const GpuModelSpec& model,
                               const std::vector<MigSlice>& slices,
                               MigRules rules) {
  if (!model.mig_capable()) {
    return absl::InvalidArgumentError(
        absl::StrCat(model.name, " does not support MIG"));
  }
  uint32_t used = 0;
  int compute = 0;
  int media = 0;
  bool has4g = false, has3g = false;
  std::vector<int> count(model.mig_profiles.size(), 0);
  for (const MigSlice& s : slices) {
    const int idx = ProfileIndex(model, s.profile);
    if (idx < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("profile ", s.profile ? s.profile->name : "(null)",
                       " is not a ", model.name, " profile"));
    }
    const MigProfile& p = *s.profile;
    if (std::find(p.starts.begin(), p.starts.end(), s.start) ==
        p.starts.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          p.name, " cannot start at slot ", s.start, " on ", model.name,
          " (allowed: ", absl::StrJoin(p.starts, ","), ")"));
    }
    const uint32_t mask = MigSlotMask(s.start, p.memory_slots);
    if (used & mask) {
      return absl::InvalidArgumentError(absl::StrCat(
          p.name, "@", s.start, " overlaps another instance on slots ", s.start,
          "..", s.start + p.memory_slots - 1));
    }
    used |= mask;
    if (++count[idx] > p.max_count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "more than ", p.max_count, " ", p.name, " instances on one GPU"));
    }
    if (p.media_extensions && ++media > 1) {
      return absl::InvalidArgumentError(
          "more than one +me instance on one GPU (one media-engine set)");
    }
    compute += p.compute_slices;
    if (compute > model.mig_compute_slices) {
      return absl::InvalidArgumentError(
          absl::StrCat("layout needs ", compute, " compute slices; ",
                       model.name, " has ", model.mig_compute_slices));
    }
    has4g = has4g || Is4g4m(p);
    has3g = has3g || Is3g4m(p);
    if (rules.pre_r510_driver && has4g && has3g) {
      return absl::InvalidArgumentError(
          "a 4g and a 3g instance cannot share a GPU before driver R510");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<MigPlan> PlanMigLayout(const GpuModelSpec& model,
                                      const std::vector<MigDemand>& demand,
                                      const MigPlanOptions& options) {
  if (!model.mig_capable()) {
    return absl::InvalidArgumentError(
        absl::StrCat(model.name, " does not support MIG"));
  }
  std::vector<int> wanted(model.mig_profiles.size(), 0);
  std::vector<double> weight(model.mig_profiles.size(), 0.0);
  for (const MigDemand& d : demand) {
    const MigProfile* p = model.FindMigProfile(d.profile);
    if (p == nullptr) {
      std::vector<std::string> names;
      for (const MigProfile& q : model.mig_profiles) names.push_back(q.name);
      return absl::InvalidArgumentError(
          absl::StrCat("unknown MIG profile '", d.profile, "' for ", model.name,
                       "; known: ", absl::StrJoin(names, ", ")));
    }
    if (d.count < 0 || d.weight < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MIG demand for ", d.profile, ": negative count or weight"));
    }
    const int idx = ProfileIndex(model, p);
    wanted[idx] += d.count;
    weight[idx] = d.weight;  // the last entry for a profile wins
  }
  // Candidates: bigger profiles first, then catalog order, then start.
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < model.mig_profiles.size(); ++i) {
    const MigProfile& p = model.mig_profiles[i];
    if (wanted[i] == 0) continue;
    const int size = options.objective == MigObjective::kCompute
                         ? p.compute_slices
                         : p.memory_slots;
    for (int s : p.starts) {
      candidates.push_back({static_cast<int>(i), s, weight[i] * size});
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const Candidate& a, const Candidate& b) {
                     return model.mig_profiles[a.profile].memory_slots >
                            model.mig_profiles[b.profile].memory_slots;
                   });
  Planner planner(model, options, std::move(candidates), std::move(wanted));
  return planner.Run();
}

absl::StatusOr<std::vector<MigPlan>> PlanMigLayouts(
    const GpuModelSpec& model, const std::vector<MigDemand>& demand,
    int num_gpus, const MigPlanOptions& options) {
  if (num_gpus < 0) {
    return absl::InvalidArgumentError("negative number of GPUs");
  }
  std::vector<MigDemand> remaining = demand;
  MigPlanOptions one = options;
  one.used = 0;
  std::vector<MigPlan> plans;
  for (int g = 0; g < num_gpus; ++g) {
    const bool done =
        std::all_of(remaining.begin(), remaining.end(),
                    [](const MigDemand& d) { return d.count <= 0; });
    if (done) {
      plans.emplace_back();
      continue;
    }
    absl::StatusOr<MigPlan> plan = PlanMigLayout(model, remaining, one);
    if (!plan.ok()) return plan.status();
    for (const MigSlice& s : plan->slices) {
      for (MigDemand& d : remaining) {
        if (d.count > 0 && model.FindMigProfile(d.profile) == s.profile) {
          --d.count;
          break;
        }
      }
    }
    plans.push_back(*std::move(plan));
  }
  return plans;
}

absl::StatusOr<std::vector<std::vector<MigSlice>>> LayOutMigDevices(
    const GpuModelSpec& model,
    const std::vector<std::pair<std::string, int>>& counts, int max_gpus) {
  if (!model.mig_capable()) {
    return absl::InvalidArgumentError(
        absl::StrCat(model.name, " does not support MIG"));
  }
  std::vector<MigDemand> demand;
  int total = 0;
  for (const auto& [name, count] : counts) {
    const MigProfile* p = model.FindMigProfile(name);
    if (p == nullptr) {
      std::vector<std::string> names;
      for (const MigProfile& q : model.mig_profiles) names.push_back(q.name);
      return absl::InvalidArgumentError(
          absl::StrCat("no MIG profile '", name, "' on ", model.name,
                       " (its profiles: ", absl::StrJoin(names, ", "), ")"));
    }
    if (count < 0 || count > kMaxStaticMigInstances - total) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": ", count, " MIG devices; at most ",
                       kMaxStaticMigInstances, " per node in all"));
    }
    total += count;
    bool merged = false;
    for (MigDemand& d : demand) {
      if (d.profile == p->name) {
        d.count += count;
        merged = true;
      }
    }
    if (!merged && count > 0) demand.push_back({p->name, count, 1.0});
  }
  std::vector<std::vector<MigSlice>> out;
  if (total == 0) return out;
  // Profiles in catalog order, so the layout does not depend on the order
  // the manager listed them in.
  std::sort(demand.begin(), demand.end(),
            [&](const MigDemand& a, const MigDemand& b) {
              return ProfileIndex(model, model.FindMigProfile(a.profile)) <
                     ProfileIndex(model, model.FindMigProfile(b.profile));
            });
  MigPlanOptions options;
  options.objective = MigObjective::kMemory;
  absl::StatusOr<std::vector<MigPlan>> plans =
      PlanMigLayouts(model, demand, std::max(max_gpus, 0), options);
  if (!plans.ok()) return plans.status();
  int placed = 0;
  for (const MigPlan& plan : *plans) {
    if (plan.slices.empty()) break;
    std::vector<MigSlice> gpu = plan.slices;
    std::sort(gpu.begin(), gpu.end(), [](const MigSlice& a, const MigSlice& b) {
      return a.start < b.start;
    });
    placed += static_cast<int>(gpu.size());
    out.push_back(std::move(gpu));
  }
  if (placed < total) {
    std::vector<std::string> what;
    for (const MigDemand& d : demand) {
      what.push_back(absl::StrCat(d.count, "x ", d.profile));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("MIG devices ", absl::StrJoin(what, ", "),
                     " do not fit on ", max_gpus, " ", model.name, " GPUs"));
  }
  return out;
}

absl::Status AddStaticMigGpus(
    NodeSpec& spec, const GpuModelSpec& model,
    const std::vector<std::pair<std::string, int>>& counts) {
  const int room = ClusterState::kMaxGpusPerNode - spec.gpu_count;
  absl::StatusOr<std::vector<std::vector<MigSlice>>> layout =
      LayOutMigDevices(model, counts, room);
  if (!layout.ok()) return layout.status();
  if (layout->empty()) return absl::OkStatus();
  spec.mig_instances.resize(spec.gpu_count);
  for (const std::vector<MigSlice>& gpu : *layout) {
    std::vector<MigInstance> instances;
    for (const MigSlice& s : gpu)
      instances.push_back({s.profile->name, s.start});
    spec.mig_instances.push_back(std::move(instances));
    if (!spec.nvlink_group.empty())
      spec.nvlink_group.push_back(-1 - spec.gpu_count);
    ++spec.gpu_count;
  }
  spec.mig_slots = model.mig_memory_slots;
  return absl::OkStatus();
}

std::vector<std::pair<int, int>> StaticMigSlices(const NodeSpec& spec,
                                                 absl::string_view profile) {
  std::vector<std::pair<int, int>> out;
  const GpuModelSpec* model = GpuCatalog::Builtin().Find(spec.gpu_model);
  const MigProfile* p =
      model != nullptr ? model->FindMigProfile(profile) : nullptr;
  if (p == nullptr) return out;
  for (size_t g = 0; g < spec.mig_instances.size(); ++g) {
    for (const MigInstance& m : spec.mig_instances[g]) {
      if (m.profile == p->name) out.emplace_back(static_cast<int>(g), m.start);
    }
  }
  return out;
}

uint32_t StaticMigMask(const NodeSpec& spec, int gpu, int start) {
  if (gpu < 0 || gpu >= static_cast<int>(spec.mig_instances.size())) return 0;
  const GpuModelSpec* model = GpuCatalog::Builtin().Find(spec.gpu_model);
  if (model == nullptr) return 0;
  for (const MigInstance& m : spec.mig_instances[gpu]) {
    if (m.start != start) continue;
    const MigProfile* p = model->FindMigProfile(m.profile);
    return p != nullptr ? MigSlotMask(start, p->memory_slots) : 0;
  }
  return 0;
}

std::string MigLayoutString(const std::vector<MigSlice>& slices) {
  return absl::StrJoin(slices, ", ", [](std::string* out, const MigSlice& s) {
    absl::StrAppend(out, s.profile ? s.profile->name : "?", "@", s.start);
  });
}

}  // namespace gpusched::inventory
