// The controller's side of launchers in front of a cluster manager (Slurm
// today): the GPUs the manager assigned and the nodes it reports.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "inventory/mig.h"
#include "runtime/controller.h"
#include "runtime/controller_internal.h"

namespace gpusched::runtime {

using nlohmann::json;

void Controller::HandleClusterReports(Micros now) {
  std::vector<backends::GpuAssignment> assigned;
  std::vector<backends::NodeReport> nodes;
  std::vector<backends::ManagerReport> manager;
  std::vector<backends::ReadinessReport> readiness;
  std::vector<backends::PoolReport> pools;
  std::vector<backends::PoolNodeReport> pool_nodes;
  {
    absl::MutexLock l(&launcher_mu_);
    assigned = launcher_->Assignments();
    nodes = launcher_->NodeReports();
    manager = launcher_->ManagerReports();
    readiness = launcher_->ReadinessReports();
    if (backends::CapacityManager* cap = launcher_->capacity()) {
      pools = cap->Pools();
      pool_nodes = cap->PoolNodeReports();
    }
  }
  // Pool nodes first: a node report of a node that is not up yet leaves
  // its GPUs to no replica (Cordoned).
  if (!pools.empty() || !pool_nodes.empty()) {
    ApplyPoolReports(std::move(pools), pool_nodes, now);
  }
  for (const backends::ManagerReport& m : manager) {
    if (m.reachable) {
      Event("manager.reachable", "", "the cluster manager answers again");
    } else {
      Event("manager.unreachable", "",
            absl::StrCat("the cluster manager does not answer (", m.message,
                         "); replicas stay as they are until it does"),
            json{{"error", m.message}});
    }
  }
  FollowAssignments(assigned);
  for (const backends::NodeReport& n : nodes) ApplyNodeReport(n, now);
  for (const backends::ReadinessReport& rr : readiness) {
    for (auto& [name, d] : deployments_) {
      for (auto& [rn, r] : d.procs) {
        if (r.pid != rr.id || r.manager_ready == rr.ready) continue;
        r.manager_ready = rr.ready;
        dirty_ = true;
        // The first Ready is the start going well (replica.ready says
        // it); what is news is losing it, and getting it back.
        const bool news = !rr.ready || r.manager_lost;
        r.manager_lost = !rr.ready;
        if (news) {
          Event(rr.ready ? "replica.manager_ready" : "replica.manager_unready",
                name,
                rr.ready ? absl::StrCat(rn, ": the cluster manager says ready")
                         : absl::StrCat(rn,
                                        ": the cluster manager says not "
                                        "ready; no request goes there (",
                                        rr.reason, ")"),
                json{{"replica", rn}, {"reason", rr.reason}});
        }
      }
    }
  }
}

void Controller::FollowAssignments(
    const std::vector<backends::GpuAssignment>& assigned) {
  struct Move {
    std::string deployment;
    std::string replica;
    Replica* r = nullptr;
    inventory::Allocation moved;
    inventory::PodInfo info;
    bool bound = false;
    std::string what;
    std::vector<int> gpus;
    std::vector<int> chosen;
  };
  std::vector<Move> moves;
  for (const backends::GpuAssignment& a : assigned) {
    for (auto& [name, d] : deployments_) {
      for (auto& [rn, r] : d.procs) {
        if (r.pid != a.id) continue;
        if (!a.address.empty() && a.address != r.endpoint.host) {
          Event(
              "replica.address", name,
              absl::StrCat(rn, " listens on ", a.address, ":", r.endpoint.port,
                           " (the cluster manager's "
                           "address for it)"),
              json{{"replica", rn}, {"address", a.address}});
          r.endpoint.host = a.address;
        }
        if (!r.placed || r.allocation.node < 0) continue;
        // What placement chose, as (GPU, MIG start) pairs, sorted.
        std::vector<std::pair<int, int>> chosen, given;
        for (const inventory::GpuShare& g : r.allocation.gpus) {
          chosen.emplace_back(g.gpu, g.mig_start);
        }
        std::sort(chosen.begin(), chosen.end());
        for (size_t i = 0; i < a.gpus.size(); ++i) {
          given.emplace_back(a.gpus[i],
                             i < a.mig_starts.size() ? a.mig_starts[i] : -1);
        }
        std::sort(given.begin(), given.end());
        if (a.gpus.empty() || chosen == given) break;
        auto text = [](const std::vector<std::pair<int, int>>& v) {
          return absl::StrJoin(v, ",", [](std::string* out, const auto& p) {
            absl::StrAppend(out, p.first);
            if (p.second >= 0) absl::StrAppend(out, "@", p.second);
          });
        };
        Move m;
        m.deployment = name;
        m.replica = rn;
        m.r = &r;
        m.what =
            absl::StrCat(rn, ": the cluster manager gave GPUs ", text(given),
                         " on ", a.node, ", placement chose ", text(chosen));
        if (given.size() != chosen.size()) {
          Event("replica.gpus_mismatch", name, m.what);
          break;
        }
        // The allocation follows what the replica holds: same shares, the
        // manager's GPUs (and MIG instances).
        m.moved = r.allocation;
        std::sort(
            m.moved.gpus.begin(), m.moved.gpus.end(),
            [](const inventory::GpuShare& x, const inventory::GpuShare& y) {
              return std::pair(x.gpu, x.mig_start) <
                     std::pair(y.gpu, y.mig_start);
            });
        for (size_t i = 0; i < m.moved.gpus.size(); ++i) {
          m.moved.gpus[i].gpu = given[i].first;
          if (m.moved.gpus[i].mig_start >= 0 && given[i].second >= 0) {
            m.moved.gpus[i].mig_start = given[i].second;
          }
        }
        const inventory::PodRecord* rec = cluster_state_.FindPod(rn);
        if (rec != nullptr) m.info = rec->info;
        m.bound = rec != nullptr && rec->bound;
        for (const auto& [gpu, start] : given) m.gpus.push_back(gpu);
        for (const auto& [gpu, start] : chosen) m.chosen.push_back(gpu);
        moves.push_back(std::move(m));
        break;
      }
    }
  }
  // Every replica that moves lets go of placement's GPUs first, so that two
  // that the manager swapped both follow.
  for (const Move& m : moves) cluster_state_.Forget(m.replica);
  std::vector<std::pair<const Move*, std::string>> misfits;
  for (const Move& m : moves) {
    std::string misfit = cluster_state_.Fits(m.moved);
    if (misfit.empty()) {
      absl::Status st = cluster_state_.Assume(m.replica, m.moved, m.info);
      if (!st.ok()) misfit = std::string(st.message());
    }
    if (!misfit.empty()) {
      misfits.emplace_back(&m, std::move(misfit));
      continue;
    }
    if (m.bound) (void)cluster_state_.Bind(m.replica);
    m.r->allocation = m.moved;
    Event("replica.gpus_assigned", m.deployment, m.what,
          json{{"replica", m.replica},
               {"node", cluster_state_.spec(m.moved.node).name},
               {"gpus", m.gpus},
               {"chosen", m.chosen}});
  }
  for (const auto& [m, misfit] : misfits) {
    const absl::Status st =
        cluster_state_.Assume(m->replica, m->r->allocation, m->info);
    if (st.ok() && m->bound) (void)cluster_state_.Bind(m->replica);
    Event("replica.gpus_mismatch", m->deployment,
          absl::StrCat(
              m->what, "; kept placement's (", misfit, ")",
              st.ok() ? "" : absl::StrCat("; not accounted: ", st.message())));
  }
}

void Controller::ApplyNodeReport(const backends::NodeReport& n, Micros now) {
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
  bool gained = false;  // GPUs that take replicas now and did not
  for (int g = 0; g < static_cast<int>(st.gpus.size()); ++g) {
    const bool healthy = n.usable && !Cordoned(n.node) &&
                         std::find(n.foreign_gpus.begin(), n.foreign_gpus.end(),
                                   g) == n.foreign_gpus.end();
    if (st.gpus[g].healthy != healthy) {
      (void)cluster_state_.SetGpuHealth(node, g, healthy);
      gained = gained || healthy;
    }
  }
  // Replicas that found no room try the new GPUs at once (a node powered up
  // for them, one back in service), not at their next retry.
  if (gained) {
    for (auto& [name, d] : deployments_) d.life.Retry(now);
    dirty_ = true;
  }
  // MIG instances other work holds: their slots take no slice.
  const inventory::NodeSpec& spec = cluster_state_.spec(node);
  std::vector<uint32_t> foreign_slots(st.gpus.size(), 0);
  for (const auto& [gpu, start] : n.foreign_mig) {
    if (gpu >= 0 && gpu < static_cast<int>(foreign_slots.size())) {
      foreign_slots[gpu] |= inventory::StaticMigMask(spec, gpu, start);
    }
  }
  for (int g = 0; g < static_cast<int>(st.gpus.size()); ++g) {
    if (st.gpus[g].mig_foreign != foreign_slots[g]) {
      (void)cluster_state_.SetMigForeign(node, g, foreign_slots[g]);
    }
  }
  std::vector<std::pair<int, int>> was_foreign_mig;
  if (known != node_reports_.end()) {
    was_foreign_mig = known->second.foreign_mig;
  }
  if (n.foreign_mig != was_foreign_mig) {
    const std::string list =
        absl::StrJoin(n.foreign_mig, ",", [](std::string* out, const auto& p) {
          absl::StrAppend(out, p.first, "@", p.second);
        });
    json instances = json::array();
    for (const auto& [gpu, start] : n.foreign_mig) {
      instances.push_back({{"gpu", gpu}, {"start", start}});
    }
    Event(
        "node.mig_foreign", "",
        n.foreign_mig.empty()
            ? absl::StrCat("no MIG instance of node ", n.node,
                           " is held by other work any more")
            : absl::StrCat("MIG instances ", list, " (GPU@slot) of node ",
                           n.node, " are held by work gpusched did not start"),
        json{{"node", n.node}, {"instances", instances}});
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
  // on usable nodes. A pool node going away (an autoscaler's scale-down
  // taint) is still there: each replica is replaced first, and drains once
  // the replacement is ready (ReplicaSet::Move), so no request fails.
  auto pn = pool_nodes_.find(n.node);
  const bool going = pn != pool_nodes_.end() &&
                     pn->second.state == backends::PoolNodeState::kPoweringDown;
  for (auto& [name, d] : deployments_) {
    for (auto& [rn, r] : d.procs) {
      if (!r.placed || r.allocation.node != node) continue;
      if (going && d.life.Move(rn, absl::StrCat("node ", n.node, " is ", said,
                                                "; its autoscaler removes "
                                                "it"))) {
        dirty_ = true;
        continue;
      }
      control::LifecycleOutput out;
      d.life.Drain(rn, absl::StrCat("node ", n.node, " is ", said), now, &out);
      Carry(d, out, now);
    }
  }
}

namespace {

// FNV-1a: stable across runs and builds (the tag outlives the process).
std::string StableHash(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrCat(absl::Hex(h, absl::kZeroPad16));
}

// How long leftovers wait for their deployment's launches.
constexpr Micros kAdoptWindow = 30 * kMicrosPerSecond;

}  // namespace

std::string Controller::LaunchTag(int port, int metrics_port,
                                  const std::string& version) {
  return absl::StrCat(port, ".", metrics_port, ".", StableHash(version));
}

void Controller::EndLeftover(const backends::Leftover& l,
                             const std::string& why) {
  absl::Status st;
  {
    absl::MutexLock lock(&launcher_mu_);
    st = launcher_->Adopt(l, l.name, l.deployment, l.tag);
    if (st.ok()) st = launcher_->Kill(l.id);
  }
  Event("replica.orphan_killed", l.deployment,
        absl::StrCat(st.ok() ? "ended " : "could not end ", l.description,
                     ", left by a previous gpusched: ", why,
                     st.ok() ? "" : absl::StrCat(" (", st.message(), ")")),
        json{{"replica", l.name}, {"pid", l.id}});
}

void Controller::PlanLeftovers(Micros now) {
  std::vector<backends::Leftover> all;
  std::vector<backends::PoolReport> pools;
  std::vector<backends::PoolNodeReport> pool_nodes;
  {
    absl::MutexLock lock(&launcher_mu_);
    all = launcher_->Leftovers();
    // Nodes an autoscaler added are learned first (Leftovers synced with
    // the manager), so that what runs there is adopted, not ended as on a
    // node not in the cluster.
    if (backends::CapacityManager* cap = launcher_->capacity()) {
      pools = cap->Pools();
      pool_nodes = cap->PoolNodeReports();
    }
  }
  if (!pools.empty() || !pool_nodes.empty()) {
    ApplyPoolReports(std::move(pools), pool_nodes, now);
  }
  absl::flat_hash_map<std::string, int> kept;
  for (backends::Leftover& l : all) {
    auto d = deployments_.find(l.deployment);
    std::vector<std::string> tag = absl::StrSplit(l.tag, '.');
    int port = 0;
    if (d == deployments_.end()) {
      EndLeftover(l, "its deployment is gone");
    } else if (!l.running) {
      EndLeftover(l, "it never started");
    } else if (tag.size() != 3 || !absl::SimpleAtoi(tag[0], &port) ||
               port <= 0 || port > 65535 ||
               tag[2] != StableHash(d->second.life.version())) {
      EndLeftover(l, "it runs another version of the deployment");
    } else if (cluster_state_.FindNode(l.node) < 0) {
      EndLeftover(l, absl::StrCat("node ", l.node, " is not in the cluster"));
    } else if (kept[l.deployment] >= ReplicaTarget(d->second)) {
      EndLeftover(l, "the deployment has enough replicas");
    } else {
      ++kept[l.deployment];
      leftovers_[l.deployment].push_back(std::move(l));
    }
  }
  adopt_deadline_ = now + kAdoptWindow;
}

void Controller::EndStaleLeftovers(Micros now) {
  if (leftovers_.empty() || now < adopt_deadline_) return;
  auto stale = std::move(leftovers_);
  leftovers_.clear();
  for (auto& [name, list] : stale) {
    for (const backends::Leftover& l : list) {
      EndLeftover(l, "no replica took it over in time");
    }
  }
}

bool Controller::AdoptLeftover(Deployment& d, Replica& r, Micros now) {
  auto it = leftovers_.find(d.spec.name);
  if (it == leftovers_.end()) return false;
  while (!it->second.empty()) {
    // The job that served this very replica first (its name stays the
    // same across a restart or a new leader), else any.
    auto same = std::find_if(
        it->second.begin(), it->second.end(),
        [&](const backends::Leftover& x) { return x.name == r.name; });
    if (same == it->second.end()) same = std::prev(it->second.end());
    backends::Leftover l = std::move(*same);
    it->second.erase(same);
    const int node = cluster_state_.FindNode(l.node);
    const inventory::NodeSpec& spec = cluster_state_.spec(node);
    const inventory::ResourceRequest req = ToRequest(d.spec.resources);
    inventory::Allocation a;
    a.node = node;
    a.cpu_milli = req.cpu_milli;
    a.memory_mib = req.memory_mib;
    // Whole GPUs, the share of one GPU or the MIG instance its deployment
    // asks for.
    const bool fraction = req.kind == inventory::GpuKind::kFraction;
    const bool mig = req.kind == inventory::GpuKind::kMig;
    const inventory::GpuModelSpec* model =
        inventory::GpuCatalog::Builtin().Find(spec.gpu_model);
    const inventory::MigProfile* profile =
        mig && model != nullptr ? model->FindMigProfile(req.mig_profile)
                                : nullptr;
    for (size_t i = 0; i < l.gpus.size(); ++i) {
      inventory::GpuShare share;
      share.gpu = l.gpus[i];
      share.milli = fraction ? req.gpu_milli : inventory::kMilliPerGpu;
      share.memory_mib = fraction ? req.gpu_memory_mib : spec.gpu_memory_mib;
      if (profile != nullptr && i < l.mig_starts.size()) {
        share.milli = profile->milli;
        share.memory_mib = profile->memory_mib;
        share.mig_start = l.mig_starts[i];
        share.mig_size = profile->memory_slots;
        share.mig_profile = profile->name;
      }
      a.gpus.push_back(share);
    }
    const bool matches = mig ? profile != nullptr && l.gpus.size() == 1 &&
                                   l.mig_starts.size() == 1
                         : fraction
                             ? l.gpus.size() == 1
                             : req.kind == inventory::GpuKind::kWhole &&
                                   static_cast<int>(l.gpus.size()) == req.gpus;
    const std::string misfit =
        matches ? cluster_state_.Fits(a)
        : mig   ? absl::StrCat("it holds ", l.gpus.size(),
                               " GPUs and no MIG instance of ", req.mig_profile,
                               "; its deployment asks for one")
                : absl::StrCat("it holds ", l.gpus.size(),
                               " GPUs; its deployment asks for ",
                             fraction ? std::string("a share of one")
                                        : absl::StrCat(req.gpus, " whole"));
    std::vector<std::string> tag = absl::StrSplit(l.tag, '.');
    int port = 0, metrics_port = 0;
    (void)absl::SimpleAtoi(tag[0], &port);
    (void)absl::SimpleAtoi(tag[1], &metrics_port);
    absl::Status st = misfit.empty()
                          ? cluster_state_.Assume(r.name, a, PodInfoOf(d))
                          : absl::FailedPreconditionError(misfit);
    if (st.ok()) {
      (void)cluster_state_.Bind(r.name);
      absl::MutexLock lock(&launcher_mu_);
      st = launcher_->Adopt(l, r.name, d.spec.name, l.tag);
      if (!st.ok()) cluster_state_.Forget(r.name);
    }
    if (!st.ok()) {
      EndLeftover(l, absl::StrCat("it cannot be adopted: ", st.message()));
      continue;
    }
    r.placed = true;
    r.allocation = a;
    r.pid = l.id;
    r.manager_ready = !manager_readiness_;
    r.manager_lost = false;
    r.endpoint = {!l.address.empty()     ? l.address
                  : spec.address.empty() ? "127.0.0.1"
                                         : spec.address,
                  static_cast<uint16_t>(port)};
    r.metrics_port = static_cast<uint16_t>(metrics_port);
    r.started_wall = Wall();
    d.life.Launched(r.name, now);
    Event("replica.adopted", d.spec.name,
          absl::StrCat(r.name, " adopted ", l.description, " (it served ",
                       l.name, " of a previous gpusched)"),
          json{{"replica", r.name},
               {"pid", l.id},
               {"node", l.node},
               {"gpus", l.gpus},
               {"port", port}});
    if (it->second.empty()) leftovers_.erase(it);
    return true;
  }
  leftovers_.erase(it);
  return false;
}

}  // namespace gpusched::runtime
