#include "engine/engine_server.h"

#include <bit>
#include <cstdint>
#include <string>

#include "absl/strings/escaping.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpusched::engine {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using nlohmann::json;
using ::testing::HasSubstr;

class EngineServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions o;
    o.model = "tiny";
    o.hidden = 16;
    auto s = EngineServer::Start(o, net::HttpServerOptions{});
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  net::HttpResponse Call(http::verb verb, const std::string& target,
                         const std::string& body = "") {
    asio::io_context ioc;
    tcp::socket socket(ioc);
    socket.connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
    net::HttpRequest req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(socket, req);
    beast::flat_buffer buffer;
    net::HttpResponse res;
    http::read(socket, buffer, res);
    return res;
  }
  std::unique_ptr<EngineServer> server_;
};

TEST_F(EngineServerTest, CompletionNonStreaming) {
  auto res =
      Call(http::verb::post, "/v1/completions",
           R"({"model":"tiny","prompt":"say something nice","max_tokens":5})");
  ASSERT_EQ(res.result(), http::status::ok) << res.body();
  json j = json::parse(res.body());
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(j["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  // Deterministic: the same prompt gives the same text.
  auto again = json::parse(
      Call(http::verb::post, "/v1/completions",
           R"({"model":"tiny","prompt":"say something nice","max_tokens":5})")
          .body());
  EXPECT_EQ(again["choices"][0]["text"], j["choices"][0]["text"]);
}

TEST_F(EngineServerTest, ChatStreamsServerSentEvents) {
  auto res =
      Call(http::verb::post, "/v1/chat/completions",
           R"({"model":"tiny","messages":[{"role":"user","content":"hi there"}],
                      "max_tokens":4,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(res.result(), http::status::ok);
  EXPECT_EQ(res[http::field::content_type], "text/event-stream");
  const std::string& body = res.body();
  EXPECT_THAT(body, HasSubstr("\"role\":\"assistant\""));
  EXPECT_THAT(body, HasSubstr("chat.completion.chunk"));
  EXPECT_THAT(body, HasSubstr("\"finish_reason\":\"length\""));
  EXPECT_THAT(body, HasSubstr("\"completion_tokens\":4"));
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
  // 1 role chunk + 4 tokens + finish + usage + [DONE].
  size_t events = 0;
  for (size_t p = body.find("data: "); p != std::string::npos;
       p = body.find("data: ", p + 1)) {
    ++events;
  }
  EXPECT_EQ(events, 8u);
}

TEST_F(EngineServerTest, EmbeddingsAndKserveInfer) {
  auto res = Call(http::verb::post, "/v1/embeddings",
                  R"({"model":"tiny","input":["a b c","d e"]})");
  ASSERT_EQ(res.result(), http::status::ok);
  json j = json::parse(res.body());
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0]["embedding"].size(), 16u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  auto infer = Call(
      http::verb::post, "/v2/models/tiny/infer",
      R"({"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":["a b c"]}]})");
  ASSERT_EQ(infer.result(), http::status::ok) << infer.body();
  json k = json::parse(infer.body());
  EXPECT_EQ(k["outputs"][0]["shape"], json::array({1, 16}));
  // The same text gives the same vector through both protocols.
  EXPECT_EQ(k["outputs"][0]["data"], j["data"][0]["embedding"]);
  EXPECT_EQ(Call(http::verb::get, "/v2/models/tiny/ready").result(),
            http::status::ok);
  EXPECT_EQ(Call(http::verb::get, "/v2/models/tiny/versions/1").result(),
            http::status::ok);
  EXPECT_EQ(Call(http::verb::get, "/v2/health/ready").result(),
            http::status::ok);
}

TEST_F(EngineServerTest, EmbeddingsInBase64AreTheSameFloats) {
  auto floats = Call(http::verb::post, "/v1/embeddings",
                     R"({"model":"tiny","input":"a b c"})");
  auto b64 =
      Call(http::verb::post, "/v1/embeddings",
           R"({"model":"tiny","input":"a b c","encoding_format":"base64"})");
  ASSERT_EQ(b64.result(), http::status::ok) << b64.body();
  const json want = json::parse(floats.body())["data"][0]["embedding"];
  std::string bytes;
  ASSERT_TRUE(absl::Base64Unescape(
      json::parse(b64.body())["data"][0]["embedding"].get<std::string>(),
      &bytes));
  ASSERT_EQ(bytes.size(), want.size() * 4);
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t bits = 0;
    for (int b = 3; b >= 0; --b) {
      bits = (bits << 8) | static_cast<uint8_t>(bytes[i * 4 + b]);
    }
    EXPECT_EQ(std::bit_cast<float>(bits), want[i].get<float>()) << i;
  }
  EXPECT_EQ(Call(http::verb::post, "/v1/embeddings",
                 R"({"model":"tiny","input":"a","encoding_format":"int8"})")
                .result(),
            http::status::bad_request);
}

TEST_F(EngineServerTest, ModelsAndMetrics) {
  json m = json::parse(Call(http::verb::get, "/v1/models").body());
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  Call(http::verb::post, "/v1/completions",
       R"({"prompt":"one two three four","max_tokens":3})");
  const std::string metrics = Call(http::verb::get, "/metrics").body();
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting",
        "vllm:gpu_cache_usage_perc", "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total", "vllm:generation_tokens_total"}) {
    EXPECT_THAT(metrics, HasSubstr(name));
  }
  EXPECT_THAT(metrics,
              HasSubstr("vllm:generation_tokens_total{model_name=\"tiny\"} 3"));
}

TEST_F(EngineServerTest, BadInputGetsClearErrors) {
  auto bad = Call(http::verb::post, "/v1/completions", "{not json");
  EXPECT_EQ(bad.result(), http::status::bad_request);
  EXPECT_THAT(bad.body(), HasSubstr("not valid JSON"));
  auto model = Call(http::verb::post, "/v1/completions",
                    R"({"model":"other","prompt":"x"})");
  EXPECT_EQ(model.result(), http::status::not_found);
  EXPECT_THAT(model.body(), HasSubstr("this engine serves 'tiny'"));
  auto tokens = Call(http::verb::post, "/v1/completions",
                     R"({"prompt":"x","max_tokens":0})");
  EXPECT_EQ(tokens.result(), http::status::bad_request);
  auto huge = Call(http::verb::post, "/v1/completions",
                   R"({"prompt":"x","max_tokens":100000})");
  EXPECT_EQ(huge.result(), http::status::bad_request);
  EXPECT_THAT(huge.body(), HasSubstr("exceeds the model's context"));
  auto chat =
      Call(http::verb::post, "/v1/chat/completions", R"({"messages":[]})");
  EXPECT_EQ(chat.result(), http::status::bad_request);
  EXPECT_EQ(Call(http::verb::get, "/nope").result(), http::status::not_found);
}

}  // namespace
}  // namespace gpusched::engine
