#include "placement/preemption.h"

#include <algorithm>
#include <climits>
#include <map>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/status.h"
#include "placement/gpu_select.h"

namespace gpusched::placement {
namespace {

using inventory::Allocation;
using inventory::GpuState;
using inventory::NodeSpec;
using inventory::NodeState;
using inventory::PodRecord;

enum class Rule { kPrioritySameQueue, kPriorityBorrowed, kReclaim };

// A running pod that may be evicted, with why.
struct Eligible {
  std::string id;
  const PodRecord* record = nullptr;
  std::string queue;   // its leaf
  std::string branch;  // see LeafFacts
  Rule rule = Rule::kPrioritySameQueue;
  int priority = 0;
  int64_t gpu_milli = 0;
  ResourceAmounts amount;
  // frees[k]: evicting it lowers the usage of the k-th limited queue.
  std::vector<bool> frees;
};

// The preemptor's queue would pass a limit only if victims in the limited
// queue's subtree release `need` of `resource`.
struct LimitDeficit {
  std::string queue;
  QuotaResource resource = QuotaResource::kGpuMilli;
  int64_t need = 0;
};

enum class Fit { kOk, kResources, kLimit };

struct Cost {
  int max_priority = INT_MIN;  // INT_MIN: no victims
  int64_t released = 0;
  int count = 0;
  int64_t priority_sum = 0;

  auto Key() const {
    return std::make_tuple(max_priority, released, count, priority_sum);
  }
};

// Cheapest victim set on one node. Victims are indexes into `victims`.
class NodeSearch {
 public:
  // `bound`, if set, is the cheapest set found on an earlier node: this
  // node only counts if it is strictly cheaper (ties go to the lower index).
  NodeSearch(const NodeSpec& spec, const NodeState& state,
             const PodRequest& pod, const std::vector<const Eligible*>& victims,
             const std::vector<LimitDeficit>& deficits, int budget,
             const Cost* bound)
      : spec_(spec),
        state_(state),
        pod_(pod),
        victims_(victims),
        deficits_(deficits),
        budget_(budget),
        bound_(bound) {}

  struct Result {
    bool found = false;
    bool beaten = false;  // not cheaper than `bound`
    Cost cost;
    std::vector<int> set;
    bool exhaustive = true;
    std::string why_not;
  };

  Result Run() {
    Result res;
    if (bound_ != nullptr && bound_->max_priority == INT_MIN) {
      res.beaten = true;  // nothing beats fitting without victims
      return res;
    }
    const int n = static_cast<int>(victims_.size());
    std::vector<char> sel(n, 0);
    if (Check(sel) == Fit::kOk) {
      res.found = true;
      return res;
    }
    if (n == 0) {
      res.why_not = "no eligible victims";
      return res;
    }
    std::fill(sel.begin(), sel.end(), 1);
    const Fit all = Check(sel);
    if (all != Fit::kOk) {
      res.why_not = all == Fit::kLimit
                        ? "evicting every eligible pod leaves the queue over "
                          "its limit"
                        : "too small even with every eligible pod evicted";
      return res;
    }
    // a. The lowest priority level whose pods, all evicted, make room.
    std::vector<int> levels;
    for (const Eligible* v : victims_) levels.push_back(v->priority);
    std::sort(levels.begin(), levels.end());
    levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
    int level = levels.back();
    for (int l : levels) {
      for (int i = 0; i < n; ++i) sel[i] = victims_[i]->priority <= l;
      if (Check(sel) == Fit::kOk) {
        level = l;
        break;
      }
    }
    if (bound_ != nullptr && level > bound_->max_priority) {
      res.beaten = true;
      return res;
    }
    // b, c. Among pods up to that level, big GPU holders considered first.
    for (int i = 0; i < n; ++i) {
      if (victims_[i]->priority <= level) order_.push_back(i);
    }
    std::sort(order_.begin(), order_.end(), [&](int a, int b) {
      const Eligible& x = *victims_[a];
      const Eligible& y = *victims_[b];
      if (x.gpu_milli != y.gpu_milli) return x.gpu_milli > y.gpu_milli;
      if (x.priority != y.priority) return x.priority > y.priority;
      return x.id < y.id;
    });
    // Greedy start: evict the whole pool, then spare each pod that can be
    // spared, biggest first. The result is minimal and bounds the search.
    std::fill(sel.begin(), sel.end(), 0);
    for (int i : order_) sel[i] = 1;
    for (int i : order_) {
      sel[i] = 0;
      if (Check(sel) != Fit::kOk) sel[i] = 1;
    }
    Consider(sel);
    // Exact branch and bound over the pool.
    std::fill(sel.begin(), sel.end(), 0);
    Search(0, sel, 0, 0);
    if (bound_ != nullptr && !(best_cost_.Key() < bound_->Key())) {
      res.beaten = true;
      return res;
    }
    res.found = true;
    res.cost = best_cost_;
    res.set = best_set_;
    res.exhaustive = !out_of_budget_;
    return res;
  }

 private:
  Fit Check(const std::vector<char>& sel) {
    ++checks_;
    NodeState& st = scratch_;
    st = state_;  // reuses the vectors' storage
    std::vector<int64_t>& freed = freed_;
    freed.assign(deficits_.size(), 0);
    for (size_t i = 0; i < sel.size(); ++i) {
      if (!sel[i]) continue;
      const Eligible& v = *victims_[i];
      const Allocation& a = v.record->allocation;
      st.cpu_free += a.cpu_milli;
      st.memory_free_mib += a.memory_mib;
      for (const GpuShare& s : a.gpus) {
        GpuState& g = st.gpus[s.gpu];
        g.milli_free += s.milli;
        g.memory_free_mib += s.memory_mib;
        if (s.mig_start >= 0) {
          g.mig_used &= ~(((1u << s.mig_size) - 1) << s.mig_start);
          g.mig_milli -= s.milli;
        }
      }
      for (size_t k = 0; k < deficits_.size(); ++k) {
        if (v.frees[k]) freed[k] += v.amount[deficits_[k].resource];
      }
    }
    st.idle_gpus = 0;
    for (const GpuState& g : st.gpus) st.idle_gpus += g.healthy && g.Idle();
    // The default filters' rules: NodeResourcesFit, GpuFit, NvlinkTopology
    // (GpuModel, and GpuFit's MIG profile check, depend on the spec only and
    // are checked by the caller). A MIG slice fits where ChooseMigSlice
    // finds one: a GPU freed of every share that is not a MIG slice, with a
    // valid start among the slots the victims leave.
    bool fits =
        pod_.cpu_milli <= st.cpu_free && pod_.memory_mib <= st.memory_free_mib;
    if (fits && pod_.kind == GpuKind::kWhole) {
      int whole = 0;
      for (const GpuState& g : st.gpus) whole += WholeFits(pod_, g);
      fits = whole >= pod_.gpus && (pod_.topology != Topology::kRequired ||
                                    HasNvlinkGang(pod_, spec_, st));
    } else if (fits && pod_.kind == GpuKind::kFraction) {
      fits = BestFitGpu(pod_, st) >= 0;
    } else if (fits && pod_.kind == GpuKind::kMig) {
      fits = !ChooseMigSlice(pod_, spec_, st).empty();
    }
    if (!fits) return Fit::kResources;
    for (size_t k = 0; k < deficits_.size(); ++k) {
      if (freed[k] < deficits_[k].need) return Fit::kLimit;
    }
    return Fit::kOk;
  }

  Cost CostOf(const std::vector<char>& sel) const {
    Cost c;
    for (size_t i = 0; i < sel.size(); ++i) {
      if (!sel[i]) continue;
      const Eligible& v = *victims_[i];
      c.max_priority = std::max(c.max_priority, v.priority);
      c.released += v.gpu_milli;
      ++c.count;
      c.priority_sum += v.priority;
    }
    return c;
  }

  std::vector<std::string> IdsOf(const std::vector<int>& set) const {
    std::vector<std::string> ids;
    for (int i : set) ids.push_back(victims_[i]->id);
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  void Consider(const std::vector<char>& sel) {
    const Cost c = CostOf(sel);
    std::vector<int> set;
    for (size_t i = 0; i < sel.size(); ++i) {
      if (sel[i]) set.push_back(static_cast<int>(i));
    }
    if (have_best_) {
      if (c.Key() > best_cost_.Key()) return;
      if (c.Key() == best_cost_.Key() && IdsOf(set) >= IdsOf(best_set_)) {
        return;
      }
    }
    have_best_ = true;
    best_cost_ = c;
    best_set_ = std::move(set);
  }

  // Decides order_[pos..]; `released` and `count` describe `sel` so far.
  void Search(size_t pos, std::vector<char>& sel, int64_t released, int count) {
    if (checks_ >= budget_) {
      out_of_budget_ = true;
      return;
    }
    // Adding victims never lowers released or count.
    const auto so_far = std::make_pair(released, count);
    if (so_far > std::make_pair(best_cost_.released, best_cost_.count)) {
      return;
    }
    if (bound_ != nullptr && best_cost_.max_priority == bound_->max_priority &&
        so_far > std::make_pair(bound_->released, bound_->count)) {
      return;
    }
    if (Check(sel) == Fit::kOk) {
      Consider(sel);
      return;
    }
    if (pos == order_.size()) return;
    for (size_t j = pos; j < order_.size(); ++j) sel[order_[j]] = 1;
    const bool possible = Check(sel) == Fit::kOk;
    for (size_t j = pos; j < order_.size(); ++j) sel[order_[j]] = 0;
    if (!possible) return;
    const int i = order_[pos];
    Search(pos + 1, sel, released, count);  // spare it
    sel[i] = 1;
    Search(pos + 1, sel, released + victims_[i]->gpu_milli, count + 1);
    sel[i] = 0;
  }

  const NodeSpec& spec_;
  const NodeState& state_;
  const PodRequest& pod_;
  const std::vector<const Eligible*>& victims_;
  const std::vector<LimitDeficit>& deficits_;
  const int budget_;
  const Cost* bound_;
  NodeState scratch_;
  std::vector<int64_t> freed_;
  int checks_ = 0;
  bool out_of_budget_ = false;
  std::vector<int> order_;
  bool have_best_ = false;
  Cost best_cost_;
  std::vector<int> best_set_;
};

// "" when every filter passes `pod` on `node` with `victims` gone; else the
// first "Plugin: reason". Runs on a one-node scratch cluster.
std::string ConfirmWithFilters(
    const inventory::ClusterState& cs, int node, const PodRequest& pod,
    const absl::flat_hash_set<std::string>& victims,
    const std::vector<std::unique_ptr<FilterPlugin>>& filters) {
  inventory::ClusterState scratch;
  absl::StatusOr<int> index = scratch.AddNode(cs.spec(node));
  CHECK(index.ok()) << index.status().message();
  for (const std::string& id : cs.PodsOnNode(node)) {
    if (victims.contains(id)) continue;
    const PodRecord* rec = cs.FindPod(id);
    Allocation a = rec->allocation;
    a.node = *index;
    const absl::Status st = scratch.Assume(id, a, rec->info);
    CHECK(st.ok()) << st.message();
  }
  const NodeState& real = cs.state(node);
  for (int g = 0; g < static_cast<int>(real.gpus.size()); ++g) {
    if (!real.gpus[g].healthy) {
      CHECK(scratch.SetGpuHealth(*index, g, false).ok());
    }
  }
  // Model ids differ on the scratch cluster; the caller checked the model.
  PodRequest p = pod;
  p.any_model = true;
  p.model_mask = ~uint64_t{0};
  for (const auto& f : filters) {
    const FilterVerdict v = f->Filter(p, scratch, *index);
    if (!v.ok()) return absl::StrCat(f->name(), ": ", v.reason);
  }
  return "";
}

std::string FirstOver(const QueueTree& queues, const std::string& queue,
                      const FairShares* shares) {
  const ResourceAmounts usage = queues.Usage(queue);
  for (QuotaResource r : kQuotaResources) {
    if (!queues.accounted(r)) continue;
    const double bound =
        shares != nullptr ? shares->at(queue)[r]
                          : static_cast<double>(queues.Knobs(queue, r)->quota);
    if (static_cast<double>(usage[r]) > bound) {
      return absl::StrCat(QuotaResourceName(r), " ", usage[r], " > ",
                          static_cast<int64_t>(bound));
    }
  }
  return "";
}

std::string VictimReason(const Eligible& e, const QueueTree& queues,
                         const FairShares& shares, const PodRequest& pod) {
  switch (e.rule) {
    case Rule::kPrioritySameQueue:
      return absl::StrCat("priority ", e.priority, " < ", pod.info.priority,
                          " in the same queue '", e.queue, "'");
    case Rule::kPriorityBorrowed:
      return absl::StrCat("priority ", e.priority, " < ", pod.info.priority,
                          " and borrowed: over the quota of queue '", e.queue,
                          "', queue '", e.branch, "' above its quota (",
                          FirstOver(queues, e.branch, nullptr), ")");
    case Rule::kReclaim:
      return absl::StrCat("reclaim for queue '", pod.info.tenant,
                          "' (in quota): over the quota of queue '", e.queue,
                          "', queue '", e.branch, "' above its fair share (",
                          FirstOver(queues, e.branch, &shares), ")");
  }
  return "";
}

PreemptionPlan NoPlan(std::string reason) {
  PreemptionPlan plan;
  plan.reason = std::move(reason);
  return plan;
}

}  // namespace

std::vector<std::string> PreemptionPlan::VictimIds() const {
  std::vector<std::string> ids;
  for (const PreemptionVictim& v : victims) ids.push_back(v.pod);
  return ids;
}

PreemptionPlan PlanPreemption(
    const inventory::ClusterState& cs, const QueueTree& queues,
    const PodRequest& pod,
    const std::vector<std::unique_ptr<FilterPlugin>>& filters,
    const PreemptionOptions& options) {
  const std::string& q = pod.info.tenant;
  const ResourceAmounts request = AmountsOf(pod);
  const AdmitVerdict admit = queues.Admit(q, request);
  if (!queues.IsLeaf(q)) {
    return NoPlan(absl::StrCat("no preemption plan: ", admit.reason));
  }
  const std::vector<std::string> q_path = queues.Path(q);
  const absl::flat_hash_set<std::string> q_ancestors(q_path.begin(),
                                                     q_path.end());

  // Limits the preemptor would break, and by how much.
  std::vector<LimitDeficit> deficits;
  for (const std::string& name : q_path) {
    for (QuotaResource r : kQuotaResources) {
      const int64_t limit = queues.Knobs(name, r)->limit;
      if (!queues.accounted(r) || limit == kNoLimit || request[r] <= 0) {
        continue;
      }
      const int64_t over = queues.Usage(name)[r] + request[r] - limit;
      if (over > 0) deficits.push_back({name, r, over});
    }
  }

  const FairShares shares =
      queues.ComputeFairShares(ClusterCapacity(cs), {{q, request}});
  const absl::flat_hash_set<std::string> over_quota = queues.OverQuotaPods();

  // What the rules need to know about a victim's leaf queue, per leaf.
  struct LeafFacts {
    std::string branch;       // ancestor just below the common one with q
    bool borrowing = false;   // branch above its quota
    bool over_fair = false;   // branch above its fair share
    std::vector<bool> frees;  // per deficit: leaf is in that subtree
  };
  absl::flat_hash_map<std::string, LeafFacts> leaf_facts;
  auto facts_of = [&](const std::string& leaf) -> const LeafFacts& {
    auto [it, inserted] = leaf_facts.try_emplace(leaf);
    if (!inserted) return it->second;
    LeafFacts& f = it->second;
    const std::vector<std::string> path = queues.Path(leaf);
    if (leaf != q) {
      for (const std::string& a : path) {
        if (q_ancestors.contains(a)) break;
        f.branch = a;
      }
    }
    if (!f.branch.empty()) {
      f.borrowing = queues.OverQuota(f.branch);
      f.over_fair = queues.OverFairShare(f.branch, shares);
    }
    for (const LimitDeficit& d : deficits) {
      f.frees.push_back(std::find(path.begin(), path.end(), d.queue) !=
                        path.end());
    }
    return f;
  };

  // Which running pods may go, and why (see the header).
  int kept_unpreemptible = 0, kept_guaranteed = 0, kept_same_queue = 0;
  std::vector<std::vector<Eligible>> eligible(cs.num_nodes());
  for (int node = 0; node < cs.num_nodes(); ++node) {
    // PodsOnNode's order is an accident of history; ids sort for a
    // deterministic search.
    std::vector<std::string> ids = cs.PodsOnNode(node);
    std::sort(ids.begin(), ids.end());
    for (const std::string& id : ids) {
      const PodRecord* rec = cs.FindPod(id);
      if (!rec->info.preemptible) {
        ++kept_unpreemptible;
        continue;
      }
      std::string leaf = queues.QueueOf(id);
      if (leaf.empty()) leaf = rec->info.tenant;
      const bool same = leaf == q;
      const bool lower = rec->info.priority < pod.info.priority;
      const bool over = over_quota.contains(id);
      const LeafFacts& f = facts_of(leaf);
      Rule rule;
      if (lower && same) {
        rule = Rule::kPrioritySameQueue;
      } else if (lower && over && f.borrowing) {
        rule = Rule::kPriorityBorrowed;
      } else if (admit.in_quota && over && f.over_fair) {
        rule = Rule::kReclaim;
      } else {
        ++(same ? kept_same_queue : kept_guaranteed);
        continue;
      }
      Eligible e;
      e.id = id;
      e.record = rec;
      e.queue = leaf;
      e.branch = f.branch;
      e.rule = rule;
      e.priority = rec->info.priority;
      e.gpu_milli = rec->allocation.GpuMilli();
      e.amount = AmountsOf(rec->allocation);
      e.frees = f.frees;
      eligible[node].push_back(std::move(e));
    }
  }

  // Scan nodes in index order keeping the cheapest; a node the filters
  // then reject is dropped and the scan repeats without it (only filters
  // beyond the modelled defaults can reject, so this is rare).
  absl::flat_hash_set<int> rejected;
  std::map<std::string, int> rejected_reasons;
  std::map<std::string, int> node_reasons;
  while (true) {
    node_reasons = rejected_reasons;
    int best_node = -1;
    NodeSearch::Result best;
    for (int node = 0; node < cs.num_nodes(); ++node) {
      if (rejected.contains(node)) continue;
      if (pod.kind != GpuKind::kNone) {
        if (cs.spec(node).gpu_count == 0) {
          ++node_reasons["GpuModel: no GPUs"];
          continue;
        }
        if (!pod.ModelAllowed(cs.node_model_id(node))) {
          ++node_reasons["GpuModel: GPU model mismatch"];
          continue;
        }
      }
      if (pod.kind == GpuKind::kMig) {
        if (const char* why = MigSpecRejection(cs.spec(node), pod.mig_profile);
            why != nullptr) {
          ++node_reasons[absl::StrCat("GpuFit: ", why)];
          continue;
        }
      }
      std::vector<const Eligible*> victims;
      for (const Eligible& e : eligible[node]) victims.push_back(&e);
      NodeSearch search(cs.spec(node), cs.state(node), pod, victims, deficits,
                        options.max_fit_checks_per_node,
                        best_node >= 0 ? &best.cost : nullptr);
      NodeSearch::Result r = search.Run();
      if (r.found) {
        best_node = node;
        best = std::move(r);
      } else if (!r.beaten) {
        ++node_reasons[r.why_not];
      }
    }
    if (best_node < 0) break;

    // Victim indexes are positions in eligible[best_node].
    absl::flat_hash_set<std::string> victim_ids;
    for (int i : best.set) victim_ids.insert(eligible[best_node][i].id);
    const std::string refused =
        ConfirmWithFilters(cs, best_node, pod, victim_ids, filters);
    if (!refused.empty()) {
      rejected.insert(best_node);
      ++rejected_reasons[refused];
      continue;
    }
    PreemptionPlan plan;
    plan.found = true;
    plan.node = best_node;
    plan.exhaustive = best.exhaustive;
    plan.cluster_version = cs.version();
    for (int i : best.set) {
      const Eligible& e = eligible[best_node][i];
      plan.victims.push_back({e.id, e.queue, e.priority, e.gpu_milli,
                              VictimReason(e, queues, shares, pod)});
      plan.gpu_milli_released += e.gpu_milli;
    }
    std::sort(plan.victims.begin(), plan.victims.end(),
              [](const PreemptionVictim& a, const PreemptionVictim& b) {
                return std::tie(a.priority, a.pod) <
                       std::tie(b.priority, b.pod);
              });
    plan.gpu_milli_excess =
        std::max<int64_t>(0, plan.gpu_milli_released - pod.TotalGpuMilli());
    const std::string& name = cs.spec(best_node).name;
    if (plan.victims.empty()) {
      plan.reason = absl::StrCat("fits on node ", name, " without preemption");
    } else {
      plan.reason =
          absl::StrCat("evict ", plan.victims.size(), " pod(s) on node ", name,
                       " (highest victim priority ", best.cost.max_priority,
                       ", ", plan.gpu_milli_released, " GPU milli released, ",
                       plan.gpu_milli_excess, " beyond the pod's need)");
    }
    return plan;
  }

  std::vector<std::pair<std::string, int>> reasons(node_reasons.begin(),
                                                   node_reasons.end());
  std::stable_sort(
      reasons.begin(), reasons.end(),
      [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> parts;
  for (const auto& [reason, n] : reasons) {
    parts.push_back(absl::StrCat(n, " node", n == 1 ? "" : "s", ": ", reason));
  }
  std::string text = absl::StrCat(
      "no preemption plan: ", absl::StrJoin(parts, ", "),
      "; running pods kept: ", kept_unpreemptible, " non-preemptible, ",
      kept_same_queue, " of the same queue not of lower priority, ",
      kept_guaranteed,
      " of other queues (in quota, or neither "
      "lower priority nor reclaimable)");
  if (!admit.admitted) absl::StrAppend(&text, "; ", admit.reason);
  return NoPlan(std::move(text));
}

absl::StatusOr<Decision> ApplyPreemption(const PreemptionPlan& plan,
                                         const std::string& pod_id,
                                         const PodRequest& pod,
                                         Scheduler& scheduler,
                                         QueueTree* queues) {
  inventory::ClusterState& cs = scheduler.cluster();
  if (!plan.found) {
    return absl::FailedPreconditionError(
        absl::StrCat("pod '", pod_id, "': ", plan.reason));
  }
  if (cs.version() != plan.cluster_version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pod '", pod_id, "': the cluster changed since the plan was made"));
  }
  // Evict, remembering each victim so a failed placement can undo it.
  std::vector<std::pair<std::string, inventory::PodRecord>> evicted;
  for (const PreemptionVictim& v : plan.victims) {
    const inventory::PodRecord* rec = cs.FindPod(v.pod);
    if (rec == nullptr) continue;
    evicted.emplace_back(v.pod, *rec);
    cs.Forget(v.pod);
    if (queues != nullptr) queues->Release(v.pod);
  }
  // On the planned node: elsewhere the evictions would have been for
  // nothing.
  Decision d = scheduler.PlaceOn(pod_id, pod, plan.node);
  if (!d.placed) {
    for (const auto& [id, rec] : evicted) {
      RETURN_IF_ERROR(cs.Assume(id, rec.allocation, rec.info));
      if (rec.bound) RETURN_IF_ERROR(cs.Bind(id));
      if (queues != nullptr) {
        RETURN_IF_ERROR(queues->Charge(
            id, rec.info.tenant, AmountsOf(rec.allocation), rec.info.priority));
      }
    }
    return absl::InternalError(absl::StrCat(
        "pod '", pod_id, "' does not fit on ", cs.spec(plan.node).name,
        " after evicting ", plan.victims.size(),
        " pod(s) (victims restored): ", d.Summary(cs)));
  }
  if (queues != nullptr) {
    RETURN_IF_ERROR(queues->Charge(pod_id, pod.info.tenant,
                                   AmountsOf(d.allocation), pod.info.priority));
  }
  return d;
}

}  // namespace gpusched::placement
