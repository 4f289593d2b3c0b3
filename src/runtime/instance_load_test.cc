#include "runtime/instance_load.h"

#include <numeric>
#include <string>

#include "gtest/gtest.h"

namespace gpusched::runtime {
namespace {

TEST(InstanceLoad, RoundTrips) {
  InstanceLoad l;
  l.seq = 7;
  l.deployments["chat"] = {.queued = 3,
                           .in_flight = 5,
                           .held = 0,
                           .held_ms = 0,
                           .ttft_s = {0.25, 0.5}};
  l.deployments["cold"] = {
      .queued = 1, .in_flight = 0, .held = 1, .held_ms = 120, .ttft_s = {}};
  l.tenants["team"] = {.requests_per_minute = 60, .tokens_per_minute = 6000};
  absl::StatusOr<InstanceLoad> back = LoadFromJson(LoadToJson(l));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->seq, 7);
  EXPECT_EQ(back->deployments.at("chat").in_flight, 5);
  EXPECT_EQ(back->deployments.at("chat").ttft_s,
            (std::vector<double>{0.25, 0.5}));
  EXPECT_EQ(back->deployments.at("cold").held_ms, 120);
  EXPECT_DOUBLE_EQ(back->tenants.at("team").tokens_per_minute, 6000);
}

TEST(InstanceLoad, BadDocumentsNameTheField) {
  auto bad = [](const std::string& text) {
    absl::StatusOr<InstanceLoad> r = LoadFromJson(text);
    EXPECT_FALSE(r.ok()) << text;
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  EXPECT_NE(bad("[1]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(bad(R"({"deployments":{"chat":{"queued":-1}}})")
                .find("deployments.chat.queued"),
            std::string::npos);
  EXPECT_NE(bad(R"({"tenants":{"t":{"rpm":"x"}}})").find("tenants.t.rpm"),
            std::string::npos);
  std::string many = R"({"deployments":{"d":{"ttft":[)";
  for (int i = 0; i <= kMaxTtftSamples; ++i) many += i ? ",1" : "1";
  many += "]}}}";
  EXPECT_NE(bad(many).find("at most"), std::string::npos);
}

TEST(InstanceLoad, ApportionSumsToTheTotal) {
  EXPECT_EQ(Apportion(10, {3, 1}), (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(Apportion(1, {1, 1, 1}), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(Apportion(2, {0, 0}), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(Apportion(0, {1, 2}), (std::vector<int64_t>{0, 0}));
  for (int total : {1, 7, 10, 99, 1000}) {
    const std::vector<double> w = {0.1, 0.3, 1.0 / 3, 0.2666};
    const std::vector<int64_t> a = Apportion(total, w);
    EXPECT_EQ(std::accumulate(a.begin(), a.end(), int64_t{0}), total);
  }
}

TEST(InstanceLoad, SharesFollowDemandAndAddUpToTheLimit) {
  serving::TenantLimits limits;
  limits.requests_per_minute = 600;
  limits.max_concurrency = 10;
  limits.max_queued = 5;
  std::map<std::string, InstanceLoad> all;
  all["a"].tenants["t"].requests_per_minute = 300;
  all["b"].tenants["t"].requests_per_minute = 100;
  all["c"];  // no demand: the reserve's part only
  const std::map<std::string, serving::TenantLimits> tenants = {{"t", limits},
                                                                {"free", {}}};
  double rate = 0;
  int64_t slots = 0, queued = 0;
  for (const std::string id : {"a", "b", "c"}) {
    auto shares = TenantShares(id, all, tenants);
    EXPECT_FALSE(shares.contains("free")) << "no limits: all of them";
    ASSERT_TRUE(shares.contains("t"));
    rate += shares["t"].rate;
    slots += shares["t"].max_concurrency;
    queued += shares["t"].max_queued;
  }
  EXPECT_NEAR(rate, 1.0, 1e-9);
  EXPECT_EQ(slots, 10);
  EXPECT_EQ(queued, 5);
  // Slots in equal parts, whatever the demand (the remainder to the ids
  // that sort first).
  EXPECT_EQ(TenantShares("a", all, tenants)["t"].max_concurrency, 4);
  EXPECT_EQ(TenantShares("c", all, tenants)["t"].max_concurrency, 3);
  EXPECT_EQ(TenantShares("c", all, tenants)["t"].max_queued, 1);
  const double a = TenantShares("a", all, tenants)["t"].rate;
  const double c = TenantShares("c", all, tenants)["t"].rate;
  EXPECT_NEAR(a, 0.9 * 0.75 + 0.1 / 3, 1e-9);
  EXPECT_NEAR(c, 0.1 / 3, 1e-9);
  // Alone, an instance has all of its limits.
  EXPECT_TRUE(TenantShares("a", {{"a", all["a"]}}, tenants).empty());
  // No demand anywhere: equal parts.
  std::map<std::string, InstanceLoad> idle = {{"a", {}}, {"b", {}}};
  EXPECT_NEAR(TenantShares("b", idle, tenants)["t"].rate, 0.5, 1e-9);
}

}  // namespace
}  // namespace gpusched::runtime
