#include "backends/kubernetes/kube_pools.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/kubernetes/kube_client.h"

namespace gpusched::backends {
namespace {

using nlohmann::json;

std::string LabelOf(const KubeNode& node, const std::string& key) {
  for (const auto& [k, v] : node.labels) {
    if (k == key) return v;
  }
  return "";
}

void AddSelector(std::vector<std::pair<std::string, std::string>>& selector,
                 const std::string& key, const std::string& value) {
  for (const auto& [k, v] : selector) {
    if (k == key) return;
  }
  selector.emplace_back(key, value);
}

// A NodePool requirement's values when its operator is In; nullopt for
// another operator or when the key is absent.
std::optional<std::vector<std::string>> RequirementIn(const json& reqs,
                                                      const std::string& key) {
  if (!reqs.is_array()) return std::nullopt;
  for (const json& r : reqs) {
    if (KubeStr(r, "key") != key || KubeStr(r, "operator") != "In") continue;
    std::vector<std::string> out;
    const json& values = KubeField(r, "values");
    if (!values.is_array()) return out;
    for (const json& v : values) {
      if (v.is_string()) out.push_back(v.get<std::string>());
    }
    return out;
  }
  return std::nullopt;
}

// Fills what `into` leaves 0 or empty from `from`.
void Merge(PoolReport& into, const PoolReport& from) {
  if (into.gpu_model.empty()) into.gpu_model = from.gpu_model;
  if (into.gpus_per_node == 0) into.gpus_per_node = from.gpus_per_node;
  if (into.cpu_milli == 0) into.cpu_milli = from.cpu_milli;
  if (into.memory_mib == 0) into.memory_mib = from.memory_mib;
  if (into.max_nodes == 0) into.max_nodes = from.max_nodes;
  into.spot = into.spot || from.spot;
  if (into.selector.empty()) into.selector = from.selector;
}

}  // namespace

std::pair<std::string, std::string> KubeNodePoolLabel(
    const KubeNode& node, const std::vector<std::string>& keys) {
  std::vector<std::string> tried = keys;
  if (tried.empty()) {
    tried.assign(std::begin(kKubePoolLabelKeys), std::end(kKubePoolLabelKeys));
  }
  for (const std::string& key : tried) {
    const std::string v = LabelOf(node, key);
    if (!v.empty()) return {key, v};
  }
  return {"", ""};
}

bool KubeNodeIsSpot(const KubeNode& node) {
  return LabelOf(node, "karpenter.sh/capacity-type") == "spot" ||
         LabelOf(node, "cloud.google.com/gke-spot") == "true" ||
         LabelOf(node, "cloud.google.com/gke-preemptible") == "true" ||
         LabelOf(node, "eks.amazonaws.com/capacityType") == "SPOT" ||
         LabelOf(node, "kubernetes.azure.com/scalesetpriority") == "spot";
}

std::string KubeScaleDownTaint(const KubeNode& node) {
  for (const std::string& key : node.taint_keys) {
    if (key == kKubeCaScaleDownTaint || key == kKubeKarpenterDisruptedTaint) {
      return key;
    }
  }
  return "";
}

bool KubeNodeMatches(
    const KubeNode& node,
    const std::vector<std::pair<std::string, std::string>>& selector) {
  if (selector.empty()) return false;
  for (const auto& [k, v] : selector) {
    if (LabelOf(node, k) != v) return false;
  }
  return true;
}

absl::StatusOr<PoolReport> ParseKarpenterNodePool(const json& pool) {
  if (!pool.is_object()) {
    return absl::InvalidArgumentError("Karpenter NodePool: not an object");
  }
  PoolReport r;
  r.pool = KubeStr(KubeField(pool, "metadata"), "name");
  if (r.pool.empty() || r.pool.size() > kMaxKubeString) {
    return absl::InvalidArgumentError(
        "Karpenter NodePool: metadata.name is missing or too long");
  }
  const std::string what = absl::StrCat("Karpenter NodePool '", r.pool, "'");
  r.selector.emplace_back("karpenter.sh/nodepool", r.pool);
  const json& tmpl = KubeField(KubeField(pool, "spec"), "template");
  const json& labels = KubeField(KubeField(tmpl, "metadata"), "labels");
  if (labels.is_object()) {
    if (labels.size() > static_cast<size_t>(kMaxKubeLabels)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": spec.template.metadata.labels has ",
                       labels.size(), " entries, more than ", kMaxKubeLabels));
    }
    for (const auto& [k, v] : labels.items()) {
      if (!v.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": spec.template.metadata.labels['",
                         k.substr(0, 64), "'] is not a string"));
      }
      AddSelector(r.selector, k, v.get<std::string>());
    }
    r.gpu_model = KubeStr(labels, kKubeGpuProductLabel);
  }
  const json& reqs = KubeField(KubeField(tmpl, "spec"), "requirements");
  if (!reqs.is_null() && !reqs.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": spec.template.spec.requirements is not a list"));
  }
  if (reqs.size() > static_cast<size_t>(kMaxKubeEntries)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": more than ", kMaxKubeEntries, " requirements"));
  }
  if (auto ct = RequirementIn(reqs, "karpenter.sh/capacity-type")) {
    r.spot = !ct->empty() &&
             std::all_of(ct->begin(), ct->end(),
                         [](const std::string& v) { return v == "spot"; });
  }
  if (auto product = RequirementIn(reqs, kKubeGpuProductLabel);
      product && product->size() == 1) {
    r.gpu_model = (*product)[0];
    AddSelector(r.selector, kKubeGpuProductLabel, r.gpu_model);
  }
  if (auto count = RequirementIn(reqs, "karpenter.k8s.aws/instance-gpu-count");
      count && count->size() == 1) {
    int n = 0;
    if (!absl::SimpleAtoi((*count)[0], &n) || n < 0 || n > kMaxKubeGpus) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": karpenter.k8s.aws/instance-gpu-count '",
                       (*count)[0].substr(0, 64), "' is not a GPU count"));
    }
    r.gpus_per_node = n;
  }
  const json& limits = KubeField(KubeField(pool, "spec"), "limits");
  const json& gpu_limit = KubeField(limits, kKubeGpuResource);
  if (!gpu_limit.is_null() && r.gpus_per_node > 0) {
    int64_t n = -1;
    if (gpu_limit.is_number_integer()) {
      n = gpu_limit.get<int64_t>();
    } else if (gpu_limit.is_string()) {
      if (!absl::SimpleAtoi(gpu_limit.get<std::string>(), &n)) n = -1;
    }
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": spec.limits['nvidia.com/gpu'] is not a whole number"));
    }
    r.max_nodes = static_cast<int>(
        std::min<int64_t>(n / r.gpus_per_node, kMaxKubePoolNodes));
  }
  return r;
}

absl::StatusOr<std::vector<PoolReport>> ParseKarpenterNodePoolList(
    const json& list) {
  std::vector<PoolReport> out;
  const json& items = KubeField(list, "items");
  if (items.is_null()) return out;
  if (!items.is_array()) {
    return absl::InvalidArgumentError(
        "Karpenter NodePoolList: items is not a list");
  }
  if (items.size() > static_cast<size_t>(kMaxKubePools)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Karpenter NodePoolList: ", items.size(),
                     " NodePools, more than ", kMaxKubePools));
  }
  for (const json& item : items) {
    absl::StatusOr<PoolReport> p = ParseKarpenterNodePool(item);
    if (!p.ok()) return p.status();
    out.push_back(*std::move(p));
  }
  return out;
}

std::vector<PoolReport> KubePools(const std::vector<KubePoolSpec>& configured,
                                  const std::vector<PoolReport>& nodepools,
                                  const std::vector<KubeNode>& nodes,
                                  const std::vector<std::string>& keys) {
  std::map<std::string, PoolReport> pools;
  for (const KubePoolSpec& c : configured) {
    PoolReport r;
    r.pool = c.name;
    r.gpu_model = c.gpu_product;
    r.gpus_per_node = c.gpus_per_node;
    r.cpu_milli = c.cpu_milli;
    r.memory_mib = c.memory_mib;
    r.spot = c.spot;
    r.max_nodes = c.max_nodes;
    r.selector = c.labels;
    if (r.selector.empty())
      r.selector.emplace_back(kKubePoolLabelKeys[0], c.name);
    pools.emplace(c.name, std::move(r));
  }
  for (const PoolReport& p : nodepools) {
    auto [it, fresh] = pools.emplace(p.pool, p);
    if (!fresh) Merge(it->second, p);
  }
  // What the nodes show: each node joins the first pool whose selector it
  // matches, else the pool its pool label names.
  std::map<std::string, int> seen;
  for (const KubeNode& n : nodes) {
    std::string name;
    for (const auto& [pname, p] : pools) {
      if (KubeNodeMatches(n, p.selector)) {
        name = pname;
        break;
      }
    }
    if (name.empty()) {
      const auto [key, value] = KubeNodePoolLabel(n, keys);
      if (value.empty() || pools.size() >= kMaxKubePools) continue;
      name = value;
      PoolReport& r = pools[name];
      if (r.pool.empty()) {
        r.pool = name;
        r.selector.emplace_back(key, value);
      }
    }
    PoolReport& r = pools[name];
    ++seen[name];
    PoolReport from;
    from.gpu_model = LabelOf(n, kKubeGpuProductLabel);
    from.gpus_per_node = n.gpus;
    from.cpu_milli = n.cpu_milli;
    from.memory_mib = n.memory_mib;
    from.spot = KubeNodeIsSpot(n);
    Merge(r, from);
  }
  std::vector<PoolReport> out;
  for (auto& [name, r] : pools) {
    // A pool whose maximum no source gives can have the nodes it has.
    if (r.max_nodes == 0) r.max_nodes = seen[name];
    out.push_back(std::move(r));
  }
  return out;
}

std::string KubePoolOfNode(const KubeNode& node,
                           const std::vector<PoolReport>& pools) {
  for (const PoolReport& p : pools) {
    if (KubeNodeMatches(node, p.selector)) return p.pool;
  }
  return "";
}

PoolNodeState KubePoolNodeState(const KubeNode& node, std::string* reason) {
  if (const std::string taint = KubeScaleDownTaint(node); !taint.empty()) {
    *reason =
        absl::StrCat("taint ", taint, ": the autoscaler is removing this node");
    return PoolNodeState::kPoweringDown;
  }
  // Registered and Ready: up (its NodeReport says whether placement may use
  // it); registered and not Ready yet: still coming.
  *reason = absl::StrJoin(node.problems, "; ");
  return node.ready ? PoolNodeState::kUp : PoolNodeState::kPoweringUp;
}

}  // namespace gpusched::backends
