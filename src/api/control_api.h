// ControlApi: the REST control plane under /api/v1 (docs/control-api.md),
// a thin JSON layer over the Controller. Admin keys may call everything;
// a tenant key may read the deployments it may use and its own tenant.
// Thread-safe (the Controller serializes).
#ifndef GPUSCHED_API_CONTROL_API_H_
#define GPUSCHED_API_CONTROL_API_H_

#include <memory>

#include "api/controller.h"
#include "api/gateway_stats.h"
#include "net/http_server.h"

namespace gpusched::api {

namespace http = boost::beast::http;

class ControlApi {
 public:
  // `stats` (the gateway's, may be null) answers GET /api/v1/stats.
  explicit ControlApi(Controller* controller,
                      const GatewayStats* stats = nullptr)
      : controller_(controller), stats_(stats) {}

  // True when `request` is a control request (its path starts with
  // /api/v1) and was answered.
  bool Handle(net::HttpRequest& request,
              std::shared_ptr<net::Responder>& responder);

 private:
  Controller* controller_;
  const GatewayStats* stats_;
};

}  // namespace gpusched::api

#endif  // GPUSCHED_API_CONTROL_API_H_
