// ControlApi: the REST control plane under /api/v1 (docs/control-api.md),
// a thin JSON layer over the Controller, one handler per route of an
// explicit table (Routes()). A path that exists answers 405 with Allow for
// another method; an unknown one 404. Admin keys may call everything;
// a tenant key may read the deployments it may use and its own tenant.
// Thread-safe (the Controller serializes). With a WorkerPool, Handle only
// recognises the path on the calling (I/O) thread and answers on the
// pool's threads, so that a call waiting for the controller's lock never
// holds up the gateway on the same I/O thread; a full pool answers 503
// with Retry-After.
#ifndef GPUSCHED_API_CONTROL_API_H_
#define GPUSCHED_API_CONTROL_API_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/alerts.h"
#include "api/cluster_view.h"
#include "common/worker_pool.h"
#include "gateway/gateway_stats.h"
#include "gateway/key_cache.h"
#include "net/http_server.h"
#include "runtime/controller.h"

namespace gpusched::api {

using runtime::ApplyResult;
using runtime::Controller;
using runtime::IsoTime;

namespace http = boost::beast::http;

class ControlApi {
 public:
  // `keys` checks the callers' API keys; `stats` (the gateway's, may be
  // null) answers GET /api/v1/stats.
  // `pool` (may be null: calls are answered on the caller's thread) must
  // outlive the ControlApi's calls.
  // `cluster` (may be null: a single instance without one) answers GET
  // /api/v1/cluster and says where the leader is, for the requests only it
  // answers (forwarded there by an instance that follows).
  // `alerts` (may be null: alerts.prometheus_url is not set) answers GET
  // /api/v1/alerts.
  ControlApi(Controller* controller, gateway::KeyCache* keys,
             const gateway::GatewayStats* stats = nullptr,
             WorkerPool* pool = nullptr, const ClusterView* cluster = nullptr,
             const AlertsSource* alerts = nullptr)
      : controller_(controller),
        keys_(keys),
        stats_(stats),
        pool_(pool),
        cluster_(cluster),
        alerts_(alerts) {}

  // True when `request` is a control request (its path starts with
  // /api/v1): then it has been taken (moved from) and is answered, at once
  // or on the pool.
  bool Handle(net::HttpRequest& request,
              std::shared_ptr<net::Responder>& responder);

 private:
  struct Call;
  enum Access { kAdmin, kTenant };  // kTenant: tenant keys too (own things)
  // kLeader: only the leader can answer (its running rollouts, its
  // replicas' logs): an instance that follows forwards the request there.
  enum Where { kAny, kLeader };
  struct Route {
    http::verb method;
    const char* path;  // under /api/v1; "{}" is one segment
    Access access;
    void (ControlApi::*handler)(Call&);
    Where where = kAny;
    // The query parameters it reads, space-separated; any other is a 400
    // naming it (a misspelt filter must not answer everything).
    const char* query = "";
  };
  static const std::vector<Route>& Routes();

  void PostApply(Call& c);
  void PostDelete(Call& c);
  void ListDeployments(Call& c);
  void GetDeployment(Call& c);
  void DeleteDeployment(Call& c);
  void ScaleDeployment(Call& c);
  void DeploymentLogs(Call& c);
  void ListReplicas(Call& c);
  void ListGpus(Call& c);
  void ListNodes(Call& c);
  void ListPools(Call& c);
  void ListQueues(Call& c);
  void ListRoutes(Call& c);
  void GetRoute(Call& c);
  void DeleteRoute(Call& c);
  void PostRollout(Call& c);
  void GetStats(Call& c);
  void GetCluster(Call& c);
  void ListInstances(Call& c);
  void ListAlerts(Call& c);
  void ListEvents(Call& c);
  void ListTenants(Call& c);
  void GetTenant(Call& c);
  void DeleteTenant(Call& c);
  void ListTenantKeys(Call& c);
  void CreateTenantKey(Call& c);
  void ListAdminKeys(Call& c);
  void CreateAdminKey(Call& c);
  void RevokeKey(Call& c);
  // Helpers: the manifests of the body (or answers 422); one item of a
  // view (or 404); a delete; a key listing.
  std::optional<std::vector<config::Manifest>> ParseBody(Call& c);
  void SendOne(Call& c, const nlohmann::json& items, const char* what);
  void DeleteOne(Call& c, config::Manifest::Kind kind);
  void SendKeys(Call& c, const std::string& tenant);

  void Answer(net::HttpRequest& req, std::shared_ptr<net::Responder>& r);

  Controller* controller_;
  gateway::KeyCache* keys_;
  const gateway::GatewayStats* stats_;
  WorkerPool* pool_;
  const ClusterView* cluster_;
  const AlertsSource* alerts_;
};

}  // namespace gpusched::api

#endif  // GPUSCHED_API_CONTROL_API_H_
