#include "api/http_server.h"

#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "nlohmann/json.hpp"

namespace gpusched::api {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

namespace {

// The head of a response: status line and fields, ending with CRLF CRLF.
// `body` is appended after it (one buffer, one write).
std::string FormatHead(const HttpResponse& res, std::string_view body = {}) {
  const boost::beast::string_view reason = http::obsolete_reason(res.result());
  size_t size = 32 + reason.size() + body.size();
  for (const auto& field : res) {
    size += field.name_string().size() + field.value().size() + 4;
  }
  std::string out;
  out.reserve(size);
  absl::StrAppend(&out, "HTTP/", res.version() / 10, ".", res.version() % 10,
                  " ", res.result_int(), " ");
  out.append(reason.data(), reason.size());
  out += "\r\n";
  for (const auto& field : res) {
    out.append(field.name_string().data(), field.name_string().size());
    out += ": ";
    out.append(field.value().data(), field.value().size());
    out += "\r\n";
  }
  out += "\r\n";
  out.append(body.data(), body.size());
  return out;
}

}  // namespace

HttpResponse JsonError(http::status status, const std::string& message,
                       const std::string& type, unsigned version,
                       bool keep_alive) {
  HttpResponse res{status, version};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(keep_alive);
  nlohmann::json body = {{"error",
                          {{"message", message},
                           {"type", type},
                           {"code", static_cast<int>(status)}}}};
  res.body() = body.dump();
  return res;
}

// One accepted connection. All state is touched on its strand.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::Impl* server);
  ~Connection();
  void Start();
  // Called through Responder (any thread): queue bytes on the strand.
  void Write(std::string bytes, bool ends_response, bool keep_alive);
  void CloseIfIdle();
  void Close();
  const std::shared_ptr<std::atomic<bool>>& gone() const { return gone_; }
  net::strand<net::io_context::executor_type>& strand() { return strand_; }
  bool draining() const;

 private:
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  void OnBody(beast::error_code ec);
  void Reject(http::status status, const std::string& message);
  void WriteNext();
  void OnWritten(beast::error_code ec);
  void FinishResponse(bool keep_alive);

  beast::tcp_stream stream_;
  net::strand<net::io_context::executor_type> strand_;
  HttpServer::Impl* server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  struct Pending {
    std::string bytes;
    bool ends_response;
    bool keep_alive;
  };
  std::deque<Pending> out_;
  bool writing_ = false;
  bool busy_ = false;  // a request is being handled
  bool closed_ = false;
  std::shared_ptr<std::atomic<bool>> gone_ =
      std::make_shared<std::atomic<bool>>(false);
};

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler handler;
  // Declared before the io_context so they outlive it: destroying the
  // io_context destroys pending handlers, and with them connections, which
  // update these.
  std::atomic<int> connections{0};
  std::atomic<int> in_flight{0};
  std::atomic<bool> draining{false};
  bool shut_down = false;
  std::mutex mu;  // guards live
  std::vector<std::weak_ptr<Connection>> live;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  // Keeps the threads running while handlers hold requests with no socket
  // operation pending; released at shutdown.
  net::executor_work_guard<net::io_context::executor_type> work =
      net::make_work_guard(ioc);
  std::vector<std::thread> threads;

  void Accept() {
    acceptor.async_accept(
        net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
          if (ec) {
            if (ec == net::error::operation_aborted || draining) return;
          } else {
            auto c = std::make_shared<Connection>(std::move(s), this);
            {
              std::lock_guard<std::mutex> lock(mu);
              // Forget connections that have gone.
              std::erase_if(live, [](const auto& w) { return w.expired(); });
              live.push_back(c);
            }
            c->Start();
          }
          if (!draining) Accept();
        });
  }

  std::vector<std::shared_ptr<Connection>> Live() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::shared_ptr<Connection>> out;
    for (const auto& w : live) {
      if (auto c = w.lock()) out.push_back(std::move(c));
    }
    return out;
  }
};

bool Connection::draining() const { return server_->draining; }

Connection::Connection(tcp::socket socket, HttpServer::Impl* server)
    : stream_(std::move(socket)),
      strand_(net::make_strand(server->ioc)),
      server_(server) {
  ++server_->connections;
  // Streamed chunks are small writes: without this, Nagle holds each one
  // until the client ACKs the last (up to 40 ms with delayed ACKs).
  beast::error_code ignored;
  stream_.socket().set_option(tcp::no_delay(true), ignored);
}

Connection::~Connection() { --server_->connections; }

void Connection::Start() {
  net::dispatch(strand_, [self = shared_from_this()] {
    if (self->server_->connections > self->server_->options.max_connections) {
      self->Reject(http::status::service_unavailable,
                   "too many connections; retry shortly");
      return;
    }
    self->ReadHeader();
  });
}

void Connection::ReadHeader() {
  if (closed_) return;
  if (server_->draining) {
    Close();
    return;
  }
  parser_.emplace();
  parser_->header_limit(
      static_cast<std::uint32_t>(server_->options.max_header_bytes));
  parser_->body_limit(server_->options.max_body_bytes);
  stream_.expires_after(server_->options.idle_timeout);
  http::async_read_header(
      stream_, buffer_, *parser_,
      net::bind_executor(strand_, [self = shared_from_this()](
                                      beast::error_code ec, std::size_t) {
        self->OnHeader(ec);
      }));
}

void Connection::OnHeader(beast::error_code ec) {
  if (ec == http::error::body_limit) {  // Content-Length over the limit
    Reject(http::status::payload_too_large,
           absl::StrCat("request body larger than ",
                        server_->options.max_body_bytes, " bytes"));
    return;
  }
  if (ec == http::error::header_limit) {
    Reject(http::status::request_header_fields_too_large,
           absl::StrCat("request header larger than ",
                        server_->options.max_header_bytes, " bytes"));
    return;
  }
  if (ec) {  // closed by the client, idle timeout, or garbage
    if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
        ec != net::error::operation_aborted && ec != net::error::eof &&
        ec != net::error::connection_reset && buffer_.size() > 0) {
      Reject(http::status::bad_request,
             absl::StrCat("malformed request: ", ec.message()));
      return;
    }
    Close();
    return;
  }
  // Content-Length over the limit: answer now, without reading the body.
  if (parser_->content_length() &&
      *parser_->content_length() > server_->options.max_body_bytes) {
    Reject(http::status::payload_too_large,
           absl::StrCat("request body larger than ",
                        server_->options.max_body_bytes, " bytes"));
    return;
  }
  // Usually the whole body came with the head: parse it from the buffer
  // rather than through another asynchronous read.
  while (!parser_->is_done() && buffer_.size() > 0) {
    const size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == http::error::need_more) ec = {};
    if (ec || used == 0) break;
  }
  if (ec || parser_->is_done()) {
    OnBody(ec);
    return;
  }
  stream_.expires_after(server_->options.read_timeout);
  http::async_read(
      stream_, buffer_, *parser_,
      net::bind_executor(strand_, [self = shared_from_this()](
                                      beast::error_code ec, std::size_t) {
        self->OnBody(ec);
      }));
}

void Connection::OnBody(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    Reject(http::status::payload_too_large,
           absl::StrCat("request body larger than ",
                        server_->options.max_body_bytes, " bytes"));
    return;
  }
  if (ec == beast::error::timeout) {
    Reject(http::status::request_timeout, "request not received in time");
    return;
  }
  if (ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset ||
        ec == net::error::operation_aborted) {
      Close();
      return;
    }
    Reject(http::status::bad_request,
           absl::StrCat("malformed request: ", ec.message()));
    return;
  }
  stream_.expires_never();
  busy_ = true;
  ++server_->in_flight;
  HttpRequest req = parser_->release();
  const bool keep_alive = req.keep_alive();
  std::shared_ptr<Responder> responder(
      new Responder(shared_from_this(), req.version(), keep_alive));
  server_->handler(std::move(req), std::move(responder));
}

void Connection::Reject(http::status status, const std::string& message) {
  // Errors before a handler ran close the connection: the stream position
  // is unknown.
  HttpResponse res = JsonError(status, message, "invalid_request_error", 11,
                               /*keep_alive=*/false);
  res.prepare_payload();
  busy_ = true;
  ++server_->in_flight;
  out_.push_back({FormatHead(res, res.body()), true, false});
  WriteNext();
}

void Connection::Write(std::string bytes, bool ends_response, bool keep_alive) {
  net::dispatch(strand_, [self = shared_from_this(), b = std::move(bytes),
                          ends_response, keep_alive]() mutable {
    if (self->closed_) {
      if (ends_response) self->FinishResponse(false);
      return;
    }
    self->out_.push_back({std::move(b), ends_response, keep_alive});
    self->WriteNext();
  });
}

void Connection::WriteNext() {
  if (writing_ || out_.empty() || closed_) return;
  writing_ = true;
  stream_.expires_after(server_->options.read_timeout);
  net::async_write(
      stream_, net::buffer(out_.front().bytes),
      net::bind_executor(strand_, [self = shared_from_this()](
                                      beast::error_code ec, std::size_t) {
        self->OnWritten(ec);
      }));
}

void Connection::OnWritten(beast::error_code ec) {
  writing_ = false;
  Pending done = std::move(out_.front());
  out_.pop_front();
  if (ec) {
    gone_->store(true);
    Close();
    if (done.ends_response) FinishResponse(false);
    // Later queued pieces are dropped; the response that owns them ends
    // through Close().
    return;
  }
  if (done.ends_response) {
    FinishResponse(done.keep_alive);
    return;
  }
  WriteNext();
}

void Connection::FinishResponse(bool keep_alive) {
  if (!busy_) return;
  busy_ = false;
  --server_->in_flight;
  if (keep_alive && !closed_ && !server_->draining) {
    ReadHeader();
  } else {
    Close();
  }
}

void Connection::CloseIfIdle() {
  net::dispatch(strand_, [self = shared_from_this()] {
    if (!self->busy_) self->Close();
  });
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  gone_->store(true);
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

Responder::Responder(std::shared_ptr<Connection> connection, unsigned version,
                     bool keep_alive)
    : connection_(std::move(connection)),
      version_(version),
      keep_alive_(keep_alive),
      gone_(connection_->gone()) {}

Responder::~Responder() {
  if (streaming_ && !ended_) EndStream();
  if (!answered_) {
    Send(JsonError(http::status::internal_server_error,
                   "the request was dropped without an answer", "server_error",
                   version_, keep_alive_));
  }
}

void Responder::Send(HttpResponse response) {
  if (answered_) return;
  answered_ = true;
  response.version(version_);
  // A draining server closes the connection after this response.
  response.keep_alive(keep_alive_ && response.keep_alive() &&
                      !connection_->draining());
  const bool keep = response.keep_alive();
  response.prepare_payload();
  connection_->Write(FormatHead(response, response.body()), true, keep);
}

void Responder::StartStream(HttpResponse head) {
  if (answered_) return;
  answered_ = true;
  head.version(version_);
  keep_alive_ = keep_alive_ && !connection_->draining();
  head.keep_alive(keep_alive_);
  head.body().clear();
  head.erase(http::field::content_length);
  head.chunked(true);
  streaming_ = true;
  connection_->Write(FormatHead(head), false, keep_alive_);
}

void Responder::SendChunk(std::string data) {
  // An empty chunk would end the stream.
  if (!streaming_ || ended_ || data.empty()) return;
  std::string framed;
  framed.reserve(data.size() + 20);
  absl::StrAppend(&framed, absl::Hex(data.size()), "\r\n", data, "\r\n");
  connection_->Write(std::move(framed), false, keep_alive_);
}

void Responder::EndStream() {
  if (!streaming_ || ended_) return;
  ended_ = true;
  connection_->Write("0\r\n\r\n", true, keep_alive_);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options, HttpHandler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  beast::error_code ec;
  const auto address = net::ip::make_address(options.address, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", options.address, "': ", ec.message()));
  }
  const tcp::endpoint endpoint(address, options.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.address, ":", options.port,
                     ": ", ec.message()));
  }
  impl->Accept();
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    impl->threads.emplace_back([raw = impl.get()] { raw->ioc.run(); });
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Shutdown(std::chrono::milliseconds(0)); }

uint16_t HttpServer::port() const {
  beast::error_code ec;
  const auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

int HttpServer::open_connections() const { return impl_->connections.load(); }

int HttpServer::in_flight() const { return impl_->in_flight.load(); }

void HttpServer::Shutdown(std::chrono::milliseconds drain) {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->draining = true;
  net::post(impl_->ioc, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
  });
  for (auto& c : impl_->Live()) c->CloseIfIdle();
  // Wait for in-flight requests to be answered (shutdown path only).
  auto wait_until = [](auto deadline, auto done) {
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  wait_until(std::chrono::steady_clock::now() + drain,
             [&] { return impl_->in_flight == 0; });
  // Close what is left; the I/O threads finish once every connection's
  // pending operations have completed.
  impl_->work.reset();
  for (auto& c : impl_->Live()) {
    net::dispatch(c->strand(), [c] { c->Close(); });
  }
  wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(2),
             [&] { return impl_->connections == 0; });
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace gpusched::api
