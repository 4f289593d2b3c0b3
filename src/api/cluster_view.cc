#include "api/cluster_view.h"

#include <chrono>

#include "runtime/controller.h"

namespace gpusched::api {

using nlohmann::json;

namespace {

Micros SteadyNow() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

json InstanceJson(const store::InstanceInfo& i) {
  return {{"id", i.id},
          {"address", i.address},
          {"version", i.version},
          {"started", i.started > 0 ? runtime::IsoTime(i.started) : ""}};
}

}  // namespace

json ClusterView::Json() const {
  const Micros now = SteadyNow();
  const store::Leadership lead = election->Current();
  const std::optional<store::LeaderInfo> leader = election->Leader();
  json j;
  j["self"] = election->self().id;
  j["leading"] = lead.acting;
  j["leader"] = nullptr;
  if (leader) {
    j["leader"] = InstanceJson(leader->instance);
    j["leader"]["term"] = leader->term;
  }
  json instances = json::array();
  for (const store::InstanceInfo& i : election->Instances()) {
    json ij = InstanceJson(i);
    ij["leader"] = leader && leader->instance.id == i.id;
    ij["self"] = i.id == election->self().id;
    instances.push_back(std::move(ij));
  }
  j["instances"] = std::move(instances);
  const store::StoreHealth h = store->Health();
  j["store"] = {{"kind", h.kind},
                {"where", h.where},
                {"reachable", h.reachable},
                {"error", h.error},
                {"revision", h.revision},
                {"resyncing", h.resyncing},
                {"lastAnswerSecondsAgo",
                 h.last_ok > 0 ? json((now - h.last_ok) / 1e6) : json()}};
  const store::ElectionStats s = election->Stats();
  j["lease"] = {{"ttlSeconds", s.lease_ttl / 1e6},
                {"leader", lead.leader},
                {"acting", lead.acting},
                {"term", lead.term},
                {"actingForSeconds", lead.acting && lead.valid_until != kNever
                                         ? json((lead.valid_until - now) / 1e6)
                                         : json()},
                {"renewals", s.renewals},
                {"renewalFailures", s.renewal_failures},
                {"lastRenewalSeconds", s.last_renewal_s},
                {"elected", s.elected},
                {"lost", s.lost}};
  return j;
}

std::optional<std::string> ClusterView::LeaderAddress() const {
  if (election->Current().acting) return std::nullopt;
  std::optional<store::LeaderInfo> l = election->Leader();
  if (!l || l->instance.id == election->self().id ||
      l->instance.address.empty()) {
    return std::nullopt;
  }
  return l->instance.address;
}

bool ClusterView::Ready(json* body) const {
  const store::StoreHealth h = store->Health();
  const bool ready = h.reachable || h.revision > 0;
  *body = {{"ready", ready},
           {"instance", election->self().id},
           {"leading", election->Current().acting},
           {"store", h.reachable ? std::string("reachable")
                                 : "unreachable (" + h.error +
                                       "); serving from the last known state"}};
  return ready;
}

}  // namespace gpusched::api
