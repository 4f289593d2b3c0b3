// Sending a control request on to the leader (HA, docs/ha.md): what only
// the leader can answer, asked of an instance that follows.
#ifndef GPUSCHED_API_CONTROL_FORWARD_H_
#define GPUSCHED_API_CONTROL_FORWARD_H_

#include <memory>
#include <string>

#include "net/http_server.h"

namespace gpusched::api {

// Marks a forwarded request (its value: the instance that forwarded it); a
// request that carries it is never forwarded again.
inline constexpr const char* kForwardedBy = "X-Gpusched-Forwarded-By";

// Sends `req` to the leader at `leader` (its advertised URL) and answers
// `r` with what it answers; 503 with Retry-After when it cannot. Blocks
// (the control API's pool thread) up to 30 s per step.
void ForwardToLeader(const std::string& leader, const std::string& self,
                     const net::HttpRequest& req,
                     const std::shared_ptr<net::Responder>& r);

}  // namespace gpusched::api

#endif  // GPUSCHED_API_CONTROL_FORWARD_H_
