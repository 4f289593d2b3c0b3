#include "config/serve_config.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "config/manifest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ServeConfigTest, ParsesWithDefaults) {
  auto cfg = ParseServeYaml(R"(
listen: 0.0.0.0:9000
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "32"]}
    replicas: 2
    router: {policy: power-of-two}
    resources: {fraction: {milli: 250, memory: 10Gi}}
  - name: ext
    replicas: 0
    endpoints: ["127.0.0.1:8001"]
tenants:
  - name: demo
    models: [chat]
    limits: {requestsPerMinute: 60}
)",
                            "s.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->listen.host, "0.0.0.0");
  EXPECT_EQ(cfg->listen.port, 9000);
  EXPECT_EQ(cfg->state, "gpusched-state.db");
  EXPECT_EQ(cfg->inventory, "");
  EXPECT_EQ(cfg->gpu_discovery, "auto");
  EXPECT_EQ(cfg->placement_policy, "fillfrag");
  EXPECT_EQ(cfg->tls.cert, "");
  EXPECT_EQ(cfg->health_check_period_ms, 5000);
  EXPECT_EQ(cfg->drain_grace_s, 30);
  EXPECT_EQ(cfg->max_launches_per_pass, 2);
  EXPECT_EQ(cfg->launch_interval_ms, 0);
  EXPECT_TRUE(cfg->gpu_prices.empty());
  ASSERT_EQ(cfg->deployments.size(), 2u);
  EXPECT_EQ(cfg->deployments[0].engine, "reference");
  EXPECT_EQ(cfg->deployments[0].model, "chat");
  EXPECT_EQ(cfg->deployments[0].args.size(), 2u);
  EXPECT_EQ(cfg->deployments[0].replicas, 2);
  EXPECT_EQ(cfg->deployments[0].router.policy, "power-of-two");
  EXPECT_EQ(cfg->deployments[0].resources.milli, 250);
  EXPECT_EQ(cfg->deployments[1].endpoints[0].port, 8001);
  EXPECT_EQ(cfg->tenants[0].limits.requests_per_minute, 60);
}

TEST(ServeConfigTest, PlatformFields) {
  auto cfg = ParseServeYaml(R"(
inventory: inv.yaml
gpu_discovery: declared
placement_policy: binpack
tls: {cert: certs/server.pem, key: /etc/gpusched/key.pem}
health_check_period_ms: 250
drain_grace_s: 2.5
max_launches_per_pass: 64
launch_interval_ms: 50
gpu_prices: {H100-SXM-80GB: 4.0, L4-24GB: 0.8}
deployments: [{name: chat}]
tenants: [{name: demo}]
)",
                            "s.yaml", "/etc/gpusched");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->inventory, "/etc/gpusched/inv.yaml");
  EXPECT_EQ(cfg->gpu_discovery, "declared");
  EXPECT_EQ(cfg->placement_policy, "binpack");
  EXPECT_EQ(cfg->tls.cert, "/etc/gpusched/certs/server.pem");
  EXPECT_EQ(cfg->tls.key, "/etc/gpusched/key.pem");
  EXPECT_EQ(cfg->health_check_period_ms, 250);
  EXPECT_EQ(cfg->drain_grace_s, 2.5);
  EXPECT_EQ(cfg->max_launches_per_pass, 64);
  EXPECT_EQ(cfg->launch_interval_ms, 50);
  for (const char* n : {"-1", "60001", "0.5"}) {
    auto b =
        ParseServeYaml(absl::StrCat("launch_interval_ms: ", n, "\n"), "s.yaml");
    ASSERT_FALSE(b.ok()) << n;
    EXPECT_NE(b.status().message().find("launch_interval_ms"),
              std::string::npos)
        << b.status();
  }
  for (const char* n : {"0", "100001", "1.5"}) {
    auto b = ParseServeYaml(absl::StrCat("max_launches_per_pass: ", n, "\n"),
                            "s.yaml");
    ASSERT_FALSE(b.ok()) << n;
    EXPECT_NE(b.status().message().find("max_launches_per_pass"),
              std::string::npos)
        << b.status();
  }
  EXPECT_EQ(cfg->gpu_prices, (std::map<std::string, double>{
                                 {"H100-SXM-80GB", 4.0}, {"L4-24GB", 0.8}}));
  auto bad = ParseServeYaml("gpu_prices: {H100-SXM-80GB: -1}\n", "s.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("gpu_prices.H100-SXM-80GB"));
}

// A deployment item is a Deployment manifest's spec plus its name, read by
// the same code: the same fields give the same struct.
TEST(ServeConfigTest, DeploymentItemsAreManifestSpecs) {
  const std::string spec = R"(
    model: qwen
    engine: {template: vllm, args: [--x], env: {A: b}}
    resources: {whole: 2, nvlink: required, cpu: "4", memory: 16Gi}
    replicas: {min: 1, max: 3}
    priorityClass: batch
    slo: {ttftMs: 100}
    maxOngoingRequests: 8
    router: {policy: prefix-affinity, affinityBlocks: 2}
    queue: {order: edf, maxQueueSize: 5}
    kvBudgetTokens: 1000
)";
  auto cfg = ParseServeYaml(
      "deployments:\n  - name: chat" + spec + "tenants: [{name: t}]\n",
      "s.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto manifests = ParseManifests(
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: chat}\n"
      "spec:" +
          spec,
      "m.yaml");
  ASSERT_TRUE(manifests.ok()) << manifests.status();
  EXPECT_EQ(cfg->deployments[0], manifests->front().deployment);
}

TEST(ServeConfigTest, AutoscaledDeploymentMayStartAtZero) {
  auto cfg = ParseServeYaml(
      "deployments:\n  - name: chat\n"
      "    autoscaling: {minReplicas: 0, maxReplicas: 2, maxHeld: 5}\n",
      "s.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->deployments[0].replicas, 0);
  EXPECT_EQ(cfg->deployments[0].max_held, 5);
  auto fixed = ParseServeYaml("deployments:\n  - name: chat\n    replicas: 0\n",
                              "s.yaml");
  ASSERT_FALSE(fixed.ok());
  EXPECT_THAT(fixed.status().message(), HasSubstr("needs replicas >= 1"));
}

TEST(ServeConfigTest, ListsEveryProblem) {
  auto cfg = ParseServeYaml(R"(listen: nowhere
deployments:
  - name: chat
    replicas: 0
    router: {policy: magic}
  - name: chat
    engine: reference
tenants:
  - name: demo
    models: [nope]
    limits: {requests_per_minute: 5}
gpu_discovery: cuda
tls: {cert: a.pem}
)",
                            "s.yaml");
  ASSERT_FALSE(cfg.ok());
  const std::vector<std::string> lines =
      absl::StrSplit(cfg.status().message(), '\n');
  EXPECT_THAT(
      lines,
      ElementsAre(
          "s.yaml:1: listen: must be host:port (port 0..65535), got 'nowhere'",
          "s.yaml:4: deployments[0].replicas: needs replicas >= 1 or endpoints",
          HasSubstr("s.yaml:5: deployments[0].router.policy: unknown policy "
                    "'magic'; known: round-robin"),
          "s.yaml:6: deployments[1].name: 'chat' is declared twice (first at "
          "line 3)",
          "s.yaml:7: deployments[1].engine: must be a map, got 'reference'",
          HasSubstr("s.yaml:11: unknown field 'requests_per_minute' in "
                    "tenants[0].limits (known: requestsPerMinute"),
          "s.yaml:12: gpu_discovery: must be auto, nvml or declared, got "
          "'cuda'",
          "s.yaml:13: tls: set both cert and key, or neither"));
  // Deployments and tenants are optional (more come through the API).
  EXPECT_TRUE(ParseServeYaml("tenants: [{name: a}]\n", "s.yaml").ok());
  EXPECT_FALSE(ParseServeYaml("tenants: {name: a}\n", "s.yaml").ok());
}

TEST(ServeConfigTest, ExampleQuickstartParses) {
  auto cfg = LoadServeFile(GPUSCHED_SOURCE_DIR "/examples/quickstart.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->inventory,
            GPUSCHED_SOURCE_DIR "/examples/quickstart-inventory.yaml");
  ASSERT_EQ(cfg->deployments.size(), 2u);
  EXPECT_EQ(cfg->deployments[0].resources.kind, "fraction");
  EXPECT_EQ(cfg->deployments[0].resources.gpu_memory_mib, 10 * 1024);
}

TEST(ServeConfigTest, SlurmBlock) {
  auto none = ParseServeYaml("listen: 127.0.0.1:0\n", "s.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->slurm.enabled);
  auto cfg = ParseServeYaml(R"(slurm:
  partition: gpu
  account: ml
  qos: high
  job_prefix: gs-prod
  bin_dir: slurm/bin
  poll_interval_ms: 500
  command_timeout_ms: 2000
  default_memory_mib: 4096
  gres_map: {a100: A100-SXM4-80GB}
)",
                            "s.yaml", "/etc/gpusched");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const SlurmConfig& s = cfg->slurm;
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.partition, "gpu");
  EXPECT_EQ(s.account, "ml");
  EXPECT_EQ(s.qos, "high");
  EXPECT_EQ(s.job_prefix, "gs-prod");
  EXPECT_EQ(s.bin_dir, "/etc/gpusched/slurm/bin");
  EXPECT_EQ(s.poll_interval_ms, 500);
  EXPECT_EQ(s.command_timeout_ms, 2000);
  EXPECT_EQ(s.default_memory_mib, 4096);
  EXPECT_EQ(s.gres_map.at("a100"), "A100-SXM4-80GB");
  auto defaults = ParseServeYaml("slurm: {}\n", "s.yaml");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_TRUE(defaults->slurm.enabled);
  EXPECT_EQ(defaults->slurm.job_prefix, "gpusched");
  EXPECT_EQ(defaults->slurm.poll_interval_ms, 1000);

  struct Bad {
    const char* yaml;
    const char* field;
  };
  for (const Bad& b : {
           Bad{"slurm: {partition: \"a b\"}", "slurm.partition"},
           Bad{"slurm: {account: \"a,b\"}", "slurm.account"},
           Bad{"slurm: {job_prefix: \"\"}", "slurm.job_prefix"},
           Bad{"slurm: {job_prefix: a.b}", "slurm.job_prefix"},
           Bad{"slurm: {poll_interval_ms: 50}", "slurm.poll_interval_ms"},
           Bad{"slurm: {command_timeout_ms: 0}", "slurm.command_timeout_ms"},
           Bad{"slurm: {default_memory_mib: 0}", "slurm.default_memory_mib"},
           Bad{"slurm: {nodes: 3}", "nodes"},
           Bad{"slurm: {}\ninventory: inv.yaml", "inventory"},
       }) {
    auto r = ParseServeYaml(b.yaml, "s.yaml");
    ASSERT_FALSE(r.ok()) << b.yaml;
    EXPECT_THAT(r.status().message(), HasSubstr(b.field)) << b.yaml;
  }
}

TEST(ServeConfigTest, EtcdStoreAndHa) {
  auto none = ParseServeYaml("listen: 127.0.0.1:0\n", "s.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->etcd.enabled);
  EXPECT_FALSE(none->stop_replicas_on_exit);
  EXPECT_EQ(none->ha.lease_ttl_s, 2);
  auto cfg = ParseServeYaml(R"(store:
  etcd:
    endpoints: [https://10.0.0.1:2379, https://10.0.0.2:2379]
    prefix: /prod/gpusched/
    username: gpusched
    password_file: secrets/etcd.pass
    ca: tls/ca.pem
    cert: tls/client.pem
    key: tls/client-key.pem
    request_timeout_ms: 1500
    connect_timeout_ms: 5000
    max_events: 20000
    max_event_age_h: 24
ha:
  instance_id: gs-a
  advertise: https://gs-a.example:8443
  lease_ttl_s: 3
  renew_interval_ms: 500
stop_replicas_on_exit: true
)",
                            "s.yaml", "/etc/gpusched");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const EtcdConfig& e = cfg->etcd;
  EXPECT_TRUE(e.enabled);
  EXPECT_EQ(e.endpoints.size(), 2u);
  EXPECT_EQ(e.prefix, "/prod/gpusched/");
  EXPECT_EQ(e.username, "gpusched");
  EXPECT_EQ(e.password_file, "/etc/gpusched/secrets/etcd.pass");
  EXPECT_EQ(e.ca, "/etc/gpusched/tls/ca.pem");
  EXPECT_EQ(e.key, "/etc/gpusched/tls/client-key.pem");
  EXPECT_EQ(e.request_timeout_ms, 1500);
  EXPECT_EQ(e.max_events, 20000);
  EXPECT_EQ(cfg->ha.instance_id, "gs-a");
  EXPECT_EQ(cfg->ha.advertise, "https://gs-a.example:8443");
  EXPECT_EQ(cfg->ha.lease_ttl_s, 3);
  EXPECT_TRUE(cfg->stop_replicas_on_exit);
  auto defaults = ParseServeYaml("store: {etcd: {}}\n", "s.yaml");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->etcd.endpoints,
            std::vector<std::string>{"http://127.0.0.1:2379"});
  EXPECT_EQ(defaults->etcd.prefix, "/gpusched/");

  struct Bad {
    const char* yaml;
    const char* field;
  };
  for (const Bad& b : {
           Bad{"store: {etcd: {endpoints: []}}", "store.etcd.endpoints"},
           Bad{"store: {etcd: {endpoints: [10.0.0.1:2379]}}",
               "store.etcd.endpoints"},
           Bad{"store: {etcd: {prefix: gpusched}}", "store.etcd.prefix"},
           Bad{"store: {etcd: {username: u}}", "store.etcd.username"},
           Bad{"store: {etcd: {cert: c.pem}}", "store.etcd.cert"},
           Bad{"store: {etcd: {request_timeout_ms: 10}}",
               "store.etcd.request_timeout_ms"},
           Bad{"store: {etcd: {max_events: 5}}", "store.etcd.max_events"},
           Bad{"store: {etcd: {}}\nstate: x.db", "state"},
           Bad{"store: {redis: {}}", "redis"},
           Bad{"ha: {instance_id: \"a b\"}", "ha.instance_id"},
           Bad{"ha: {advertise: gs-a:8080}", "ha.advertise"},
           Bad{"ha: {lease_ttl_s: 0}", "ha.lease_ttl_s"},
           Bad{"ha: {lease_ttl_s: 2, renew_interval_ms: 1500}",
               "ha.renew_interval_ms"},
           Bad{"stop_replicas_on_exit: maybe", "stop_replicas_on_exit"},
       }) {
    auto r = ParseServeYaml(b.yaml, "s.yaml");
    ASSERT_FALSE(r.ok()) << b.yaml;
    EXPECT_THAT(r.status().message(), HasSubstr(b.field)) << b.yaml;
  }
}

TEST(ServeConfigTest, AlertsBlock) {
  auto none = ParseServeYaml("listen: 127.0.0.1:0\n", "s.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->alerts.prometheus_url, "");
  EXPECT_EQ(none->alerts.timeout_ms, 2000);
  EXPECT_EQ(none->alerts.max_alerts, 500);
  auto cfg = ParseServeYaml(R"(alerts:
  prometheus_url: http://prometheus.monitoring:9090/prom
  runbook_base_url: https://git.example/gpusched/blob/main/
  timeout_ms: 500
  max_alerts: 50
)",
                            "s.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->alerts.prometheus_url,
            "http://prometheus.monitoring:9090/prom");
  EXPECT_EQ(cfg->alerts.runbook_base_url,
            "https://git.example/gpusched/blob/main/");
  EXPECT_EQ(cfg->alerts.timeout_ms, 500);
  EXPECT_EQ(cfg->alerts.max_alerts, 50);
  struct Bad {
    const char* yaml;
    const char* field;
  };
  for (const Bad& b : {
           Bad{"alerts: {prometheus_url: prometheus:9090}",
               "alerts.prometheus_url"},
           Bad{"alerts: {prometheus_url: https://p:9090}",
               "alerts.prometheus_url"},
           Bad{"alerts: {timeout_ms: 10}", "alerts.timeout_ms"},
           Bad{"alerts: {timeout_ms: 60000}", "alerts.timeout_ms"},
           Bad{"alerts: {max_alerts: 0}", "alerts.max_alerts"},
           Bad{"alerts: {url: http://p:9090}", "url"},
       }) {
    auto r = ParseServeYaml(b.yaml, "s.yaml");
    ASSERT_FALSE(r.ok()) << b.yaml;
    EXPECT_THAT(r.status().message(), HasSubstr(b.field)) << b.yaml;
  }
}

TEST(ServeConfigTest, KubernetesBlock) {
  auto cfg = ParseServeYaml(R"(kubernetes:
  kubeconfig: kube/config
  api_server: https://10.0.0.1:6443
  namespace: serving
  instance: prod
  node_selector: {gpusched.io/managed: "true"}
  tolerations: [gpu]
  image: reg/gpusched:1
  images: {vllm: vllm/vllm-openai:v0.6.3}
  engine_path: /opt/gpusched
  scheduler_name: gs
  service_account: engines
  product_map: {NVIDIA-H100-PCIe: H100-PCIe-80GB}
  request_timeout_ms: 2000
  default_memory_mib: 2048
  pools:
    - name: h100-spot
      labels: {cloud.google.com/gke-nodepool: h100-spot}
      gpu_product: NVIDIA-H100-80GB-HBM3
      gpus_per_node: 8
      cpu: 200
      memory: 1800Gi
      spot: true
      max_nodes: 4
  pool_labels: [team.example.com/pool]
  karpenter_nodepools: false
)",
                            "s.yaml", "/etc/gpusched");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const KubernetesConfig& k = cfg->kubernetes;
  EXPECT_TRUE(k.enabled);
  EXPECT_EQ(k.kubeconfig, "/etc/gpusched/kube/config");
  EXPECT_EQ(k.api_server, "https://10.0.0.1:6443");
  EXPECT_EQ(k.namespace_name, "serving");
  EXPECT_EQ(k.instance, "prod");
  EXPECT_EQ(k.node_selector.at("gpusched.io/managed"), "true");
  EXPECT_EQ(k.tolerations, std::vector<std::string>{"gpu"});
  EXPECT_EQ(k.images.at("vllm"), "vllm/vllm-openai:v0.6.3");
  EXPECT_EQ(k.engine_path, "/opt/gpusched");
  EXPECT_EQ(k.scheduler_name, "gs");
  EXPECT_EQ(k.service_account, "engines");
  EXPECT_EQ(k.request_timeout_ms, 2000);
  EXPECT_EQ(k.default_memory_mib, 2048);
  ASSERT_EQ(k.pools.size(), 1u);
  EXPECT_EQ(k.pools[0].name, "h100-spot");
  EXPECT_EQ(k.pools[0].labels.at("cloud.google.com/gke-nodepool"), "h100-spot");
  EXPECT_EQ(k.pools[0].gpu_product, "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(k.pools[0].gpus_per_node, 8);
  EXPECT_EQ(k.pools[0].cpu_milli, 200000);
  EXPECT_EQ(k.pools[0].memory_mib, 1800 * 1024);
  EXPECT_TRUE(k.pools[0].spot);
  EXPECT_EQ(k.pools[0].max_nodes, 4);
  EXPECT_EQ(k.pool_labels, std::vector<std::string>{"team.example.com/pool"});
  EXPECT_FALSE(k.karpenter_nodepools);
  auto defaults = ParseServeYaml("kubernetes: {}\n", "s.yaml");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->kubernetes.namespace_name, "gpusched");
  EXPECT_EQ(defaults->kubernetes.tolerations.size(), 2u);
  EXPECT_FALSE(defaults->slurm.enabled);

  struct Bad {
    const char* yaml;
    const char* field;
  };
  for (const Bad& b : {
           Bad{"kubernetes: {namespace: Serving}", "kubernetes.namespace"},
           Bad{"kubernetes: {instance: \"\"}", "kubernetes.instance"},
           Bad{"kubernetes: {instance: abcdefghijklmnopqrstuvwxyz}",
               "kubernetes.instance"},
           Bad{"kubernetes: {request_timeout_ms: 1}",
               "kubernetes.request_timeout_ms"},
           Bad{"kubernetes: {tolerations: 3}", "kubernetes.tolerations"},
           Bad{"kubernetes: {pools: {a: 1}}", "kubernetes.pools"},
           Bad{"kubernetes: {pools: [{gpus_per_node: 1}]}",
               "kubernetes.pools[0].name"},
           Bad{"kubernetes: {pools: [{name: A}]}", "kubernetes.pools[0].name"},
           Bad{"kubernetes: {pools: [{name: a}, {name: a}]}",
               "kubernetes.pools[1].name: 'a' is declared twice"},
           Bad{"kubernetes: {pools: [{name: a, max_nodes: -1}]}",
               "kubernetes.pools[0].max_nodes"},
           Bad{"kubernetes: {pools: [{name: a, memory: lots}]}",
               "kubernetes.pools[0].memory"},
           Bad{"kubernetes: {pools: [{name: a, size: 3}]}", "size"},
           Bad{"kubernetes: {nodes: 3}", "nodes"},
           Bad{"kubernetes: {}\ninventory: inv.yaml", "inventory"},
           Bad{"kubernetes: {}\nslurm: {}", "cannot be used with slurm"},
       }) {
    auto r = ParseServeYaml(b.yaml, "s.yaml");
    ASSERT_FALSE(r.ok()) << b.yaml;
    EXPECT_THAT(r.status().message(), HasSubstr(b.field)) << b.yaml;
  }
}

}  // namespace
}  // namespace gpusched::config
