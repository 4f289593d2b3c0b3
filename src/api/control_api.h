// ControlApi: the REST control plane under /api/v1 (docs/control-api.md),
// a thin JSON layer over the Controller, one handler per route of an
// explicit table (Routes()). A path that exists answers 405 with Allow for
// another method; an unknown one 404. Every route states the permission it
// needs and on what (docs/access.md): the caller's Principal (an API key or
// a token, auth/) must hold it, cluster-wide or in the tenant of the object;
// a refusal is a 403 naming the missing permission. Every action that
// changes something, and every refusal, is written to the audit log.
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
#include "auth/access.h"
#include "auth/access_control.h"
#include "auth/audit_log.h"
#include "common/worker_pool.h"
#include "gateway/gateway_stats.h"
#include "net/http_server.h"
#include "runtime/controller.h"

namespace gpusched::api {

using runtime::ApplyResult;
using runtime::Controller;
using runtime::IsoTime;

namespace http = boost::beast::http;

// What the control API asks besides the controller. Each outlives it.
struct ControlAccess {
  const auth::Authenticator* authenticator = nullptr;  // required
  auth::AccessControl* access = nullptr;  // roles and bindings; required
  auth::AuditLog* audit = nullptr;        // may be null: nothing recorded
  store::Store* store = nullptr;          // owners of objects; required
};

// How a route's object is found, for a permission held in one tenant.
enum class RouteScope {
  kCluster,     // not a tenant's: only cluster-wide grants reach it
  kListing,     // a listing: some grant of the permission; items filtered
  kDeployment,  // {name} is a deployment: its tenant (owner; reads: users)
  kRoute,       // {name} is a ModelRoute: the tenant owning its targets
  kTenant,      // {name} is a tenant
  kKey,         // {name} is a key id: the key's tenant
  kBody,        // the manifests of the body: each one's kind and tenant
};

// One row of the route table, for the route-permission test and the docs.
struct RouteInfo {
  std::string method;
  std::string path;             // under /api/v1
  auth::Permission permission;  // kBody: the verb, resource per manifest
  RouteScope scope;
};

class ControlApi {
 public:
  // `stats` (the gateway's, may be null) answers GET /api/v1/stats.
  // `pool` (may be null: calls are answered on the caller's thread) must
  // outlive the ControlApi's calls.
  // `cluster` (may be null: a single instance without one) answers GET
  // /api/v1/cluster and says where the leader is, for the requests only it
  // answers (forwarded there by an instance that follows).
  // `alerts` (may be null: alerts.prometheus_url is not set) answers GET
  // /api/v1/alerts.
  ControlApi(Controller* controller, ControlAccess access,
             const gateway::GatewayStats* stats = nullptr,
             WorkerPool* pool = nullptr, const ClusterView* cluster = nullptr,
             const AlertsSource* alerts = nullptr)
      : controller_(controller),
        access_(access),
        stats_(stats),
        pool_(pool),
        cluster_(cluster),
        alerts_(alerts) {}

  // The route table, as data.
  static std::vector<RouteInfo> RouteTable();

  struct Call;  // one call being answered (control_internal.h)

  // True when `request` is a control request (its path starts with
  // /api/v1): then it has been taken (moved from) and is answered, at once
  // or on the pool.
  bool Handle(net::HttpRequest& request,
              std::shared_ptr<net::Responder>& responder);

 private:
  // kLeader: only the leader can answer (its running rollouts, its
  // replicas' logs): an instance that follows forwards the request there.
  enum Where { kAny, kLeader };
  struct Route {
    http::verb method;
    const char* path;  // under /api/v1; "{}" is one segment
    auth::Permission permission;
    RouteScope scope;
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
  void ListRoles(Call& c);
  void ListRoleBindings(Call& c);
  void GetRole(Call& c);
  void GetRoleBinding(Call& c);
  void DeleteRole(Call& c);
  void DeleteRoleBinding(Call& c);
  void ListAudit(Call& c);
  void VerifyAudit(Call& c);
  // Access (control_access.cc): whether the caller may do the route's
  // permission on its object; the tenants an object belongs to.
  absl::Status Authorize(Call& c, const Route& route);
  absl::Status AuthorizeBody(Call& c, const std::vector<config::Manifest>& ms,
                             const config::AccessManifests& access,
                             auth::Verb verb);
  bool DeploymentIn(const std::string& name, const std::string& tenant,
                    bool read);
  bool RouteIn(const std::string& name, const std::string& tenant);
  std::string KeyTenant(const std::string& key_id);
  // Records an action or a refusal in the audit log.
  void Audit(Call& c, std::string verb, std::string resource,
             const absl::Status& outcome,
             nlohmann::json diff = nlohmann::json::object());
  nlohmann::json StoredManifest(store::DocKind kind, const std::string& name);
  // Helpers: the manifests of the body (or answers 422); one item of a
  // view (or 404); a delete; a key listing.
  std::optional<std::vector<config::Manifest>> ParseBody(
      Call& c, config::AccessManifests* access);
  void SendOne(Call& c, const nlohmann::json& items, const char* what);
  void DeleteOne(Call& c, config::Manifest::Kind kind);
  void SendKeys(Call& c, const std::string& tenant);

  void Answer(net::HttpRequest& req, std::shared_ptr<net::Responder>& r);

  Controller* controller_;
  ControlAccess access_;
  const gateway::GatewayStats* stats_;
  WorkerPool* pool_;
  const ClusterView* cluster_;
  const AlertsSource* alerts_;
};

}  // namespace gpusched::api

#endif  // GPUSCHED_API_CONTROL_API_H_
