// Gateway: the data plane of `gpusched serve`. Authenticates the tenant,
// admits and queues each request through serving::Dispatcher (the same
// policy core the simulator runs), proxies it to the replica the router
// picks, and relays the answer, streamed chunk by chunk for SSE.
//
// Endpoints:
//   OpenAI-compatible: POST /v1/chat/completions, /v1/completions,
//     /v1/embeddings; GET /v1/models.
//   KServe v2 (Open Inference Protocol, HTTP/JSON): GET /v2/health/live,
//     /v2/health/ready, /v2/models/{name}[/versions/{v}] (metadata, from a
//     replica), .../ready; POST .../infer (queued like any request).
//   GET /healthz.
// Headers:
//   Authorization: Bearer <api key>      the tenant (store::Store keys)
//   X-Gpusched-Priority: <class name>    default: the tenant's class
//   X-Gpusched-Deadline-Ms: <ms>         first-token deadline from arrival
//   X-Gpusched-Session: <id>             session (first 256 bytes): the
//                                        session-affinity router's key and a
//                                        sticky route's (else OpenAI `user`)
// A model name may be a route (GatewayRoute, docs/versions.md): the
// request goes to one of its deployments, picked by weight.
// Errors use each protocol's shape (OpenAI: {"error": {"message", "type"}};
// KServe: {"error": "..."}): 401 bad key, 404 unknown model (listing the
// tenant's models), 429 rate or queue limits (with Retry-After), 503
// deadline infeasible, queue timeout, hold limit (max_held requests already
// held at zero ready replicas) or deployment deleted. A request whose
// replica fails before answering (refused, reset, gone) is retried on
// another replica (three attempts in all); once the response has started
// it is relayed as it is.
//
// Deployments, their ready replicas and tenants change at run time
// (UpsertDeployment, SetReplicas, UpsertTenant...), called by the runtime's
// controller. Changing a deployment's router or queue starts a new queue;
// requests already queued in the old one are still served by the
// deployment's replicas.
//
// Threads: called on HTTP I/O threads, on the upstream client's threads and
// by the controller; everything is guarded by one mutex, and no network
// call is made while it is held.
#ifndef GPUSCHED_GATEWAY_GATEWAY_H_
#define GPUSCHED_GATEWAY_GATEWAY_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "auth/access.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_stats.h"
#include "gateway/stream_resume.h"
#include "net/http_server.h"
#include "net/upstream.h"
#include "runtime/data_plane.h"
#include "serving/dispatcher.h"
#include "serving/split.h"
#include "store/store.h"

namespace gpusched::gateway {

namespace http = boost::beast::http;

struct GatewayDeployment {
  serving::DeploymentSpec spec;  // spec.name is the model name clients use
  int max_ongoing_requests = 64;
  int64_t kv_budget_tokens = 0;
  // Queued requests wait at most this long for a replica (503 after).
  Micros queue_timeout = 60 * kMicrosPerSecond;
  // Scale from zero: while the deployment has no ready replica, at most
  // this many requests are held in its queue; more get 503 with
  // Retry-After (reason no_replica). 0: no bound beyond max_queue_size.
  int64_t max_held = 0;
};

struct GatewayTenant {
  serving::TenantSpec spec;
  std::string priority;             // class name; "" = the second class
  std::vector<std::string> models;  // deployments it may use; empty = all
};

// A public model name that routes to deployments by weight
// (config::ModelRouteSpec; docs/versions.md). Requests name `name`; each
// goes to one target, picked by weight from a sticky key (sticky: session:
// the X-Gpusched-Session header, else the OpenAI `user` field; tenant: the
// tenant) or at random. KServe /v2/models/{name}/versions/{v} addresses the
// target of version v.
struct GatewayRouteTarget {
  std::string deployment;
  std::string version;
  int weight = 0;
};
struct GatewayRoute {
  std::string name;
  std::vector<GatewayRouteTarget> targets;
  std::string sticky = "none";  // none | session | tenant
  // Copies of shadow_percent % of the route's requests go to
  // shadow_deployment ("" : none) as the tenant kShadowTenant; their answers
  // are dropped, their latencies recorded as that deployment's.
  std::string shadow_deployment;
  int shadow_percent = 0;
};

// The tenant shadow copies are queued as: they never count against the
// client's tenant (its limits, its fair share).
inline constexpr char kShadowTenant[] = "_shadow";

struct GatewayConfig {
  std::vector<std::string> classes = {"critical", "standard", "batch",
                                      "sheddable"};
  uint64_t seed = 1;
  // The version GET /v2 (KServe server metadata) reports.
  std::string version = "dev";
  // Request metrics (docs/metrics.md); optional, outlives the gateway.
  GatewayMetrics* metrics = nullptr;
  // A streamed OpenAI response whose replica fails mid-stream continues on
  // another replica up to this many times (0: never; the stream then ends
  // with an error event).
  int max_migrations = 2;
};

// What the gateway holds for one deployment now.
using DeploymentLoad = runtime::ServingLoad;

// Checks a bearer credential (an API key or a token) and says who it is
// (auth/access_control.h; thread-safe).
using Authenticator =
    std::function<absl::StatusOr<auth::Principal>(std::string_view bearer)>;

// One data-plane route and the permission it needs (docs/access.md);
// nullopt: public (health and server metadata, no credential).
struct DataPlaneRoute {
  const char* method;
  const char* path;  // "{}" is one segment
  std::optional<auth::Permission> permission;
};
// Every route the data plane answers.
const std::vector<DataPlaneRoute>& DataPlaneRoutes();

class Gateway : public runtime::DataPlane {
 public:
  static absl::StatusOr<std::unique_ptr<Gateway>> Create(
      const GatewayConfig& config, Authenticator authenticate,
      net::UpstreamOptions upstream = {});
  ~Gateway() override;

  void Handle(net::HttpRequest request,
              std::shared_ptr<net::Responder> responder);

  // From now on, proxy on `ioc` (the HTTP server's, so that a request is
  // read, proxied and answered on one thread without hand-offs); `ioc`
  // must outlive the gateway or be stopped before it is destroyed.
  void UseIoContext(boost::asio::io_context& ioc);

  // Creates the deployment, or updates it (see the file comment).
  absl::Status UpsertDeployment(const GatewayDeployment& d);
  // New requests for it get 404; queued ones are still served until
  // SetReplicas(name, {}), after which the rest get 503.
  void RemoveDeployment(const std::string& name) override;
  // The ready replicas of `name` (an unknown name is ignored). A replica
  // left out takes no new request; its in-flight ones finish.
  void SetReplicas(const std::string& name,
                   const std::vector<net::Endpoint>& ready) override;
  absl::Status UpsertTenant(const GatewayTenant& t);
  // The tenant's keys stop working here at once.
  void RemoveTenant(const std::string& name) override;
  // runtime::DataPlane: UpsertDeployment / UpsertTenant from the specs.
  absl::Status ServeDeployment(
      const config::DeploymentSpec& spec,
      const std::vector<std::string>& classes) override;
  absl::Status ServeTenant(const config::TenantSpec& spec) override;
  std::vector<double> TtftSince(const std::string& deployment,
                                Micros since) override;
  std::vector<control::VersionSample> SamplesSince(
      const std::string& deployment, Micros since) override;

  // Creates or replaces the route (weights take effect for new requests).
  // InvalidArgument when its name is a deployment's or no target has
  // weight > 0.
  absl::Status UpsertRoute(const GatewayRoute& route);
  void RemoveRoute(const std::string& name) override;
  absl::Status ServeRoute(const config::ModelRouteSpec& spec,
                          const std::vector<int>& weights) override;

  // Engine-reported load of the replica at `ep` (for the routers).
  void UpdateEngineLoad(const net::Endpoint& ep,
                        const serving::EngineLoad& load) override;

  DeploymentLoad Load(const std::string& name) override;
  std::map<std::string, runtime::TenantUsage> TenantUsages() override;
  void SetTenantShares(
      const std::map<std::string, serving::TenantShare>& shares) override;
  // Recent per-deployment and per-tenant request statistics
  // (GET /api/v1/stats); thread-safe.
  const GatewayStats& stats() const { return stats_; }
  // Requests proxied to `ep` and not finished.
  int64_t InFlightOn(const net::Endpoint& ep) override;
  // Expires queued requests past their timeout and forgets drained old
  // queues; the controller calls it periodically (every ~50 ms).
  void Tick() override;
  // Rejections become "request.rejected" events, one per (deployment,
  // tenant, reason) and second with their count, sent from Tick().
  void SetEventSink(std::function<void(store::Event)> sink);
  // Demand at zero: called with the deployment and the request's arrival
  // (steady clock) when a request is held while the deployment has no
  // ready replica and held no other request, i.e. once per burst of first
  // requests (concurrent ones find the first already held). Called on the
  // thread that received the request, without the gateway's lock, so the
  // sink may take the controller's lock (whose holder calls the gateway).
  void SetDemandSink(DemandSink sink) override;

 private:
  enum class Protocol { kOpenAi, kKServe };
  struct Pending {
    serving::Request request;
    std::string target;  // path on the engine
    std::shared_ptr<const std::string> body;
    bool stream = false;
    Protocol protocol = Protocol::kOpenAi;
    std::shared_ptr<net::Responder> responder;
    int attempts = 0;
    std::string endpoint;  // where it is in flight, "" when queued
    GatewayMetrics::RequestCells* cells = nullptr;  // null: no metrics
    std::string tenant;                             // its name, for stats
    std::string deployment;                         // the model it asked
    bool held = false;  // arrived while the deployment had no ready replica
    // Streamed OpenAI requests: what was sent, to migrate the stream.
    std::shared_ptr<StreamResume> resume;
    // The prompt's block hashes request.prefix_blocks points into (a heap
    // buffer: the Pending may move).
    std::shared_ptr<const std::vector<uint64_t>> blocks;
  };
  struct Queue {  // one dispatcher deployment
    serving::ModelId id = 0;
    std::string name;
    std::map<std::string, serving::ReplicaId> replicas;  // endpoint key ->
  };
  struct Model {  // one deployment name
    GatewayDeployment config;
    serving::ModelId current = 0;
    std::vector<serving::ModelId> retired;
    std::vector<net::Endpoint> ready;
    bool deleted = false;
    // Metric cells by tenant id * classes + class, made at first use.
    std::vector<GatewayMetrics::RequestCells*> cells;
    // When the first request now held (no ready replica) arrived.
    Micros held_since = 0;
    // Unix seconds when this gateway first served the name (`created` in
    // GET /v1/models); kept across updates.
    int64_t created = 0;
  };
  struct Route {
    GatewayRoute config;
    serving::WeightedSplit split;
    std::vector<metrics::Counter*> cells;  // per target; null: no metrics
    int64_t created = 0;                   // as Model::created
  };
  // Where a request for a route goes.
  struct RouteChoice {
    std::string deployment;
    std::string version;
    metrics::Counter* cell = nullptr;
    std::vector<std::string> versions;  // all of the route's
    std::string shadow;                 // copy it there too ("" : no)
  };
  struct Tenant {
    std::shared_ptr<const GatewayTenant> config;  // replaced, never mutated
    serving::TenantId id = 0;
    bool deleted = false;
    serving::TenantShare share;  // of its limits (SetTenantShares)
  };

  // A dispatched request, ready to proxy (without mu_).
  struct Job {
    serving::Assignment a;
    std::shared_ptr<const std::string> body;
    std::string target;
    bool stream = false;
    Protocol protocol = Protocol::kOpenAi;
    std::shared_ptr<net::Responder> responder;
    net::Endpoint ep;
    net::UpstreamClient* upstream = nullptr;
    GatewayMetrics::RequestCells* cells = nullptr;
    GatewayStats::Finish finish;  // deployment and tenant filled in
    std::shared_ptr<StreamResume> resume;
  };
  struct Replica {
    net::Endpoint ep;
    std::string key;  // EndpointKey(ep)
  };

  Gateway() = default;
  // Dispatches what can go and proxies it; call without mu_ held.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);
  // Dispatches what can go; the jobs are proxied after unlocking.
  void DispatchLocked(std::vector<Job>* jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Proxy(Job job);
  // `p` (sent as `req` to `replica`) left it unfinished; `suspect`: route
  // around the replica for a second; `prefilled`: its first token was
  // noted (Dispatcher::OnFinished).
  void LeftReplica(Pending& p, const serving::Request& req,
                   serving::ReplicaId replica, bool suspect, bool prefilled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `req` again, for the deployment's current queue, as `p`'s request.
  serving::Request Requeued(Pending& p, const serving::Request& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers a request that cannot be served: an error response, or, when
  // its stream already started (a migration was under way), an error event
  // that ends the stream.
  void FailPending(const Pending& p, http::status status,
                   const std::string& message, const std::string& type,
                   Micros retry_after = 0);
  // A stream that started cannot go on: the error event, then its end.
  static void EndWithError(const std::shared_ptr<net::Responder>& r,
                           const std::string& why);
  // Events for a stream migrated (or not) when its replica failed.
  void NoteMigration(const std::string& deployment, const std::string& tenant,
                     const std::string& from, bool migrated,
                     const std::string& why);
  void Reject(Protocol protocol, const std::shared_ptr<net::Responder>& r,
              http::status status, const std::string& message,
              const std::string& type, Micros retry_after = 0);
  // Queues a copy of the request for `deployment` (model field rewritten)
  // as kShadowTenant, answered to nobody.
  void Shadow(Protocol protocol, const net::HttpRequest& req,
              const std::string& deployment, std::string engine_target,
              bool stream, int64_t max_tokens);
  // The session a request names (X-Gpusched-Session), "" when none.
  static std::string Session(const net::HttpRequest& req);
  void Submit(Protocol protocol, net::HttpRequest& req,
              std::shared_ptr<net::Responder> r, const std::string& model,
              std::string engine_target, bool stream, int64_t max_tokens,
              const Tenant& tenant, std::string_view prompt = {});
  void HandleKServe(net::HttpRequest& req, std::shared_ptr<net::Responder> r,
                    const std::string& target);
  // The tenant behind the request's key or token, or answers 401/403 and
  // nullopt.
  // The caller must hold `permission` in its tenant.
  std::optional<Tenant> Authenticate(const net::HttpRequest& req,
                                     Protocol protocol,
                                     const std::shared_ptr<net::Responder>& r,
                                     auth::Permission permission);
  // May the tenant use the live deployment `model`? (Listed in its
  // models, or a target of a route that is.)
  bool Allowed(const Tenant& t, const std::string& model) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Is `name` (a deployment or a route) in the tenant's models (empty:
  // all)?
  static bool Listed(const Tenant& t, const std::string& name);
  // Listed, or a target of a route that is (the deployment need not exist).
  bool Grants(const Tenant& t, const std::string& deployment) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The deployments the tenant may use (Allowed).
  std::vector<std::string> AllowedModels(const Tenant& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the tenant sees (/v1/models, 404 messages): its routes and the
  // deployments that are no route's target.
  std::vector<std::string> PublicModels(const Tenant& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unix seconds when this gateway first served the public name (a route
  // or a deployment), 0 when it serves none by that name.
  int64_t CreatedOf(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The target a request of `tenant` for route `name` goes to: the one of
  // `version` when given, else picked by weight, sticky by `session` (the
  // X-Gpusched-Session header or the OpenAI user; "" : random) or by the
  // tenant as the route says.
  // nullopt when `name` is no route the tenant may use; NotFound when the
  // version is not one of the route's.
  std::optional<absl::StatusOr<RouteChoice>> PickRoute(
      const Tenant& t, const std::string& name, const std::string& version,
      const std::string& session) ABSL_LOCKS_EXCLUDED(mu_);
  // A route is ready when every target with weight > 0 has a ready replica.
  bool RouteReady(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // Declares every tenant allowed `deployment` to its current queue.
  void DeclareTenants(const std::string& deployment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<serving::ModelId> NewQueue(const Model& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t Queued(const Model& m) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // over all its queues
  void SyncReplicas(serving::ModelId id, const Model& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SyncAll(const Model& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queued requests of a deleted, replica-less deployment: answered 503.
  void FailQueued(serving::ModelId id, std::vector<Pending>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  GatewayMetrics::RequestCells* CellsFor(Model& m, const Tenant& t,
                                         serving::ClassId c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Invalid(const char* reason);  // counts a refused request

  // The upstream client the proxy uses now; its options; replaced ones are
  // kept until the gateway is destroyed (their requests may be in flight).
  net::UpstreamClient* Upstream();
  Authenticator authenticate_;
  net::UpstreamOptions upstream_options_;
  std::vector<std::unique_ptr<net::UpstreamClient>> upstreams_;
  GatewayConfig config_;
  absl::Mutex mu_;
  // Guarded by mu_:
  std::unique_ptr<serving::Dispatcher> dispatcher_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<serving::RequestId, Pending> pending_
      ABSL_GUARDED_BY(mu_);
  serving::RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  serving::ReplicaId next_replica_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Model> models_ ABSL_GUARDED_BY(mu_);
  std::vector<Queue> queues_ ABSL_GUARDED_BY(mu_);  // by ModelId
  std::map<std::string, Tenant> tenants_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Route> routes_ ABSL_GUARDED_BY(mu_);
  std::optional<Tenant> shadow_tenant_ ABSL_GUARDED_BY(mu_);
  uint64_t route_draws_ ABSL_GUARDED_BY(mu_) = 0;  // random keys' counter
  absl::flat_hash_map<serving::ReplicaId, Replica> endpoints_
      ABSL_GUARDED_BY(mu_);
  std::vector<serving::Assignment> assigned_
      ABSL_GUARDED_BY(mu_);  // scratch for Dispatch
  DemandSink demand_sink_ ABSL_GUARDED_BY(mu_);
  // By tenant id: what reached admission (TenantUsages).
  std::vector<runtime::TenantUsage> usage_ ABSL_GUARDED_BY(mu_);

  void NoteRejection(const std::string& deployment, const std::string& tenant,
                     serving::RejectReason reason);
  void FlushRejections();
  absl::Mutex rejections_mu_;
  std::function<void(store::Event)> event_sink_ ABSL_GUARDED_BY(rejections_mu_);
  std::map<std::tuple<std::string, std::string, serving::RejectReason>, int64_t>
      rejections_ ABSL_GUARDED_BY(rejections_mu_);
  Micros next_rejection_flush_ ABSL_GUARDED_BY(rejections_mu_) = 0;
  // By endpoint key.
  absl::flat_hash_map<std::string, int64_t> in_flight_ ABSL_GUARDED_BY(mu_);
  GatewayStats stats_;  // its own lock
  // Endpoints that refused or dropped a connection: routed around until
  // the time given (the controller's health checks decide for good).
  absl::flat_hash_map<std::string, Micros> suspect_until_ ABSL_GUARDED_BY(mu_);
};

using net::EndpointKey;

}  // namespace gpusched::gateway

#endif  // GPUSCHED_GATEWAY_GATEWAY_H_
