#include "gateway/gateway.h"

#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "auth/access_control.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "engine/engine_server.h"
#include "gateway/protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "store/sqlite_store.h"

namespace gpusched::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using nlohmann::json;
using ::testing::HasSubstr;

// Two reference engines behind a gateway (plus, for the retry test, a
// replica address where nothing listens).
class GatewayTest : public ::testing::Test {
 protected:
  void Start(bool with_dead_replica, double rpm = 0) {
    for (int i = 0; i < 2; ++i) StartEngine("chat");
    auto opened = store::SqliteStore::Open(":memory:");
    ASSERT_TRUE(opened.ok());
    store_ = *std::move(opened);
    ASSERT_TRUE(store_->PutTenant("alice", "{}", 1, 0).ok());
    ASSERT_TRUE(store_->PutTenant("bob", "{}", 1, 0).ok());
    alice_ = store_->CreateApiKey("alice", "k", 0)->secret;
    bob_ = store_->CreateApiKey("bob", "k", 0)->secret;

    auto g = Gateway::Create(GatewayConfig{}, [this](std::string_view k) {
      return auth::KeyOnly(store_->AuthenticateKey(k));
    });
    ASSERT_TRUE(g.ok()) << g.status();
    gateway_ = *std::move(g);
    GatewayDeployment chat;
    chat.spec.name = "chat";
    chat.spec.router.policy = "round-robin";
    std::vector<net::Endpoint> chat_eps;
    if (with_dead_replica) chat_eps.push_back({"127.0.0.1", 1});
    for (auto& e : engines_) chat_eps.push_back({"127.0.0.1", e->port()});
    ASSERT_TRUE(gateway_->UpsertDeployment(chat).ok());
    gateway_->SetReplicas("chat", chat_eps);
    GatewayDeployment other;
    other.spec.name = "secret-model";
    ASSERT_TRUE(gateway_->UpsertDeployment(other).ok());
    gateway_->SetReplicas("secret-model", {{"127.0.0.1", engines_[0]->port()}});
    GatewayTenant a;
    a.spec.name = "alice";
    a.spec.limits.requests_per_minute = rpm;
    a.models = {"chat"};
    GatewayTenant b;
    b.spec.name = "bob";
    b.models = {"secret-model"};
    ASSERT_TRUE(gateway_->UpsertTenant(a).ok());
    ASSERT_TRUE(gateway_->UpsertTenant(b).ok());
    auto s = net::HttpServer::Start(
        net::HttpServerOptions{},
        [this](net::HttpRequest req, std::shared_ptr<net::Responder> r) {
          gateway_->Handle(std::move(req), std::move(r));
        });
    ASSERT_TRUE(s.ok());
    server_ = *std::move(s);
  }
  // A reference engine serving `model`, in engines_.
  void StartEngine(const std::string& model) {
    engine::EngineOptions o;
    o.model = model;
    o.hidden = 16;
    auto e = engine::EngineServer::Start(o, net::HttpServerOptions{});
    ASSERT_TRUE(e.ok()) << e.status();
    engines_.push_back(*std::move(e));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::seconds(2));
    gateway_.reset();
    for (auto& e : engines_) e->Shutdown(std::chrono::seconds(1));
  }
  net::HttpResponse Call(const std::string& key, const std::string& target,
                         const std::string& body,
                         http::verb verb = http::verb::post,
                         const std::string& session = "") {
    asio::io_context ioc;
    tcp::socket socket(ioc);
    socket.connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
    net::HttpRequest req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
    if (!session.empty()) req.set("X-Gpusched-Session", session);
    req.body() = body;
    req.prepare_payload();
    http::write(socket, req);
    beast::flat_buffer buffer;
    net::HttpResponse res;
    http::read(socket, buffer, res);
    return res;
  }

  std::vector<std::unique_ptr<engine::EngineServer>> engines_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<net::HttpServer> server_;
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
  // OpenAI's Model: id, object, created (Unix seconds), owned_by.
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_GT(models["data"][0]["created"].get<int64_t>(), 1'500'000'000);
  EXPECT_EQ(models["data"][0]["owned_by"], "gpusched");
}

TEST_F(GatewayTest, AuthAndTenantIsolation) {
  Start(false);
  // OpenAI's Error: message, type, param (null), code (a string or null).
  const auto error = [](const net::HttpResponse& res) {
    json e = json::parse(res.body())["error"];
    EXPECT_TRUE(e.contains("param") && e["param"].is_null()) << e;
    EXPECT_TRUE(e["code"].is_string() || e["code"].is_null()) << e;
    return e;
  };
  auto none = Call("", "/v1/completions", "{}");
  EXPECT_EQ(none.result(), http::status::unauthorized);
  EXPECT_EQ(error(none)["code"], "invalid_api_key");
  EXPECT_EQ(Call("gs-wrongwrongwrong", "/v1/completions", "{}").result(),
            http::status::unauthorized);
  // Bob may not use alice's model, and is told which ones he may use.
  auto denied =
      Call(bob_, "/v1/completions", R"({"model":"chat","prompt":"x"})");
  EXPECT_EQ(denied.result(), http::status::not_found);
  EXPECT_THAT(denied.body(), HasSubstr("your models: secret-model"));
  EXPECT_EQ(error(denied)["code"], "model_not_found");
  auto path = Call(alice_, "/v1/nope", "{}");
  EXPECT_EQ(path.result(), http::status::not_found);
  EXPECT_TRUE(error(path)["code"].is_null());
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

TEST_F(GatewayTest, KServeV2InferMetadataAndReady) {
  Start(false);
  const std::string infer =
      R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1],)"
      R"("data":["hello"]}]})";
  auto res = Call(alice_, "/v2/models/chat/infer", infer);
  ASSERT_EQ(res.result(), http::status::ok) << res.body();
  EXPECT_EQ(json::parse(res.body())["outputs"][0]["datatype"], "FP32");
  auto versioned = Call(alice_, "/v2/models/chat/versions/1/infer", infer);
  EXPECT_EQ(versioned.result(), http::status::ok) << versioned.body();
  auto meta = Call(alice_, "/v2/models/chat", "", http::verb::get);
  ASSERT_EQ(meta.result(), http::status::ok) << meta.body();
  EXPECT_EQ(json::parse(meta.body())["name"], "chat");
  EXPECT_EQ(Call(alice_, "/v2/models/chat/ready", "", http::verb::get).result(),
            http::status::ok);
  EXPECT_EQ(Call("", "/v2/health/ready", "", http::verb::get).result(),
            http::status::ok);
  // KServe's error shape: {"error": "..."}.
  auto denied = Call(bob_, "/v2/models/chat/infer", infer);
  EXPECT_EQ(denied.result(), http::status::not_found);
  EXPECT_TRUE(json::parse(denied.body())["error"].is_string());
  auto bad = Call(alice_, "/v2/models/chat/infer", R"({"x":1})");
  EXPECT_EQ(bad.result(), http::status::bad_request);
  EXPECT_THAT(bad.body(), HasSubstr("inputs"));
  // A tensor whose shape does not match its data is refused before it is
  // queued, naming the tensor, in KServe's shape.
  auto mismatch = Call(alice_, "/v2/models/chat/infer",
                       R"({"id":"7","inputs":[{"name":"text","datatype":)"
                       R"("BYTES","shape":[2],"data":["only one"]}]})");
  EXPECT_EQ(mismatch.result(), http::status::bad_request);
  ASSERT_TRUE(json::parse(mismatch.body())["error"].is_string());
  EXPECT_THAT(json::parse(mismatch.body())["error"].get<std::string>(),
              HasSubstr("inputs[0] (text): shape [2] holds 2 elements"));
  // The request id is echoed.
  auto with_id = Call(alice_, "/v2/models/chat/infer",
                      R"({"id":"req-9","inputs":[{"name":"text","datatype":)"
                      R"("BYTES","shape":[1],"data":["hi"]}]})");
  ASSERT_EQ(with_id.result(), http::status::ok) << with_id.body();
  EXPECT_EQ(json::parse(with_id.body())["id"], "req-9");
  // Server metadata (GET /v2), no key needed, like health.
  auto server = Call("", "/v2", "", http::verb::get);
  ASSERT_EQ(server.result(), http::status::ok) << server.body();
  EXPECT_EQ(json::parse(server.body())["name"], "gpusched");
  EXPECT_TRUE(json::parse(server.body())["extensions"].is_array());
}

// A public name over two versions (docs/versions.md).
TEST_F(GatewayTest, RoutesSplitByWeightStickAndAddressVersions) {
  Start(false);
  StartEngine("chat-v1");
  StartEngine("chat-v2");
  for (int v = 1; v <= 2; ++v) {
    GatewayDeployment d;
    d.spec.name = "chat-v" + std::to_string(v);
    ASSERT_TRUE(gateway_->UpsertDeployment(d).ok());
    gateway_->SetReplicas(d.spec.name,
                          {{"127.0.0.1", engines_[v + 1]->port()}});
  }
  GatewayRoute route;
  route.name = "assistant";
  route.targets = {{"chat-v1", "1", 70}, {"chat-v2", "2", 30}};
  ASSERT_TRUE(gateway_->UpsertRoute(route).ok());
  // A route may not take a deployment's name, nor have no weight.
  EXPECT_FALSE(gateway_->UpsertRoute({"chat", route.targets, "none"}).ok());
  EXPECT_FALSE(
      gateway_->UpsertRoute({"x", {{"chat-v1", "1", 0}}, "none"}).ok());
  // Carol may use the public name only; its versions come with it.
  GatewayTenant carol;
  carol.spec.name = "carol";
  carol.models = {"assistant"};
  ASSERT_TRUE(store_->PutTenant("carol", "{}", 1, 0).ok());
  const std::string key = store_->CreateApiKey("carol", "k", 0)->secret;
  ASSERT_TRUE(gateway_->UpsertTenant(carol).ok());
  auto models = Call(key, "/v1/models", "", http::verb::get);
  ASSERT_EQ(models.result(), http::status::ok);
  const json listed = json::parse(models.body())["data"];
  ASSERT_EQ(listed.size(), 1u) << models.body();
  EXPECT_EQ(listed[0]["id"], "assistant");

  const std::string body =
      R"({"model":"assistant","prompt":"x","max_tokens":1})";
  int v2 = 0;
  constexpr int kRequests = 200;
  for (int i = 0; i < kRequests; ++i) {
    auto res = Call(key, "/v1/completions", body);
    ASSERT_EQ(res.result(), http::status::ok) << res.body();
    v2 += json::parse(res.body())["model"] == "chat-v2";
  }
  // 30% of 200: mean 60, sd 6.5; 4.5 sd either side.
  EXPECT_GT(v2, 31);
  EXPECT_LT(v2, 89);
  EXPECT_FALSE(gateway_->SamplesSince("chat-v2", 0).empty());

  // Sticky by session: every request of one session on one version.
  route.sticky = "session";
  ASSERT_TRUE(gateway_->UpsertRoute(route).ok());
  for (int s = 0; s < 5; ++s) {
    std::set<std::string> seen;
    for (int i = 0; i < 8; ++i) {
      auto res = Call(key, "/v1/completions", body, http::verb::post,
                      "session-" + std::to_string(s));
      ASSERT_EQ(res.result(), http::status::ok) << res.body();
      seen.insert(json::parse(res.body())["model"].get<std::string>());
    }
    EXPECT_EQ(seen.size(), 1u) << "session " << s;
  }

  // KServe addresses one version directly, and shows the public name.
  const std::string infer =
      R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1],)"
      R"("data":["hello"]}]})";
  auto direct = Call(key, "/v2/models/assistant/versions/2/infer", infer);
  ASSERT_EQ(direct.result(), http::status::ok) << direct.body();
  EXPECT_EQ(json::parse(direct.body())["model_name"], "chat-v2");
  auto unknown = Call(key, "/v2/models/assistant/versions/9/infer", infer);
  EXPECT_EQ(unknown.result(), http::status::not_found);
  EXPECT_THAT(unknown.body(), HasSubstr("its versions: 1, 2"));
  auto meta = Call(key, "/v2/models/assistant", "", http::verb::get);
  ASSERT_EQ(meta.result(), http::status::ok) << meta.body();
  EXPECT_EQ(json::parse(meta.body())["name"], "assistant");
  EXPECT_EQ(json::parse(meta.body())["versions"], json({"1", "2"}));
  EXPECT_EQ(
      Call(key, "/v2/models/assistant/ready", "", http::verb::get).result(),
      http::status::ok);

  // All weight to v2 (a promotion): every request goes there.
  route.targets[0].weight = 0;
  route.targets[1].weight = 100;
  ASSERT_TRUE(gateway_->UpsertRoute(route).ok());
  for (int i = 0; i < 20; ++i) {
    auto res = Call(key, "/v1/completions", body, http::verb::post,
                    "session-" + std::to_string(i));
    EXPECT_EQ(json::parse(res.body())["model"], "chat-v2");
  }
  // Shadow copies: every request also goes to chat, whose answers nobody
  // gets; the client's answer is v2's, and carol's limits are not used.
  const Micros before = NowMicros();
  route.shadow_deployment = "chat";
  route.shadow_percent = 100;
  ASSERT_TRUE(gateway_->UpsertRoute(route).ok());
  for (int i = 0; i < 10; ++i) {
    auto res = Call(key, "/v1/completions", body);
    ASSERT_EQ(res.result(), http::status::ok) << res.body();
    EXPECT_EQ(json::parse(res.body())["model"], "chat-v2");
  }
  auto shadowed = Call(key, "/v2/models/assistant/infer", infer);
  EXPECT_EQ(shadowed.result(), http::status::ok) << shadowed.body();
  for (int i = 0; i < 200 && gateway_->SamplesSince("chat", before).size() < 11;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_EQ(gateway_->SamplesSince("chat", before).size(), 11u);
  gateway_->RemoveRoute("assistant");
  EXPECT_EQ(Call(key, "/v1/completions", body).result(),
            http::status::not_found);
}

TEST_F(GatewayTest, DeploymentsAndTenantsChangeAtRunTime) {
  Start(false);
  const std::string body = R"({"model":"chat","prompt":"x","max_tokens":1})";
  // A new tenant works at once; removing it stops its keys.
  GatewayTenant carol;
  carol.spec.name = "carol";
  ASSERT_TRUE(store_->PutTenant("carol", "{}", 1, 0).ok());
  const std::string carol_key = store_->CreateApiKey("carol", "k", 0)->secret;
  ASSERT_TRUE(gateway_->UpsertTenant(carol).ok());
  EXPECT_EQ(Call(carol_key, "/v1/completions", body).result(),
            http::status::ok);
  gateway_->RemoveTenant("carol");
  EXPECT_EQ(Call(carol_key, "/v1/completions", body).result(),
            http::status::forbidden);
  // Changing the router starts a new queue on the same replicas.
  GatewayDeployment chat;
  chat.spec.name = "chat";
  chat.spec.router.policy = "least-outstanding";
  ASSERT_TRUE(gateway_->UpsertDeployment(chat).ok());
  EXPECT_EQ(Call(alice_, "/v1/completions", body).result(), http::status::ok);
  EXPECT_EQ(gateway_->Load("chat").replicas, 2);
  // A deleted deployment is unknown to clients at once.
  gateway_->RemoveDeployment("chat");
  auto gone = Call(alice_, "/v1/completions", body);
  EXPECT_EQ(gone.result(), http::status::not_found);
  gateway_->SetReplicas("chat", {});
  EXPECT_EQ(gateway_->Load("chat").replicas, 0);
}

TEST_F(GatewayTest, QueuedRequestsTimeOutWithoutReplicas) {
  Start(false);
  GatewayDeployment cold;
  cold.spec.name = "cold";
  cold.queue_timeout = 200 * kMicrosPerMilli;
  ASSERT_TRUE(gateway_->UpsertDeployment(cold).ok());
  GatewayTenant a;
  a.spec.name = "alice";
  a.models = {"chat", "cold"};
  ASSERT_TRUE(gateway_->UpsertTenant(a).ok());
  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop) {
      gateway_->Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto res = Call(alice_, "/v1/completions",
                  R"({"model":"cold","prompt":"x","max_tokens":1})");
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  stop = true;
  ticker.join();
  EXPECT_EQ(res.result(), http::status::service_unavailable) << res.body();
  EXPECT_THAT(res.body(), HasSubstr("queue_timeout"));
  EXPECT_FALSE(res[http::field::retry_after].empty());
  EXPECT_GE(waited, 0.15);
}

// Scale from zero: requests for a deployment without a ready replica are
// held (at most max_held), the first one tells the demand sink, and all are
// released when a replica is ready.
TEST_F(GatewayTest, HoldsRequestsAtZeroReplicasWithinTheBound) {
  Start(false);
  StartEngine("cold");
  const net::Endpoint replica{"127.0.0.1", engines_.back()->port()};
  GatewayDeployment cold;
  cold.spec.name = "cold";
  cold.max_held = 2;
  ASSERT_TRUE(gateway_->UpsertDeployment(cold).ok());
  GatewayTenant a;
  a.spec.name = "alice";
  a.models = {"chat", "cold"};
  ASSERT_TRUE(gateway_->UpsertTenant(a).ok());
  std::mutex mu;
  std::vector<std::string> demands;
  gateway_->SetDemandSink([&](const std::string& deployment, Micros arrival) {
    EXPECT_GT(arrival, 0);
    std::lock_guard<std::mutex> lock(mu);
    demands.push_back(deployment);
  });
  auto demanded = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return demands.size();
  };
  // Waits (bounded) until `n` requests are held.
  auto held = [&](int64_t n) {
    for (int i = 0; i < 500 && gateway_->Load("cold").queued != n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return gateway_->Load("cold").queued == n;
  };
  const std::string body = R"({"model":"cold","prompt":"x","max_tokens":1})";
  net::HttpResponse first, second;
  std::thread t1([&] { first = Call(alice_, "/v1/completions", body); });
  ASSERT_TRUE(held(1));
  std::thread t2([&] { second = Call(alice_, "/v1/completions", body); });
  ASSERT_TRUE(held(2));
  EXPECT_EQ(demanded(), 1u);  // once for the burst, not per request
  EXPECT_EQ(gateway_->Load("cold").replicas, 0);

  // Beyond the bound: 503 with Retry-After, in each protocol's shape.
  auto over = Call(alice_, "/v1/completions", body);
  EXPECT_EQ(over.result(), http::status::service_unavailable);
  EXPECT_THAT(over.body(), HasSubstr("hold_limit"));
  EXPECT_EQ(json::parse(over.body())["error"]["type"], "overloaded_error");
  EXPECT_EQ(over[http::field::retry_after], "1");
  auto kserve = Call(alice_, "/v2/models/cold/infer",
                     R"({"inputs":[{"name":"text","datatype":"BYTES",)"
                     R"("shape":[1],"data":["hello"]}]})");
  EXPECT_EQ(kserve.result(), http::status::service_unavailable);
  EXPECT_TRUE(json::parse(kserve.body())["error"].is_string());
  EXPECT_FALSE(kserve[http::field::retry_after].empty());
  EXPECT_EQ(gateway_->Load("cold").queued, 2);

  // A ready replica releases the held requests.
  gateway_->SetReplicas("cold", {replica});
  t1.join();
  t2.join();
  EXPECT_EQ(first.result(), http::status::ok) << first.body();
  EXPECT_EQ(second.result(), http::status::ok) << second.body();
  EXPECT_EQ(demanded(), 1u);
  // With a ready replica nothing is held and nobody is told.
  EXPECT_EQ(Call(alice_, "/v1/completions", body).result(), http::status::ok);
  EXPECT_EQ(demanded(), 1u);

  // Back at zero, the next request is a new demand.
  gateway_->SetReplicas("cold", {});
  std::thread t3([&] { first = Call(alice_, "/v1/completions", body); });
  ASSERT_TRUE(held(1));
  EXPECT_EQ(demanded(), 2u);
  gateway_->SetReplicas("cold", {replica});
  t3.join();
  EXPECT_EQ(first.result(), http::status::ok) << first.body();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(demands, (std::vector<std::string>{"cold", "cold"}));
}

}  // namespace
}  // namespace gpusched::gateway
