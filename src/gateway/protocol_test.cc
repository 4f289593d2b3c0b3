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

}  // namespace
}  // namespace gpusched::gateway
