#include "config/serve_sim_config.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::config {
namespace {

using ::testing::HasSubstr;

constexpr char kMinimal[] = R"(
deployments:
  - name: chat
    model: llama-2-7b
    gpu: A100-80GB
workload:
  trace: {format: azure, path: trace.csv}
)";

TEST(ServeSimConfigTest, MinimalGetsDefaults) {
  auto cfg = ParseServeSimYaml(kMinimal, "sim.yaml", "/data");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->seed, 42u);
  ASSERT_EQ(cfg->classes.size(), 4u);
  EXPECT_EQ(cfg->classes[1].name, "standard");
  ASSERT_EQ(cfg->deployments.size(), 1u);
  const SimDeploymentSpec& d = cfg->deployments[0];
  EXPECT_EQ(d.kind, "llm");
  EXPECT_EQ(d.replicas, 1);
  EXPECT_EQ(d.max_ongoing_requests, 64);
  EXPECT_EQ(d.router.policy, "least-outstanding");
  EXPECT_EQ(d.queue.order, "fair");
  EXPECT_EQ(d.engine.max_num_batched_tokens, 8192);
  EXPECT_EQ(cfg->workload.trace_path, "/data/trace.csv");
  EXPECT_EQ(cfg->workload.deployment, "chat");
  EXPECT_EQ(cfg->workload.tenant, "default");
  EXPECT_EQ(cfg->tenant_defaults.priority, "standard");
}

TEST(ServeSimConfigTest, Routes) {
  const std::string head = R"(
deployments:
  - {name: v1, model: llama-2-7b, gpu: A100-80GB}
  - {name: v2, model: llama-2-7b, gpu: A100-80GB}
workload:
  deployment: chat
  trace: {format: azure, path: trace.csv}
routes:
)";
  auto cfg = ParseServeSimYaml(
      head +
          "  - name: chat\n    targets: [{deployment: v1}, {deployment: "
          "v2}]\n    rollout: {canary: v2}\n",
      "sim.yaml", "");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ASSERT_EQ(cfg->routes.size(), 1u);
  EXPECT_EQ(cfg->routes[0].Stable(), "v1");
  EXPECT_EQ(cfg->routes[0].rollout->steps, DefaultRolloutSteps());
  auto bad = ParseServeSimYaml(
      head +
          "  - name: chat\n    targets: [{deployment: v1, weight: 50}, "
          "{deployment: v3, weight: 40}]\n",
      "sim.yaml", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(
      bad.status().message(),
      HasSubstr("routes[0].targets[1].deployment: 'v3' is not declared"));
}

TEST(ServeSimConfigTest, FullConfig) {
  auto cfg = ParseServeSimYaml(R"(
seed: 7
priority_classes:
  - {name: gold, timeout_s: 30}
  - {name: bronze, order: fcfs}
deployments:
  - name: chat
    model: llama-2-7b
    gpu: A100-80GB
    replicas: 8
    router: {policy: prefix-affinity, load_bound_epsilon: 0.5}
    queue: {order: edf, demote_late: true, max_queue_size: 100}
    engine: {block_tokens: 512, prefix_caching: false}
  - name: embed
    kind: tensor
    batching: {max_batch_size: 16, preferred_batch_size: [4, 8]}
tenant_defaults: {priority: bronze}
tenants:
  - name: a
    weight: 2
    priority: gold
    tokens_per_minute: 60000
    slo: {ttft_s: 1.5, tpot_s: 0.05}
workload:
  synthetic:
    duration_s: 30
    tenants:
      - {name: a, arrival: gamma, rate: 3, cv: 2, input_tokens: 100}
  time_scale: 2
)",
                               "sim.yaml", "");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->seed, 7u);
  EXPECT_EQ(cfg->classes[0].timeout_s, 30);
  EXPECT_EQ(cfg->classes[1].order, "fcfs");
  EXPECT_EQ(cfg->deployments[0].router.policy, "prefix-affinity");
  EXPECT_TRUE(cfg->deployments[0].queue.demote_late);
  EXPECT_EQ(cfg->deployments[0].engine.block_tokens, 512);
  EXPECT_EQ(cfg->deployments[1].batching.preferred_batch_size,
            (std::vector<int>{4, 8}));
  ASSERT_EQ(cfg->tenants.size(), 1u);
  EXPECT_EQ(cfg->tenants[0].priority, "gold");
  EXPECT_EQ(cfg->tenants[0].limits.tokens_per_minute, 60000);
  EXPECT_EQ(cfg->tenants[0].slo.ttft_s, 1.5);
  EXPECT_TRUE(cfg->workload.synthetic);
  ASSERT_EQ(cfg->workload.synthetic_tenants.size(), 1u);
  EXPECT_EQ(cfg->workload.synthetic_tenants[0].arrival, "gamma");
  EXPECT_EQ(cfg->workload.time_scale, 2);
}

TEST(ServeSimConfigTest, ListsEveryProblemWithLines) {
  auto cfg = ParseServeSimYaml(R"(deployments:
  - name: chat
    model: llama-2-7b
    gpu: A100-80GB
    replicas: 0
    router: {policy: random-walk}
    colour: blue
tenants:
  - name: a
    priority: platinum
workload:
  trace: {format: parquet, path: x}
)",
                               "sim.yaml", "");
  ASSERT_FALSE(cfg.ok());
  const std::string msg(cfg.status().message());
  EXPECT_THAT(msg, HasSubstr("sim.yaml:5: replicas must be in 1..1000000"));
  EXPECT_THAT(msg, HasSubstr("sim.yaml:6:"));
  EXPECT_THAT(msg, HasSubstr("unknown router policy 'random-walk'"));
  EXPECT_THAT(msg, HasSubstr("sim.yaml:7: unknown field 'colour'"));
  EXPECT_THAT(msg, HasSubstr("sim.yaml:10: unknown priority class 'platinum'"));
  EXPECT_THAT(msg, HasSubstr("sim.yaml:12: unknown trace format 'parquet'"));
}

TEST(ServeSimConfigTest, WorkloadRules) {
  auto both = ParseServeSimYaml(R"(deployments: [{name: e, kind: tensor}]
workload:
  trace: {format: vtc, path: r.csv}
  synthetic: {tenants: [{name: a}]}
)",
                                "s.yaml", "");
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(both.status().message(), HasSubstr("not both"));
  auto none = ParseServeSimYaml("deployments: [{name: e, kind: tensor}]\n",
                                "s.yaml", "");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("missing workload"));
  auto llm = ParseServeSimYaml(R"(deployments: [{name: c}]
workload: {trace: {format: vtc, path: r.csv}, deployment: nope}
)",
                               "s.yaml", "");
  ASSERT_FALSE(llm.ok());
  EXPECT_THAT(llm.status().message(), HasSubstr("needs model and gpu"));
  EXPECT_THAT(llm.status().message(), HasSubstr("'nope' is not declared"));
  auto syntax = ParseServeSimYaml("deployments: [\n", "s.yaml", "");
  ASSERT_FALSE(syntax.ok());
  EXPECT_THAT(syntax.status().message(), HasSubstr("YAML syntax error"));
}

TEST(ServeSimConfigTest, AutoscalingBlock) {
  constexpr char kText[] = R"(
deployments:
  - name: chat
    model: llama-2-7b
    gpu: A100-80GB
    autoscaling:
      min_replicas: 0
      max_replicas: 4
      policy: slo
      slo_ttft_s: 0.5
      upscale_delay_s: 5
      downscale_delay_s: 60
      max_concurrent_starts: 2
      idle_timeout_s: 30
      cold_start_s: 2.5
workload:
  trace: {format: azure, path: trace.csv}
)";
  auto cfg = ParseServeSimYaml(kText, "sim.yaml", "");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const SimDeploymentSpec& d = cfg->deployments[0];
  EXPECT_TRUE(d.autoscaling);
  EXPECT_EQ(d.replicas, 0);  // initial: min_replicas
  const autoscale::AutoscalingConfig& a = d.autoscaling_config;
  EXPECT_EQ(a.min_replicas, 0);
  EXPECT_EQ(a.max_replicas, 4);
  EXPECT_EQ(a.policy, autoscale::Policy::kSlo);
  EXPECT_DOUBLE_EQ(a.slo_ttft_s, 0.5);
  EXPECT_DOUBLE_EQ(a.upscale_delay_s, 5);
  EXPECT_DOUBLE_EQ(a.downscale_delay_s, 60);
  EXPECT_EQ(a.max_concurrent_starts, 2);
  EXPECT_DOUBLE_EQ(a.idle_timeout_s, 30);
  EXPECT_DOUBLE_EQ(a.target_ongoing_requests, 2);  // default
  EXPECT_DOUBLE_EQ(d.cold_start_s, 2.5);

  auto plain = ParseServeSimYaml(kMinimal, "sim.yaml", "");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->deployments[0].autoscaling);
  EXPECT_DOUBLE_EQ(plain->deployments[0].cold_start_s, -1);
}

// One llm deployment and a trace workload, around a block of its fields.
constexpr char kChatDeployment[] = R"(
deployments:
  - name: chat
    model: llama-2-7b
    gpu: A100-80GB
)";
constexpr char kTraceWorkload[] = R"(
workload:
  trace: {format: azure, path: trace.csv}
)";

TEST(ServeSimConfigTest, AutoscalingErrors) {
  const std::string base = kChatDeployment;
  const std::string tail = kTraceWorkload;
  struct Bad {
    std::string block;
    std::string message;
  };
  for (const Bad& b : std::vector<Bad>{
           {"    autoscaling: {policy: cpu}", "target-ongoing or slo"},
           {"    autoscaling: {policy: slo}", "slo_ttft_s > 0"},
           {"    autoscaling: {min_replicas: 3, max_replicas: 2}",
            "max_replicas must be"},
           {"    autoscaling: {max_concurrent_starts: 0}",
            "max_concurrent_starts"},
           {"    replicas: 5\n    autoscaling: {max_replicas: 2}",
            "replicas 5 must be in"},
           {"    autoscaling: {max_replica: 2}", "max_replica"},
       }) {
    auto cfg = ParseServeSimYaml(base + b.block + tail, "sim.yaml", "");
    ASSERT_FALSE(cfg.ok()) << b.block;
    EXPECT_THAT(cfg.status().message(), HasSubstr(b.message)) << b.block;
  }
}

TEST(ServeSimConfigTest, CanaryKnobs) {
  const std::string base = kChatDeployment;
  const std::string tail = kTraceWorkload;
  auto ok = ParseServeSimYaml(
      base + "    latency_multiplier: 1.5\n    error_rate: 0.02" + tail,
      "sim.yaml", "");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->deployments[0].latency_multiplier, 1.5);
  EXPECT_EQ(ok->deployments[0].error_rate, 0.02);
  auto plain = ParseServeSimYaml(base + tail, "sim.yaml", "");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->deployments[0].latency_multiplier, 1);
  EXPECT_EQ(plain->deployments[0].error_rate, 0);
  for (const auto& [block, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"    latency_multiplier: 0", "latency_multiplier"},
           {"    latency_multiplier: 101", "latency_multiplier"},
           {"    error_rate: 1.5", "error_rate"},
           {"    error_rate: -0.1", "error_rate"},
       }) {
    auto cfg = ParseServeSimYaml(base + block + tail, "sim.yaml", "");
    ASSERT_FALSE(cfg.ok()) << block;
    EXPECT_THAT(cfg.status().message(), HasSubstr(message)) << block;
  }
}

}  // namespace
}  // namespace gpusched::config
