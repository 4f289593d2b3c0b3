#include "net/http_client.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>
#include <variant>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/ssl.hpp"
#include "common/status.h"

namespace gpusched::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

bool IsIpAddress(const std::string& host) {
  boost::system::error_code ec;
  (void)asio::ip::make_address(host, ec);
  return !ec;
}

// One connection: plain TCP or TLS over it.
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

struct HttpClient::Impl {
  std::optional<ssl::context> tls;
  absl::Mutex mu;
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  absl::flat_hash_set<asio::io_context*> active ABSL_GUARDED_BY(mu);
};

HttpClient::HttpClient(HttpClientOptions options, std::unique_ptr<Impl> impl)
    : options_(std::move(options)), impl_(std::move(impl)) {}

HttpClient::~HttpClient() = default;

absl::StatusOr<std::unique_ptr<HttpClient>> HttpClient::Create(
    HttpClientOptions options) {
  auto impl = std::make_unique<Impl>();
  if (options.peer.empty()) {
    options.peer = absl::StrCat(options.tls ? "https://" : "http://",
                                options.host, ":", options.port);
  }
  if (options.tls) {
    impl->tls.emplace(ssl::context::tls_client);
    ssl::context& ctx = *impl->tls;
    boost::system::error_code ec;
    ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                    ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                    ssl::context::no_tlsv1_1);
    if (options.ca_pem.empty()) {
      ctx.set_default_verify_paths(ec);
    } else {
      ctx.add_certificate_authority(
          asio::buffer(options.ca_pem.data(), options.ca_pem.size()), ec);
    }
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.peer, ": cannot load the CA: ", ec.message()));
    }
    if (!options.client_cert_pem.empty()) {
      ctx.use_certificate_chain(asio::buffer(options.client_cert_pem.data(),
                                             options.client_cert_pem.size()),
                                ec);
      if (!ec) {
        ctx.use_private_key(asio::buffer(options.client_key_pem.data(),
                                         options.client_key_pem.size()),
                            ssl::context::pem, ec);
      }
      if (ec) {
        return absl::InvalidArgumentError(absl::StrCat(
            options.peer,
            ": cannot load the client certificate or key: ", ec.message()));
      }
    }
    ctx.set_verify_mode(options.insecure_skip_verify ? ssl::verify_none
                                                     : ssl::verify_peer);
  }
  return std::unique_ptr<HttpClient>(
      new HttpClient(std::move(options), std::move(impl)));
}

void HttpClient::Cancel() {
  absl::MutexLock l(&impl_->mu);
  impl_->cancelled = true;
  for (asio::io_context* io : impl_->active) io->stop();
}

namespace {

std::chrono::steady_clock::duration Dur(Micros us) {
  return std::chrono::microseconds(us);
}

beast::tcp_stream& Lowest(PlainStream& s) { return s; }
beast::tcp_stream& Lowest(TlsStream& s) { return beast::get_lowest_layer(s); }

absl::Status Failed(const HttpClientOptions& c, absl::string_view step,
                    const beast::error_code& ec) {
  const std::string text = absl::StrCat(c.peer, ": ", step, ": ", ec.message());
  if (ec == beast::error::timeout) return absl::DeadlineExceededError(text);
  if (ec == asio::error::operation_aborted) return absl::CancelledError(text);
  return absl::UnavailableError(text);
}

}  // namespace

// One exchange on its own connection (and io_context, registered so that
// Cancel() can stop it).
class HttpExchange {
 public:
  HttpExchange(const HttpClientOptions& c, HttpClient::Impl& impl,
               Micros timeout)
      : c_(c), impl_(impl), timeout_(timeout) {}
  ~HttpExchange() {
    absl::MutexLock l(&impl_.mu);
    impl_.active.erase(&io_);
  }

  // Runs the operation `start` begins to its end; the error it ended with
  // (operation_aborted when the client was cancelled). The cancelled flag is
  // read after restart(): a Cancel() that came before is seen here, and one
  // that comes after stops run().
  template <typename Start>
  beast::error_code Await(Start&& start) {
    beast::error_code out = asio::error::operation_aborted;
    bool done = false;
    start([&out, &done](beast::error_code ec, auto&&...) {
      out = ec;
      done = true;
    });
    io_.restart();
    {
      absl::MutexLock l(&impl_.mu);
      if (impl_.cancelled) return asio::error::operation_aborted;
    }
    io_.run();
    return done ? out : beast::error_code(asio::error::operation_aborted);
  }

  absl::Status Open() {
    {
      absl::MutexLock l(&impl_.mu);
      if (impl_.cancelled) {
        return absl::CancelledError(
            absl::StrCat(c_.peer, ": the client was stopped"));
      }
      impl_.active.insert(&io_);
    }
    tcp::resolver resolver(io_);
    beast::error_code ec;
    const tcp::resolver::results_type addrs =
        resolver.resolve(c_.host, std::to_string(c_.port), ec);
    if (ec) return Failed(c_, "resolve", ec);
    if (c_.tls) {
      stream_.emplace<TlsStream>(io_, *impl_.tls);
    } else {
      stream_.emplace<PlainStream>(io_);
    }
    return std::visit(
        [&](auto& s) -> absl::Status {
          if constexpr (std::is_same_v<std::decay_t<decltype(s)>,
                                       std::monostate>) {
            return absl::InternalError("no stream");
          } else {
            Lowest(s).expires_after(Dur(timeout_));
            beast::error_code e = Await([&](auto h) {
              Lowest(s).async_connect(
                  addrs,
                  [h](beast::error_code ec2, const tcp::endpoint&) { h(ec2); });
            });
            if (e) return Failed(c_, "connect", e);
            if constexpr (std::is_same_v<std::decay_t<decltype(s)>,
                                         TlsStream>) {
              return Handshake(s);
            }
            return absl::OkStatus();
          }
        },
        stream_);
  }

  absl::Status Write(http::request<http::string_body>& req) {
    return Visit([&](auto& s) {
      Lowest(s).expires_after(Dur(timeout_));
      beast::error_code e =
          Await([&](auto h) { http::async_write(s, req, std::move(h)); });
      return e ? Failed(c_, "write", e) : absl::OkStatus();
    });
  }

  // The whole response.
  absl::StatusOr<HttpClientResponse> Read() {
    http::response_parser<http::string_body> parser;
    parser.body_limit(c_.max_body);
    absl::Status st = Visit([&](auto& s) {
      Lowest(s).expires_after(Dur(timeout_));
      beast::error_code e = Await(
          [&](auto h) { http::async_read(s, buffer_, parser, std::move(h)); });
      return e ? Failed(c_, "read", e) : absl::OkStatus();
    });
    if (!st.ok()) return st;
    return Response(parser.get());
  }

  // The head, then each line of the body to `on_line`.
  absl::Status ReadLines(Micros idle,
                         const std::function<bool(absl::string_view)>& on_line,
                         HttpClientResponse* error_response) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    absl::Status st = Visit([&](auto& s) {
      Lowest(s).expires_after(Dur(timeout_));
      beast::error_code e = Await([&](auto h) {
        http::async_read_header(s, buffer_, parser, std::move(h));
      });
      return e ? Failed(c_, "read", e) : absl::OkStatus();
    });
    if (!st.ok()) return st;
    if (parser.get().result_int() != 200) {
      parser.body_limit(kMaxHttpClientBody);
      st = Visit([&](auto& s) {
        Lowest(s).expires_after(Dur(timeout_));
        beast::error_code e = Await([&](auto h) {
          http::async_read(s, buffer_, parser, std::move(h));
        });
        return e ? Failed(c_, "read", e) : absl::OkStatus();
      });
      if (!st.ok()) return st;
      *error_response = Response(parser.get());
      return absl::OkStatus();
    }
    size_t scanned = 0;
    while (true) {
      std::string& body = parser.get().body();
      size_t nl;
      while ((nl = body.find('\n', scanned)) != std::string::npos) {
        absl::string_view line(body.data(), nl);
        if (!absl::StripAsciiWhitespace(line).empty() && !on_line(line)) {
          return absl::OkStatus();
        }
        body.erase(0, nl + 1);
        scanned = 0;
      }
      scanned = body.size();
      if (body.size() > kMaxHttpClientLine) {
        return absl::ResourceExhaustedError(
            absl::StrCat(c_.peer, ": a streamed line over ",
                         kMaxHttpClientLine >> 20, " MiB"));
      }
      if (parser.is_done()) {
        if (!absl::StripAsciiWhitespace(body).empty()) on_line(body);
        return absl::OkStatus();
      }
      st = Visit([&](auto& s) {
        Lowest(s).expires_after(Dur(idle));
        beast::error_code e = Await([&](auto h) {
          http::async_read_some(s, buffer_, parser, std::move(h));
        });
        return e ? Failed(c_, "stream", e) : absl::OkStatus();
      });
      if (!st.ok()) return st;
    }
  }

 private:
  absl::Status Handshake(TlsStream& s) {
    SSL* ssl = s.native_handle();
    const std::string& name =
        c_.tls_server_name.empty() ? c_.host : c_.tls_server_name;
    if (!IsIpAddress(name)) SSL_set_tlsext_host_name(ssl, name.c_str());
    if (!c_.insecure_skip_verify) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      const int ok = IsIpAddress(name)
                         ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                         : X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
      if (ok != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot verify the server name ", name));
      }
    }
    beast::error_code e = Await([&](auto h) {
      s.async_handshake(ssl::stream_base::client, std::move(h));
    });
    return e ? Failed(c_, "TLS handshake", e) : absl::OkStatus();
  }

  template <typename F>
  absl::Status Visit(F&& f) {
    if (auto* p = std::get_if<PlainStream>(&stream_)) return f(*p);
    if (auto* t = std::get_if<TlsStream>(&stream_)) return f(*t);
    return absl::InternalError("not connected");
  }

  static HttpClientResponse Response(http::response<http::string_body>& res) {
    HttpClientResponse out;
    out.status = res.result_int();
    out.body = std::move(res.body());
    if (auto it = res.find(http::field::content_type); it != res.end()) {
      out.content_type = std::string(it->value());
    }
    if (auto it = res.find(http::field::retry_after); it != res.end()) {
      int s = 0;
      if (absl::SimpleAtoi(
              absl::string_view(it->value().data(), it->value().size()), &s) &&
          s > 0) {
        out.retry_after = std::min<Micros>(s, 3600) * kMicrosPerSecond;
      }
    }
    return out;
  }

  const HttpClientOptions& c_;
  HttpClient::Impl& impl_;
  Micros timeout_;
  asio::io_context io_;
  beast::flat_buffer buffer_;
  std::variant<std::monostate, PlainStream, TlsStream> stream_;
};

namespace {

absl::StatusOr<http::request<http::string_body>> MakeRequest(
    const HttpClientOptions& c, absl::string_view method,
    absl::string_view target, const HttpClient::Headers& headers,
    absl::string_view body, absl::string_view content_type) {
  http::request<http::string_body> req;
  const http::verb verb =
      http::string_to_verb(beast::string_view(method.data(), method.size()));
  if (verb == http::verb::unknown) {
    return absl::InvalidArgumentError(absl::StrCat("bad method ", method));
  }
  req.method(verb);
  req.target(beast::string_view(target.data(), target.size()));
  req.version(11);
  const bool v6 = c.host.find(':') != std::string::npos;
  req.set(http::field::host,
          absl::StrCat(v6 ? "[" : "", c.host, v6 ? "]" : "", ":", c.port));
  req.set(http::field::user_agent, "gpusched");
  req.set(http::field::accept, "application/json");
  for (const auto& [name, value] : headers) req.set(name, value);
  if (!body.empty()) {
    req.set(http::field::content_type,
            beast::string_view(content_type.data(), content_type.size()));
    req.body() = std::string(body);
  }
  req.prepare_payload();
  return req;
}

}  // namespace

absl::StatusOr<HttpClientResponse> HttpClient::Request(
    absl::string_view method, absl::string_view target, const Headers& headers,
    absl::string_view body, absl::string_view content_type) {
  ASSIGN_OR_RETURN(auto req, MakeRequest(options_, method, target, headers,
                                         body, content_type));
  requests_.fetch_add(1);
  HttpExchange x(options_, *impl_, options_.timeout);
  if (absl::Status st = x.Open(); !st.ok()) return st;
  if (absl::Status st = x.Write(req); !st.ok()) return st;
  return x.Read();
}

absl::Status HttpClient::Stream(
    absl::string_view method, absl::string_view target, const Headers& headers,
    absl::string_view body, Micros idle,
    const std::function<bool(absl::string_view)>& on_line,
    HttpClientResponse* error_response) {
  ASSIGN_OR_RETURN(auto req, MakeRequest(options_, method, target, headers,
                                         body, "application/json"));
  requests_.fetch_add(1);
  HttpExchange x(options_, *impl_, options_.timeout);
  if (absl::Status st = x.Open(); !st.ok()) return st;
  if (absl::Status st = x.Write(req); !st.ok()) return st;
  return x.ReadLines(idle, on_line, error_response);
}

}  // namespace gpusched::net
