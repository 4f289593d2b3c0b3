#include "backends/kubernetes/kube_nodes.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "config/quantity.h"
#include "inventory/cluster_state.h"
#include "inventory/mig.h"

namespace gpusched::backends {
namespace {

using nlohmann::json;

// The member `key` of `j` when `j` is an object holding it; nullptr else.
const json* Member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// A string member: "" when absent; an error when not a string or too long.
absl::StatusOr<std::string> Str(const json& j, const char* key,
                                const std::string& what) {
  const json* v = Member(j, key);
  if (v == nullptr) return std::string();
  if (!v->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", key, " is not a string"));
  }
  const std::string& s = v->get_ref<const std::string&>();
  if (s.size() > kMaxKubeString) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", key, " is longer than ", kMaxKubeString, " characters"));
  }
  return s;
}

// An array member: nullptr when absent; an error when not an array or
// longer than `bound`.
absl::StatusOr<const json*> Array(const json& j, const char* key,
                                  const std::string& what, size_t bound) {
  const json* v = Member(j, key);
  if (v == nullptr) return nullptr;
  if (!v->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", key, " is not a list"));
  }
  if (v->size() > bound) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", key, " has ", v->size(), " entries, more than ", bound));
  }
  return v;
}

// metadata.labels, sorted by key.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Labels(
    const json& meta, const std::string& what) {
  std::vector<std::pair<std::string, std::string>> out;
  const json* labels = Member(meta, "labels");
  if (labels == nullptr) return out;
  if (!labels->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": metadata.labels is not a map"));
  }
  if (labels->size() > static_cast<size_t>(kMaxKubeLabels)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", labels->size(), " labels, more than ", kMaxKubeLabels));
  }
  for (const auto& [k, v] : labels->items()) {
    if (!v.is_string() || k.size() > kMaxKubeString ||
        v.get_ref<const std::string&>().size() > kMaxKubeString) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": label '", k.substr(0, 64), "' is not a short string"));
    }
    out.emplace_back(k, v.get<std::string>());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string LabelOf(
    const std::vector<std::pair<std::string, std::string>>& labels,
    const std::string& key) {
  auto it = std::lower_bound(
      labels.begin(), labels.end(), key,
      [](const auto& kv, const std::string& k) { return kv.first < k; });
  return it != labels.end() && it->first == key ? it->second : std::string();
}

// A count quantity ("4"); an error naming the resource when not a whole
// number within 0..bound.
absl::StatusOr<int64_t> Count(const json& v, const std::string& what,
                              const std::string& resource, int64_t bound) {
  int64_t n = -1;
  if (v.is_number_integer()) {
    n = v.get<int64_t>();
  } else if (!v.is_string() || !absl::SimpleAtoi(v.get<std::string>(), &n)) {
    n = -1;
  }
  if (n < 0 || n > bound) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", resource, " is not a whole number within 0..", bound));
  }
  return n;
}

// Adds the GPU resources of one resource map (limits or requests) to `gpus`
// and `mig`.
absl::Status AddGpuResources(const json& resources, const std::string& what,
                             int64_t* gpus,
                             std::map<std::string, int64_t>* mig) {
  if (!resources.is_object()) return absl::OkStatus();
  for (const auto& [k, v] : resources.items()) {
    if (k == kKubeGpuResource) {
      absl::StatusOr<int64_t> n = Count(v, what, k, kMaxKubeGpus);
      if (!n.ok()) return n.status();
      *gpus += *n;
    } else if (absl::StartsWith(k, kKubeMigResourcePrefix)) {
      absl::StatusOr<int64_t> n = Count(v, what, k, kMaxKubeGpus * 7);
      if (!n.ok()) return n.status();
      (*mig)[k.substr(sizeof(kKubeMigResourcePrefix) - 1)] += *n;
    }
  }
  return absl::OkStatus();
}

// What one container holds: limits (which the device plugin requires for
// extended resources), else requests.
absl::Status ContainerGpus(const json& c, const std::string& what,
                           int64_t* gpus, std::map<std::string, int64_t>* mig) {
  const json* res = Member(c, "resources");
  if (res == nullptr) return absl::OkStatus();
  const json* limits = Member(*res, "limits");
  const json* requests = Member(*res, "requests");
  int64_t g = 0;
  std::map<std::string, int64_t> m;
  if (limits != nullptr) {
    if (absl::Status st = AddGpuResources(*limits, what, &g, &m); !st.ok()) {
      return st;
    }
  }
  if (g == 0 && m.empty() && requests != nullptr) {
    if (absl::Status st = AddGpuResources(*requests, what, &g, &m); !st.ok()) {
      return st;
    }
  }
  *gpus += g;
  for (const auto& [k, v] : m) (*mig)[k] += v;
  return absl::OkStatus();
}

// The items of a list object ({"kind": "...List", "items": [...]}), each
// read by `parse`.
template <typename T, typename Parse>
absl::StatusOr<std::vector<T>> ParseList(const json& list, const char* kind,
                                         Parse parse) {
  ASSIGN_OR_RETURN(const json* items,
                   Array(list, "items", kind, kMaxKubeItems));
  std::vector<T> out;
  if (items == nullptr) return out;
  out.reserve(items->size());
  for (const json& item : *items) {
    ASSIGN_OR_RETURN(T one, parse(item));
    out.push_back(std::move(one));
  }
  return out;
}

}  // namespace

absl::StatusOr<KubeNode> ParseKubeNode(
    const json& node, const std::vector<std::string>& tolerated) {
  if (!node.is_object()) {
    return absl::InvalidArgumentError("Kubernetes node: not an object");
  }
  KubeNode n;
  static const json kEmpty = json::object();
  const json* meta = Member(node, "metadata");
  if (meta == nullptr) meta = &kEmpty;
  ASSIGN_OR_RETURN(n.name, Str(*meta, "name", "Kubernetes node"));
  if (n.name.empty()) {
    return absl::InvalidArgumentError(
        "Kubernetes node: metadata.name is missing");
  }
  const std::string what = absl::StrCat("Kubernetes node '", n.name, "'");
  ASSIGN_OR_RETURN(n.uid, Str(*meta, "uid", what));
  ASSIGN_OR_RETURN(n.resource_version, Str(*meta, "resourceVersion", what));
  ASSIGN_OR_RETURN(n.labels, Labels(*meta, what));

  const json* spec = Member(node, "spec");
  if (spec == nullptr) spec = &kEmpty;
  if (const json* u = Member(*spec, "unschedulable")) {
    n.unschedulable = u->is_boolean() && u->get<bool>();
  }
  if (n.unschedulable) n.problems.push_back("cordoned (spec.unschedulable)");
  ASSIGN_OR_RETURN(const json* taints,
                   Array(*spec, "taints", what, kMaxKubeEntries));
  if (taints != nullptr) {
    for (const json& t : *taints) {
      ASSIGN_OR_RETURN(std::string key, Str(t, "key", what));
      ASSIGN_OR_RETURN(std::string value, Str(t, "value", what));
      ASSIGN_OR_RETURN(std::string effect, Str(t, "effect", what));
      n.taint_keys.push_back(key);
      if (effect != "NoSchedule" && effect != "NoExecute") continue;
      if (std::find(tolerated.begin(), tolerated.end(), key) !=
          tolerated.end()) {
        continue;
      }
      n.problems.push_back(absl::StrCat("taint ", key, value.empty() ? "" : "=",
                                        value, ":", effect));
    }
  }

  const json* status = Member(node, "status");
  if (status == nullptr) status = &kEmpty;
  ASSIGN_OR_RETURN(const json* conditions,
                   Array(*status, "conditions", what, kMaxKubeEntries));
  bool saw_ready = false;
  if (conditions != nullptr) {
    for (const json& c : *conditions) {
      ASSIGN_OR_RETURN(std::string type, Str(c, "type", what));
      ASSIGN_OR_RETURN(std::string st, Str(c, "status", what));
      ASSIGN_OR_RETURN(std::string reason, Str(c, "reason", what));
      ASSIGN_OR_RETURN(std::string message, Str(c, "message", what));
      if (type == "Ready") {
        saw_ready = true;
        n.ready = st == "True";
        if (!n.ready) {
          n.problems.push_back(absl::StrCat(
              st == "Unknown" ? "not responding" : "NotReady", " (",
              reason.empty() ? "no reason" : reason,
              message.empty() ? "" : absl::StrCat(": ", message), ")"));
        }
      } else if (absl::EndsWith(type, "Pressure") ||
                 type == "NetworkUnavailable") {
        if (st == "True") n.problems.push_back(type);
      }
    }
  }
  if (!saw_ready) n.problems.push_back("no Ready condition");
  ASSIGN_OR_RETURN(const json* addresses,
                   Array(*status, "addresses", what, kMaxKubeEntries));
  std::string hostname;
  if (addresses != nullptr) {
    for (const json& a : *addresses) {
      ASSIGN_OR_RETURN(std::string type, Str(a, "type", what));
      ASSIGN_OR_RETURN(std::string address, Str(a, "address", what));
      if (type == "InternalIP" && n.address.empty()) n.address = address;
      if (type == "Hostname" && hostname.empty()) hostname = address;
    }
  }
  if (n.address.empty()) n.address = hostname.empty() ? n.name : hostname;

  const json* alloc = Member(*status, "allocatable");
  if (alloc != nullptr && !alloc->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": status.allocatable is not a map"));
  }
  if (alloc != nullptr) {
    if (const json* cpu = Member(*alloc, "cpu")) {
      std::optional<int64_t> v =
          cpu->is_string() ? config::ParseCpuMilli(cpu->get<std::string>())
                           : std::nullopt;
      if (!v) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": allocatable cpu is not a CPU quantity"));
      }
      n.cpu_milli = *v;
    }
    if (const json* mem = Member(*alloc, "memory")) {
      std::optional<int64_t> v =
          mem->is_string() ? config::ParseMemoryMib(mem->get<std::string>())
                           : std::nullopt;
      if (!v) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": allocatable memory is not a memory quantity"));
      }
      n.memory_mib = *v;
    }
    int64_t gpus = 0;
    std::map<std::string, int64_t> mig;
    if (absl::Status st = AddGpuResources(*alloc, what, &gpus, &mig);
        !st.ok()) {
      return st;
    }
    n.gpus = static_cast<int>(gpus);
    for (const auto& [k, v] : mig) n.mig.emplace_back(k, static_cast<int>(v));
  }

  n.gpu_product = LabelOf(n.labels, "nvidia.com/gpu.product");
  n.mig_strategy = LabelOf(n.labels, "nvidia.com/mig.strategy");
  const std::string memory = LabelOf(n.labels, "nvidia.com/gpu.memory");
  if (!memory.empty() && !absl::SimpleAtoi(memory, &n.gpu_memory_mib)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": label nvidia.com/gpu.memory '",
                     memory.substr(0, 64), "' is not a number of MiB"));
  }
  const std::string count = LabelOf(n.labels, "nvidia.com/gpu.count");
  if (!count.empty() &&
      (!absl::SimpleAtoi(count, &n.gpu_count_label) || n.gpu_count_label < 0 ||
       n.gpu_count_label > kMaxKubeGpus)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": label nvidia.com/gpu.count '",
                     count.substr(0, 64), "' is not a GPU count"));
  }
  n.usable = n.problems.empty();
  return n;
}

absl::StatusOr<std::vector<KubeNode>> ParseKubeNodeList(
    const json& list, const std::vector<std::string>& tolerated) {
  return ParseList<KubeNode>(list, "Kubernetes NodeList", [&](const json& j) {
    return ParseKubeNode(j, tolerated);
  });
}

absl::StatusOr<KubePod> ParseKubePod(const json& pod) {
  if (!pod.is_object()) {
    return absl::InvalidArgumentError("Kubernetes pod: not an object");
  }
  KubePod p;
  static const json kEmpty = json::object();
  const json* meta = Member(pod, "metadata");
  if (meta == nullptr) meta = &kEmpty;
  ASSIGN_OR_RETURN(p.name, Str(*meta, "name", "Kubernetes pod"));
  ASSIGN_OR_RETURN(p.namespace_name, Str(*meta, "namespace", "Kubernetes pod"));
  if (p.name.empty()) {
    return absl::InvalidArgumentError(
        "Kubernetes pod: metadata.name is missing");
  }
  const std::string what =
      absl::StrCat("Kubernetes pod '", p.namespace_name, "/", p.name, "'");
  ASSIGN_OR_RETURN(p.uid, Str(*meta, "uid", what));
  ASSIGN_OR_RETURN(p.resource_version, Str(*meta, "resourceVersion", what));
  ASSIGN_OR_RETURN(p.labels, Labels(*meta, what));
  p.terminating = Member(*meta, "deletionTimestamp") != nullptr;

  const json* spec = Member(pod, "spec");
  if (spec == nullptr) spec = &kEmpty;
  ASSIGN_OR_RETURN(p.node, Str(*spec, "nodeName", what));
  std::map<std::string, int64_t> mig;
  ASSIGN_OR_RETURN(const json* containers,
                   Array(*spec, "containers", what, kMaxKubeEntries));
  if (containers != nullptr) {
    for (const json& c : *containers) {
      if (absl::Status st = ContainerGpus(c, what, &p.gpus, &mig); !st.ok()) {
        return st;
      }
    }
  }
  // Init containers run one at a time before the others: the Pod holds the
  // most any of them needs, when that is more than its containers' sum.
  ASSIGN_OR_RETURN(const json* inits,
                   Array(*spec, "initContainers", what, kMaxKubeEntries));
  if (inits != nullptr) {
    for (const json& c : *inits) {
      int64_t g = 0;
      std::map<std::string, int64_t> m;
      if (absl::Status st = ContainerGpus(c, what, &g, &m); !st.ok()) {
        return st;
      }
      p.gpus = std::max(p.gpus, g);
      for (const auto& [k, v] : m) mig[k] = std::max(mig[k], v);
    }
  }
  if (p.gpus > kMaxKubeGpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", p.gpus, " GPUs, more than the bound of ", kMaxKubeGpus));
  }
  p.mig.assign(mig.begin(), mig.end());

  const json* status = Member(pod, "status");
  if (status == nullptr) status = &kEmpty;
  ASSIGN_OR_RETURN(p.phase, Str(*status, "phase", what));
  ASSIGN_OR_RETURN(p.pod_ip, Str(*status, "podIP", what));
  ASSIGN_OR_RETURN(p.reason, Str(*status, "reason", what));
  if (p.reason.empty()) {
    ASSIGN_OR_RETURN(p.reason, Str(*status, "message", what));
  }
  ASSIGN_OR_RETURN(const json* conditions,
                   Array(*status, "conditions", what, kMaxKubeEntries));
  if (conditions != nullptr) {
    for (const json& c : *conditions) {
      ASSIGN_OR_RETURN(std::string type, Str(c, "type", what));
      ASSIGN_OR_RETURN(std::string st, Str(c, "status", what));
      if (type == "Ready") p.ready = st == "True";
    }
  }
  return p;
}

absl::StatusOr<std::vector<KubePod>> ParseKubePodList(const json& list) {
  return ParseList<KubePod>(list, "Kubernetes PodList",
                            [](const json& j) { return ParseKubePod(j); });
}

bool KubePodHoldsResources(const KubePod& pod) {
  return !pod.node.empty() && pod.phase != "Succeeded" && pod.phase != "Failed";
}

std::string KubeLabel(const KubePod& pod, const std::string& key) {
  return LabelOf(pod.labels, key);
}

absl::flat_hash_map<std::string, KubeForeignUse> KubeForeignGpuUse(
    const std::vector<KubePod>& pods, const std::string& ours_key,
    const std::string& ours_value) {
  absl::flat_hash_map<std::string, std::map<std::string, int64_t>> mig;
  absl::flat_hash_map<std::string, KubeForeignUse> out;
  for (const KubePod& p : pods) {
    if (!KubePodHoldsResources(p) || (p.gpus == 0 && p.mig.empty())) continue;
    if (!ours_key.empty() && KubeLabel(p, ours_key) == ours_value) continue;
    KubeForeignUse& u = out[p.node];
    u.gpus += p.gpus;
    for (const auto& [k, v] : p.mig) mig[p.node][k] += v;
  }
  for (auto& [node, m] : mig) out[node].mig.assign(m.begin(), m.end());
  return out;
}

std::string KubeSingleStrategyProfile(const KubeNode& node) {
  if (node.mig_strategy != "single") return "";
  const size_t at = node.gpu_product.rfind("-MIG-");
  if (at == std::string::npos) return "";
  return absl::AsciiStrToLower(node.gpu_product.substr(at + 5));
}

absl::StatusOr<std::vector<inventory::NodeSpec>> KubeNodeSpecs(
    const std::vector<KubeNode>& nodes,
    const absl::flat_hash_map<std::string, std::string>& product_map,
    const inventory::GpuCatalog& catalog) {
  std::vector<inventory::NodeSpec> out;
  std::vector<std::string> problems;
  for (const KubeNode& n : nodes) {
    inventory::NodeSpec spec;
    spec.name = n.name;
    spec.labels = n.labels;
    spec.cpu_milli = n.cpu_milli;
    spec.memory_mib = n.memory_mib;
    spec.simulated = false;
    spec.address = n.address;
    // MIG devices: the mixed strategy advertises them by profile; the
    // single strategy as nvidia.com/gpu, its product naming the profile
    // ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb").
    std::string product = n.gpu_product;
    int whole = n.gpus;
    std::vector<std::pair<std::string, int>> mig = n.mig;
    if (const std::string single = KubeSingleStrategyProfile(n);
        !single.empty()) {
      product = product.substr(0, product.size() - single.size() - 5);
      mig = {{single, n.gpus}};
      whole = 0;
    }
    int devices = 0;
    for (const auto& [profile, count] : mig) devices += count;
    if (whole > 0 || devices > 0) {
      const inventory::GpuModelSpec* model =
          catalog.FindMapped(product, product_map);
      if (model == nullptr) {
        problems.push_back(absl::StrCat(
            "Kubernetes node '", n.name, "': GPU product '",
            product.empty() ? "(no nvidia.com/gpu.product label)" : product,
            "' is not a known GPU model; map it in kubernetes.productMap (",
            product.empty() ? "<product>" : product,
            ": <model>) to one of: ", absl::StrJoin(catalog.Names(), ", ")));
        continue;
      }
      if (whole > inventory::ClusterState::kMaxGpusPerNode) {
        problems.push_back(absl::StrCat(
            "Kubernetes node '", n.name, "': ", whole,
            " nvidia.com/gpu; gpusched places onto at most ",
            inventory::ClusterState::kMaxGpusPerNode, " GPUs per node"));
        continue;
      }
      spec.gpu_model = model->name;
      spec.gpu_count = whole;
      spec.gpu_memory_mib = model->memory_mib;
      if (n.gpu_memory_mib > 0 && whole == n.gpus) {
        spec.gpu_memory_mib = std::min(spec.gpu_memory_mib, n.gpu_memory_mib);
      }
      // Whole GPUs are whole; the MIG devices the GPU Operator's MIG manager
      // made are a static layout (docs/kubernetes.md, "MIG").
      spec.mig_slots = 0;
      if (absl::Status st = inventory::AddStaticMigGpus(spec, *model, mig);
          !st.ok()) {
        problems.push_back(absl::StrCat("Kubernetes node '", n.name,
                                        "': its MIG devices: ", st.message()));
        continue;
      }
    }
    out.push_back(std::move(spec));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  }
  return out;
}

}  // namespace gpusched::backends
