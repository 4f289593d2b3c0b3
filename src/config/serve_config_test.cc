#include "config/serve_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::config {
namespace {

using ::testing::HasSubstr;

TEST(ServeConfigTest, ParsesWithDefaults) {
  auto cfg = ParseServeYaml(R"(
listen: 0.0.0.0:9000
deployments:
  - name: chat
    args: ["--hidden", "32"]
    replicas: 2
    router: {policy: power-of-two}
  - name: ext
    replicas: 0
    endpoints: ["127.0.0.1:8001"]
tenants:
  - name: demo
    models: [chat]
    requests_per_minute: 60
)",
                            "s.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->listen.host, "0.0.0.0");
  EXPECT_EQ(cfg->listen.port, 9000);
  EXPECT_EQ(cfg->state, "gpusched-state.db");
  ASSERT_EQ(cfg->deployments.size(), 2u);
  EXPECT_EQ(cfg->deployments[0].engine, "reference");
  EXPECT_EQ(cfg->deployments[0].model, "chat");
  EXPECT_EQ(cfg->deployments[0].args.size(), 2u);
  EXPECT_EQ(cfg->deployments[0].router.policy, "power-of-two");
  EXPECT_EQ(cfg->deployments[1].endpoints[0].port, 8001);
  EXPECT_EQ(cfg->tenants[0].limits.requests_per_minute, 60);
}

TEST(ServeConfigTest, ListsEveryProblem) {
  auto cfg = ParseServeYaml(R"(listen: nowhere
deployments:
  - name: chat
    replicas: 0
    router: {policy: magic}
tenants:
  - name: demo
    models: [nope]
)",
                            "s.yaml");
  ASSERT_FALSE(cfg.ok());
  const std::string m(cfg.status().message());
  EXPECT_THAT(m, HasSubstr("s.yaml:1: listen must be host:port"));
  EXPECT_THAT(m, HasSubstr("needs replicas >= 1 or endpoints"));
  EXPECT_THAT(m, HasSubstr("unknown router policy 'magic'"));
  EXPECT_THAT(m, HasSubstr("model 'nope' is not a deployment"));
  EXPECT_FALSE(ParseServeYaml("tenants: [{name: a}]\n", "s.yaml").ok());
}

}  // namespace
}  // namespace gpusched::config
