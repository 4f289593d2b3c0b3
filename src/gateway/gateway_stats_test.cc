#include "gateway/gateway_stats.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::gateway {
namespace {

constexpr Micros kS = kMicrosPerSecond;
constexpr Micros kMs = kMicrosPerMilli;

GatewayStats::Finish Done(Micros now, Micros ttft, Micros e2e, bool ok = true) {
  GatewayStats::Finish f;
  f.deployment = "chat";
  f.tenant = "demo";
  f.now = now;
  f.ttft = ttft;
  f.e2e = e2e;
  f.input_tokens = 10;
  f.output_tokens = 4;
  f.ok = ok;
  return f;
}

TEST(GatewayStatsTest, EmptyHasNoPercentiles) {
  GatewayStats stats;
  stats.RecordRejected("chat", "demo", 100 * kS);
  const nlohmann::json j = stats.Json(100 * kS);
  ASSERT_EQ(j["deployments"].size(), 1u);
  EXPECT_EQ(j["deployments"][0]["rejected"], 1);
  EXPECT_EQ(j["deployments"][0]["completed"], 0);
  EXPECT_TRUE(j["deployments"][0]["ttftSeconds"]["p50"].is_null());
  EXPECT_EQ(j["tenants"][0]["rejected"], 1);
}

TEST(GatewayStatsTest, CountsRatesAndPercentiles) {
  GatewayStats stats;
  // 100 requests over seconds 100..109: TTFT 1..100 ms, E2E twice that.
  for (int i = 1; i <= 100; ++i) {
    stats.RecordFinished(
        Done(100 * kS + (i - 1) * 100 * kMs, i * kMs, 2 * i * kMs));
  }
  stats.RecordFinished(Done(109 * kS, 0, 0, /*ok=*/false));
  const nlohmann::json j = stats.Json(110 * kS);
  const nlohmann::json& d = j["deployments"][0];
  EXPECT_EQ(d["completed"], 100);
  EXPECT_EQ(d["errors"], 1);
  EXPECT_EQ(d["outputTokens"], 400);
  EXPECT_DOUBLE_EQ(d["requestsPerSecond"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(d["ttftSeconds"]["p50"].get<double>(), 0.051);
  EXPECT_DOUBLE_EQ(d["ttftSeconds"]["p90"].get<double>(), 0.091);
  EXPECT_DOUBLE_EQ(d["e2eSeconds"]["p99"].get<double>(), 0.2);
  EXPECT_EQ(j["tenants"][0]["requests"], 101);
  EXPECT_EQ(j["tenants"][0]["errors"], 1);
}

TEST(GatewayStatsTest, OldSamplesAndSecondsAge) {
  GatewayStats stats;
  stats.RecordFinished(Done(10 * kS, 5 * kMs, 9 * kMs));
  // Within the window: a percentile; the rate counts whole past seconds.
  nlohmann::json j = stats.Json(11 * kS);
  EXPECT_DOUBLE_EQ(j["deployments"][0]["ttftSeconds"]["p50"].get<double>(),
                   0.005);
  EXPECT_DOUBLE_EQ(j["deployments"][0]["requestsPerSecond"].get<double>(), 0.1);
  // Past the window and the rate: counters stay, the rest is gone.
  j = stats.Json(10 * kS + GatewayStats::kWindow + kS);
  EXPECT_EQ(j["deployments"][0]["completed"], 1);
  EXPECT_TRUE(j["deployments"][0]["ttftSeconds"]["p50"].is_null());
  EXPECT_DOUBLE_EQ(j["deployments"][0]["requestsPerSecond"].get<double>(), 0);
}

TEST(GatewayStatsTest, TtftSinceTakesOnlyNewerSamples) {
  GatewayStats stats;
  stats.RecordFinished(Done(10 * kS, 5 * kMs, 9 * kMs));
  stats.RecordFinished(Done(12 * kS, 7 * kMs, 9 * kMs));
  EXPECT_THAT(stats.TtftSince("chat", 0), ::testing::ElementsAre(0.005, 0.007));
  EXPECT_THAT(stats.TtftSince("chat", 10 * kS), ::testing::ElementsAre(0.007));
  EXPECT_TRUE(stats.TtftSince("chat", 12 * kS).empty());
  EXPECT_TRUE(stats.TtftSince("other", 0).empty());
}

TEST(GatewayStatsTest, RingKeepsTheNewestSamples) {
  GatewayStats stats;
  const size_t n = GatewayStats::kSamples + 100;
  for (size_t i = 0; i < n; ++i) {
    // The first 100 are slow; the ring must have dropped them.
    stats.RecordFinished(Done(50 * kS, i < 100 ? 10 * kS : kMs, kMs));
  }
  const nlohmann::json j = stats.Json(51 * kS);
  EXPECT_EQ(j["deployments"][0]["samples"], GatewayStats::kSamples);
  EXPECT_DOUBLE_EQ(j["deployments"][0]["ttftSeconds"]["p99"].get<double>(),
                   0.001);
}

}  // namespace
}  // namespace gpusched::gateway
