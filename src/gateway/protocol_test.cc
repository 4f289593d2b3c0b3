#include "gateway/protocol.h"

#include "gtest/gtest.h"

namespace gpusched::gateway {
namespace {

constexpr char kCompletion[] = "\"completion_tokens\":";

TEST(UsageTokensTest, ReadsTheLastCount) {
  EXPECT_EQ(UsageTokens(R"({"usage":{"completion_tokens":12}})", kCompletion),
            12);
  // Python's json.dumps puts a space after the colon.
  EXPECT_EQ(UsageTokens(R"({"usage": {"completion_tokens": 7}})", kCompletion),
            7);
  EXPECT_EQ(UsageTokens(R"({"completion_tokens":1} {"completion_tokens":3})",
                        kCompletion),
            3);
  EXPECT_EQ(UsageTokens(R"({"usage":{}})", kCompletion), -1);
  EXPECT_EQ(UsageTokens(R"({"completion_tokens":"x"})", kCompletion), -1);
}

// Found by fuzz_openai_body: a long digit run overflowed an int32.
TEST(UsageTokensTest, ACountBeyondInt32IsNoCount) {
  EXPECT_EQ(UsageTokens(R"({"completion_tokens":2147483647})", kCompletion),
            2147483647);
  EXPECT_EQ(UsageTokens(R"({"completion_tokens":7777777777777})", kCompletion),
            -1);
}

TEST(ScanOpenAiTest, KeepsThePromptTextForPrefixRouting) {
  OpenAiFields chat;
  ASSERT_TRUE(ScanOpenAi(
      R"({"model":"m","messages":[{"role":"system","content":"be brief"},)"
      R"({"role":"user","content":[{"type":"text","text":"hi"}]}],)"
      R"("temperature":0.5})",
      &chat));
  EXPECT_EQ(chat.model, "m");
  EXPECT_EQ(chat.prompt,
            "system\x1f"
            "be brief\x1f"
            "user\x1f"
            "text\x1f"
            "hi\x1f");
  // Where the fields come does not matter.
  OpenAiFields late;
  ASSERT_TRUE(ScanOpenAi(
      R"({"stream":true,"messages":[{"role":"system","content":"be brief"},)"
      R"({"role":"user","content":[{"type":"text","text":"hi"}]}],"model":"m"})",
      &late));
  EXPECT_EQ(late.prompt, chat.prompt);
  OpenAiFields completion;
  ASSERT_TRUE(ScanOpenAi(R"({"model":"m","prompt":"once upon","user":"u"})",
                         &completion));
  EXPECT_EQ(completion.prompt, "once upon\x1f");
  OpenAiFields tokens;
  ASSERT_TRUE(ScanOpenAi(R"({"model":"m","prompt":[1,2,3]})", &tokens));
  EXPECT_EQ(tokens.prompt,
            "1\x1f"
            "2\x1f"
            "3\x1f");
  // Bounded.
  OpenAiFields big;
  const std::string huge(kMaxPromptText * 2, 'x');
  ASSERT_TRUE(
      ScanOpenAi("{\"model\":\"m\",\"prompt\":\"" + huge + "\"}", &big));
  EXPECT_EQ(big.prompt.size(), kMaxPromptText);
}

}  // namespace
}  // namespace gpusched::gateway
