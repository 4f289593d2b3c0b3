// The controller's side of launchers in front of a cluster manager (Slurm
// today): the GPUs the manager assigned and the nodes it reports.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/controller.h"

namespace gpusched::runtime {

using nlohmann::json;

void Controller::HandleClusterReports(Micros now) {
  std::vector<runtime::GpuAssignment> assigned;
  std::vector<runtime::NodeReport> nodes;
  {
    absl::MutexLock l(&launcher_mu_);
    assigned = launcher_->Assignments();
    nodes = launcher_->NodeReports();
  }
  for (const runtime::GpuAssignment& a : assigned) FollowAssignment(a);
  for (const runtime::NodeReport& n : nodes) ApplyNodeReport(n, now);
}

void Controller::FollowAssignment(const runtime::GpuAssignment& a) {
  for (auto& [name, d] : deployments_) {
    for (auto& [rn, r] : d.procs) {
      if (r.pid != a.id || !r.placed || r.allocation.node < 0) continue;
      std::vector<int> chosen;
      for (const inventory::GpuShare& g : r.allocation.gpus) {
        chosen.push_back(g.gpu);
      }
      std::sort(chosen.begin(), chosen.end());
      if (a.gpus.empty() || chosen == a.gpus) return;
      const std::string what = absl::StrCat(
          rn, ": the cluster manager gave GPUs ", absl::StrJoin(a.gpus, ","),
          " on ", a.node, ", placement chose ", absl::StrJoin(chosen, ","));
      if (a.gpus.size() != chosen.size()) {
        Event("replica.gpus_mismatch", name, what);
        return;
      }
      // The allocation follows what the replica holds: same shares, the
      // manager's GPUs.
      inventory::Allocation moved = r.allocation;
      std::sort(moved.gpus.begin(), moved.gpus.end(),
                [](const inventory::GpuShare& x, const inventory::GpuShare& y) {
                  return x.gpu < y.gpu;
                });
      for (size_t i = 0; i < moved.gpus.size(); ++i) {
        moved.gpus[i].gpu = a.gpus[i];
      }
      const inventory::PodRecord* rec = cluster_state_.FindPod(rn);
      const inventory::PodInfo info =
          rec != nullptr ? rec->info : inventory::PodInfo{};
      const bool bound = rec != nullptr && rec->bound;
      cluster_state_.Forget(rn);
      const std::string misfit = cluster_state_.Fits(moved);
      const inventory::Allocation& keep = misfit.empty() ? moved : r.allocation;
      (void)cluster_state_.Assume(rn, keep, info);
      if (bound) (void)cluster_state_.Bind(rn);
      if (!misfit.empty()) {
        Event("replica.gpus_mismatch", name,
              absl::StrCat(what, "; kept placement's (", misfit, ")"));
        return;
      }
      r.allocation = moved;
      Event("replica.gpus_assigned", name, what,
            json{{"replica", rn},
                 {"node", a.node},
                 {"gpus", a.gpus},
                 {"chosen", chosen}});
      return;
    }
  }
}

void Controller::ApplyNodeReport(const runtime::NodeReport& n, Micros now) {
  const int node = cluster_state_.FindNode(n.node);
  if (node < 0) return;
  const inventory::NodeState& st = cluster_state_.state(node);
  bool was_usable = true;
  std::vector<int> was_foreign;
  auto known = node_reports_.find(n.node);
  if (known != node_reports_.end()) {
    was_usable = known->second.usable;
    was_foreign = known->second.foreign_gpus;
  }
  for (int g = 0; g < static_cast<int>(st.gpus.size()); ++g) {
    const bool healthy =
        n.usable && std::find(n.foreign_gpus.begin(), n.foreign_gpus.end(),
                              g) == n.foreign_gpus.end();
    if (st.gpus[g].healthy != healthy) {
      (void)cluster_state_.SetGpuHealth(node, g, healthy);
    }
  }
  const std::string said = absl::StrCat(
      n.state, n.reason.empty() ? "" : absl::StrCat(": ", n.reason));
  if (n.usable != was_usable) {
    Event(n.usable ? "node.usable" : "node.unusable", "",
          absl::StrCat("node ", n.node, " is ", said),
          json{{"node", n.node}, {"state", n.state}, {"reason", n.reason}});
  }
  if (n.foreign_gpus != was_foreign) {
    Event("node.gpus_foreign", "",
          n.foreign_gpus.empty()
              ? absl::StrCat("no GPU of node ", n.node,
                             " is held by other work any more")
              : absl::StrCat("GPUs ", absl::StrJoin(n.foreign_gpus, ","),
                             " of node ", n.node,
                             " are held by work gpusched did not start"),
          json{{"node", n.node}, {"gpus", n.foreign_gpus}});
  }
  node_reports_[n.node] = n;
  if (n.usable) return;
  // Its replicas move: drained (requests finish or go elsewhere), replaced
  // on usable nodes.
  for (auto& [name, d] : deployments_) {
    for (auto& [rn, r] : d.procs) {
      if (!r.placed || r.allocation.node != node) continue;
      control::LifecycleOutput out;
      d.life.Drain(rn, absl::StrCat("node ", n.node, " is ", said), now, &out);
      Carry(d, out, now);
    }
  }
}

}  // namespace gpusched::runtime
