// Internal to the control API (control_api.cc, control_access.cc): one call
// being answered, and the JSON answers of both files.
#ifndef GPUSCHED_API_CONTROL_INTERNAL_H_
#define GPUSCHED_API_CONTROL_INTERNAL_H_

#include <memory>
#include <string>

#include "api/control_api.h"
#include "api/control_query.h"
#include "nlohmann/json.hpp"

namespace gpusched::api {

net::HttpResponse ControlJson(http::status status, const nlohmann::json& body);
// {"error": {"message", "type"}} with the status of `st` (403 for
// PermissionDenied, type permission_error).
net::HttpResponse ControlError(const absl::Status& st);
net::HttpResponse ControlError(http::status status, const std::string& message);

// The name of an item of a listing: metadata.name (deployments, tenants),
// else name (routes); "" when it has neither.
inline std::string ListedName(const nlohmann::json& item) {
  if (!item.is_object()) return "";
  if (auto m = item.find("metadata"); m != item.end() && m->is_object()) {
    return m->value("name", "");
  }
  return item.value("name", "");
}

// One control request being answered.
struct ControlApi::Call {
  net::HttpRequest& req;
  std::shared_ptr<net::Responder>& r;
  ControlTarget target;  // path segments and query, decoded
  auth::Principal who;
  // The {name} segment of the route (parts[1]).
  const std::string& name() const { return target.parts.at(1); }
  void Send(http::status s, const nlohmann::json& j) {
    r->Send(ControlJson(s, j));
  }
  void Fail(const absl::Status& st) { r->Send(ControlError(st)); }
  void Fail(http::status s, const std::string& message) {
    r->Send(ControlError(s, message));
  }
};

}  // namespace gpusched::api

#endif  // GPUSCHED_API_CONTROL_INTERNAL_H_
