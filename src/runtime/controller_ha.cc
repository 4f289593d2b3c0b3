// The Controller's leadership (docs/ha.md): following the election
// (Promote, Demote, pauses), absorbing what other instances wrote to the
// store, and publishing the leader's views for the instances that follow.
#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/plural.h"
#include "common/status.h"
#include "runtime/controller.h"
#include "runtime/controller_internal.h"

namespace gpusched::runtime {

using nlohmann::json;

namespace {

// Fields of the views that change with every request or every second: a
// follower shows its own (queues) or none, and publishing them would write
// to the store all the time.
void StripVolatile(json& j) {
  if (j.contains("status") && j["status"].is_object()) {
    j["status"].erase("queued");
    j["status"].erase("inFlight");
  }
  if (j.contains("rollout") && j["rollout"].is_object()) {
    j["rollout"].erase("stepSeconds");
    j["rollout"].erase("nextStepInSeconds");
  }
}

}  // namespace

bool Controller::Leading() {
  absl::MutexLock lock(&mu_);
  return leading_ && !paused_;
}

void Controller::SyncFromStore() {
  absl::MutexLock lock(&mu_);
  SyncDesiredLocked();
}

void Controller::FollowElection(const store::Leadership& lead) {
  const bool was_paused = paused_;
  paused_ = leading_ && lead.leader && !lead.acting;
  if (paused_ && !was_paused) {
    Event("leader.paused", "",
          "this instance leads but cannot renew its lease: it acts on "
          "nothing until it can (its replicas keep running)");
  } else if (was_paused && !paused_ && leading_ && lead.leader) {
    Event("leader.resumed", "", "the lease is renewed again: acting again");
  }
}

void Controller::Promote(const store::Leadership& lead,
                         std::unique_ptr<backends::Launcher> launcher,
                         Micros now) {
  {
    absl::MutexLock l(&launcher_mu_);
    launcher_ = std::move(launcher);
    manager_readiness_ = launcher_->ReportsReadiness();
  }
  leading_ = true;
  paused_ = false;
  fence_ = lead.fence;
  // The leader scrapes the engines of its own replicas.
  for (auto& [name, d] : deployments_) d.followed.clear();
  {
    absl::MutexLock l(&fence_mu_);
    event_fence_ = lead.fence;
  }
  SyncDesiredLocked();
  // Autoscaled deployments resume at the count last decided for them, not
  // at their manifest's initial count.
  absl::StatusOr<std::map<std::string, int>> desired =
      store_->ListDesiredReplicas();
  if (desired.ok()) {
    for (const auto& [name, count] : *desired) {
      if (scaling_.has(name)) scaling_.Resume(name, count);
    }
  }
  // Rollouts go on from the state stored by the last leader (ours were a
  // follower's and did not move).
  for (const auto& [name, r] : routes_) gateway_->RemoveRoute(name);
  routes_.clear();
  if (absl::Status st = RestoreRoutes(); !st.ok()) {
    Event("leader.restore_failed", "",
          absl::StrCat("routes not restored: ", st.message()));
  }
  PlanLeftovers(now);
  Event("leader.elected", "",
        absl::StrCat(election_->self().id, " leads (term ", lead.term,
                     "): ", Counted(deployments_.size(), "deployment"), ", ",
                     Counted(tenants_.size(), "tenant"), ", ",
                     Counted(routes_.size(), "route"), "; ",
                     Counted(cluster_.nodes.size(), "node"), " (",
                     cluster_.source, ")"),
        json{{"instance", election_->self().id}, {"term", lead.term}});
  ever_led_ = true;
  dirty_ = true;
}

std::unique_ptr<backends::Launcher> Controller::Demote(const std::string& why) {
  leading_ = false;
  paused_ = false;
  {
    absl::MutexLock l(&fence_mu_);
    event_fence_.reset();
  }
  // Every replica is forgotten, not stopped: the next leader adopts them.
  for (auto it = deployments_.begin(); it != deployments_.end();) {
    Deployment& d = it->second;
    for (auto& [rn, r] : d.procs) Release(r);
    if (d.deleting) {
      it = deployments_.erase(it);
      continue;
    }
    d.procs.clear();
    d.external.clear();
    d.cold.reset();
    d.parked_by.clear();
    d.life = control::ReplicaSet(d.spec.name, LifecycleOptionsFor(d.engine));
    d.life.SetVersion(TemplateKey(d.spec));
    ++it;
  }
  for (auto& [name, r] : routes_) r.rollout.reset();
  follower_revision_ = -1;  // the gateway follows the new leader's replicas
  leftovers_.clear();
  node_reports_.clear();
  starts_.clear();
  std::unique_ptr<backends::Launcher> old;
  {
    absl::MutexLock l(&launcher_mu_);
    old = std::move(launcher_);
  }
  store::Event e;
  e.time = Wall();
  e.kind = "leader.lost";
  e.message = absl::StrCat(election_->self().id, " no longer leads: ", why,
                           "; its replicas keep running for the next leader");
  e.details = json{{"instance", election_->self().id}};
  RecordEvent(std::move(e));
  return old;
}

absl::Status Controller::Absorb(config::Manifest::Kind kind,
                                const store::Document& doc) {
  const json j = json::parse(doc.manifest_json, nullptr, false);
  ASSIGN_OR_RETURN(
      config::Manifest m,
      config::ManifestFromJson(
          j, absl::StrCat("stored ", config::KindName(kind), " ", doc.name)));
  ApplyResult result;
  switch (kind) {
    case config::Manifest::Kind::kTenant:
      RETURN_IF_ERROR(ApplyTenant(m.tenant, &result, /*persist=*/false));
      tenants_[doc.name].generation = doc.generation;
      tenants_[doc.name].created = doc.created;
      tenants_[doc.name].updated = doc.updated;
      break;
    case config::Manifest::Kind::kDeployment:
      RETURN_IF_ERROR(ApplyDeployment(m.deployment, &result, false));
      deployments_[doc.name].generation = doc.generation;
      deployments_[doc.name].created = doc.created;
      deployments_[doc.name].updated = doc.updated;
      break;
    case config::Manifest::Kind::kModelRoute: {
      json state;
      if (auto s = store_->GetRouteState(doc.name); s.ok()) {
        state = json::parse(*s, nullptr, false);
      }
      RETURN_IF_ERROR(ApplyRoute(m.route, &result, false,
                                 state.is_object() ? &state : nullptr));
      routes_[doc.name].generation = doc.generation;
      routes_[doc.name].created = doc.created;
      routes_[doc.name].updated = doc.updated;
      break;
    }
  }
  return absl::OkStatus();
}

void Controller::SyncDesiredLocked() {
  if (!store_->shared()) return;  // every write came through us
  const int64_t rev = store_->desired_revision();
  if (rev == synced_revision_ && !resync_) return;
  synced_revision_ = rev;
  resync_ = false;
  auto tenants = store_->ListTenants();
  auto deployments = store_->ListDeployments();
  auto routes = store_->ListRoutes();
  if (!tenants.ok() || !deployments.ok() || !routes.ok()) {
    resync_ = true;
    return;
  }
  auto absorb = [&](config::Manifest::Kind kind,
                    const std::vector<store::Document>& docs,
                    auto& ours) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const store::Document& doc : docs) {
      auto it = ours.find(doc.name);
      if (it != ours.end() && it->second.generation == doc.generation) {
        continue;
      }
      if constexpr (std::is_same_v<std::decay_t<decltype(ours)>,
                                   std::map<std::string, Deployment>>) {
        if (it != ours.end() && it->second.deleting) {
          resync_ = true;  // once the old one is gone
          continue;
        }
      }
      if (absl::Status st = Absorb(kind, doc); !st.ok()) {
        std::fprintf(stderr, "gpusched: %s %s from the store: %s\n",
                     config::KindName(kind), doc.name.c_str(),
                     std::string(st.message()).c_str());
      }
    }
  };
  auto gone = [](const std::vector<store::Document>& docs,
                 const std::string& name) {
    return std::none_of(
        docs.begin(), docs.end(),
        [&](const store::Document& d) { return d.name == name; });
  };
  // Tenants first, routes last (as Apply orders them); deletions the other
  // way round.
  absorb(config::Manifest::Kind::kTenant, *tenants, tenants_);
  absorb(config::Manifest::Kind::kDeployment, *deployments, deployments_);
  absorb(config::Manifest::Kind::kModelRoute, *routes, routes_);
  std::vector<std::pair<config::Manifest::Kind, std::string>> doomed;
  for (const auto& [name, r] : routes_) {
    if (gone(*routes, name)) {
      doomed.push_back({config::Manifest::Kind::kModelRoute, name});
    }
  }
  for (const auto& [name, d] : deployments_) {
    if (!d.deleting && gone(*deployments, name)) {
      doomed.push_back({config::Manifest::Kind::kDeployment, name});
    }
  }
  for (const auto& [name, t] : tenants_) {
    if (gone(*tenants, name)) {
      doomed.push_back({config::Manifest::Kind::kTenant, name});
    }
  }
  for (const auto& [kind, name] : doomed) {
    (void)DeleteLocked(kind, name, /*persist=*/false);
  }
}

void Controller::FollowerPass() {
  // A follower runs no replica: a deleted deployment goes at once.
  for (auto it = deployments_.begin(); it != deployments_.end();) {
    if (it->second.deleting && it->second.life.empty()) {
      gateway_->SetReplicas(it->first, {});
      it = deployments_.erase(it);
      resync_ = true;
    } else {
      ++it;
    }
  }
  if (!store_->shared()) return;
  // Its routers read the engines' own load signals, as the leader's do.
  const Micros now = Now();
  for (auto& [name, d] : deployments_) {
    for (Replica& r : d.followed) {
      if (!r.scraping && now >= r.next_scrape && options_.metrics_period > 0) {
        Scrape(d, r, now);
      }
    }
  }
  // Its gateway serves too: the replicas the leader says are ready, and
  // the routes' weights as the leader's rollouts set them (read when the
  // store changed).
  const int64_t rev = store_->revision();
  if (rev == follower_revision_) return;
  follower_revision_ = rev;
  absl::StatusOr<std::map<std::string, std::string>> docs =
      store_->ListStatus("");
  if (!docs.ok()) return;
  for (auto& [name, d] : deployments_) {
    if (d.deleting) continue;
    auto it = docs->find(absl::StrCat("deployments/", name));
    if (it == docs->end()) continue;
    const json p = json::parse(it->second, nullptr, false);
    if (!p.is_object() || !p.contains("status")) continue;
    std::vector<net::Endpoint> ready;
    std::vector<std::string> keys;
    std::vector<Replica> followed;
    for (const json& r : p["status"].value("replicaStatus", json::array())) {
      const std::string ep = r.value("endpoint", "");
      const size_t colon = ep.rfind(':');
      int port = 0;
      if (!r.value("ready", false) || colon == std::string::npos ||
          !absl::SimpleAtoi(ep.substr(colon + 1), &port) || port <= 0 ||
          port > 65535) {
        continue;
      }
      ready.push_back({ep.substr(0, colon), static_cast<uint16_t>(port)});
      keys.push_back(ep);
      Replica f;
      f.name = ep;
      f.endpoint = ready.back();
      const int metrics_port = r.value("metricsPort", 0);
      if (metrics_port > 0 && metrics_port <= 65535) {
        f.metrics_port = static_cast<uint16_t>(metrics_port);
      }
      // Kept as it was: a scrape in flight, the next one due.
      for (Replica& old : d.followed) {
        if (old.name == f.name) f = old;
      }
      followed.push_back(std::move(f));
    }
    d.followed = std::move(followed);
    if (keys == d.pushed) continue;
    d.pushed = keys;
    gateway_->SetReplicas(name, ready);
  }
  for (auto& [name, r] : routes_) {
    auto it = docs->find(absl::StrCat("routes/", name));
    if (it == docs->end()) continue;
    const json p = json::parse(it->second, nullptr, false);
    if (!p.is_object() || p.value("generation", int64_t{-1}) != r.generation) {
      continue;
    }
    std::vector<int> weights;
    for (const json& t : p.value("targets", json::array())) {
      weights.push_back(t.value("weight", 0));
    }
    if (weights.size() != r.spec.targets.size() || weights == r.weights) {
      continue;
    }
    if (gateway_->ServeRoute(r.spec, weights).ok()) r.weights = weights;
  }
}

std::optional<json> Controller::Published(const std::string& name) {
  absl::StatusOr<std::map<std::string, std::string>> docs =
      store_->ListStatus(name);
  if (!docs.ok()) return std::nullopt;
  auto it = docs->find(name);
  if (it == docs->end()) return std::nullopt;
  json j = json::parse(it->second, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

void Controller::PublishStatus(Micros now) {
  if (!store_->shared() || now < next_publish_) return;
  next_publish_ = now + options_.status_period;
  const store::Fence* fence = nullptr;
  store::Fence copy;
  {
    absl::MutexLock lock(&mu_);
    if (!leading_ || paused_) return;
    copy = fence_;
    fence = &copy;
  }
  std::map<std::string, std::string> docs;
  for (json& d : DeploymentsJson()) {
    StripVolatile(d);
    const std::string name = d["metadata"]["name"].get<std::string>();
    docs[absl::StrCat("deployments/", name)] = d.dump();
  }
  for (json& r : RoutesJson()) {
    StripVolatile(r);
    docs[absl::StrCat("routes/", r["name"].get<std::string>())] = r.dump();
  }
  docs["cluster/gpus"] = GpusJson().dump();
  docs["cluster/nodes"] = NodesJson().dump();
  docs["cluster/pools"] = PoolsJson().dump();
  for (const auto& [name, text] : docs) {
    auto it = published_.find(name);
    if (it != published_.end() && it->second == text) continue;
    absl::Status st = store_->PutStatus(name, text, fence);
    if (st.ok()) {
      published_[name] = text;
    } else {
      published_.erase(name);  // tried again at the next period
    }
  }
  for (auto it = published_.begin(); it != published_.end();) {
    if (docs.contains(it->first)) {
      ++it;
      continue;
    }
    absl::Status st = store_->DeleteStatus(it->first, fence);
    if (st.ok() || absl::IsNotFound(st)) {
      it = published_.erase(it);
    } else {
      ++it;
    }
  }
  // What an earlier leader published and we do not (a deployment deleted
  // meanwhile) goes too.
  if (auto all = store_->ListStatus(""); all.ok()) {
    for (const auto& [name, text] : *all) {
      if (!docs.contains(name)) (void)store_->DeleteStatus(name, fence);
    }
  }
}

void Controller::PruneEvents(Micros now) {
  if (now < next_prune_) return;
  next_prune_ = now + 60 * kMicrosPerSecond;
  {
    absl::MutexLock lock(&mu_);
    if (!leading_ || paused_) return;
  }
  const Micros older = options_.max_event_age > 0
                           ? Wall() - options_.max_event_age
                           : std::numeric_limits<Micros>::min();
  (void)store_->PruneEvents(options_.max_events, older);
}

// --- A follower's views ----------------------------------------------------

void Controller::FollowerStatus(json& j) {
  const std::string name = j["metadata"]["name"].get<std::string>();
  std::optional<json> p = Published(absl::StrCat("deployments/", name));
  json& status = j["status"];
  if (!p || !p->contains("status")) {
    status["message"] = absl::StrCat(
        "no status from the leader yet",
        Leading() ? ""
                  : " (this instance follows; see gpusched get instances)");
    return;
  }
  const json queued = status["queued"], in_flight = status["inFlight"];
  status = (*p)["status"];
  status["queued"] = queued;  // this instance's own queue
  status["inFlight"] = in_flight;
  const int64_t seen = (*p)["metadata"].value("generation", int64_t{0});
  status["observedGeneration"] = seen;
  if (seen != j["metadata"].value("generation", int64_t{0})) {
    status["message"] = absl::StrCat(
        "generation ", j["metadata"].value("generation", 0),
        " is stored; the leader has acted on generation ", seen, " so far");
  }
}

json Controller::FollowerReplicas() {
  std::set<std::string> ours;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, d] : deployments_) ours.insert(name);
  }
  json items = json::array();
  absl::StatusOr<std::map<std::string, std::string>> docs =
      store_->ListStatus("deployments/");
  if (!docs.ok()) return items;
  for (const auto& [key, text] : *docs) {
    const json d = json::parse(text, nullptr, false);
    if (!d.is_object() || !d.contains("status")) continue;
    const json& reps = d["status"].value("replicaStatus", json::array());
    if (!ours.contains(key.substr(std::string("deployments/").size()))) {
      continue;
    }
    for (const json& r : reps) items.push_back(r);
  }
  return items;
}

std::vector<std::string> Controller::FollowerNotReady() {
  std::vector<std::string> waiting;
  for (const json& d : DeploymentsJson()) {
    const json& s = d["status"];
    const int ready = s.value("readyReplicas", 0);
    const int want = s.value("desiredReplicas", 0);
    if (!s.contains("observedGeneration") || ready < want) {
      waiting.push_back(absl::StrCat(d["metadata"]["name"].get<std::string>(),
                                     " (", ready, "/", want,
                                     " replicas ready as the leader says)"));
    }
  }
  return waiting;
}

}  // namespace gpusched::runtime
