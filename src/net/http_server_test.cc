#include "net/http_server.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "boost/asio.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/ssl.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/ssl.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

namespace gpusched::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using ::testing::HasSubstr;

// A self-signed certificate for 127.0.0.1 (P-256, CA:TRUE so a client can
// trust it as its own root) and its key, written as PEM once per test run.
struct TlsFiles {
  std::string cert;
  std::string key;
};

template <class T, void (*Free)(T*)>
struct Freer {
  void operator()(T* p) const { Free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Freer<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Freer<X509, X509_free>>;

bool WritePem(const std::string& path, const std::function<int(FILE*)>& write) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  const bool ok = write(f) == 1;
  return std::fclose(f) == 0 && ok;
}

TlsFiles MakeSelfSigned(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/http_server_test.XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) return {};
  PkeyPtr key(EVP_EC_gen("P-256"));
  X509Ptr cert(X509_new());
  if (!key || !cert) return {};
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(
      subject, "CN", MBSTRING_ASC,
      reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), subject);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  const std::string san = "IP:" + name;
  for (const auto& [nid, value] :
       {std::pair<int, const char*>{NID_basic_constraints, "critical,CA:TRUE"},
        {NID_subject_alt_name, san.c_str()}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (ext == nullptr) return {};
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) return {};
  TlsFiles files{dir + "/cert.pem", dir + "/key.pem"};
  if (!WritePem(files.cert,
                [&](FILE* f) { return PEM_write_X509(f, cert.get()); }) ||
      !WritePem(files.key, [&](FILE* f) {
        return PEM_write_PrivateKey(f, key.get(), nullptr, nullptr, 0, nullptr,
                                    nullptr);
      })) {
    return {};
  }
  return files;
}

const TlsFiles& TestCert() {
  static const TlsFiles* files = new TlsFiles(MakeSelfSigned("127.0.0.1"));
  return *files;
}

using TlsClientStream = beast::ssl_stream<tcp::socket>;

// A blocking client on one connection: plain, or TLS trusting `tls`'s
// certificate (tls_options may narrow the client's protocol versions).
class Client {
 public:
  explicit Client(uint16_t port, const TlsFiles* tls = nullptr,
                  const std::function<void(SSL_CTX*)>& tls_options = {})
      : socket_(ioc_) {
    const tcp::endpoint server(asio::ip::make_address("127.0.0.1"), port);
    if (tls == nullptr) {
      socket_.connect(server);
      return;
    }
    ctx_.set_verify_mode(asio::ssl::verify_peer);
    beast::error_code ec;
    ctx_.load_verify_file(tls->cert, ec);
    EXPECT_FALSE(ec) << ec.message();
    if (tls_options) tls_options(ctx_.native_handle());
    tls_.emplace(ioc_, ctx_);
    beast::get_lowest_layer(*tls_).connect(server);
    tls_->handshake(asio::ssl::stream_base::client, handshake_error_);
  }
  HttpResponse Request(http::verb verb, const std::string& target,
                       const std::string& body = "") {
    HttpRequest req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.body() = body;
    req.prepare_payload();
    beast::error_code ec;
    With([&](auto& s) { http::write(s, req, ec); });
    return Read();
  }
  void WriteRaw(const std::string& bytes) {
    With([&](auto& s) { asio::write(s, asio::buffer(bytes)); });
  }
  HttpResponse Read() {
    HttpResponse res;
    beast::error_code ec;
    With([&](auto& s) { http::read(s, buffer_, res, ec); });
    last_error_ = ec;
    return res;
  }
  // True when the server closed the connection.
  bool ReadEof() {
    char c;
    beast::error_code ec;
    With([&](auto& s) { s.read_some(asio::buffer(&c, 1), ec); });
    return ec == asio::error::eof || ec == asio::error::connection_reset ||
           ec == asio::ssl::error::stream_truncated;
  }
  beast::error_code last_error() const { return last_error_; }
  beast::error_code handshake_error() const { return handshake_error_; }
  // The negotiated TLS version (TLS1_2_VERSION, ...); 0 for plain.
  int tls_version() { return tls_ ? SSL_version(tls_->native_handle()) : 0; }

 private:
  template <class Fn>
  void With(Fn fn) {
    if (tls_) {
      fn(*tls_);
    } else {
      fn(socket_);
    }
  }
  asio::io_context ioc_;
  tcp::socket socket_;
  asio::ssl::context ctx_{asio::ssl::context::tls_client};
  std::optional<TlsClientStream> tls_;
  beast::error_code handshake_error_;
  beast::flat_buffer buffer_;
  beast::error_code last_error_;
};

// Threads that answer later; joined before the server goes away (a
// Responder must not outlive its server).
class Workers {
 public:
  ~Workers() {
    for (std::thread& t : threads_) t.join();
  }
  void Run(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    threads_.emplace_back(std::move(fn));
  }

 private:
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

void Handle(Workers& workers, HttpRequest req, std::shared_ptr<Responder> r) {
  const std::string target(req.target());
  if (target == "/echo") {
    HttpResponse res{http::status::ok, req.version()};
    res.body() = req.body();
    r->Send(std::move(res));
  } else if (target == "/stream") {
    // Chunks produced later, from another thread.
    workers.Run([r] {
      HttpResponse head{http::status::ok, 11};
      head.set(http::field::content_type, "text/event-stream");
      r->StartStream(std::move(head));
      for (int i = 0; i < 3; ++i)
        r->SendChunk("data: " + std::to_string(i) + "\n\n");
      r->EndStream();
    });
  } else if (target == "/slow") {
    workers.Run([r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      HttpResponse res{http::status::ok, 11};
      res.body() = "late";
      r->Send(std::move(res));
    });
  } else if (target == "/drop") {
    // No answer: the server sends 500.
  } else {
    r->Send(JsonError(http::status::not_found, "no route " + target,
                      "not_found_error"));
  }
}

// The same tests over plain HTTP and over TLS (the parameter).
class HttpServerTest : public ::testing::TestWithParam<bool> {
 protected:
  bool tls() const { return GetParam(); }
  bool Start(HttpServerOptions o) {
    if (tls()) {
      o.tls_cert_file = TestCert().cert;
      o.tls_key_file = TestCert().key;
    }
    auto s = HttpServer::Start(
        o, [this](HttpRequest req, std::shared_ptr<Responder> r) {
          Handle(workers_, std::move(req), std::move(r));
        });
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return false;
    server_ = *std::move(s);
    EXPECT_EQ(server_->tls(), tls());
    return true;
  }
  std::unique_ptr<Client> Connect() {
    auto c = std::make_unique<Client>(server_->port(),
                                      tls() ? &TestCert() : nullptr);
    EXPECT_FALSE(c->handshake_error()) << c->handshake_error().message();
    return c;
  }
  // Members go in reverse order: the workers (and the Responders they hold)
  // are joined before the server is destroyed.
  std::unique_ptr<HttpServer> server_;
  Workers workers_;
};

HttpServerOptions Options() {
  HttpServerOptions o;
  o.max_body_bytes = 1024;
  o.max_header_bytes = 1024;
  return o;
}

INSTANTIATE_TEST_SUITE_P(Transports, HttpServerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Tls" : "Plain";
                         });

TEST_P(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  ASSERT_TRUE(Start(Options()));
  ASSERT_NE(server_->port(), 0);
  std::unique_ptr<Client> c = Connect();
  if (tls()) {
    EXPECT_GE(c->tls_version(), TLS1_2_VERSION);
  }
  for (int i = 0; i < 3; ++i) {
    HttpResponse res =
        c->Request(http::verb::post, "/echo", "hello" + std::to_string(i));
    EXPECT_EQ(res.result(), http::status::ok);
    EXPECT_EQ(res.body(), "hello" + std::to_string(i));
    EXPECT_TRUE(res.keep_alive());
  }
  HttpResponse missing = c->Request(http::verb::get, "/nope");
  EXPECT_EQ(missing.result(), http::status::not_found);
  EXPECT_THAT(missing.body(), HasSubstr("no route /nope"));
  EXPECT_EQ(missing[http::field::content_type], "application/json");
}

TEST_P(HttpServerTest, LimitsAnswerWithTheRightStatus) {
  ASSERT_TRUE(Start(Options()));
  {
    std::unique_ptr<Client> c = Connect();
    HttpResponse res =
        c->Request(http::verb::post, "/echo", std::string(2000, 'x'));
    EXPECT_EQ(res.result(), http::status::payload_too_large);
    EXPECT_THAT(res.body(), HasSubstr("larger than 1024 bytes"));
  }
  {
    std::unique_ptr<Client> c = Connect();
    c->WriteRaw("GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " +
                std::string(4000, 'y') + "\r\n\r\n");
    EXPECT_EQ(c->Read().result(),
              http::status::request_header_fields_too_large);
  }
  {
    std::unique_ptr<Client> c = Connect();
    c->WriteRaw("THIS IS NOT HTTP\r\n\r\n");
    EXPECT_EQ(c->Read().result(), http::status::bad_request);
  }
}

TEST_P(HttpServerTest, StreamsChunksFromAnotherThread) {
  ASSERT_TRUE(Start(Options()));
  std::unique_ptr<Client> c = Connect();
  HttpResponse res = c->Request(http::verb::get, "/stream");
  EXPECT_EQ(res.result(), http::status::ok);
  EXPECT_TRUE(res.chunked());
  EXPECT_EQ(res.body(), "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  // The connection is still usable.
  EXPECT_EQ(c->Request(http::verb::post, "/echo", "after").body(), "after");
}

TEST_P(HttpServerTest, DroppedResponderAnswers500) {
  ASSERT_TRUE(Start(Options()));
  std::unique_ptr<Client> c = Connect();
  HttpResponse res = c->Request(http::verb::get, "/drop");
  EXPECT_EQ(res.result(), http::status::internal_server_error);
}

TEST_P(HttpServerTest, ConnectionsOverTheLimitGet503) {
  HttpServerOptions o = Options();
  o.max_connections = 1;
  ASSERT_TRUE(Start(o));
  std::unique_ptr<Client> first = Connect();
  EXPECT_EQ(first->Request(http::verb::post, "/echo", "a").result(),
            http::status::ok);
  std::unique_ptr<Client> second = Connect();
  HttpResponse res = second->Read();
  EXPECT_EQ(res.result(), http::status::service_unavailable);
  EXPECT_THAT(res.body(), HasSubstr("too many connections"));
}

TEST_P(HttpServerTest, IdleConnectionsAreClosed) {
  HttpServerOptions o = Options();
  o.idle_timeout = std::chrono::milliseconds(100);
  ASSERT_TRUE(Start(o));
  std::unique_ptr<Client> c = Connect();
  EXPECT_EQ(c->Request(http::verb::post, "/echo", "a").result(),
            http::status::ok);
  EXPECT_TRUE(c->ReadEof());  // returns once the server closes it
}

TEST_P(HttpServerTest, ShutdownDrainsInFlightRequests) {
  ASSERT_TRUE(Start(Options()));
  const uint16_t port = server_->port();
  std::unique_ptr<Client> c = Connect();
  c->WriteRaw("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
  // Wait until the server has the request, then shut down while it is in
  // flight: the answer still arrives, and the connection then closes.
  while (server_->in_flight() == 0) std::this_thread::yield();
  std::thread stopper([&] { server_->Shutdown(std::chrono::seconds(5)); });
  HttpResponse res = c->Read();
  stopper.join();
  EXPECT_EQ(res.result(), http::status::ok);
  EXPECT_EQ(res.body(), "late");
  EXPECT_FALSE(res.keep_alive());
  // No longer accepting.
  asio::io_context ioc;
  tcp::socket s(ioc);
  beast::error_code ec;
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
  EXPECT_TRUE(ec);
}

TEST(HttpServerStartTest, BadListenAddressIsAnError) {
  HttpServerOptions o;
  o.address = "not-an-address";
  auto server =
      HttpServer::Start(o, [](HttpRequest, std::shared_ptr<Responder>) {});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("not-an-address"));
}

HttpHandler Echo() {
  return [](HttpRequest req, std::shared_ptr<Responder> r) {
    HttpResponse res{http::status::ok, req.version()};
    res.body() = req.body();
    r->Send(std::move(res));
  };
}

// An echo server on TestCert().
absl::StatusOr<std::unique_ptr<HttpServer>> StartTlsEcho() {
  HttpServerOptions o;
  o.tls_cert_file = TestCert().cert;
  o.tls_key_file = TestCert().key;
  return HttpServer::Start(o, Echo());
}

TEST(HttpServerTlsTest, PlainHttpClientGetsNoAnswer) {
  auto server = StartTlsEcho();
  ASSERT_TRUE(server.ok()) << server.status();
  Client plain((*server)->port());
  HttpResponse res = plain.Request(http::verb::post, "/echo", "hello");
  EXPECT_TRUE(plain.last_error());  // no HTTP response was read
  EXPECT_EQ(res.body(), "");
  // The server still serves TLS clients.
  Client tls((*server)->port(), &TestCert());
  EXPECT_EQ(tls.Request(http::verb::post, "/echo", "hello").body(), "hello");
}

TEST(HttpServerTlsTest, OnlyTls12OrLater) {
  auto server = StartTlsEcho();
  ASSERT_TRUE(server.ok()) << server.status();
  const uint16_t port = (*server)->port();
  // Security level 0 lets the client offer old versions at all.
  Client old(port, &TestCert(), [](SSL_CTX* ctx) {
    SSL_CTX_set_security_level(ctx, 0);
    SSL_CTX_set_min_proto_version(ctx, TLS1_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_1_VERSION);
  });
  EXPECT_TRUE(old.handshake_error());
  Client tls12(port, &TestCert(), [](SSL_CTX* ctx) {
    SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
  });
  ASSERT_FALSE(tls12.handshake_error()) << tls12.handshake_error().message();
  EXPECT_EQ(tls12.tls_version(), TLS1_2_VERSION);
  EXPECT_EQ(tls12.Request(http::verb::post, "/echo", "x").body(), "x");
}

TEST(HttpServerTlsTest, CertificateAndKeyErrorsNameTheFile) {
  const std::string dir = ::testing::TempDir();
  const TlsFiles other = MakeSelfSigned("127.0.0.2");
  struct Case {
    std::string cert, key, want;
  };
  const Case cases[] = {
      {dir + "/no-such-cert.pem", TestCert().key,
       "certificate (PEM) from '" + dir + "/no-such-cert.pem': "},
      {TestCert().cert, dir + "/no-such-key.pem",
       "private key (PEM) from '" + dir + "/no-such-key.pem': "},
      // Not PEM at all: the key file given as the certificate.
      {TestCert().key, TestCert().key,
       "certificate (PEM) from '" + TestCert().key + "': "},
      {TestCert().cert, other.key,
       "private key (PEM) from '" + other.key + "': "},
      {TestCert().cert, "", "set both the certificate and the key"},
  };
  for (const Case& c : cases) {
    HttpServerOptions o;
    o.tls_cert_file = c.cert;
    o.tls_key_file = c.key;
    auto server = HttpServer::Start(o, Echo());
    ASSERT_FALSE(server.ok()) << c.want;
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(c.want));
  }
  // The OpenSSL reason comes with the name.
  HttpServerOptions o;
  o.tls_cert_file = dir + "/no-such-cert.pem";
  o.tls_key_file = TestCert().key;
  EXPECT_THAT(std::string(HttpServer::Start(o, Echo()).status().message()),
              HasSubstr("No such file or directory"));
  o.tls_cert_file = TestCert().cert;
  o.tls_key_file = other.key;
  EXPECT_THAT(std::string(HttpServer::Start(o, Echo()).status().message()),
              HasSubstr("mismatch"));
}

}  // namespace
}  // namespace gpusched::net
