// HttpServer: gpusched's HTTP/1.1 front door on Boost.Asio/Beast.
//
// Owns its io_context and I/O threads (joined in Shutdown/destructor).
// Keep-alive, request limits (header and body size, read and idle
// timeouts, max connections), complete or streamed (chunked, for SSE)
// responses, and graceful shutdown: stop accepting, let in-flight requests
// finish up to a deadline, close idle connections. With a certificate and
// key it speaks only HTTPS (TLS 1.2 or later), with the same features.
//
// Threads: the handler runs on an I/O thread; it may answer at once or keep
// the Responder and answer later from another thread (the Responder hands
// its bytes to the connection's strand; one Responder is used by one thread
// at a time). Every request gets exactly one response: a Responder dropped
// without answering sends 500, and a dropped stream is ended. Responders
// must not outlive the server: Shutdown waits for in-flight ones.
#ifndef GPUSCHED_NET_HTTP_SERVER_H_
#define GPUSCHED_NET_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/io_context.hpp"
#include "boost/beast/http.hpp"

namespace gpusched::net {

namespace http = boost::beast::http;

struct HttpServerOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see HttpServer::port)
  size_t max_header_bytes = 16 * 1024;      // larger: 431
  size_t max_body_bytes = 8 * 1024 * 1024;  // larger: 413
  // A started request must arrive whole within this (else 408 and close).
  std::chrono::milliseconds read_timeout{30'000};
  // A keep-alive connection idle this long is closed.
  std::chrono::milliseconds idle_timeout{60'000};
  // Connections beyond this get 503 and are closed.
  int max_connections = 1024;
  int threads = 1;  // I/O threads
  // PEM files. Both set: TLS only (1.2 or later), plain HTTP is refused.
  // Both empty: plain HTTP. The certificate file may hold the chain (leaf
  // first); the key must match it.
  std::string tls_cert_file;
  std::string tls_key_file;
};

using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

class Connection;

// Answers one request: once with Send, or as a stream (StartStream, any
// number of SendChunk, EndStream). Thread-safe.
class Responder {
 public:
  ~Responder();
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

  // Keep-alive and the body length are set here.
  void Send(HttpResponse response);
  // Chunked transfer; `head`'s body is ignored.
  void StartStream(HttpResponse head);
  void SendChunk(std::string data);
  void EndStream();
  // A responder with no client: everything sent to it is dropped (the
  // gateway's shadow copies of requests).
  static std::shared_ptr<Responder> Discarding();
  // The client is gone (its chunks are dropped); for cancelling work.
  bool client_gone() const { return gone_->load(); }
  // The client's address ("127.0.0.1:41234"); "" for a discarding one.
  const std::string& peer() const;

 private:
  friend class Connection;  // the only maker of Responders
  Responder(std::shared_ptr<Connection> connection, unsigned version,
            bool keep_alive);
  std::shared_ptr<Connection> connection_;
  unsigned version_;
  bool keep_alive_;
  bool answered_ = false;
  bool streaming_ = false;
  bool ended_ = false;
  std::shared_ptr<std::atomic<bool>> gone_;
};

using HttpHandler =
    std::function<void(HttpRequest request, std::shared_ptr<Responder>)>;

class HttpServer {
 public:
  // Errors: a bad listen address, a port in use, or (with TLS) a
  // certificate or key that cannot be loaded, naming the file and OpenSSL's
  // reason.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const HttpServerOptions& options, HttpHandler handler);
  ~HttpServer();

  uint16_t port() const;
  // The I/O context the server's threads run: an upstream client may run
  // on it too (net::UpstreamOptions::io_context), so a proxied request
  // stays on one thread. Valid until the server is destroyed; stopped by
  // Shutdown.
  boost::asio::io_context& io_context();
  bool tls() const;  // serving HTTPS
  int open_connections() const;
  int in_flight() const;  // requests read and not yet answered

  // Stops accepting, waits up to `drain` for in-flight requests, then closes
  // every connection and joins the I/O threads. Idempotent.
  void Shutdown(std::chrono::milliseconds drain);

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A JSON error body in OpenAI's shape (its OpenAPI `Error` schema):
// {"error": {"message", "type", "param": null, "code"}}, `code` a string
// such as "model_not_found" or null (empty `code`).
HttpResponse JsonError(http::status status, const std::string& message,
                       const std::string& type, unsigned version = 11,
                       bool keep_alive = true, const std::string& code = "");

}  // namespace gpusched::net

#endif  // GPUSCHED_NET_HTTP_SERVER_H_
