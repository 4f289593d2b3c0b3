#include "control/capacity.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gpusched::control {

using json = nlohmann::json;

absl::Status ValidatePool(const NodePool& p, const std::string& where) {
  auto bad = [&](const char* field, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".", field, ": ", what));
  };
  if (p.name.empty()) return bad("name", "required");
  if (p.name.size() > 63) return bad("name", "at most 63 characters");
  for (char c : p.name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' &&
        c != '.') {
      return bad("name", absl::StrCat("'", p.name,
                                      "' may hold letters, digits and ._- "
                                      "only"));
    }
  }
  if (p.gpu.empty()) return bad("gpu", "required (a GPU model name)");
  if (p.gpus_per_node < 1 || p.gpus_per_node > NodePool::kMaxGpusPerNode) {
    return bad("gpus_per_node",
               absl::StrCat("must be 1..", NodePool::kMaxGpusPerNode, ", not ",
                            p.gpus_per_node));
  }
  if (!std::isfinite(p.price_per_node_hour) || p.price_per_node_hour < 0) {
    return bad("price_per_node_hour", "must be a number >= 0");
  }
  if (p.provisioning_delay < 0) {
    return bad("provisioning_delay_s", "must be >= 0");
  }
  if (p.max_nodes < 1 || p.max_nodes > NodePool::kMaxNodes) {
    return bad("max_nodes", absl::StrCat("must be 1..", NodePool::kMaxNodes,
                                         ", not ", p.max_nodes));
  }
  if (p.min_nodes < 0 || p.min_nodes > p.max_nodes) {
    return bad("min_nodes", absl::StrCat("must be 0..max_nodes (", p.max_nodes,
                                         "), not ", p.min_nodes));
  }
  return absl::OkStatus();
}

CapacityOptions CapacityOptionsFrom(const config::CapacitySpec& k) {
  CapacityOptions o;
  o.scale_up_delay = FromSeconds(k.scale_up_delay_s);
  o.scale_down_delay = FromSeconds(k.scale_down_delay_s);
  o.cost_aware = k.policy == "gpusched";
  o.consolidate = k.policy == "gpusched";
  o.consolidate_below = k.consolidate_below;
  o.base_ondemand_fallback_replicas = k.base_ondemand_fallback_replicas;
  o.dynamic_ondemand_fallback = k.dynamic_ondemand_fallback;
  o.spot_recovery_delay = FromSeconds(k.spot_recovery_delay_s);
  o.failed_pool_backoff = FromSeconds(k.failed_pool_backoff_s);
  return o;
}

namespace {

// Output tokens per second of one replica at each batch that meets the
// SLO (index: the batch; [0] = 0), and the best of them.
struct TokenCurve {
  std::vector<double> tps_at = {0};
  int batch = 0;
  double tokens_per_s = 0;
  double prefill = 0;

  // At `d` concurrent requests: below one, busy that share of the time;
  // between batches, the tokens per second in between; beyond the
  // capacity, its capacity (the requests over it wait: they say that the
  // deployment needs more, not how many tokens arrive).
  double At(double d) const {
    d = std::max(d, SloTarget::kMinDemand);
    if (d >= batch) return tokens_per_s;
    const int lo = static_cast<int>(std::floor(d));
    const double f = d - lo;
    return lo == 0 ? d * tps_at[1] : (1 - f) * tps_at[lo] + f * tps_at[lo + 1];
  }
  // The concurrency at which it serves `tps` (<= tokens_per_s).
  double ConcurrencyFor(double tps) const {
    if (tps >= tokens_per_s) return batch;
    for (int b = 1; b <= batch; ++b) {
      if (tps <= tps_at[b]) {
        const double below = tps_at[b - 1];
        return b - 1 + (tps - below) / (tps_at[b] - below);
      }
    }
    return batch;
  }
};

TokenCurve CurveOf(const serving::LatencyModel& m, const SloTarget& slo) {
  TokenCurve c;
  const int in = std::max(1, slo.input_tokens);
  const int outn = std::max(1, slo.output_tokens);
  c.prefill = m.PrefillSeconds(in);
  const double tpot = slo.tpot_s > 0 ? slo.tpot_s : SloTarget::kDefaultTpotS;
  for (int b = 1; b <= std::max(1, slo.max_batch); ++b) {
    const int64_t kv = static_cast<int64_t>(b) * (in + outn / 2);
    if (m.kv_capacity_tokens > 0 &&
        static_cast<int64_t>(b) * (in + outn) > m.kv_capacity_tokens) {
      break;
    }
    const double step = m.DecodeSeconds(b, kv);
    if (step > tpot) break;
    // b requests: each prefills once, then they decode together.
    const double tps =
        static_cast<double>(b) * outn / (b * c.prefill + outn * step);
    c.tps_at.push_back(tps);
    if (tps > c.tokens_per_s) {
      c.tokens_per_s = tps;
      c.batch = b;
    }
  }
  return c;
}

}  // namespace

TokenCost CostPerToken(const serving::LatencyModel& m,
                       double price_per_gpu_hour, const SloTarget& slo) {
  TokenCost c;
  const int in = std::max(1, slo.input_tokens);
  const int outn = std::max(1, slo.output_tokens);
  const TokenCurve own = CurveOf(m, slo);
  if (slo.ttft_s > 0 && own.prefill > slo.ttft_s) {
    c.why = absl::StrFormat(
        "%s on %s (tp %d): a %d-token prompt prefills in %.3f s, over the "
        "TTFT target %.3f s",
        m.model, m.gpu, m.tensor_parallel, in, own.prefill, slo.ttft_s);
    return c;
  }
  if (own.tokens_per_s <= 0) {
    const double tpot = slo.tpot_s > 0 ? slo.tpot_s : SloTarget::kDefaultTpotS;
    c.why = absl::StrFormat(
        "%s on %s (tp %d): one sequence decodes at %.3f s per token, over "
        "the TPOT target %.3f s",
        m.model, m.gpu, m.tensor_parallel, m.DecodeSeconds(1, in + outn / 2),
        tpot);
    return c;
  }
  c.feasible = true;
  c.batch = own.batch;
  c.tokens_per_s = own.tokens_per_s;
  c.served_concurrency = c.batch;
  c.served_tokens_per_s = c.tokens_per_s;
  if (slo.demand >= 0) {
    const double d = std::max(slo.demand, SloTarget::kMinDemand);
    const int replicas = std::clamp(slo.replicas, 1, SloTarget::kMaxReplicas);
    if (slo.demand_on == nullptr && replicas == 1) {
      c.served_concurrency = std::min<double>(d, c.batch);
      c.served_tokens_per_s = std::min(own.At(d), c.tokens_per_s);
    } else {
      // The deployment's token rate, where it was measured; one replica
      // here serves at most its capacity of it.
      TokenCurve ref = own;
      if (slo.demand_on != nullptr) {
        TokenCurve on = CurveOf(*slo.demand_on, slo);
        if (on.tokens_per_s > 0) ref = std::move(on);
      }
      c.served_tokens_per_s = std::min(c.tokens_per_s, replicas * ref.At(d));
      c.served_concurrency = own.ConcurrencyFor(c.served_tokens_per_s);
    }
  }
  c.usd_per_mtok = price_per_gpu_hour * m.tensor_parallel / 3600.0 /
                   c.served_tokens_per_s * 1e6;
  return c;
}

CapacityPlanner::CapacityPlanner(CapacityOptions options)
    : options_(std::move(options)) {}

void CapacityPlanner::NodeFailed(const std::string& pool,
                                 const std::string& node,
                                 const std::string& why, Micros now,
                                 CapacityPlan* out) {
  pool_failed_[pool] = now;
  if (out == nullptr) return;
  out->events.push_back(
      {"capacity.failed",
       absl::StrCat(
           "node ", node, " of pool ", pool, " did not come up: ", why,
           "; the pool is skipped for ",
           absl::StrFormat("%.0f", ToSeconds(options_.failed_pool_backoff)),
           " s and the next pool is tried"),
       json{{"pool", pool}, {"node", node}, {"reason", why}}});
}

void CapacityPlanner::SpotLost(const std::string& pool, const std::string& node,
                               const std::vector<std::string>& deployments,
                               Micros now, CapacityPlan* out) {
  for (const std::string& d : deployments) spot_lost_[d] = now;
  cordoned_.erase(node);
  if (out == nullptr) return;
  std::string then =
      deployments.empty()
          ? "it held no replica"
          : absl::StrCat(
                "its replicas of ", absl::StrJoin(deployments, ", "),
                options_.dynamic_ondemand_fallback
                    ? absl::StrFormat(" are replaced on on-demand nodes for "
                                      "%.0f s (dynamic_ondemand_fallback)",
                                      ToSeconds(options_.spot_recovery_delay))
                    : " are replaced");
  out->events.push_back(
      {"spot.preempted",
       absl::StrCat("spot node ", node, " of pool ", pool, " was taken back; ",
                    then),
       json{{"pool", pool}, {"node", node}, {"deployments", deployments}}});
}

std::vector<std::string> CapacityPlanner::FallbackDeployments(
    Micros now) const {
  std::vector<std::string> out;
  if (!options_.dynamic_ondemand_fallback) return out;
  for (const auto& [d, t] : spot_lost_) {
    if (now - t < options_.spot_recovery_delay) out.push_back(d);
  }
  return out;
}

bool CapacityPlanner::SpotAllowed(const CapacityInput& in,
                                  const WaitingReplica& w, int planned,
                                  Micros now) const {
  if (!w.spot_ok) return false;
  if (options_.dynamic_ondemand_fallback) {
    auto lost = spot_lost_.find(w.deployment);
    if (lost != spot_lost_.end() &&
        now - lost->second < options_.spot_recovery_delay) {
      return false;
    }
  }
  if (options_.base_ondemand_fallback_replicas > 0) {
    auto it = in.ondemand_replicas.find(w.deployment);
    const int have =
        (it == in.ondemand_replicas.end() ? 0 : it->second) + planned;
    if (have < options_.base_ondemand_fallback_replicas) return false;
  }
  return true;
}

CapacityPlan CapacityPlanner::Plan(const CapacityInput& in, Micros now) {
  CapacityPlan plan;
  // Forget cordons of nodes that are gone.
  for (auto it = cordoned_.begin(); it != cordoned_.end();) {
    const bool present =
        std::any_of(in.nodes.begin(), in.nodes.end(), [&](const auto& n) {
          return n.node == *it && n.phase != PoolNodeView::Phase::kReleasing;
        });
    it = present ? std::next(it) : cordoned_.erase(it);
  }
  std::map<std::string, Micros> busy;
  for (const PoolNodeView& n : in.nodes) {
    auto it = busy_.find(n.node);
    Micros last = it == busy_.end() ? n.since : it->second;
    if (!n.replicas.empty()) last = now;
    busy[n.node] = last;
  }
  busy_ = std::move(busy);
  PlanAdds(in, now, &plan);
  PlanReleases(in, now, &plan);
  if (options_.consolidate && in.waiting.empty()) PlanMoves(in, now, &plan);
  return plan;
}

void CapacityPlanner::PlanAdds(const CapacityInput& in, Micros now,
                               CapacityPlan* plan) {
  std::vector<const WaitingReplica*> due;
  for (const WaitingReplica& w : in.waiting) {
    if (now - w.since >= options_.scale_up_delay) due.push_back(&w);
  }
  if (due.empty()) return;
  std::stable_sort(due.begin(), due.end(), [](auto* a, auto* b) {
    if (a->gpus != b->gpus) return a->gpus > b->gpus;
    if (a->since != b->since) return a->since < b->since;
    return a->replica < b->replica;
  });
  std::map<std::string, const NodePool*> pools;
  std::map<std::string, int> count;  // nodes per pool (not releasing)
  for (const NodePool& p : in.pools) pools[p.name] = &p;
  // Room on nodes already coming: those take the first replicas.
  struct Coming {
    std::string pool;
    int free;
  };
  std::vector<Coming> coming;
  for (const PoolNodeView& n : in.nodes) {
    if (n.phase == PoolNodeView::Phase::kReleasing) continue;
    ++count[n.pool];
    if (n.phase == PoolNodeView::Phase::kProvisioning) {
      coming.push_back(
          {n.pool, n.gpus - static_cast<int>(std::ceil(n.gpus_held))});
    }
  }
  auto usable = [&](const WaitingReplica& w, const NodePool& p, bool spot_ok) {
    return w.usd_per_mtok.count(p.name) && p.gpus_per_node >= w.gpus &&
           (!p.spot || spot_ok);
  };
  // Per pool: the new nodes planned and the room left on each.
  std::map<std::string, std::vector<int>> fresh;
  std::map<std::string, std::vector<std::string>> fresh_for;
  std::map<std::string, int> ondemand_planned;
  int planned_nodes = 0;
  for (const WaitingReplica* w : due) {
    const bool spot_ok =
        SpotAllowed(in, *w, ondemand_planned[w->deployment], now);
    // 1. A node already coming.
    bool taken = false;
    for (Coming& c : coming) {
      auto p = pools.find(c.pool);
      if (p == pools.end() || c.free < w->gpus ||
          !usable(*w, *p->second, spot_ok)) {
        continue;
      }
      c.free -= w->gpus;
      if (!p->second->spot) ++ondemand_planned[w->deployment];
      taken = true;
      break;
    }
    if (taken) continue;
    // 2. The pools it may use, best first.
    std::vector<const NodePool*> order;
    for (const NodePool& p : in.pools) {
      if (!usable(*w, p, spot_ok)) continue;
      auto failed = pool_failed_.find(p.name);
      if (failed != pool_failed_.end() &&
          now - failed->second < options_.failed_pool_backoff) {
        continue;
      }
      order.push_back(&p);
    }
    if (options_.cost_aware) {
      std::stable_sort(order.begin(), order.end(), [&](auto* a, auto* b) {
        const double ca = w->usd_per_mtok.at(a->name);
        const double cb = w->usd_per_mtok.at(b->name);
        if (ca != cb) return ca < cb;
        return a->provisioning_delay < b->provisioning_delay;
      });
    }
    for (const NodePool* p : order) {
      std::vector<int>& nodes = fresh[p->name];
      auto room = std::find_if(nodes.begin(), nodes.end(),
                               [&](int f) { return f >= w->gpus; });
      if (room == nodes.end()) {
        if (count[p->name] + static_cast<int>(nodes.size()) >= p->max_nodes ||
            planned_nodes >= options_.max_nodes_per_plan) {
          continue;
        }
        nodes.push_back(p->gpus_per_node);
        ++planned_nodes;
        room = nodes.end() - 1;
      }
      *room -= w->gpus;
      fresh_for[p->name].push_back(w->replica);
      if (!p->spot) ++ondemand_planned[w->deployment];
      break;
    }
    // A replica no pool takes waits (placement's event says why).
  }
  for (const NodePool& p : in.pools) {
    auto it = fresh.find(p.name);
    // Pools below min_nodes are filled up too.
    int n = it == fresh.end() ? 0 : static_cast<int>(it->second.size());
    const int below = p.min_nodes - count[p.name] - n;
    if (below > 0) n += below;
    if (n == 0) continue;
    CapacityAction a;
    a.kind = CapacityAction::Kind::kAdd;
    a.pool = p.name;
    a.count = n;
    a.replicas = fresh_for[p.name];
    std::string cost;
    if (!a.replicas.empty()) {
      const WaitingReplica* first = nullptr;
      for (const WaitingReplica& w : in.waiting) {
        if (w.replica == a.replicas.front()) first = &w;
      }
      if (first != nullptr) {
        cost = first->per_hour
                   ? absl::StrFormat(
                         ", $%.3f per hour for its %d GPU%s (no latency "
                         "model on every pool: priced per GPU-hour)",
                         first->usd_per_mtok.at(p.name), first->gpus,
                         first->gpus == 1 ? "" : "s")
                   : absl::StrFormat(", $%.3f per million tokens at the SLO",
                                     first->usd_per_mtok.at(p.name));
      }
    }
    a.why = a.replicas.empty()
                ? absl::StrCat("pool ", p.name, " is below min_nodes (",
                               p.min_nodes, ")")
                : absl::StrCat(a.replicas.size(), " replica",
                               a.replicas.size() == 1 ? "" : "s",
                               " fit on no node (",
                               absl::StrJoin(a.replicas, ", "), ")");
    plan->events.push_back(
        {"capacity.requested",
         absl::StrFormat("%d node%s of pool %s (%d x %s, %s, $%.2f per "
                         "node-hour%s): %s",
                         n, n == 1 ? "" : "s", p.name, p.gpus_per_node, p.gpu,
                         p.spot ? "spot" : "on-demand", p.price_per_node_hour,
                         cost, a.why),
         json{{"pool", p.name},
              {"nodes", n},
              {"gpu", p.gpu},
              {"spot", p.spot},
              {"usd_per_node_hour", p.price_per_node_hour},
              {"replicas", a.replicas}}});
    plan->actions.push_back(std::move(a));
  }
}

void CapacityPlanner::PlanReleases(const CapacityInput& in, Micros now,
                                   CapacityPlan* plan) {
  std::map<std::string, int> count;
  std::map<std::string, const NodePool*> pools;
  for (const NodePool& p : in.pools) pools[p.name] = &p;
  for (const PoolNodeView& n : in.nodes) {
    if (n.phase != PoolNodeView::Phase::kReleasing) ++count[n.pool];
  }
  for (const PoolNodeView& n : in.nodes) {
    if (n.phase != PoolNodeView::Phase::kUp || !n.replicas.empty()) continue;
    auto p = pools.find(n.pool);
    const int min_nodes = p == pools.end() ? 0 : p->second->min_nodes;
    if (count[n.pool] <= min_nodes) continue;
    const bool emptied = cordoned_.count(n.node) > 0;
    const Micros idle = now - std::max(n.since, busy_[n.node]);
    if (!emptied && idle < options_.scale_down_delay) continue;
    --count[n.pool];
    cordoned_.erase(n.node);
    CapacityAction a;
    a.kind = CapacityAction::Kind::kRelease;
    a.pool = n.pool;
    a.node = n.node;
    a.why = emptied
                ? "its replicas moved to other nodes (consolidation)"
                : absl::StrFormat(
                      "no replica for %.0f s (scale_down_delay "
                      "%.0f s)",
                      ToSeconds(idle), ToSeconds(options_.scale_down_delay));
    plan->events.push_back({"node.released",
                            absl::StrCat("node ", n.node, " of pool ", n.pool,
                                         " is given back: ", a.why),
                            json{{"pool", n.pool}, {"node", n.node}}});
    plan->actions.push_back(std::move(a));
  }
}

void CapacityPlanner::PlanMoves(const CapacityInput& in, Micros now,
                                CapacityPlan* plan) {
  if (!cordoned_.empty()) return;  // one node at a time
  // USD per GPU-hour of each pool node; a static node's GPUs are paid for
  // anyway (0).
  std::map<std::string, double> pool_price;
  for (const NodePool& p : in.pools) {
    pool_price[p.name] = p.price_per_node_hour / std::max(1, p.gpus_per_node);
  }
  std::map<std::string, double> node_price;
  for (const PoolNodeView& n : in.nodes)
    node_price[n.node] = pool_price[n.pool];
  auto price_of = [&](const std::string& node) {
    auto it = node_price.find(node);
    return it == node_price.end() ? 0.0 : it->second;
  };
  std::map<std::string, int> room;
  for (const NodeRoom& r : in.room) room[r.node] = r.free_gpus;
  // The dearest GPU-hours first: they are the ones worth emptying.
  std::vector<const PoolNodeView*> order;
  for (const PoolNodeView& n : in.nodes) order.push_back(&n);
  std::stable_sort(order.begin(), order.end(), [&](auto* a, auto* b) {
    return price_of(a->node) > price_of(b->node);
  });
  for (const PoolNodeView* np : order) {
    const PoolNodeView& n = *np;
    if (n.phase != PoolNodeView::Phase::kUp || n.replicas.empty() ||
        n.gpus <= 0) {
      sparse_since_.erase(n.node);
      continue;
    }
    std::vector<int> sizes;
    bool movable = true;
    for (const std::string& r : n.replicas) {
      auto g = in.replica_gpus.find(r);
      movable = movable && in.movable.count(r) && g != in.replica_gpus.end();
      if (movable) sizes.push_back(g->second);
    }
    std::sort(sizes.rbegin(), sizes.rend());
    // Whether its replicas fit, first fit and largest first, on the free
    // GPUs of the other nodes that `keep` accepts.
    auto fits = [&](auto keep) {
      std::map<std::string, int> left;
      for (const auto& [node, free] : room) {
        if (node != n.node && keep(node)) left[node] = free;
      }
      for (int s : sizes) {
        auto it = std::find_if(left.begin(), left.end(),
                               [&](const auto& kv) { return kv.second >= s; });
        if (it == left.end()) return false;
        it->second -= s;
      }
      return true;
    };
    // Nearly empty and its replicas fit elsewhere; or, whatever it holds,
    // they fit on nodes whose GPU-hours cost less (a node of a dearer
    // pool, kept up by replicas that cheaper nodes have room for).
    const double price = price_of(n.node);
    const bool sparse = n.gpus_held <= options_.consolidate_below * n.gpus;
    const bool dear =
        movable && !sparse && price > 0 &&
        fits([&](const std::string& node) { return price_of(node) < price; });
    if (!movable ||
        !(dear || (sparse && fits([](const std::string&) { return true; })))) {
      sparse_since_.erase(n.node);
      continue;
    }
    auto [since, fresh] = sparse_since_.try_emplace(n.node, now);
    if (now - since->second < options_.scale_down_delay) continue;
    sparse_since_.erase(n.node);
    cordoned_.insert(n.node);
    CapacityAction a;
    a.kind = CapacityAction::Kind::kMove;
    a.pool = n.pool;
    a.node = n.node;
    a.replicas = n.replicas;
    a.why = dear
                ? absl::StrFormat(
                      "node %s holds %.2f of its %d GPUs at $%.2f per GPU-hour "
                      "and its replicas fit on cheaper nodes",
                      n.node, n.gpus_held, n.gpus, price)
                : absl::StrFormat(
                      "node %s holds %.2f of its %d GPUs and its replicas fit "
                      "elsewhere",
                      n.node, n.gpus_held, n.gpus);
    plan->events.push_back(
        {"node.consolidating",
         absl::StrCat(a.why, ": moving ", absl::StrJoin(n.replicas, ", "),
                      " (each starts elsewhere and is ready before it "
                      "drains), then the node is given back"),
         json{{"pool", n.pool}, {"node", n.node}, {"replicas", n.replicas}}});
    plan->actions.push_back(std::move(a));
    return;
  }
}

}  // namespace gpusched::control
