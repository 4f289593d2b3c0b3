#include "inventory/cluster_state.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "inventory/gpu_catalog.h"
#include "inventory/mig.h"

namespace gpusched::inventory {
namespace {

bool IsMediaSlice(const GpuShare& s) {
  return s.mig_profile.size() >= 3 &&
         s.mig_profile.compare(s.mig_profile.size() - 3, 3, "+me") == 0;
}

bool HasInstance(const NodeSpec& spec, int gpu, const std::string& profile,
                 int start) {
  if (gpu < 0 || gpu >= static_cast<int>(spec.mig_instances.size())) {
    return false;
  }
  for (const MigInstance& m : spec.mig_instances[gpu]) {
    if (m.start == start && m.profile == profile) return true;
  }
  return false;
}

// A static MIG layout (NodeSpec::mig_instances): one entry per GPU, on a
// MIG-capable model, every GPU's instances a layout the driver accepts.
absl::Status ValidateStaticMig(const NodeSpec& spec) {
  const std::string what = absl::StrCat("node '", spec.name, "'");
  if (static_cast<int>(spec.mig_instances.size()) != spec.gpu_count) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": mig_instances has ", spec.mig_instances.size(),
                     " entries for ", spec.gpu_count, " GPUs"));
  }
  const GpuModelSpec* model = GpuCatalog::Builtin().Find(spec.gpu_model);
  if (model == nullptr || !model->mig_capable() || spec.mig_slots == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": MIG instances on GPU model '", spec.gpu_model,
                     "', which is not MIG-capable (or mig_slots is 0)"));
  }
  for (size_t i = 0; i < spec.mig_instances.size(); ++i) {
    std::vector<MigSlice> slices;
    for (const MigInstance& m : spec.mig_instances[i]) {
      const MigProfile* p = model->FindMigProfile(m.profile);
      if (p == nullptr || p->name != m.profile) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": GPU ", i, ": '", m.profile, "' is not ",
                         model->name, "'s spelling of a MIG profile"));
      }
      slices.push_back({p, m.start});
    }
    if (absl::Status st = ValidateMigLayout(*model, slices); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": GPU ", i, ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

bool UniformTopology(const NodeSpec& spec) {
  if (spec.nvlink_group.empty()) return true;
  return std::all_of(spec.nvlink_group.begin(), spec.nvlink_group.end(),
                     [&](int g) { return g == spec.nvlink_group[0]; });
}

}  // namespace

absl::StatusOr<int> ClusterState::AddNode(NodeSpec spec) {
  if (spec.name.empty()) {
    return absl::InvalidArgumentError("node has no name");
  }
  if (node_by_name_.contains(spec.name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("node '", spec.name, "' is declared twice"));
  }
  if (spec.cpu_milli < 0 || spec.memory_mib < 0 || spec.gpu_count < 0 ||
      spec.gpu_memory_mib < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", spec.name, "': negative CPU, memory or GPU count"));
  }
  if (spec.gpu_count > 0 && spec.gpu_model.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", spec.name, "' has GPUs but no GPU model"));
  }
  if (spec.gpu_count > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", spec.name, "': ", spec.gpu_count,
                     " GPUs; at most ", kMaxGpusPerNode, " per node"));
  }
  if (spec.mig_slots < 0 || spec.mig_slots > kMaxMigSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", spec.name, "': mig_slots must be 0..", kMaxMigSlots));
  }
  if (spec.mig_slots > 0) {
    // MIG placement follows the catalog's slot rules; the node must agree.
    const GpuModelSpec* model = GpuCatalog::Builtin().Find(spec.gpu_model);
    if (model == nullptr || !model->mig_capable()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", spec.name, "': mig_slots set but GPU model '",
                       spec.gpu_model, "' is not MIG-capable"));
    }
    if (spec.mig_slots != model->mig_memory_slots) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", spec.name, "': mig_slots ", spec.mig_slots, " but ",
          model->name, " has ", model->mig_memory_slots, " MIG memory slots"));
    }
  }
  if (!spec.mig_instances.empty()) {
    if (absl::Status st = ValidateStaticMig(spec); !st.ok()) return st;
  }
  if (!spec.nvlink_group.empty() &&
      static_cast<int>(spec.nvlink_group.size()) != spec.gpu_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", spec.name, "': nvlink_group has ", spec.nvlink_group.size(),
        " entries for ", spec.gpu_count, " GPUs"));
  }
  if (!spec.gpu_model.empty() && !model_ids_.contains(spec.gpu_model) &&
      model_names_.size() >= kMaxGpuModels) {
    return absl::ResourceExhaustedError(
        absl::StrCat("node '", spec.name, "': more than ", kMaxGpuModels,
                     " distinct GPU models in one cluster"));
  }
  const int index = num_nodes();
  int model = -1;
  if (!spec.gpu_model.empty()) {
    auto [it, inserted] = model_ids_.try_emplace(
        spec.gpu_model, static_cast<int>(model_names_.size()));
    if (inserted) model_names_.push_back(spec.gpu_model);
    model = it->second;
  }
  NodeState st;
  st.cpu_free = spec.cpu_milli;
  st.memory_free_mib = spec.memory_mib;
  st.gpus.resize(spec.gpu_count);
  for (size_t i = 0; i < st.gpus.size(); ++i) {
    st.gpus[i].memory_free_mib = spec.gpu_memory_mib;
    st.gpus[i].mig_static =
        i < spec.mig_instances.size() && !spec.mig_instances[i].empty();
  }
  total_gpu_milli_ += int64_t{spec.gpu_count} * kMilliPerGpu;
  max_cpu_milli_ = std::max(max_cpu_milli_, spec.cpu_milli);
  total_cpu_milli_ += spec.cpu_milli;
  max_gpus_ = std::max(max_gpus_, spec.gpu_count);

  node_by_name_[spec.name] = index;
  node_model_.push_back(model);
  node_spec_.push_back(SpecId(spec));
  specs_.push_back(std::move(spec));
  states_.push_back(std::move(st));
  pods_on_node_.emplace_back();
  class_of_.push_back(-1);
  Recompute(index);
  Reclassify(index);
  ++version_;
  ++cluster_epoch_;
  return index;
}

int ClusterState::SpecId(const NodeSpec& spec) {
  // Everything about a node that placement may look at, except its name.
  std::vector<std::string> labels;
  for (const auto& [k, v] : spec.labels)
    labels.push_back(absl::StrCat(k, "=", v));
  std::sort(labels.begin(), labels.end());
  std::string mig;
  for (const std::vector<MigInstance>& gpu : spec.mig_instances) {
    for (const MigInstance& m : gpu)
      absl::StrAppend(&mig, m.profile, "@", m.start, ",");
    mig += ";";
  }
  const std::string key =
      absl::StrCat(spec.cpu_milli, "|", spec.memory_mib, "|", spec.gpu_model,
                   "|", spec.gpu_count, "|", spec.gpu_memory_mib, "|",
                   spec.mig_slots, "|", absl::StrJoin(spec.nvlink_group, ","),
                   "|", absl::StrJoin(labels, ","), "|", mig);
  auto [it, inserted] =
      spec_ids_.try_emplace(key, static_cast<int>(spec_ids_.size()));
  return it->second;
}

int ClusterState::FindNode(const std::string& name) const {
  auto it = node_by_name_.find(name);
  return it == node_by_name_.end() ? -1 : it->second;
}

int ClusterState::ModelId(const std::string& model) const {
  auto it = model_ids_.find(model);
  return it == model_ids_.end() ? -1 : it->second;
}

std::string ClusterState::Fits(const Allocation& alloc) const {
  if (alloc.node < 0 || alloc.node >= num_nodes()) {
    return absl::StrCat("no node with index ", alloc.node);
  }
  const NodeSpec& spec = specs_[alloc.node];
  const NodeState& st = states_[alloc.node];
  if (alloc.cpu_milli < 0 || alloc.memory_mib < 0) return "negative request";
  if (alloc.cpu_milli > st.cpu_free) {
    return absl::StrCat("CPU: need ", alloc.cpu_milli, "m, free ", st.cpu_free,
                        "m");
  }
  if (alloc.memory_mib > st.memory_free_mib) {
    return absl::StrCat("memory: need ", alloc.memory_mib, " MiB, free ",
                        st.memory_free_mib, " MiB");
  }
  std::vector<bool> seen(spec.gpu_count, false);
  for (const GpuShare& s : alloc.gpus) {
    if (s.gpu < 0 || s.gpu >= spec.gpu_count) {
      return absl::StrCat("no GPU ", s.gpu, " on node ", spec.name);
    }
    if (seen[s.gpu]) return absl::StrCat("GPU ", s.gpu, " listed twice");
    seen[s.gpu] = true;
    const GpuState& g = st.gpus[s.gpu];
    if (!g.healthy) return absl::StrCat("GPU ", s.gpu, " is unhealthy");
    if (s.milli < 0 || s.memory_mib < 0) return "negative GPU share";
    if (s.milli > g.milli_free) {
      return absl::StrCat("GPU ", s.gpu, ": need ", s.milli, " milli, free ",
                          g.milli_free);
    }
    if (s.memory_mib > g.memory_free_mib) {
      return absl::StrCat("GPU ", s.gpu, ": need ", s.memory_mib,
                          " MiB GPU memory, free ", g.memory_free_mib);
    }
    if (s.mig_start >= 0) {
      if (spec.mig_slots == 0) {
        return absl::StrCat("GPU ", s.gpu, " is not MIG-capable");
      }
      if (s.mig_size <= 0 || s.mig_size > spec.mig_slots ||
          s.mig_start > spec.mig_slots - s.mig_size) {
        return absl::StrCat("MIG slots ", s.mig_start, "+", s.mig_size,
                            " outside 0..", spec.mig_slots);
      }
      const uint32_t mask = ((1u << s.mig_size) - 1) << s.mig_start;
      if (g.mig_used & mask) {
        return absl::StrCat("GPU ", s.gpu, ": MIG slots ", s.mig_start, "+",
                            s.mig_size, " overlap an existing slice");
      }
      if (g.mig_foreign & mask) {
        return absl::StrCat("GPU ", s.gpu, ": MIG slots ", s.mig_start, "+",
                            s.mig_size, " are held by other work");
      }
      if (!spec.mig_instances.empty() &&
          !HasInstance(spec, s.gpu, s.mig_profile, s.mig_start)) {
        return absl::StrCat("GPU ", s.gpu, " has no MIG instance ",
                            s.mig_profile, " at slot ", s.mig_start,
                            " (its layout is the cluster manager's)");
      }
      if (g.milli_free + g.mig_milli != kMilliPerGpu) {
        return absl::StrCat("GPU ", s.gpu,
                            " is time-shared; it cannot also hold MIG slices");
      }
      if (IsMediaSlice(s) && g.mig_media > 0) {
        return absl::StrCat("GPU ", s.gpu,
                            ": another MIG slice already holds the media "
                            "engines (+me)");
      }
    } else if (g.mig_static) {
      return absl::StrCat("GPU ", s.gpu,
                          " is in MIG mode; it runs MIG slices only");
    } else if (g.mig_used != 0) {
      return absl::StrCat(
          "GPU ", s.gpu,
          " is partitioned into MIG slices; it cannot be shared");
    }
  }
  return "";
}

absl::Status ClusterState::Assume(const std::string& pod,
                                  const Allocation& alloc, PodInfo info) {
  if (pods_.contains(pod)) {
    return absl::AlreadyExistsError(
        absl::StrCat("pod '", pod, "' already holds an allocation"));
  }
  if (alloc.node < 0 || alloc.node >= num_nodes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pod '", pod, "': no node with index ", alloc.node));
  }
  const std::string why = Fits(alloc);
  CHECK(why.empty()) << "double allocation for pod '" << pod << "' on node '"
                     << specs_[alloc.node].name << "': " << why;
  Apply(alloc, +1);
  pods_on_node_[alloc.node].push_back(pod);
  pods_.emplace(pod, PodRecord{alloc, std::move(info), false});
  return absl::OkStatus();
}

bool ClusterState::Forget(const std::string& pod) {
  auto it = pods_.find(pod);
  if (it == pods_.end()) return false;
  const Allocation alloc = std::move(it->second.allocation);
  pods_.erase(it);
  std::vector<std::string>& on_node = pods_on_node_[alloc.node];
  auto pos = std::find(on_node.begin(), on_node.end(), pod);
  CHECK(pos != on_node.end()) << "pod index out of sync for " << pod;
  *pos = std::move(on_node.back());
  on_node.pop_back();
  Apply(alloc, -1);
  return true;
}

absl::Status ClusterState::Bind(const std::string& pod) {
  auto it = pods_.find(pod);
  if (it == pods_.end()) {
    return absl::NotFoundError(
        absl::StrCat("pod '", pod, "' has no assumed allocation to bind"));
  }
  it->second.bound = true;
  ++version_;
  return absl::OkStatus();
}

const PodRecord* ClusterState::FindPod(const std::string& pod) const {
  auto it = pods_.find(pod);
  return it == pods_.end() ? nullptr : &it->second;
}

absl::Status ClusterState::SetMigForeign(int node, int gpu, uint32_t slots) {
  if (node < 0 || node >= num_nodes() || gpu < 0 ||
      gpu >= specs_[node].gpu_count) {
    return absl::NotFoundError(
        absl::StrCat("no GPU ", gpu, " on node index ", node));
  }
  const int n = specs_[node].mig_slots;
  if (n == 0 || (slots >> n) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPU ", gpu, " of node ", specs_[node].name, " has ", n,
        " MIG slots; cannot mark slots 0x", absl::Hex(slots), " foreign"));
  }
  GpuState& g = states_[node].gpus[gpu];
  if (g.mig_foreign == slots) return absl::OkStatus();
  g.mig_foreign = slots;
  Recompute(node);
  Reclassify(node);
  ++version_;
  return absl::OkStatus();
}

absl::Status ClusterState::SetGpuHealth(int node, int gpu, bool healthy) {
  if (node < 0 || node >= num_nodes() || gpu < 0 ||
      gpu >= specs_[node].gpu_count) {
    return absl::NotFoundError(
        absl::StrCat("no GPU ", gpu, " on node index ", node));
  }
  GpuState& g = states_[node].gpus[gpu];
  if (g.healthy == healthy) return absl::OkStatus();
  g.healthy = healthy;
  total_gpu_milli_ += healthy ? kMilliPerGpu : -kMilliPerGpu;
  Recompute(node);
  Reclassify(node);
  ++version_;
  ++cluster_epoch_;
  return absl::OkStatus();
}

void ClusterState::Apply(const Allocation& alloc, int sign) {
  NodeState& st = states_[alloc.node];
  st.cpu_free -= sign * alloc.cpu_milli;
  st.memory_free_mib -= sign * alloc.memory_mib;
  for (const GpuShare& s : alloc.gpus) {
    GpuState& g = st.gpus[s.gpu];
    g.milli_free -= sign * s.milli;
    g.memory_free_mib -= sign * s.memory_mib;
    if (s.mig_start >= 0) {
      const uint32_t mask = ((1u << s.mig_size) - 1) << s.mig_start;
      g.mig_used = sign > 0 ? (g.mig_used | mask) : (g.mig_used & ~mask);
      g.mig_milli += sign * s.milli;
      if (IsMediaSlice(s)) g.mig_media += sign;
    }
    allocated_gpu_milli_ += sign * s.milli;
  }
  Recompute(alloc.node);
  Reclassify(alloc.node);
  ++version_;
}

void ClusterState::Recompute(int node) {
  NodeState& st = states_[node];
  const int64_t was_free = st.gpu_milli_free;
  st.idle_gpus = 0;
  st.max_milli_free = 0;
  st.gpu_milli_free = 0;
  for (const GpuState& g : st.gpus) {
    if (!g.healthy) continue;
    st.gpu_milli_free += g.milli_free;
    if (g.Idle()) ++st.idle_gpus;
    if (!g.Partitioned())
      st.max_milli_free = std::max(st.max_milli_free, g.milli_free);
  }
  free_gpu_milli_ += st.gpu_milli_free - was_free;
  const int spec = node_spec_[node];
  if (spec >= static_cast<int>(free_by_spec_.size())) {
    free_by_spec_.resize(spec + 1, 0);
  }
  free_by_spec_[spec] += st.gpu_milli_free - was_free;
}

void ClusterState::DetachFromClass(int node) {
  const int c = class_of_[node];
  if (c < 0) return;
  absl::btree_set<int>& members = classes_[c].members;
  members.erase(node);
  class_of_[node] = -1;
  if (members.empty()) {
    class_by_key_.erase(class_key_[c]);
    const int lp = live_pos_[c];
    live_classes_[lp] = live_classes_.back();
    live_pos_[live_classes_[lp]] = lp;
    live_classes_.pop_back();
    free_class_slots_.push_back(c);
  }
}

void ClusterState::Reclassify(int node) {
  const NodeSpec& spec = specs_[node];
  const NodeState& st = states_[node];
  std::vector<std::tuple<int64_t, int64_t, int64_t>> gpus;
  gpus.reserve(st.gpus.size());
  for (const GpuState& g : st.gpus) {
    gpus.emplace_back(
        (int64_t{g.mig_media} << 41) | (int64_t{g.healthy} << 40) |
            (int64_t{g.mig_used} << 12) | g.milli_free,
        g.memory_free_mib, (int64_t{g.mig_foreign} << 32) | g.mig_milli);
  }
  // GPUs are interchangeable unless NVLink domains tell them apart.
  if (UniformTopology(spec)) std::sort(gpus.begin(), gpus.end());
  std::vector<int64_t> key;
  key.reserve(3 + 3 * gpus.size());
  key.push_back(node_spec_[node]);
  key.push_back(st.cpu_free);
  key.push_back(st.memory_free_mib);
  for (const auto& [a, b, c] : gpus) {
    key.push_back(a);
    key.push_back(b);
    key.push_back(c);
  }
  const int old = class_of_[node];
  if (old >= 0 && class_key_[old] == key) return;
  DetachFromClass(node);
  auto it = class_by_key_.find(key);
  int c;
  if (it != class_by_key_.end()) {
    c = it->second;
  } else {
    if (!free_class_slots_.empty()) {
      c = free_class_slots_.back();
      free_class_slots_.pop_back();
      ++classes_[c].generation;
      class_key_[c] = key;
    } else {
      c = static_cast<int>(classes_.size());
      classes_.emplace_back();
      class_key_.push_back(key);
      live_pos_.push_back(-1);
    }
    classes_[c].spec_id = node_spec_[node];
    class_by_key_.emplace(std::move(key), c);
    live_pos_[c] = static_cast<int>(live_classes_.size());
    live_classes_.push_back(c);
  }
  classes_[c].members.insert(node);
  class_of_[node] = c;
}

std::shared_ptr<const ClusterSnapshot> ClusterState::Snapshot() const {
  if (snapshot_ && snapshot_->version == version_) return snapshot_;
  auto snap = std::make_shared<ClusterSnapshot>();
  snap->version = version_;
  snap->nodes = specs_;
  snap->states = states_;
  snap->pods.assign(pods_.begin(), pods_.end());
  std::sort(snap->pods.begin(), snap->pods.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  snapshot_ = std::move(snap);
  return snapshot_;
}

}  // namespace gpusched::inventory
