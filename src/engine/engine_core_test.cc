#include "engine/engine_core.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace gpusched::engine {
namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kStop;
  int64_t cached = -1;
  bool finished = false;
};

SequenceRequest Seq(std::vector<int32_t> prompt, int max_tokens, Outcome* o) {
  SequenceRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.on_token = [o](int32_t t) { o->tokens.push_back(t); };
  r.on_finish = [o](FinishReason why, int64_t cached) {
    o->reason = why;
    o->cached = cached;
    o->finished = true;
  };
  return r;
}

std::vector<int32_t> Prompt(int n, int offset = 0) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 7 + offset) % 500);
  return p;
}

void RunToEnd(EngineCore& core) {
  for (int i = 0; i < 10000 && core.has_work(); ++i) core.Step();
}

TEST(EngineCoreTest, OutputIsDeterministicPerSeed) {
  EngineOptions o;
  Outcome a, b, c;
  {
    EngineCore core(o);
    ASSERT_TRUE(core.Add(Seq(Prompt(20), 12, &a)).ok());
    RunToEnd(core);
  }
  {
    EngineCore core(o);
    ASSERT_TRUE(core.Add(Seq(Prompt(20), 12, &b)).ok());
    RunToEnd(core);
  }
  o.seed = 2;
  {
    EngineCore core(o);
    ASSERT_TRUE(core.Add(Seq(Prompt(20), 12, &c)).ok());
    RunToEnd(core);
  }
  ASSERT_EQ(a.tokens.size(), 12u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens, c.tokens);
  EXPECT_EQ(a.reason, FinishReason::kLength);
}

TEST(EngineCoreTest, ContinuousBatchingPrefillsThenDecodesTogether) {
  EngineCore core(EngineOptions{});
  Outcome o[3];
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(core.Add(Seq(Prompt(10 + i, i), 4, &o[i])).ok());
  }
  StepResult first = core.Step();
  EXPECT_EQ(first.prefill_tokens, 10 + 11 + 12);
  EXPECT_EQ(first.decoded, 0);
  EXPECT_EQ(core.stats().running, 3);
  StepResult second = core.Step();
  EXPECT_EQ(second.prefill_tokens, 0);
  EXPECT_EQ(second.decoded, 3);
  // A sequence that arrives now joins the running batch at the next step.
  Outcome late;
  ASSERT_TRUE(core.Add(Seq(Prompt(5), 2, &late)).ok());
  StepResult third = core.Step();
  EXPECT_EQ(third.prefill_tokens, 5);
  EXPECT_EQ(third.decoded, 3);
  RunToEnd(core);
  for (const Outcome& x : o) EXPECT_EQ(x.tokens.size(), 4u);
  EXPECT_EQ(late.tokens.size(), 2u);
}

TEST(EngineCoreTest, KvCacheBoundsTheBatch) {
  EngineOptions opt;
  opt.kv_blocks = 4;  // 64 tokens
  opt.block_tokens = 16;
  EngineCore core(opt);
  Outcome a, b;
  ASSERT_TRUE(core.Add(Seq(Prompt(30), 10, &a)).ok());  // 3 blocks
  ASSERT_TRUE(core.Add(Seq(Prompt(30, 3), 10, &b)).ok());
  core.Step();
  EXPECT_EQ(core.stats().running, 1);
  EXPECT_EQ(core.stats().waiting, 1);
  RunToEnd(core);
  EXPECT_TRUE(a.finished);
  EXPECT_TRUE(b.finished);
  EXPECT_EQ(b.tokens.size(), 10u);
  // More than the whole cache can never run.
  Outcome c;
  auto too_big = core.Add(Seq(Prompt(60), 10, &c));
  EXPECT_FALSE(too_big.ok());
}

TEST(EngineCoreTest, PrefixCacheHitsOnARepeatedPrompt) {
  EngineCore core(EngineOptions{});
  Outcome a, b, c;
  ASSERT_TRUE(core.Add(Seq(Prompt(64), 2, &a)).ok());
  RunToEnd(core);
  EXPECT_EQ(a.cached, 0);
  ASSERT_TRUE(core.Add(Seq(Prompt(64), 2, &b)).ok());
  StepResult s = core.Step();
  RunToEnd(core);
  EXPECT_EQ(b.cached, 63);  // all 4 blocks, but the last token is computed
  EXPECT_EQ(s.prefill_tokens, 1);
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_TRUE(core.Add(Seq(Prompt(64, 1), 2, &c)).ok());
  RunToEnd(core);
  EXPECT_EQ(c.cached, 0);
  EXPECT_EQ(core.stats().prefix_hits, 63);
  EXPECT_EQ(core.stats().prefix_queries, 3 * 64);
  // Everything finished: only cached blocks remain, so nothing is in use.
  EXPECT_DOUBLE_EQ(core.stats().kv_usage, 0);
}

TEST(EngineCoreTest, CancelAnswersAndFreesBlocks) {
  EngineCore core(EngineOptions{});
  Outcome a, b;
  auto id = core.Add(Seq(Prompt(20), 100, &a));
  ASSERT_TRUE(id.ok());
  core.Step();
  EXPECT_GT(core.stats().kv_usage, 0);
  core.Cancel(*id);
  EXPECT_TRUE(a.finished);
  EXPECT_EQ(a.reason, FinishReason::kCancelled);
  EXPECT_DOUBLE_EQ(core.stats().kv_usage, 0);
  ASSERT_TRUE(core.Add(Seq(Prompt(20), 100, &b)).ok());
  core.CancelAll();
  EXPECT_TRUE(b.finished);
  EXPECT_FALSE(core.has_work());
}

TEST(EngineCoreTest, ProfileModeReportsModeledTime) {
  EngineOptions opt;
  serving::LatencyModel lm;
  lm.p0 = 0.01;
  lm.p1 = 1e-4;
  lm.d0 = 0.005;
  lm.d1 = 1e-3;
  opt.profile = lm;
  EngineCore core(opt);
  Outcome a;
  ASSERT_TRUE(core.Add(Seq(Prompt(100), 3, &a)).ok());
  EXPECT_NEAR(core.Step().seconds, 0.01 + 100 * 1e-4, 1e-9);
  EXPECT_NEAR(core.Step().seconds, 0.005 + 1e-3, 1e-9);
}

TEST(EngineCoreTest, EmbeddingsAreUnitVectorsAndStable) {
  EngineOptions opt;
  opt.hidden = 32;
  EngineCore core(opt);
  const auto a = core.Embed(core.Tokenize("hello gpu world"));
  const auto b = core.Embed(core.Tokenize("hello gpu world"));
  const auto c = core.Embed(core.Tokenize("another sentence entirely"));
  ASSERT_EQ(a.size(), 32u);
  double norm = 0;
  for (float v : a) norm += v * v;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(core.Tokenize("two  words").size(), 2u);
}

TEST(EngineCoreTest, BadOptionsAndRequests) {
  EngineOptions o;
  o.hidden = 0;
  EXPECT_FALSE(ValidateEngineOptions(o).ok());
  EngineCore core(EngineOptions{});
  Outcome x;
  EXPECT_FALSE(core.Add(Seq({}, 4, &x)).ok());
  EXPECT_FALSE(core.Add(Seq(Prompt(4), 0, &x)).ok());
  EXPECT_FALSE(core.Add(Seq(Prompt(4), 9000, &x)).ok());
}

}  // namespace
}  // namespace gpusched::engine
