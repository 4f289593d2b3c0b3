// UpstreamClient: HTTP/1.1 client from gpusched to engine processes.
//
// Asynchronous on its own io_context and threads (owned and joined), with a
// keep-alive connection pool per endpoint, connect / first-byte / between-
// data timeouts, and incremental response bodies: OnData is called with
// each piece as it arrives (chunked transfer decoded), so an SSE stream is
// relayed token by token. Used by the gateway to proxy requests, and by
// readiness probes, health checks and metrics scraping.
//
// Thread-safe. Callbacks run on the client's threads, one request's
// callbacks never concurrently, in order: OnHead, OnData*, OnDone (OnDone
// alone when the request fails before a response head).
#ifndef GPUSCHED_NET_UPSTREAM_H_
#define GPUSCHED_NET_UPSTREAM_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "boost/asio/io_context.hpp"
#include "boost/beast/http.hpp"

namespace gpusched::net {

struct Endpoint {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
};
// "host:port".
std::string EndpointKey(const Endpoint& ep);

struct UpstreamOptions {
  // Run on this I/O context (run by its owner, who keeps it alive until
  // the client is gone) instead of the client's own threads.
  boost::asio::io_context* io_context = nullptr;
  int threads = 1;  // own threads, when io_context is null
  std::chrono::milliseconds connect_timeout{2'000};
  // From sending the request to the response head.
  std::chrono::milliseconds first_byte_timeout{60'000};
  // Between two pieces of a streamed body.
  std::chrono::milliseconds idle_timeout{60'000};
  int max_idle_per_endpoint = 64;
  // Pooled keep-alive connections are swept at most this often: those idle
  // longer than max_idle_age, and those whose peer has closed (an engine
  // that exited, whose endpoint is never asked again), are closed.
  std::chrono::milliseconds idle_sweep_period{1'000};
  std::chrono::milliseconds max_idle_age{30'000};
};

struct UpstreamCallbacks {
  std::function<void(const boost::beast::http::response_header<>& head)>
      on_head;
  std::function<void(std::string data)> on_data;
  // OK once the whole body arrived; else why (Unavailable: connection
  // refused or reset before any byte of the response, so the request may be
  // retried elsewhere; DeadlineExceeded: a timeout).
  std::function<void(absl::Status)> on_done;
};

class UpstreamClient {
 public:
  explicit UpstreamClient(UpstreamOptions options = {});
  ~UpstreamClient();
  UpstreamClient(const UpstreamClient&) = delete;
  UpstreamClient& operator=(const UpstreamClient&) = delete;

  // Sends `request` (its Host and Content-Length are set here).
  void Send(
      const Endpoint& to,
      boost::beast::http::request<boost::beast::http::string_body> request,
      UpstreamCallbacks callbacks);

  // Blocking convenience for probes and tests: status and whole body.
  struct Result {
    unsigned status = 0;
    std::string body;
  };
  absl::StatusOr<Result> Fetch(
      const Endpoint& to,
      boost::beast::http::request<boost::beast::http::string_body> request);

  int idle_connections() const;

  // Ends the client's own threads (after the callback running now, if any,
  // returns); no callback runs on them afterwards. The client stays valid:
  // a Send after Stop is queued and dropped unanswered when the client is
  // destroyed. Not from a callback. The destructor calls it.
  void Stop();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace gpusched::net

#endif  // GPUSCHED_NET_UPSTREAM_H_
