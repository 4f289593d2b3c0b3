// HttpClient: a blocking HTTP/1.1 client for the control plane's own peers
// (the Kubernetes API server, etcd's JSON gateway): one request or one
// streamed response per call, on a connection of its own, plain or TLS.
//
// TLS is verified against the CA given (else the system's) and the server's
// name or IP, unless insecure_skip_verify; a client certificate is sent when
// one is set. Every step (resolve and connect, TLS handshake, write, first
// byte, every read of a body) is bounded by the timeout, and every body by
// kMaxHttpClientBody (one streamed line by kMaxHttpClientLine), so a peer
// that stalls or floods cannot hold a caller.
//
// Thread-safe: calls on different threads run independently. Cancel() ends
// every call in progress (a blocked stream) from any thread, and refuses
// every later one, so that the thread that streams can be joined.
//
// Errors: a transport failure is Unavailable (DeadlineExceeded for a
// timeout, Cancelled after Cancel()), naming the peer and the step; an HTTP
// error status is a response, for the caller to read.
#ifndef GPUSCHED_NET_HTTP_CLIENT_H_
#define GPUSCHED_NET_HTTP_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"

namespace gpusched::net {

// Bounds on what is read from a peer.
inline constexpr size_t kMaxHttpClientBody = 256 << 20;  // one response body
inline constexpr size_t kMaxHttpClientLine = 16 << 20;   // one streamed line

struct HttpClientOptions {
  std::string host;  // name or IP (no brackets)
  uint16_t port = 80;
  bool tls = false;
  std::string tls_server_name;  // verify this name instead of `host`
  std::string ca_pem;           // CA certificates; empty: the system's
  bool insecure_skip_verify = false;
  std::string client_cert_pem;  // with client_key_pem: sent to the server
  std::string client_key_pem;
  Micros timeout = 10 * kMicrosPerSecond;  // each step of a call
  std::string peer;  // names the peer in errors ("the API server https://..")
  size_t max_body = kMaxHttpClientBody;  // a longer response body fails
};

struct HttpClientResponse {
  unsigned status = 0;
  std::string body;
  Micros retry_after = 0;  // from Retry-After (seconds, at most 1 h); 0: none
  std::string content_type;
};

class HttpClient {
 public:
  // InvalidArgument when the CA, certificate or key cannot be loaded.
  static absl::StatusOr<std::unique_ptr<HttpClient>> Create(
      HttpClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  using Headers = std::vector<std::pair<std::string, std::string>>;

  // `target` is the path and query; `body`, when not empty, is sent with
  // `content_type`. Bad method: InvalidArgument.
  absl::StatusOr<HttpClientResponse> Request(
      absl::string_view method, absl::string_view target,
      const Headers& headers = {}, absl::string_view body = {},
      absl::string_view content_type = "application/json");

  // Sends the request and calls `on_line` with each non-blank line of a 200
  // response's body as it arrives, until the peer ends it, `on_line`
  // returns false, no data came for `idle` (DeadlineExceeded), or Cancel().
  // Another status is the response, read whole, in `*error_response`.
  absl::Status Stream(absl::string_view method, absl::string_view target,
                      const Headers& headers, absl::string_view body,
                      Micros idle,
                      const std::function<bool(absl::string_view)>& on_line,
                      HttpClientResponse* error_response);

  // Ends the calls in progress and refuses later ones (Cancelled).
  void Cancel();

  const HttpClientOptions& options() const { return options_; }
  // Requests sent since the client was made (streams included).
  int64_t requests() const { return requests_.load(); }

 private:
  friend class HttpExchange;
  struct Impl;
  HttpClient(HttpClientOptions options, std::unique_ptr<Impl> impl);

  HttpClientOptions options_;
  std::unique_ptr<Impl> impl_;
  std::atomic<int64_t> requests_{0};
};

// True when `host` is an IPv4 or IPv6 address rather than a name.
bool IsIpAddress(const std::string& host);

}  // namespace gpusched::net

#endif  // GPUSCHED_NET_HTTP_CLIENT_H_
