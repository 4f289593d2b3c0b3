#include "api/http_server.h"

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::api {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using ::testing::HasSubstr;

// A blocking client on one connection.
class Client {
 public:
  explicit Client(uint16_t port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  }
  HttpResponse Request(http::verb verb, const std::string& target,
                       const std::string& body = "") {
    HttpRequest req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.body() = body;
    req.prepare_payload();
    http::write(socket_, req);
    return Read();
  }
  void WriteRaw(const std::string& bytes) {
    net::write(socket_, net::buffer(bytes));
  }
  HttpResponse Read() {
    HttpResponse res;
    beast::error_code ec;
    http::read(socket_, buffer_, res, ec);
    last_error_ = ec;
    return res;
  }
  // True when the server closed the connection.
  bool ReadEof() {
    char c;
    beast::error_code ec;
    socket_.read_some(net::buffer(&c, 1), ec);
    return ec == net::error::eof || ec == net::error::connection_reset;
  }
  beast::error_code last_error() const { return last_error_; }

 private:
  net::io_context ioc_;
  tcp::socket socket_;
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

class HttpServerTest : public ::testing::Test {
 protected:
  bool Start(const HttpServerOptions& o) {
    auto s = HttpServer::Start(
        o, [this](HttpRequest req, std::shared_ptr<Responder> r) {
          Handle(workers_, std::move(req), std::move(r));
        });
    if (!s.ok()) return false;
    server_ = *std::move(s);
    return true;
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

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  ASSERT_TRUE(Start(Options()));
  ASSERT_NE(server_->port(), 0);
  Client c(server_->port());
  for (int i = 0; i < 3; ++i) {
    HttpResponse res =
        c.Request(http::verb::post, "/echo", "hello" + std::to_string(i));
    EXPECT_EQ(res.result(), http::status::ok);
    EXPECT_EQ(res.body(), "hello" + std::to_string(i));
    EXPECT_TRUE(res.keep_alive());
  }
  HttpResponse missing = c.Request(http::verb::get, "/nope");
  EXPECT_EQ(missing.result(), http::status::not_found);
  EXPECT_THAT(missing.body(), HasSubstr("no route /nope"));
  EXPECT_EQ(missing[http::field::content_type], "application/json");
}

TEST_F(HttpServerTest, LimitsAnswerWithTheRightStatus) {
  ASSERT_TRUE(Start(Options()));
  {
    Client c(server_->port());
    HttpResponse res =
        c.Request(http::verb::post, "/echo", std::string(2000, 'x'));
    EXPECT_EQ(res.result(), http::status::payload_too_large);
    EXPECT_THAT(res.body(), HasSubstr("larger than 1024 bytes"));
  }
  {
    Client c(server_->port());
    c.WriteRaw("GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " +
               std::string(4000, 'y') + "\r\n\r\n");
    EXPECT_EQ(c.Read().result(), http::status::request_header_fields_too_large);
  }
  {
    Client c(server_->port());
    c.WriteRaw("THIS IS NOT HTTP\r\n\r\n");
    EXPECT_EQ(c.Read().result(), http::status::bad_request);
  }
}

TEST_F(HttpServerTest, StreamsChunksFromAnotherThread) {
  ASSERT_TRUE(Start(Options()));
  Client c(server_->port());
  HttpResponse res = c.Request(http::verb::get, "/stream");
  EXPECT_EQ(res.result(), http::status::ok);
  EXPECT_TRUE(res.chunked());
  EXPECT_EQ(res.body(), "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  // The connection is still usable.
  EXPECT_EQ(c.Request(http::verb::post, "/echo", "after").body(), "after");
}

TEST_F(HttpServerTest, DroppedResponderAnswers500) {
  ASSERT_TRUE(Start(Options()));
  Client c(server_->port());
  HttpResponse res = c.Request(http::verb::get, "/drop");
  EXPECT_EQ(res.result(), http::status::internal_server_error);
}

TEST_F(HttpServerTest, ConnectionsOverTheLimitGet503) {
  HttpServerOptions o = Options();
  o.max_connections = 1;
  ASSERT_TRUE(Start(o));
  Client first(server_->port());
  EXPECT_EQ(first.Request(http::verb::post, "/echo", "a").result(),
            http::status::ok);
  Client second(server_->port());
  HttpResponse res = second.Read();
  EXPECT_EQ(res.result(), http::status::service_unavailable);
  EXPECT_THAT(res.body(), HasSubstr("too many connections"));
}

TEST_F(HttpServerTest, IdleConnectionsAreClosed) {
  HttpServerOptions o = Options();
  o.idle_timeout = std::chrono::milliseconds(100);
  ASSERT_TRUE(Start(o));
  Client c(server_->port());
  EXPECT_EQ(c.Request(http::verb::post, "/echo", "a").result(),
            http::status::ok);
  EXPECT_TRUE(c.ReadEof());  // returns once the server closes it
}

TEST_F(HttpServerTest, ShutdownDrainsInFlightRequests) {
  ASSERT_TRUE(Start(Options()));
  const uint16_t port = server_->port();
  Client c(port);
  c.WriteRaw("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
  // Wait until the server has the request, then shut down while it is in
  // flight: the answer still arrives, and the connection then closes.
  while (server_->in_flight() == 0) std::this_thread::yield();
  std::thread stopper([&] { server_->Shutdown(std::chrono::seconds(5)); });
  HttpResponse res = c.Read();
  stopper.join();
  EXPECT_EQ(res.result(), http::status::ok);
  EXPECT_EQ(res.body(), "late");
  EXPECT_FALSE(res.keep_alive());
  // No longer accepting.
  net::io_context ioc;
  tcp::socket s(ioc);
  beast::error_code ec;
  s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port), ec);
  EXPECT_TRUE(ec);
}

TEST_F(HttpServerTest, BadListenAddressIsAnError) {
  HttpServerOptions o;
  o.address = "not-an-address";
  auto server =
      HttpServer::Start(o, [](HttpRequest, std::shared_ptr<Responder>) {});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("not-an-address"));
}

}  // namespace
}  // namespace gpusched::api
