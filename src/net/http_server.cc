#include "net/http_server.h"

#include <deque>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/ssl.hpp"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "openssl/err.h"
#include "openssl/ssl.h"

namespace gpusched::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

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
                       bool keep_alive, const std::string& code) {
  HttpResponse res{status, version};
  res.set(http::field::content_type, "application/json");
  res.keep_alive(keep_alive);
  nlohmann::json body = {
      {"error",
       {{"message", message},
        {"type", type},
        {"param", nullptr},
        {"code", code.empty() ? nlohmann::json() : nlohmann::json(code)}}}};
  res.body() = body.dump();
  return res;
}

// What Responders and the server see of a connection; Session<Stream> is
// the one implementation, over plain TCP or TLS.
class Connection {
 public:
  virtual ~Connection() = default;
  // Any thread: queue bytes on the connection's strand.
  virtual void Write(std::string bytes, bool ends_response,
                     bool keep_alive) = 0;
  // Any thread: close unless a request is being handled.
  virtual void CloseIfIdle() = 0;
  // Any thread: close the socket now (the end of a server shutdown).
  virtual void Abort() = 0;
  virtual bool draining() const = 0;
  const std::shared_ptr<std::atomic<bool>>& gone() const { return gone_; }
  // The client's address ("127.0.0.1:41234"), set once when accepted.
  const std::string& peer() const { return peer_; }

 protected:
  static std::shared_ptr<Responder> NewResponder(
      std::shared_ptr<Connection> connection, unsigned version,
      bool keep_alive) {
    return std::shared_ptr<Responder>(
        new Responder(std::move(connection), version, keep_alive));
  }
  std::shared_ptr<std::atomic<bool>> gone_ =
      std::make_shared<std::atomic<bool>>(false);
  std::string peer_;
};

namespace {

using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// A TLS peer that does not answer close_notify is dropped after this.
constexpr std::chrono::seconds kTlsCloseTimeout{5};

// OpenSSL's error queue as text (and cleared), for load errors.
std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// The server's TLS context: TLS 1.2 or later, the certificate chain and its
// key from PEM files.
absl::StatusOr<std::unique_ptr<asio::ssl::context>> LoadTlsContext(
    const HttpServerOptions& o) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls: set both the certificate and the key file, or neither");
  }
  std::unique_ptr<asio::ssl::context> ctx;
  try {  // the context's constructor is Asio's only throwing call here
    ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  } catch (const boost::system::system_error& e) {
    return absl::InternalError(absl::StrCat("tls: ", e.what()));
  }
  SSL_CTX* native = ctx->native_handle();
  ERR_clear_error();
  SSL_CTX_set_options(native, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                  SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
    return absl::InternalError(
        absl::StrCat("tls: cannot require TLS 1.2: ", OpenSslErrors()));
  }
  if (SSL_CTX_use_certificate_chain_file(native, o.tls_cert_file.c_str()) !=
      1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls: cannot load the certificate (PEM) from '",
                     o.tls_cert_file, "': ", OpenSslErrors()));
  }
  if (SSL_CTX_use_PrivateKey_file(native, o.tls_key_file.c_str(),
                                  SSL_FILETYPE_PEM) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls: cannot load the private key (PEM) from '",
                     o.tls_key_file, "': ", OpenSslErrors()));
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls: the private key in '", o.tls_key_file,
                     "' does not match the certificate in '", o.tls_cert_file,
                     "': ", OpenSslErrors()));
  }
  return ctx;
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler handler;
  std::unique_ptr<asio::ssl::context> tls;  // null: plain HTTP
  // Declared before the io_context so they outlive it: destroying the
  // io_context destroys pending handlers, and with them connections, which
  // update these.
  std::atomic<int> connections{0};
  std::atomic<int> in_flight{0};
  std::atomic<bool> draining{false};
  bool shut_down = false;
  absl::Mutex mu;
  std::vector<std::weak_ptr<Connection>> live ABSL_GUARDED_BY(mu);
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  // Keeps the threads running while handlers hold requests with no socket
  // operation pending; released at shutdown.
  asio::executor_work_guard<asio::io_context::executor_type> work =
      asio::make_work_guard(ioc);
  std::vector<std::thread> threads;

  void Accept();

  std::vector<std::shared_ptr<Connection>> Live() {
    absl::MutexLock lock(&mu);
    std::vector<std::shared_ptr<Connection>> out;
    for (const auto& w : live) {
      if (auto c = w.lock()) out.push_back(std::move(c));
    }
    return out;
  }
};

namespace {

// One accepted connection over Stream (PlainStream or TlsStream); the HTTP
// logic is the same for both, TLS adds the handshake and close_notify. All
// state is touched on its strand.
template <class Stream>
class Session final : public Connection,
                      public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  // `args` construct the stream: the socket, and for TLS the context.
  template <class... Args>
  explicit Session(HttpServer::Impl* server, Args&&... args)
      : stream_(std::forward<Args>(args)...),
        strand_(asio::make_strand(server->ioc)),
        server_(server) {
    ++server_->connections;
    // Streamed chunks are small writes: without this, Nagle holds each one
    // until the client ACKs the last (up to 40 ms with delayed ACKs).
    beast::error_code ignored;
    tcp().socket().set_option(asio::ip::tcp::no_delay(true), ignored);
  }
  ~Session() override { --server_->connections; }
  void SetPeer(std::string peer) { peer_ = std::move(peer); }

  void Start();
  void Write(std::string bytes, bool ends_response, bool keep_alive) override;
  void CloseIfIdle() override;
  void Abort() override;
  bool draining() const override { return server_->draining; }

 private:
  using std::enable_shared_from_this<Session<Stream>>::shared_from_this;
  // The TCP layer: timeouts and the socket.
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }
  // A completion handler run on the strand, holding the session.
  template <class Fn>
  auto OnStrand(Fn fn) {
    return asio::bind_executor(
        strand_, [self = shared_from_this(), fn](auto&&... args) mutable {
          fn(self.get(), std::forward<decltype(args)>(args)...);
        });
  }
  void Admit();
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  void OnBody(beast::error_code ec);
  void Reject(http::status status, const std::string& message);
  void WriteNext();
  void OnWritten(beast::error_code ec);
  void FinishResponse(bool keep_alive);
  // Ends the connection: over TLS, with close_notify when nothing else is
  // in progress on the stream.
  void Close();
  void CloseSocket();

  Stream stream_;
  asio::strand<asio::io_context::executor_type> strand_;
  HttpServer::Impl* server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  struct Pending {
    std::string bytes;
    bool ends_response;
    bool keep_alive;
  };
  std::deque<Pending> out_;
  bool reading_ = false;  // a handshake or read is in progress
  bool writing_ = false;
  bool busy_ = false;  // a request is being handled
  bool closed_ = false;
  bool socket_closed_ = false;
};

template <class Stream>
void Session<Stream>::Start() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    if constexpr (kTls) {
      // The handshake must finish within the read timeout; a client that
      // speaks plain HTTP fails here and is dropped.
      self->tcp().expires_after(self->server_->options.read_timeout);
      self->reading_ = true;
      self->stream_.async_handshake(
          asio::ssl::stream_base::server,
          self->OnStrand([](Session* s, beast::error_code ec) {
            s->reading_ = false;
            if (ec) {
              s->gone_->store(true);
              s->closed_ = true;
              s->CloseSocket();
              return;
            }
            s->Admit();
          }));
    } else {
      self->Admit();
    }
  });
}

template <class Stream>
void Session<Stream>::Admit() {
  if (server_->connections > server_->options.max_connections) {
    Reject(http::status::service_unavailable,
           "too many connections; retry shortly");
    return;
  }
  ReadHeader();
}

template <class Stream>
void Session<Stream>::ReadHeader() {
  if (closed_) return;
  if (server_->draining) {
    Close();
    return;
  }
  parser_.emplace();
  parser_->header_limit(
      static_cast<std::uint32_t>(server_->options.max_header_bytes));
  parser_->body_limit(server_->options.max_body_bytes);
  tcp().expires_after(server_->options.idle_timeout);
  reading_ = true;
  http::async_read_header(stream_, buffer_, *parser_,
                          OnStrand([](Session* s, beast::error_code ec,
                                      std::size_t) { s->OnHeader(ec); }));
}

template <class Stream>
void Session<Stream>::OnHeader(beast::error_code ec) {
  reading_ = false;
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
        ec != asio::error::operation_aborted && ec != asio::error::eof &&
        ec != asio::error::connection_reset &&
        ec != asio::ssl::error::stream_truncated && buffer_.size() > 0) {
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
  tcp().expires_after(server_->options.read_timeout);
  reading_ = true;
  http::async_read(stream_, buffer_, *parser_,
                   OnStrand([](Session* s, beast::error_code ec, std::size_t) {
                     s->OnBody(ec);
                   }));
}

template <class Stream>
void Session<Stream>::OnBody(beast::error_code ec) {
  reading_ = false;
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
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted ||
        ec == asio::ssl::error::stream_truncated) {
      Close();
      return;
    }
    Reject(http::status::bad_request,
           absl::StrCat("malformed request: ", ec.message()));
    return;
  }
  tcp().expires_never();
  busy_ = true;
  ++server_->in_flight;
  HttpRequest req = parser_->release();
  std::shared_ptr<Responder> responder =
      NewResponder(shared_from_this(), req.version(), req.keep_alive());
  server_->handler(std::move(req), std::move(responder));
}

template <class Stream>
void Session<Stream>::Reject(http::status status, const std::string& message) {
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

template <class Stream>
void Session<Stream>::Write(std::string bytes, bool ends_response,
                            bool keep_alive) {
  asio::dispatch(strand_, [self = shared_from_this(), b = std::move(bytes),
                           ends_response, keep_alive]() mutable {
    if (self->closed_) {
      if (ends_response) self->FinishResponse(false);
      return;
    }
    self->out_.push_back({std::move(b), ends_response, keep_alive});
    self->WriteNext();
  });
}

template <class Stream>
void Session<Stream>::WriteNext() {
  if (writing_ || out_.empty() || closed_) return;
  writing_ = true;
  tcp().expires_after(server_->options.read_timeout);
  asio::async_write(stream_, asio::buffer(out_.front().bytes),
                    OnStrand([](Session* s, beast::error_code ec, std::size_t) {
                      s->OnWritten(ec);
                    }));
}

template <class Stream>
void Session<Stream>::OnWritten(beast::error_code ec) {
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

template <class Stream>
void Session<Stream>::FinishResponse(bool keep_alive) {
  if (!busy_) return;
  busy_ = false;
  --server_->in_flight;
  if (keep_alive && !closed_ && !server_->draining) {
    ReadHeader();
  } else {
    Close();
  }
}

template <class Stream>
void Session<Stream>::CloseIfIdle() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    if (!self->busy_) self->Close();
  });
}

template <class Stream>
void Session<Stream>::Abort() {
  asio::dispatch(strand_, [self = shared_from_this()] {
    self->closed_ = true;
    self->gone_->store(true);
    self->CloseSocket();
  });
}

template <class Stream>
void Session<Stream>::Close() {
  if (closed_) return;
  closed_ = true;
  gone_->store(true);
  if constexpr (kTls) {
    // close_notify tells the client the response was not truncated. Only
    // with the stream quiet: a pending read or write is cancelled instead.
    if (!reading_ && !writing_ && !socket_closed_) {
      tcp().expires_after(kTlsCloseTimeout);
      stream_.async_shutdown(
          OnStrand([](Session* s, beast::error_code) { s->CloseSocket(); }));
      return;
    }
  }
  CloseSocket();
}

template <class Stream>
void Session<Stream>::CloseSocket() {
  if (socket_closed_) return;
  socket_closed_ = true;
  beast::error_code ignored;
  tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
  tcp().close();
}

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec,
                                                       tcp::socket s) {
    if (ec) {
      if (ec == asio::error::operation_aborted || draining) return;
    } else {
      std::string peer;
      beast::error_code pec;
      const tcp::endpoint remote = s.remote_endpoint(pec);
      if (!pec) {
        peer =
            absl::StrCat(remote.address().to_string(pec), ":", remote.port());
      }
      auto start = [&](auto session) {
        session->SetPeer(std::move(peer));
        {
          absl::MutexLock lock(&mu);
          // Forget connections that have gone.
          std::erase_if(live, [](const auto& w) { return w.expired(); });
          live.push_back(session);
        }
        session->Start();
      };
      if (tls) {
        start(std::make_shared<Session<TlsStream>>(this, std::move(s), *tls));
      } else {
        start(std::make_shared<Session<PlainStream>>(this, std::move(s)));
      }
    }
    if (!draining) Accept();
  });
}

Responder::Responder(std::shared_ptr<Connection> connection, unsigned version,
                     bool keep_alive)
    : connection_(std::move(connection)),
      version_(version),
      keep_alive_(keep_alive),
      gone_(connection_ ? connection_->gone()
                        : std::make_shared<std::atomic<bool>>(false)) {}

const std::string& Responder::peer() const {
  static const std::string* const kNone = new std::string();
  return connection_ != nullptr ? connection_->peer() : *kNone;
}

std::shared_ptr<Responder> Responder::Discarding() {
  return std::shared_ptr<Responder>(new Responder(nullptr, 11, false));
}

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
  if (!connection_) return;  // Discarding()
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
  streaming_ = true;
  if (!connection_) return;  // Discarding()
  keep_alive_ = keep_alive_ && !connection_->draining();
  head.keep_alive(keep_alive_);
  head.body().clear();
  head.erase(http::field::content_length);
  head.chunked(true);
  connection_->Write(FormatHead(head), false, keep_alive_);
}

void Responder::SendChunk(std::string data) {
  // An empty chunk would end the stream.
  if (!streaming_ || ended_ || data.empty() || !connection_) return;
  std::string framed;
  framed.reserve(data.size() + 20);
  absl::StrAppend(&framed, absl::Hex(data.size()), "\r\n", data, "\r\n");
  connection_->Write(std::move(framed), false, keep_alive_);
}

void Responder::EndStream() {
  if (!streaming_ || ended_) return;
  ended_ = true;
  if (connection_) connection_->Write("0\r\n\r\n", true, keep_alive_);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options, HttpHandler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    ASSIGN_OR_RETURN(impl->tls, LoadTlsContext(options));
  }
  beast::error_code ec;
  const auto address = asio::ip::make_address(options.address, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", options.address, "': ", ec.message()));
  }
  const tcp::endpoint endpoint(address, options.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec)
    impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
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

boost::asio::io_context& HttpServer::io_context() { return impl_->ioc; }

uint16_t HttpServer::port() const {
  beast::error_code ec;
  const auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

bool HttpServer::tls() const { return impl_->tls != nullptr; }

int HttpServer::open_connections() const { return impl_->connections.load(); }

int HttpServer::in_flight() const { return impl_->in_flight.load(); }

void HttpServer::Shutdown(std::chrono::milliseconds drain) {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->draining = true;
  asio::post(impl_->ioc, [impl = impl_.get()] {
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
  for (auto& c : impl_->Live()) c->Abort();
  wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(2),
             [&] { return impl_->connections == 0; });
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
}

}  // namespace gpusched::net
