// ControlApi: the REST control plane under /api/v1 (docs/control-api.md),
// a thin JSON layer over the Controller. Admin keys may call everything;
// a tenant key may read the deployments it may use and its own tenant.
// Thread-safe (the Controller serializes).
#ifndef GPUSCHED_API_CONTROL_API_H_
#define GPUSCHED_API_CONTROL_API_H_

#include <memory>

#include "api/controller.h"
#include "gateway/gateway_stats.h"
#include "gateway/key_cache.h"
#include "net/http_server.h"

namespace gpusched::api {

namespace http = boost::beast::http;

class ControlApi {
 public:
  // `keys` checks the callers' API keys; `stats` (the gateway's, may be
  // null) answers GET /api/v1/stats.
  ControlApi(Controller* controller, gateway::KeyCache* keys,
             const gateway::GatewayStats* stats = nullptr)
      : controller_(controller), keys_(keys), stats_(stats) {}

  // True when `request` is a control request (its path starts with
  // /api/v1) and was answered.
  bool Handle(net::HttpRequest& request,
              std::shared_ptr<net::Responder>& responder);

 private:
  Controller* controller_;
  gateway::KeyCache* keys_;
  const gateway::GatewayStats* stats_;
};

}  // namespace gpusched::api

#endif  // GPUSCHED_API_CONTROL_API_H_
