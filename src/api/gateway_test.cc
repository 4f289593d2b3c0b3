#include "api/gateway.h"

#include <string>

#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "engine/engine_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpusched::api {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using nlohmann::json;
using ::testing::HasSubstr;

// Two reference engines behind a gateway (plus, for the retry test, a
// replica address where nothing listens).
class GatewayTest : public ::testing::Test {
 protected:
  void Start(bool with_dead_replica, double rpm = 0) {
    for (int i = 0; i < 2; ++i) {
      engine::EngineOptions o;
      o.model = "chat";
      o.hidden = 16;
      auto e = engine::EngineServer::Start(o, HttpServerOptions{});
      ASSERT_TRUE(e.ok());
      engines_.push_back(*std::move(e));
    }
    auto store = runtime::Store::Open(":memory:");
    ASSERT_TRUE(store.ok());
    store_ = *std::move(store);
    ASSERT_TRUE(store_->PutTenant("alice", "{}", 1, 0).ok());
    ASSERT_TRUE(store_->PutTenant("bob", "{}", 1, 0).ok());
    alice_ = store_->CreateApiKey("alice", "k", 0)->secret;
    bob_ = store_->CreateApiKey("bob", "k", 0)->secret;

    GatewayConfig c;
    GatewayDeployment chat;
    chat.spec.name = "chat";
    chat.spec.router.policy = "round-robin";
    if (with_dead_replica) chat.replicas.push_back({"127.0.0.1", 1});
    for (auto& e : engines_) chat.replicas.push_back({"127.0.0.1", e->port()});
    c.deployments.push_back(chat);
    GatewayDeployment other;
    other.spec.name = "secret-model";
    other.replicas.push_back({"127.0.0.1", engines_[0]->port()});
    c.deployments.push_back(other);
    GatewayTenant a;
    a.spec.name = "alice";
    a.spec.limits.requests_per_minute = rpm;
    a.models = {"chat"};
    GatewayTenant b;
    b.spec.name = "bob";
    b.models = {"secret-model"};
    c.tenants = {a, b};
    auto g = Gateway::Create(c, store_.get());
    ASSERT_TRUE(g.ok()) << g.status();
    gateway_ = *std::move(g);
    auto s = HttpServer::Start(
        HttpServerOptions{},
        [this](HttpRequest req, std::shared_ptr<Responder> r) {
          gateway_->Handle(std::move(req), std::move(r));
        });
    ASSERT_TRUE(s.ok());
    server_ = *std::move(s);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::seconds(2));
    gateway_.reset();
    for (auto& e : engines_) e->Shutdown(std::chrono::seconds(1));
  }
  HttpResponse Call(const std::string& key, const std::string& target,
                    const std::string& body,
                    http::verb verb = http::verb::post) {
    net::io_context ioc;
    tcp::socket socket(ioc);
    socket.connect(
        tcp::endpoint(net::ip::make_address("127.0.0.1"), server_->port()));
    HttpRequest req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
    req.body() = body;
    req.prepare_payload();
    http::write(socket, req);
    beast::flat_buffer buffer;
    HttpResponse res;
    http::read(socket, buffer, res);
    return res;
  }

  std::vector<std::unique_ptr<engine::EngineServer>> engines_;
  std::unique_ptr<runtime::Store> store_;
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<HttpServer> server_;
  std::string alice_, bob_;
};

TEST_F(GatewayTest, ProxiesCompletionsAndStreams) {
  Start(false);
  auto res = Call(alice_, "/v1/completions",
                  R"({"model":"chat","prompt":"hello world","max_tokens":3})");
  ASSERT_EQ(res.result(), http::status::ok) << res.body();
  EXPECT_EQ(json::parse(res.body())["usage"]["completion_tokens"], 3);
  auto s = Call(alice_, "/v1/chat/completions",
                R"({"model":"chat","stream":true,"max_tokens":4,
                    "messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(s.result(), http::status::ok);
  EXPECT_EQ(s[http::field::content_type], "text/event-stream");
  EXPECT_THAT(s.body(), HasSubstr("chat.completion.chunk"));
  EXPECT_THAT(s.body(), HasSubstr("data: [DONE]"));
  auto e = Call(alice_, "/v1/embeddings", R"({"model":"chat","input":"a b"})");
  EXPECT_EQ(e.result(), http::status::ok);
  auto models =
      json::parse(Call(alice_, "/v1/models", "", http::verb::get).body());
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "chat");
}

TEST_F(GatewayTest, AuthAndTenantIsolation) {
  Start(false);
  EXPECT_EQ(Call("", "/v1/completions", "{}").result(),
            http::status::unauthorized);
  EXPECT_EQ(Call("gs-wrongwrongwrong", "/v1/completions", "{}").result(),
            http::status::unauthorized);
  // Bob may not use alice's model, and is told which ones he may use.
  auto denied =
      Call(bob_, "/v1/completions", R"({"model":"chat","prompt":"x"})");
  EXPECT_EQ(denied.result(), http::status::not_found);
  EXPECT_THAT(denied.body(), HasSubstr("your models: secret-model"));
  auto bad =
      Call(alice_, "/v1/completions", R"({"model":"chat","max_tokens":"x"})");
  EXPECT_EQ(bad.result(), http::status::bad_request);
}

TEST_F(GatewayTest, RateLimitAnswers429WithRetryAfter) {
  Start(false, /*rpm=*/1);
  const std::string body = R"({"model":"chat","prompt":"x","max_tokens":1})";
  EXPECT_EQ(Call(alice_, "/v1/completions", body).result(), http::status::ok);
  auto limited = Call(alice_, "/v1/completions", body);
  EXPECT_EQ(limited.result(), http::status::too_many_requests);
  EXPECT_THAT(limited.body(), HasSubstr("rate_limited_requests"));
  EXPECT_FALSE(limited[http::field::retry_after].empty());
}

TEST_F(GatewayTest, RetriesOnAReplicaThatRefuses) {
  Start(/*with_dead_replica=*/true);
  // Round-robin sends some requests to the dead address first; every one
  // still succeeds on a live replica.
  for (int i = 0; i < 6; ++i) {
    auto res = Call(alice_, "/v1/completions",
                    R"({"model":"chat","prompt":"retry me","max_tokens":2})");
    EXPECT_EQ(res.result(), http::status::ok) << res.body();
  }
}

}  // namespace
}  // namespace gpusched::api
