// Gateway: the data plane of `gpusched serve`. Authenticates the tenant,
// admits and queues each request through serving::Dispatcher (the same
// policy core the simulator runs), proxies it to the replica the router
// picks, and relays the answer, streamed chunk by chunk for SSE.
//
// Endpoints: OpenAI-compatible POST /v1/chat/completions, /v1/completions,
// /v1/embeddings and GET /v1/models; GET /healthz. Headers:
//   Authorization: Bearer <api key>      the tenant (runtime::Store keys)
//   X-Gpusched-Priority: <class name>    default: the tenant's class
//   X-Gpusched-Deadline-Ms: <ms>         first-token deadline from arrival
// Errors use OpenAI's error shape: 401 bad key, 404 unknown model (listing
// the tenant's models), 429 rate or queue limits (with Retry-After), 503
// deadline infeasible or no replica. A request whose replica refuses the
// connection before answering is retried on another replica (twice at most).
//
// Threads: called on HTTP I/O threads and on the upstream client's threads;
// the Dispatcher and the request table are guarded by one mutex, and no
// network call is made while it is held.
#ifndef GPUSCHED_API_GATEWAY_H_
#define GPUSCHED_API_GATEWAY_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "api/http_server.h"
#include "runtime/store.h"
#include "runtime/upstream.h"
#include "serving/dispatcher.h"

namespace gpusched::api {

struct GatewayDeployment {
  serving::DeploymentSpec spec;
  std::vector<runtime::Endpoint> replicas;  // ready engine endpoints
  int max_ongoing_requests = 64;
  int64_t kv_budget_tokens = 0;
};

struct GatewayTenant {
  serving::TenantSpec spec;
  std::string priority;             // class name; "" = the second class
  std::vector<std::string> models;  // deployments it may use; empty = all
};

struct GatewayConfig {
  std::vector<std::string> classes = {"critical", "standard", "batch",
                                      "sheddable"};
  std::vector<GatewayDeployment> deployments;
  std::vector<GatewayTenant> tenants;
  uint64_t seed = 1;
};

class Gateway {
 public:
  // `store` authenticates keys and must outlive the gateway.
  static absl::StatusOr<std::unique_ptr<Gateway>> Create(
      const GatewayConfig& config, runtime::Store* store,
      runtime::UpstreamOptions upstream = {});
  ~Gateway();

  void Handle(HttpRequest request, std::shared_ptr<Responder> responder);

 private:
  struct Pending {
    serving::Request request;
    std::string target;
    std::string body;
    bool stream = false;
    std::shared_ptr<Responder> responder;
    int attempts = 0;
  };
  struct Model {
    serving::ModelId id;
    std::vector<runtime::Endpoint> endpoints;  // by ReplicaId - first_replica
    serving::ReplicaId first_replica;
  };
  Gateway() = default;
  // Dispatches what can go and proxies it; call without mu_ held.
  void Pump();
  void Proxy(serving::Assignment a);
  void Finished(const serving::Request& r, serving::ReplicaId replica,
                int32_t output_tokens);

  runtime::Store* store_ = nullptr;
  std::unique_ptr<runtime::UpstreamClient> upstream_;
  GatewayConfig config_;
  std::mutex mu_;
  std::unique_ptr<serving::Dispatcher> dispatcher_;           // guarded by mu_
  absl::flat_hash_map<serving::RequestId, Pending> pending_;  // guarded by mu_
  serving::RequestId next_id_ = 1;                            // guarded by mu_
  std::map<std::string, Model> models_;
  std::map<std::string, serving::TenantId> tenant_ids_;
  std::vector<const GatewayTenant*> tenants_;        // by TenantId
  std::vector<runtime::Endpoint> replica_endpoint_;  // by ReplicaId
};

}  // namespace gpusched::api

#endif  // GPUSCHED_API_GATEWAY_H_
