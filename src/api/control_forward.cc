// Requests only the leader can answer (a rollout's actions, a replica's
// logs), sent on to it from an instance that follows: the same method,
// path, body and Authorization, the leader's answer returned as it is.
#include "api/control_forward.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "net/http_client.h"

namespace gpusched::api {

namespace http = boost::beast::http;

namespace {

net::HttpResponse Fail(http::status status, const std::string& message) {
  net::HttpResponse res = net::JsonError(status, message, "server_error");
  res.set(http::field::retry_after, "1");
  return res;
}

}  // namespace

void ForwardToLeader(const std::string& leader, const std::string& self,
                     const net::HttpRequest& req,
                     const std::shared_ptr<net::Responder>& r) {
  if (req.find(kForwardedBy) != req.end()) {
    // Another instance sent it here thinking this one leads: no loops.
    r->Send(Fail(http::status::service_unavailable,
                 "the leader changed while the request was forwarded; retry"));
    return;
  }
  absl::string_view rest(leader);
  net::HttpClientOptions o;
  if (absl::ConsumePrefix(&rest, "https://")) {
    o.tls = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    r->Send(Fail(http::status::service_unavailable,
                 absl::StrCat("the leader's address '", leader,
                              "' is not a URL; check its ha.advertise")));
    return;
  }
  absl::ConsumeSuffix(&rest, "/");
  const size_t colon = rest.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    r->Send(Fail(http::status::service_unavailable,
                 absl::StrCat("the leader's address '", leader,
                              "' has no port; check its ha.advertise")));
    return;
  }
  o.host = std::string(
      absl::StripPrefix(absl::StripSuffix(rest.substr(0, colon), "]"), "["));
  o.port = static_cast<uint16_t>(port);
  o.timeout = 30 * kMicrosPerSecond;
  o.peer = absl::StrCat("the leader ", leader);
  auto client = net::HttpClient::Create(std::move(o));
  if (!client.ok()) {
    r->Send(Fail(http::status::service_unavailable,
                 std::string(client.status().message())));
    return;
  }
  net::HttpClient::Headers headers = {{std::string(kForwardedBy), self}};
  if (auto it = req.find(http::field::authorization); it != req.end()) {
    headers.emplace_back("Authorization", std::string(it->value()));
  }
  std::string content_type = "application/json";
  if (auto it = req.find(http::field::content_type); it != req.end()) {
    content_type = std::string(it->value());
  }
  absl::StatusOr<net::HttpClientResponse> res = (*client)->Request(
      std::string(http::to_string(req.method())), std::string(req.target()),
      headers, req.body(), content_type);
  if (!res.ok()) {
    r->Send(Fail(http::status::service_unavailable,
                 absl::StrCat("this instance follows, and the leader (", leader,
                              ") did not answer: ", res.status().message())));
    return;
  }
  net::HttpResponse out{static_cast<http::status>(res->status), 11};
  if (!res->content_type.empty()) {
    out.set(http::field::content_type, res->content_type);
  }
  out.body() = std::move(res->body);
  r->Send(std::move(out));
}

}  // namespace gpusched::api
