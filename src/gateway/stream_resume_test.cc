#include "gateway/stream_resume.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpusched::gateway {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

std::string Completion(const std::string& id, const std::string& text) {
  return "data: " +
         json{{"id", id},
              {"object", "text_completion"},
              {"created", id == "cmpl-1" ? 100 : 200},
              {"choices",
               {{{"index", 0}, {"text", text}, {"finish_reason", nullptr}}}}}
             .dump() +
         "\n\n";
}

TEST(StreamResumeTest, PassesEventsThroughAndRecordsTheText) {
  StreamResume s(/*chat=*/false);
  const std::string a = Completion("cmpl-1", "Hello");
  const std::string b = Completion("cmpl-1", " world");
  // An event split across chunks is sent once it is complete, unchanged.
  EXPECT_EQ(s.Relay(a.substr(0, 10)), "");
  EXPECT_EQ(s.Relay(a.substr(10) + b), a + b);
  EXPECT_EQ(s.tokens_sent(), 2);
  EXPECT_EQ(s.id(), "cmpl-1");
  EXPECT_FALSE(s.saw_done());
  EXPECT_EQ(s.Relay("data: [DONE]\n\n"), "data: [DONE]\n\n");
  EXPECT_TRUE(s.saw_done());
}

TEST(StreamResumeTest, CompletionContinuesWithThePromptPlusTheTextSent) {
  StreamResume s(false);
  s.Relay(Completion("cmpl-1", "Hello") + Completion("cmpl-1", " world"));
  auto body = s.ContinuationBody(
      R"({"model":"chat","prompt":"Say:","max_tokens":10,"stream":true})");
  ASSERT_TRUE(body.ok()) << body.status();
  const json j = json::parse(*body);
  EXPECT_EQ(j["prompt"], "Say:Hello world");
  EXPECT_EQ(j["max_tokens"], 8);
  EXPECT_EQ(j["stream"], true);
  // A one-element prompt list is one text too.
  EXPECT_TRUE(s.ContinuationBody(R"({"prompt":["Say:"]})").ok());
  // What cannot continue says why.
  EXPECT_THAT(s.ContinuationBody(R"({"prompt":[1,2,3]})").status().message(),
              HasSubstr("not one text"));
  EXPECT_THAT(s.ContinuationBody(R"({"prompt":"x","n":2})").status().message(),
              HasSubstr("n > 1"));
  EXPECT_THAT(
      s.ContinuationBody(R"({"prompt":"x","max_tokens":2})").status().message(),
      HasSubstr("no tokens left"));
  EXPECT_FALSE(s.ContinuationBody("not json").ok());
}

TEST(StreamResumeTest, ContinuationKeepsOneIdAndCountsAllTokens) {
  StreamResume s(false);
  s.Relay(Completion("cmpl-1", "Hello"));
  s.BeginContinuation();
  EXPECT_EQ(s.migrations(), 1);
  // The new replica's events carry its own id and time: rewritten.
  const json got =
      json::parse(s.Relay(Completion("cmpl-9", " again")).substr(6));
  EXPECT_EQ(got["id"], "cmpl-1");
  EXPECT_EQ(got["created"], 100);
  EXPECT_EQ(got["choices"][0]["text"], " again");
  // Its usage counts the tokens the first attempt sent.
  const std::string usage = "data: " +
                            json{{"id", "cmpl-9"},
                                 {"choices", json::array()},
                                 {"usage",
                                  {{"prompt_tokens", 12},
                                   {"completion_tokens", 3},
                                   {"total_tokens", 15}}}}
                                .dump() +
                            "\n\n";
  const json u = json::parse(s.Relay(usage).substr(6))["usage"];
  EXPECT_EQ(u["completion_tokens"], 4);
  EXPECT_EQ(u["prompt_tokens"], 11);
  EXPECT_EQ(u["total_tokens"], 15);
  EXPECT_EQ(s.tokens_sent(), 2);
}

TEST(StreamResumeTest, ChatContinuesTheFinalAssistantMessage) {
  StreamResume s(/*chat=*/true);
  auto chunk = [](const std::string& id, const json& delta,
                  const json& finish) {
    return "data: " +
           json{{"id", id},
                {"object", "chat.completion.chunk"},
                {"created", 7},
                {"choices",
                 {{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}}}}
               .dump() +
           "\n\n";
  };
  const std::string role = chunk("c-1", {{"role", "assistant"}}, nullptr);
  EXPECT_EQ(s.Relay(role), role);  // the first attempt's preamble goes out
  s.Relay(chunk("c-1", {{"content", "Par"}}, nullptr));
  auto body = s.ContinuationBody(
      R"({"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":5})");
  ASSERT_TRUE(body.ok()) << body.status();
  const json j = json::parse(*body);
  ASSERT_EQ(j["messages"].size(), 2u);
  EXPECT_EQ(j["messages"][1]["role"], "assistant");
  EXPECT_EQ(j["messages"][1]["content"], "Par");
  EXPECT_EQ(j["continue_final_message"], true);
  EXPECT_EQ(j["add_generation_prompt"], false);
  EXPECT_EQ(j["max_completion_tokens"], 4);
  s.BeginContinuation();
  // The continuation's own preamble is dropped; its content and its end
  // go out under the first id.
  EXPECT_EQ(s.Relay(chunk("c-2", {{"role", "assistant"}}, nullptr)), "");
  EXPECT_THAT(s.Relay(chunk("c-2", {{"content", "is"}}, nullptr)),
              HasSubstr("\"id\":\"c-1\""));
  EXPECT_THAT(s.Relay(chunk("c-2", json::object(), "stop")),
              HasSubstr("\"finish_reason\":\"stop\""));
}

TEST(StreamResumeTest, ErrorEventInTheOpenAiShape) {
  const std::string e = StreamResume::ErrorEvent("the replica failed");
  ASSERT_EQ(e.substr(0, 6), "data: ");
  ASSERT_EQ(e.substr(e.size() - 2), "\n\n");
  const json j = json::parse(e.substr(6));
  EXPECT_EQ(j["error"]["message"], "the replica failed");
  EXPECT_EQ(j["error"]["type"], "server_error");
  EXPECT_EQ(j["error"]["code"], "replica_failed");
  EXPECT_TRUE(j["error"]["param"].is_null());
}

}  // namespace
}  // namespace gpusched::gateway
