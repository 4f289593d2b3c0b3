#include "placement/quota.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"

namespace gpusched::placement {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Usage is an integer and shares are doubles; this keeps rounding in a
// share from turning "exactly at its share" into "over".
constexpr double kShareEpsilon = 1e-6;

int Idx(QuotaResource r) { return static_cast<int>(r); }

}  // namespace

const char* QuotaResourceName(QuotaResource r) {
  switch (r) {
    case QuotaResource::kGpuMilli:
      return "GPU milli";
    case QuotaResource::kCpuMilli:
      return "CPU milli";
    case QuotaResource::kMemoryMib:
      return "memory MiB";
  }
  return "?";
}

int64_t ResourceAmounts::operator[](QuotaResource r) const {
  switch (r) {
    case QuotaResource::kGpuMilli:
      return gpu_milli;
    case QuotaResource::kCpuMilli:
      return cpu_milli;
    case QuotaResource::kMemoryMib:
      return memory_mib;
  }
  return 0;
}

int64_t& ResourceAmounts::operator[](QuotaResource r) {
  switch (r) {
    case QuotaResource::kCpuMilli:
      return cpu_milli;
    case QuotaResource::kMemoryMib:
      return memory_mib;
    case QuotaResource::kGpuMilli:
      break;
  }
  return gpu_milli;
}

ResourceAmounts& ResourceAmounts::operator+=(const ResourceAmounts& o) {
  gpu_milli += o.gpu_milli;
  cpu_milli += o.cpu_milli;
  memory_mib += o.memory_mib;
  return *this;
}

ResourceAmounts& ResourceAmounts::operator-=(const ResourceAmounts& o) {
  gpu_milli -= o.gpu_milli;
  cpu_milli -= o.cpu_milli;
  memory_mib -= o.memory_mib;
  return *this;
}

ResourceAmounts AmountsOf(const PodRequest& pod) {
  return {pod.TotalGpuMilli(), pod.cpu_milli, pod.memory_mib};
}

ResourceAmounts AmountsOf(const inventory::Allocation& alloc) {
  return {alloc.GpuMilli(), alloc.cpu_milli, alloc.memory_mib};
}

ResourceAmounts ClusterCapacity(const inventory::ClusterState& cs) {
  ResourceAmounts c;
  c.gpu_milli = cs.total_gpu_milli();
  for (int n = 0; n < cs.num_nodes(); ++n) {
    c.cpu_milli += cs.spec(n).cpu_milli;
    c.memory_mib += cs.spec(n).memory_mib;
  }
  return c;
}

absl::StatusOr<QueueTree> QueueTree::Create(std::vector<QueueConfig> queues) {
  std::vector<std::string> problems;
  auto problem = [&](const std::string& queue, auto&&... parts) {
    problems.push_back(absl::StrCat("queue '", queue, "': ", parts...));
  };

  // Names: which configs become queues (first of each name).
  absl::flat_hash_map<std::string, int> by_name;
  std::vector<int> kept;  // config indexes
  for (size_t i = 0; i < queues.size(); ++i) {
    const std::string& name = queues[i].name;
    if (name.empty()) {
      problems.push_back(absl::StrCat("queue #", i + 1, " has no name"));
    } else if (name == kRoot) {
      problems.push_back("queue 'root' is reserved for the implicit root");
    } else if (!by_name.try_emplace(name, static_cast<int>(kept.size()))
                    .second) {
      problem(name, "declared twice");
    } else {
      kept.push_back(static_cast<int>(i));
    }
  }

  // Values.
  std::array<bool, kNumQuotaResources> accounted = {true, false, false};
  for (int k : kept) {
    const QueueConfig& q = queues[k];
    const std::array<const ResourceQuota*, kNumQuotaResources> knobs = {
        &q.gpu, q.cpu ? &*q.cpu : nullptr, q.memory ? &*q.memory : nullptr};
    for (QuotaResource r : kQuotaResources) {
      const ResourceQuota* rq = knobs[Idx(r)];
      if (rq == nullptr) continue;
      accounted[Idx(r)] = true;
      const char* what = QuotaResourceName(r);
      if (rq->quota < 0) problem(q.name, what, " quota ", rq->quota, " < 0");
      if (rq->limit < 0 && rq->limit != kNoLimit) {
        problem(q.name, what, " limit ", rq->limit,
                " < 0 (use -1 for no limit)");
      }
      if (!(rq->over_quota_weight >= 0) || std::isinf(rq->over_quota_weight)) {
        problem(q.name, what, " overQuotaWeight ", rq->over_quota_weight,
                " must be a finite number >= 0");
      }
      if (rq->limit != kNoLimit && rq->limit >= 0 && rq->quota >= 0 &&
          rq->limit < rq->quota) {
        problem(q.name, what, " limit ", rq->limit, " is below its quota ",
                rq->quota);
      }
    }
  }

  // Parents: index into `kept`, kRootParent, or kUnknownParent.
  constexpr int kRootParent = -1, kUnknownParent = -2;
  std::vector<int> parent(kept.size(), kRootParent);
  for (size_t i = 0; i < kept.size(); ++i) {
    const QueueConfig& q = queues[kept[i]];
    if (q.parent.empty() || q.parent == kRoot) continue;
    auto it = by_name.find(q.parent);
    if (it == by_name.end()) {
      problem(q.name, "unknown parent '", q.parent, "'");
      parent[i] = kUnknownParent;
    } else {
      parent[i] = it->second;
    }
  }

  // Cycles: walk each chain of parents once.
  std::vector<int> state(kept.size(), 0);  // 0 new, 1 on this walk, 2 done
  std::vector<bool> in_cycle(kept.size(), false);
  for (size_t start = 0; start < kept.size(); ++start) {
    std::vector<int> walk;
    int j = static_cast<int>(start);
    while (j >= 0 && state[j] == 0) {
      state[j] = 1;
      walk.push_back(j);
      j = parent[j];
    }
    if (j >= 0 && state[j] == 1) {
      const auto pos = std::find(walk.begin(), walk.end(), j);
      std::vector<std::string> names;
      for (auto it = pos; it != walk.end(); ++it) {
        names.push_back(queues[kept[*it]].name);
        in_cycle[*it] = true;
      }
      names.push_back(queues[kept[j]].name);
      problems.push_back(
          absl::StrCat("parent cycle: ", absl::StrJoin(names, " -> ")));
    }
    for (int w : walk) state[w] = 2;
  }

  QueueTree tree;
  tree.accounted_ = accounted;
  tree.queues_.resize(kept.size() + 1);
  tree.queues_[0].name = kRoot;
  tree.index_[kRoot] = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    const QueueConfig& c = queues[kept[i]];
    Queue& q = tree.queues_[i + 1];
    q.name = c.name;
    q.parent = parent[i] >= 0 ? parent[i] + 1 : 0;
    q.knobs[Idx(QuotaResource::kGpuMilli)] = c.gpu;
    if (c.cpu) q.knobs[Idx(QuotaResource::kCpuMilli)] = *c.cpu;
    if (c.memory) q.knobs[Idx(QuotaResource::kMemoryMib)] = *c.memory;
    tree.index_[c.name] = static_cast<int>(i + 1);
  }
  for (size_t i = 0; i < kept.size(); ++i) {
    if (parent[i] == kUnknownParent || in_cycle[i]) continue;
    tree.queues_[tree.queues_[i + 1].parent].children.push_back(
        static_cast<int>(i + 1));
  }

  // Guarantees nest: children's quotas fit in their parent's.
  for (size_t i = 1; i < tree.queues_.size(); ++i) {
    const Queue& q = tree.queues_[i];
    if (q.children.empty()) continue;
    for (QuotaResource r : kQuotaResources) {
      if (!accounted[Idx(r)]) continue;
      int64_t sum = 0;
      for (int c : q.children) sum += tree.queues_[c].knobs[Idx(r)].quota;
      if (sum > q.knobs[Idx(r)].quota) {
        problem(q.name, "children's ", QuotaResourceName(r), " quotas sum to ",
                sum, ", above its quota ", q.knobs[Idx(r)].quota);
      }
    }
  }

  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid queue config (", problems.size(),
                     problems.size() == 1 ? " problem): " : " problems): ",
                     absl::StrJoin(problems, "; ")));
  }
  return tree;
}

int QueueTree::Index(const std::string& queue) const {
  auto it = index_.find(queue);
  return it == index_.end() ? -1 : it->second;
}

bool QueueTree::Contains(const std::string& queue) const {
  return Index(queue) >= 0;
}

bool QueueTree::IsLeaf(const std::string& queue) const {
  const int i = Index(queue);
  return i > 0 && queues_[i].children.empty();
}

const ResourceQuota* QueueTree::Knobs(const std::string& queue,
                                      QuotaResource r) const {
  const int i = Index(queue);
  if (i <= 0) return nullptr;
  return &queues_[i].knobs[Idx(r)];
}

std::vector<std::string> QueueTree::Path(const std::string& queue) const {
  std::vector<std::string> path;
  for (int i = Index(queue); i > 0; i = queues_[i].parent) {
    path.push_back(queues_[i].name);
  }
  return path;
}

AdmitVerdict QueueTree::Admit(const std::string& queue,
                              const ResourceAmounts& request) const {
  AdmitVerdict v;
  const int leaf = Index(queue);
  if (leaf < 0) {
    v.reason = absl::StrCat("unknown queue '", queue, "'");
    return v;
  }
  if (leaf == 0 || !queues_[leaf].children.empty()) {
    v.reason =
        absl::StrCat("queue '", queue, "' is not a leaf; pods run in leaves");
    return v;
  }
  std::vector<std::string> over_limit;
  for (int i = leaf; i > 0; i = queues_[i].parent) {
    const Queue& q = queues_[i];
    for (QuotaResource r : kQuotaResources) {
      const int64_t limit = q.knobs[Idx(r)].limit;
      if (!accounted(r) || limit == kNoLimit || request[r] <= 0) continue;
      const int64_t after = q.usage[r] + request[r];
      if (after > limit) {
        over_limit.push_back(
            absl::StrCat("queue '", q.name, "': ", QuotaResourceName(r), " ",
                         after, " would exceed its limit ", limit));
      }
    }
  }
  v.admitted = over_limit.empty();
  v.in_quota = true;
  std::string over_quota;
  const Queue& q = queues_[leaf];
  for (QuotaResource r : kQuotaResources) {
    if (!accounted(r) || request[r] <= 0) continue;
    const int64_t after = q.usage[r] + request[r];
    if (after > q.knobs[Idx(r)].quota) {
      v.in_quota = false;
      over_quota = absl::StrCat(
          "over quota in queue '", q.name, "': ", QuotaResourceName(r), " ",
          after, " would exceed its quota ", q.knobs[Idx(r)].quota);
      break;
    }
  }
  if (!v.admitted) {
    v.reason = absl::StrJoin(over_limit, "; ");
  } else {
    v.reason = v.in_quota ? "in quota" : over_quota;
  }
  return v;
}

absl::Status QueueTree::Charge(const std::string& pod, const std::string& queue,
                               const ResourceAmounts& amount, int priority) {
  const int leaf = Index(queue);
  if (leaf < 0) {
    return absl::NotFoundError(
        absl::StrCat("pod '", pod, "': unknown queue '", queue, "'"));
  }
  if (leaf == 0 || !queues_[leaf].children.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pod '", pod, "': queue '", queue, "' is not a leaf queue"));
  }
  if (pods_.contains(pod)) {
    return absl::AlreadyExistsError(
        absl::StrCat("pod '", pod, "' is already charged to queue '",
                     queues_[pods_.at(pod).queue].name, "'"));
  }
  pods_.emplace(pod, PodCharge{leaf, amount, priority, next_seq_++});
  for (int i = leaf; i >= 0; i = queues_[i].parent) queues_[i].usage += amount;
  return absl::OkStatus();
}

bool QueueTree::Release(const std::string& pod) {
  auto it = pods_.find(pod);
  if (it == pods_.end()) return false;
  for (int i = it->second.queue; i >= 0; i = queues_[i].parent) {
    queues_[i].usage -= it->second.amount;
  }
  pods_.erase(it);
  return true;
}

std::string QueueTree::QueueOf(const std::string& pod) const {
  auto it = pods_.find(pod);
  return it == pods_.end() ? "" : queues_[it->second.queue].name;
}

ResourceAmounts QueueTree::Usage(const std::string& queue) const {
  const int i = Index(queue);
  return i < 0 ? ResourceAmounts{} : queues_[i].usage;
}

void QueueTree::OverQuotaIn(int leaf, std::vector<PodRef> pods,
                            absl::flat_hash_set<std::string>& out) const {
  // Highest priority first, then oldest: the pods the guarantee covers.
  std::sort(pods.begin(), pods.end(), [](const PodRef& a, const PodRef& b) {
    if (a.second->priority != b.second->priority) {
      return a.second->priority > b.second->priority;
    }
    return a.second->seq < b.second->seq;
  });
  const Queue& q = queues_[leaf];
  ResourceAmounts cum;
  for (const auto& [id, c] : pods) {
    cum += c->amount;
    for (QuotaResource r : kQuotaResources) {
      if (accounted(r) && c->amount[r] > 0 && cum[r] > q.knobs[Idx(r)].quota) {
        out.insert(*id);
        break;
      }
    }
  }
}

absl::flat_hash_set<std::string> QueueTree::OverQuotaPods() const {
  absl::flat_hash_map<int, std::vector<PodRef>> by_leaf;
  for (const auto& [id, c] : pods_) by_leaf[c.queue].emplace_back(&id, &c);
  absl::flat_hash_set<std::string> out;
  for (auto& [leaf, pods] : by_leaf) OverQuotaIn(leaf, std::move(pods), out);
  return out;
}

bool QueueTree::IsOverQuota(const std::string& pod) const {
  auto it = pods_.find(pod);
  if (it == pods_.end()) return false;
  std::vector<PodRef> pods;
  for (const auto& [id, c] : pods_) {
    if (c.queue == it->second.queue) pods.emplace_back(&id, &c);
  }
  absl::flat_hash_set<std::string> over;
  OverQuotaIn(it->second.queue, std::move(pods), over);
  return over.contains(pod);
}

bool QueueTree::OverQuota(const std::string& queue) const {
  const int i = Index(queue);
  if (i <= 0) return false;
  const Queue& q = queues_[i];
  for (QuotaResource r : kQuotaResources) {
    if (accounted(r) && q.usage[r] > q.knobs[Idx(r)].quota) return true;
  }
  return false;
}

void QueueTree::Distribute(
    int parent, int r, double amount,
    const std::vector<std::array<double, kNumQuotaResources>>& capped_demand,
    std::vector<FairShare>& shares) const {
  const std::vector<int>& kids = queues_[parent].children;
  if (kids.empty()) return;
  const size_t n = kids.size();
  std::vector<double> give(n), cap(n), weight(n);
  double base_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const ResourceQuota& k = queues_[kids[i]].knobs[r];
    cap[i] = capped_demand[kids[i]][r];
    weight[i] = k.over_quota_weight;
    give[i] = std::min(static_cast<double>(k.quota), cap[i]);
    base_sum += give[i];
  }
  // Guarantees larger than what the parent has (lost GPUs, or top-level
  // quotas above capacity) shrink in proportion.
  if (base_sum > amount) {
    const double scale = base_sum > 0 ? amount / base_sum : 0;
    for (double& g : give) g *= scale;
    base_sum = amount;
  }
  double left = amount - base_sum;
  std::vector<size_t> active;
  for (size_t i = 0; i < n; ++i) {
    if (cap[i] > give[i] && weight[i] > 0) active.push_back(i);
  }
  // Progressive filling: raise every active sibling's extra at the same
  // rate per unit of weight; whoever reaches its cap leaves, the rest go on.
  while (left > 0 && !active.empty()) {
    double total_weight = 0;
    for (size_t i : active) total_weight += weight[i];
    const double level = left / total_weight;
    std::vector<size_t> still;
    bool saturated = false;
    for (size_t i : active) {
      if (cap[i] - give[i] <= level * weight[i]) {
        left -= cap[i] - give[i];
        give[i] = cap[i];
        saturated = true;
      } else {
        still.push_back(i);
      }
    }
    if (!saturated) {
      for (size_t i : active) give[i] += level * weight[i];
      left = 0;
    }
    active = std::move(still);
  }
  for (size_t i = 0; i < n; ++i) {
    shares[kids[i]].deserved[r] = give[i];
    Distribute(kids[i], r, give[i], capped_demand, shares);
  }
}

FairShares QueueTree::ComputeFairShares(
    const ResourceAmounts& capacity,
    const absl::flat_hash_map<std::string, ResourceAmounts>& pending) const {
  const int n = static_cast<int>(queues_.size());
  std::vector<std::array<double, kNumQuotaResources>> demand(n);
  std::vector<ResourceAmounts> extra(n);
  for (const auto& [name, amounts] : pending) {
    const int i = Index(name);
    if (i >= 0) extra[i] += amounts;
  }
  // Capped demand, children before parents.
  std::vector<int> order;  // preorder from the root
  std::vector<int> stack = {0};
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    order.push_back(i);
    for (int c : queues_[i].children) stack.push_back(c);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Queue& q = queues_[*it];
    for (QuotaResource r : kQuotaResources) {
      double d = static_cast<double>(extra[*it][r]);
      if (q.children.empty()) {
        d += static_cast<double>(q.usage[r]);
      } else {
        for (int c : q.children) d += demand[c][Idx(r)];
      }
      const int64_t limit = q.knobs[Idx(r)].limit;
      if (*it != 0 && limit != kNoLimit) {
        d = std::min(d, static_cast<double>(limit));
      }
      demand[*it][Idx(r)] = std::max(d, 0.0);
    }
  }
  std::vector<FairShare> shares(n);
  for (QuotaResource r : kQuotaResources) {
    if (!accounted(r)) {
      for (FairShare& s : shares) s.deserved[Idx(r)] = kInf;
      continue;
    }
    const double cap = static_cast<double>(capacity[r]);
    shares[0].deserved[Idx(r)] = cap;
    Distribute(0, Idx(r), cap, demand, shares);
  }
  FairShares out;
  for (int i = 0; i < n; ++i) out[queues_[i].name] = shares[i];
  return out;
}

bool QueueTree::OverFairShare(const std::string& queue,
                              const FairShares& shares) const {
  const int i = Index(queue);
  auto it = shares.find(queue);
  if (i < 0 || it == shares.end()) return false;
  for (QuotaResource r : kQuotaResources) {
    if (!accounted(r)) continue;
    if (static_cast<double>(queues_[i].usage[r]) >
        it->second[r] + kShareEpsilon) {
      return true;
    }
  }
  return false;
}

}  // namespace gpusched::placement
