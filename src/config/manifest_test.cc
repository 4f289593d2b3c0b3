#include "config/manifest.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "config/quantity.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr char kFullDeployment[] = R"(apiVersion: gpusched.io/v1
kind: Deployment
metadata:
  name: chat
  labels: {team: search}
spec:
  model: qwen-7b
  engine:
    template: vllm
    args: ["--max-model-len", "4096"]
    env: {HF_HOME: /cache}
  resources:
    fraction: {milli: 250, memory: 10Gi}
    gpuModels: [H100-SXM-80GB]
    cpu: 500m
    memory: 2Gi
  replicas: {min: 1, max: 4}
  priorityClass: critical
  slo: {ttftMs: 500, tpotMs: 50}
  maxOngoingRequests: 16
  router:
    policy: prefix-affinity
    loadBoundEpsilon: 0.5
    affinityBlocks: 8
    sessionFallback: round-robin
  queue: {order: edf, maxQueueSize: 100}
  kvBudgetTokens: 65536
)";

constexpr char kFullTenant[] = R"(apiVersion: gpusched.io/v1
kind: Tenant
metadata: {name: acme}
spec:
  models: [chat]
  weight: 2.5
  priorityClass: batch
  limits: {requestsPerMinute: 60, tokensPerMinute: 10000, burstMinutes: 2,
           maxQueued: 10}
  quota: {gpus: 1.5, limit: 4, overQuotaWeight: 0.5}
)";

Manifest ParseOne(const std::string& text) {
  auto got = ParseManifests(text, "m.yaml");
  EXPECT_TRUE(got.ok()) << got.status();
  if (!got.ok() || got->size() != 1) return {};
  return got->front();
}

std::vector<std::string> Lines(const absl::Status& s) {
  return absl::StrSplit(s.message(), '\n');
}

TEST(ManifestTest, ParsesEveryDeploymentField) {
  const Manifest m = ParseOne(kFullDeployment);
  ASSERT_EQ(m.kind, Manifest::Kind::kDeployment);
  const DeploymentSpec& d = m.deployment;
  EXPECT_EQ(m.name(), "chat");
  EXPECT_EQ(m.line, 1);
  EXPECT_EQ(d.labels.at("team"), "search");
  EXPECT_EQ(d.model, "qwen-7b");
  EXPECT_EQ(d.engine, "vllm");
  EXPECT_THAT(d.args, ElementsAre("--max-model-len", "4096"));
  EXPECT_EQ(d.env.at("HF_HOME"), "/cache");
  EXPECT_EQ(d.resources.kind, "fraction");
  EXPECT_EQ(d.resources.milli, 250);
  EXPECT_EQ(d.resources.gpu_memory_mib, 10 * 1024);
  EXPECT_THAT(d.resources.gpu_models, ElementsAre("H100-SXM-80GB"));
  EXPECT_EQ(d.resources.cpu_milli, 500);
  EXPECT_EQ(d.resources.memory_mib, 2048);
  EXPECT_EQ(d.replicas, 1);
  EXPECT_EQ(d.min_replicas, 1);
  EXPECT_EQ(d.max_replicas, 4);
  EXPECT_EQ(d.priority_class, "critical");
  EXPECT_EQ(d.ttft_slo_ms, 500);
  EXPECT_EQ(d.tpot_slo_ms, 50);
  EXPECT_EQ(d.max_ongoing_requests, 16);
  EXPECT_EQ(d.router.policy, "prefix-affinity");
  EXPECT_EQ(d.router.load_bound_epsilon, 0.5);
  EXPECT_EQ(d.router.affinity_blocks, 8);
  EXPECT_EQ(d.router.session_fallback, "round-robin");
  EXPECT_EQ(d.queue_order, "edf");
  EXPECT_EQ(d.max_queue_size, 100);
  EXPECT_EQ(d.kv_budget_tokens, 65536);
}

TEST(ManifestTest, ParsesEveryTenantField) {
  const Manifest m = ParseOne(kFullTenant);
  ASSERT_EQ(m.kind, Manifest::Kind::kTenant);
  const TenantSpec& t = m.tenant;
  EXPECT_EQ(t.name, "acme");
  EXPECT_THAT(t.models, ElementsAre("chat"));
  EXPECT_EQ(t.weight, 2.5);
  EXPECT_EQ(t.priority_class, "batch");
  EXPECT_EQ(t.limits.requests_per_minute, 60);
  EXPECT_EQ(t.limits.tokens_per_minute, 10000);
  EXPECT_EQ(t.limits.burst_minutes, 2);
  EXPECT_EQ(t.limits.max_queued, 10);
  EXPECT_EQ(t.quota.gpus, 1.5);
  EXPECT_EQ(t.quota.limit, 4);
  EXPECT_EQ(t.quota.over_quota_weight, 0.5);
}

TEST(ManifestTest, DefaultsFillEverythingElse) {
  const Manifest d = ParseOne(
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: a}\n");
  DeploymentSpec want;
  want.name = "a";
  want.model = "a";
  EXPECT_EQ(d.deployment, want);
  const Manifest t = ParseOne(
      "apiVersion: gpusched.io/v1\nkind: Tenant\nmetadata: {name: t}\n"
      "spec: {}\n");
  TenantSpec want_tenant;
  want_tenant.name = "t";
  EXPECT_EQ(t.tenant, want_tenant);
}

TEST(ManifestTest, Replicas) {
  struct Case {
    const char* replicas;
    int desired, min, max;
  };
  for (const Case& c :
       std::vector<Case>{{"3", 3, 3, 3},
                         {"0", 0, 0, 0},
                         {"{min: 2, max: 5}", 2, 2, 5},
                         {"{min: 0, max: 2}", 0, 0, 2},
                         {"{min: 1, max: 4, desired: 3}", 3, 1, 4}}) {
    const Manifest m =
        ParseOne(std::string("apiVersion: gpusched.io/v1\nkind: Deployment\n"
                             "metadata: {name: a}\nspec:\n  replicas: ") +
                 c.replicas + "\n");
    EXPECT_EQ(m.deployment.replicas, c.desired) << c.replicas;
    EXPECT_EQ(m.deployment.min_replicas, c.min) << c.replicas;
    EXPECT_EQ(m.deployment.max_replicas, c.max) << c.replicas;
  }
}

TEST(ManifestTest, ResourceKinds) {
  struct Case {
    const char* resources;
    ResourceSpec want;
  };
  ResourceSpec whole;
  whole.kind = "whole";
  whole.gpus = 2;
  whole.nvlink = "required";
  ResourceSpec mig;
  mig.kind = "mig";
  mig.mig_profile = "1g.10gb";
  ResourceSpec cpu_only;
  cpu_only.cpu_milli = 1500;
  cpu_only.memory_mib = 512;
  for (const Case& c :
       std::vector<Case>{{"{whole: 2, nvlink: required}", whole},
                         {"{mig: 1g.10gb}", mig},
                         {"{cpu: '1.5', memory: 512Mi}", cpu_only},
                         {"{}", ResourceSpec{}}}) {
    const Manifest m =
        ParseOne(std::string("apiVersion: gpusched.io/v1\nkind: Deployment\n"
                             "metadata: {name: a}\nspec:\n  resources: ") +
                 c.resources + "\n");
    EXPECT_EQ(m.deployment.resources, c.want) << c.resources;
  }
}

// One bad field per case: the message names the file, the line and the
// field.
TEST(ManifestTest, RejectsBadManifests) {
  const std::string head =
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: a}\n"
      "spec:\n";
  const std::string tenant =
      "apiVersion: gpusched.io/v1\nkind: Tenant\nmetadata: {name: t}\n"
      "spec:\n";
  struct Case {
    std::string text;
    std::string error;
  };
  const std::vector<Case> cases = {
      {head + "  replicas: two\n",
       "m.yaml:5: spec.replicas: must be an integer in 0..1000, got 'two'"},
      // Found by fuzz_manifest: invalid UTF-8 was stored, then replaced on
      // the way out, so the stored manifest was not the one applied.
      {tenant + "  models: [\"summ\xff\xfe"
                "ary\"]\n",
       "m.yaml:5: spec.models[0]: is not valid UTF-8 (byte 4)"},
      {head + "  replicas: -1\n",
       "m.yaml:5: spec.replicas: must be an integer in 0..1000, got '-1'"},
      {head + "  replicas: 1001\n",
       "m.yaml:5: spec.replicas: must be an integer in 0..1000, got '1001'"},
      {head + "  replicas: {min: 0, max: 100000000}\n",
       "m.yaml:5: spec.replicas.max: must be an integer in 0..1000"},
      {head + "  autoscaling: {maxReplicas: 5000}\n",
       "spec.autoscaling.maxReplicas: must be an integer in 0..1000"},
      {head + "  engine: {template: reference, args: [" +
           [] {
             std::string items;
             for (int i = 0; i < 257; ++i) items += "x,";
             return items;
           }() +
           "]}\n",
       "spec.engine.args: has 257 items; at most 256"},
      {head + "  model: " + std::string(5000, 'm') + "\n",
       "m.yaml:5: spec.model: is 5000 bytes long; at most 4096"},
      {head + "  replicas: {min: 3, max: 2}\n",
       "m.yaml:5: spec.replicas: min 3 must be in 0..max (2)"},
      {head + "  replicas: {min: 1, max: 2, desired: 5}\n",
       "m.yaml:5: spec.replicas: desired 5 must be in min..max (1..2)"},
      {head + "  replicas: {min: 1}\n",
       "m.yaml:5: spec.replicas.max: required"},
      {head + "  replicaz: 2\n",
       "m.yaml:5: unknown field 'replicaz' in spec (known: model, engine,"},
      {head + "  router: {policy: rr}\n",
       "m.yaml:5: spec.router.policy: unknown policy 'rr'; known: "
       "round-robin, least-outstanding"},
      {head + "  router: {sessionFallback: session-affinity}\n",
       "m.yaml:5: spec.router.sessionFallback: cannot be session-affinity"},
      {head + "  router: {loadBoundEpsilon: 0}\n",
       "m.yaml:5: spec.router.loadBoundEpsilon: must be a number > 0, got '0'"},
      {head + "  queue: {order: lifo}\n",
       "m.yaml:5: spec.queue.order: unknown queue order \"lifo\""},
      {head + "  priorityClass: gold\n",
       "m.yaml:5: spec.priorityClass: unknown class 'gold'; known: critical, "
       "standard, batch, sheddable"},
      {head + "  engine: reference\n",
       "m.yaml:5: spec.engine: must be a map, got 'reference'"},
      {head + "  engine: {template: ''}\n",
       "m.yaml:5: spec.engine.template: must not be empty"},
      {head + "  endpoints: [nowhere]\n",
       "m.yaml:5: spec.endpoints[0]: must be host:port"},
      {head + "  resources: {whole: 1, mig: 1g.10gb}\n",
       "m.yaml:5: spec.resources: set one of whole, fraction and mig, not "
       "whole and mig"},
      {head + "  resources:\n    fraction: {milli: 250}\n",
       "m.yaml:6: spec.resources.fraction.memory: required"},
      {head + "  resources:\n    fraction: {milli: 1001, memory: 1Gi}\n",
       "m.yaml:6: spec.resources.fraction.milli: must be an integer in "
       "1..1000, got '1001'"},
      {head + "  resources:\n    memory: lots\n",
       "m.yaml:6: spec.resources.memory: 'lots' is not a quantity"},
      {head + "  resources:\n    whole: 2\n    nvlink: always\n",
       "m.yaml:7: spec.resources.nvlink: must be any, preferred or required"},
      {head + "  resources:\n    fraction: {milli: 5, memory: 1Gi}\n"
              "    nvlink: required\n",
       "m.yaml:7: spec.resources.nvlink: applies to whole GPUs only"},
      {head + "  resources: {gpuModels: [A100-80GB]}\n",
       "m.yaml:5: spec.resources.gpuModels: needs a GPU request"},
      {head + "  maxOngoingRequests: 0\n",
       "m.yaml:5: spec.maxOngoingRequests: must be an integer >= 1, got '0'"},
      {head + "  slo: {ttftMs: -5}\n",
       "m.yaml:5: spec.slo.ttftMs: must be a number >= 0, got '-5'"},
      {tenant + "  weight: 0\n",
       "m.yaml:5: spec.weight: must be a number > 0, got '0'"},
      {tenant + "  limits: {burstMinutes: 0}\n",
       "m.yaml:5: spec.limits.burstMinutes: must be a number > 0"},
      {tenant + "  quota: {gpus: 4, limit: 2}\n",
       "m.yaml:5: spec.quota.limit: must be 0 (none) or >= gpus (4), got 2"},
      {tenant + "  models: chat\n",
       "m.yaml:5: spec.models: must be a list, got 'chat'"},
      {"apiVersion: gpusched.io/v2\nkind: Tenant\nmetadata: {name: t}\n",
       "m.yaml:1: apiVersion: must be gpusched.io/v1, got 'gpusched.io/v2'"},
      {"apiVersion: gpusched.io/v1\nkind: Pod\nmetadata: {name: t}\n",
       "m.yaml:2: kind: must be Deployment, Tenant or ModelRoute, got 'Pod'"},
      {"kind: Tenant\nmetadata: {name: t}\n",
       "m.yaml:1: apiVersion: required (gpusched.io/v1)"},
      {"apiVersion: gpusched.io/v1\nkind: Tenant\nmetadata: {name: Chat}\n",
       "m.yaml:3: metadata.name: 'Chat' must be lower-case"},
      {"apiVersion: gpusched.io/v1\nkind: Tenant\n",
       "m.yaml:1: metadata.name: required"},
      {"apiVersion: gpusched.io/v1\nkind: Tenant\nmetadata: {name: t}\n"
       "status: {}\n",
       "m.yaml:4: unknown field 'status' in the manifest (known: apiVersion, "
       "kind, metadata, spec)"},
      {"- a\n- b\n", "m.yaml:1: a manifest must be a map, got a list"},
      {"a: [\n", "m.yaml:2: YAML syntax error"},
  };
  for (const Case& c : cases) {
    auto got = ParseManifests(c.text, "m.yaml");
    ASSERT_FALSE(got.ok()) << c.text;
    EXPECT_THAT(got.status().message(), HasSubstr(c.error)) << c.text;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ManifestTest, BoundsTheManifestsOfOneText) {
  std::string text;
  for (int i = 0; i <= kMaxManifests; ++i) {
    text +=
        "---\napiVersion: gpusched.io/v1\nkind: Tenant\nmetadata: {name: t" +
        std::to_string(i) + "}\n";
  }
  auto m = ParseManifests(text, "m.yaml");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("more than 1000 manifests in one request"));
}

TEST(ManifestTest, ListsEveryProblemOncePerLine) {
  auto got = ParseManifests(R"(apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: chat}
spec:
  replicas: two
  router: {policy: rr}
  resources:
    fraction: {milli: 0, memory: 1Gi}
)",
                            "f.yaml");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(
      Lines(got.status()),
      ElementsAre("f.yaml:5: spec.replicas: must be an integer in 0..1000, got "
                  "'two'",
                  HasSubstr("f.yaml:6: spec.router.policy: unknown policy "
                            "'rr'; known: "),
                  "f.yaml:8: spec.resources.fraction.milli: must be an "
                  "integer in 1..1000, got '0'"));
}

TEST(ManifestTest, MultipleDocuments) {
  auto got = ParseManifests(std::string("---\n") + kFullDeployment +
                                "---\n---\n" + kFullTenant + "...\n",
                            "m.yaml");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_THAT(*got, SizeIs(2));
  EXPECT_EQ((*got)[0].name(), "chat");
  EXPECT_EQ((*got)[0].line, 2);
  EXPECT_EQ((*got)[1].kind, Manifest::Kind::kTenant);
  EXPECT_EQ((*got)[1].line, 31);
  auto empty = ParseManifests("", "m.yaml");
  ASSERT_TRUE(empty.ok());
  EXPECT_THAT(*empty, SizeIs(0));

  // A problem in the second document rejects the whole text, with its line
  // counted from the start of the file.
  auto bad = ParseManifests(std::string(kFullTenant) +
                                "---\napiVersion: gpusched.io/v1\n"
                                "kind: Tenant\nmetadata: {name: b}\n"
                                "spec: {weight: heavy}\n",
                            "m.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "m.yaml:15: spec.weight: must be a number > 0, got 'heavy'");
}

// Found by fuzz_manifest: yaml-cpp's LoadAll never returns on a document
// that starts with ',' (the apply wedged and its memory grew). Documents
// are now loaded one at a time.
TEST(ManifestTest, AStrayCommaDocumentEnds) {
  for (const char* text :
       {",", "  , a", "# c\n,", "apiVersion: gpusched.io/v1\n---\n,\n"}) {
    auto got = ParseManifests(text, "m.yaml");
    EXPECT_FALSE(got.ok() && !got->empty()) << text;
  }
  // Directives stay with the document they introduce.
  auto directive =
      ParseManifests(std::string("%YAML 1.2\n---\n") + kFullTenant, "m.yaml");
  ASSERT_TRUE(directive.ok()) << directive.status();
  EXPECT_THAT(*directive, SizeIs(1));
}

TEST(ManifestTest, DuplicateKindAndName) {
  const std::string tenant =
      "apiVersion: gpusched.io/v1\nkind: Tenant\nmetadata: {name: x}\n";
  const std::string deployment =
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: x}\n";
  auto dup = ParseManifests(tenant + "---\n" + tenant, "d.yaml");
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().message(),
            "d.yaml:7: Tenant 'x' is declared twice (first at line 1)");
  // The same name in two kinds is two objects.
  auto both = ParseManifests(tenant + "---\n" + deployment, "d.yaml");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_THAT(*both, SizeIs(2));
}

TEST(ManifestTest, RoundTripsThroughJson) {
  const std::vector<std::string> texts = {
      kFullDeployment,
      kFullTenant,
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: a}\n",
      "apiVersion: gpusched.io/v1\nkind: Tenant\nmetadata: {name: b}\n",
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: s}\n"
      "spec: {spread: gpu}\n",
      R"(apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: big.one}
spec:
  endpoints: ["10.0.0.1:8000", "[::1]:9000"]
  resources: {whole: 8, nvlink: preferred, cpu: "96", memory: 1Ti}
  replicas: {min: 0, max: 3, desired: 2}
  router: {policy: session-affinity, loadBoundEpsilon: 1e-6}
)",
      R"(apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: m}
spec:
  resources: {mig: 3g.40gb, gpuModels: [A100-80GB, H100-SXM-80GB], memory: 1500Mi}
  replicas: 0
)",
      R"(apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: scaled}
spec:
  slo: {ttftMs: 400}
  replicas: 1
  autoscaling: {minReplicas: 0, maxReplicas: 8, policy: slo,
                upscaleDelayS: 5, maxConcurrentStarts: 2, idleTimeoutS: 60}
)",
  };
  for (const std::string& text : texts) {
    const Manifest m = ParseOne(text);
    const nlohmann::json j = ToJson(m);
    auto reparsed = ParseManifests(j.dump(), "j.json");
    ASSERT_TRUE(reparsed.ok()) << reparsed.status() << "\n" << j.dump(2);
    ASSERT_THAT(*reparsed, SizeIs(1));
    EXPECT_EQ(reparsed->front(), m) << j.dump(2);
    auto from_json = ManifestFromJson(j, "j.json");
    ASSERT_TRUE(from_json.ok()) << from_json.status();
    EXPECT_EQ(*from_json, m) << j.dump(2);
    EXPECT_EQ(ToJson(*from_json), j);
  }
}

TEST(ManifestTest, CanonicalJsonHasEveryField) {
  const nlohmann::json j = ToJson(ParseOne(
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: a}\n"
      "spec:\n  resources: {fraction: {milli: 250, memory: 10Gi}}\n"));
  EXPECT_EQ(j["apiVersion"], "gpusched.io/v1");
  EXPECT_EQ(j["kind"], "Deployment");
  EXPECT_EQ(
      j["metadata"],
      (nlohmann::json{{"name", "a"}, {"labels", nlohmann::json::object()}}));
  const nlohmann::json& spec = j["spec"];
  for (const char* key :
       {"model", "engine", "endpoints", "resources", "replicas",
        "priorityClass", "slo", "maxOngoingRequests", "router", "queue",
        "kvBudgetTokens"}) {
    EXPECT_TRUE(spec.contains(key)) << key;
  }
  EXPECT_EQ(spec["model"], "a");
  EXPECT_EQ(spec["replicas"], 1);
  EXPECT_EQ(spec["engine"]["template"], "reference");
  EXPECT_EQ(spec["resources"]["fraction"]["memory"], "10Gi");
  EXPECT_EQ(spec["resources"]["nvlink"], "any");
  EXPECT_EQ(spec["router"]["policy"], "least-outstanding");
  EXPECT_EQ(spec["router"]["sessionFallback"], "least-outstanding");
  EXPECT_EQ(spec["queue"]["order"], "fair");
}

TEST(ManifestTest, ManifestFromJsonReportsProblems) {
  auto not_object = ManifestFromJson(nlohmann::json::array(), "api");
  EXPECT_FALSE(not_object.ok());
  nlohmann::json j = ToJson(ParseOne(kFullTenant));
  j["spec"]["weight"] = -1;
  auto bad = ManifestFromJson(j, "api");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("spec.weight: must be a number > 0, got '-1'"));
}

TEST(ManifestTest, CheckDeployment) {
  DeploymentSpec d;
  d.name = d.model = "a";
  std::vector<std::string> problems;
  CheckDeployment(d, DefaultPriorityClasses(), &problems);
  EXPECT_THAT(problems, SizeIs(0));
  d.priority_class = "standard";
  d.router.policy = "rr";
  d.queue_order = "lifo";
  d.resources.kind = "whole";
  d.resources.gpus = 0;
  CheckDeployment(d, {"gold"}, &problems);
  EXPECT_THAT(problems,
              ElementsAre(HasSubstr("spec.priorityClass: unknown class "
                                    "'standard'; known: gold"),
                          HasSubstr("spec.router.policy: unknown policy 'rr'"),
                          HasSubstr("spec.queue.order: unknown queue order"),
                          "spec.resources.whole: must be >= 1, got 0"));
}

TEST(ManifestTest, Autoscaling) {
  const Manifest m = ParseOne(R"(apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: chat}
spec:
  slo: {ttftMs: 500}
  autoscaling:
    minReplicas: 0
    maxReplicas: 6
    targetOngoingRequests: 4
    upscaleDelayS: 10
    downscaleDelayS: 120
    maxConcurrentStarts: 2
    idleTimeoutS: 90
    maxHeld: 7
    holdTimeoutS: 2.5
    policy: slo
)");
  const DeploymentSpec& d = m.deployment;
  ASSERT_TRUE(d.autoscaling.has_value());
  EXPECT_EQ(d.min_replicas, 0);
  EXPECT_EQ(d.max_replicas, 6);
  EXPECT_EQ(d.replicas, 0);  // initial: minReplicas
  const autoscale::AutoscalingConfig& a = *d.autoscaling;
  EXPECT_EQ(a.min_replicas, 0);
  EXPECT_EQ(a.max_replicas, 6);
  EXPECT_EQ(a.policy, autoscale::Policy::kSlo);
  EXPECT_DOUBLE_EQ(a.target_ongoing_requests, 4);
  EXPECT_DOUBLE_EQ(a.upscale_delay_s, 10);
  EXPECT_DOUBLE_EQ(a.downscale_delay_s, 120);
  EXPECT_EQ(a.max_concurrent_starts, 2);
  EXPECT_DOUBLE_EQ(a.idle_timeout_s, 90);
  EXPECT_DOUBLE_EQ(a.slo_ttft_s, 0.5);
  EXPECT_EQ(d.max_held, 7);
  EXPECT_DOUBLE_EQ(d.hold_timeout_s, 2.5);
  const nlohmann::json j = ToJson(m);
  EXPECT_EQ(j["spec"]["autoscaling"]["maxHeld"], 7);
  EXPECT_EQ(j["spec"]["autoscaling"]["holdTimeoutS"], 2.5);
  auto back = ManifestFromJson(j, "json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, m);
  EXPECT_EQ(j["spec"]["replicas"], 0);
  EXPECT_EQ(j["spec"]["autoscaling"]["maxReplicas"], 6);
  EXPECT_EQ(j["spec"]["autoscaling"]["policy"], "slo");

  // Without the block nothing changes in the canonical JSON.
  const Manifest plain = ParseOne(
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: a}\n");
  EXPECT_FALSE(plain.deployment.autoscaling.has_value());
  EXPECT_FALSE(ToJson(plain)["spec"].contains("autoscaling"));

  const std::string head =
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: a}\n"
      "spec:\n";
  struct Bad {
    std::string spec;
    std::string message;
  };
  for (const Bad& b : std::vector<Bad>{
           {"  autoscaling: {policy: cpu}", "must be target-ongoing or slo"},
           {"  autoscaling: {policy: slo}", "slo_ttft_s > 0"},
           {"  autoscaling: {minReplicas: 3, maxReplicas: 2}", "max_replicas"},
           {"  autoscaling: {maxConcurrentStarts: 0}", "maxConcurrentStarts"},
           {"  replicas: {min: 0, max: 2}\n  autoscaling: {}", "one integer"},
           {"  replicas: 5\n  autoscaling: {maxReplicas: 2}", "desired 5"},
           {"  endpoints: [\"127.0.0.1:9000\"]\n  autoscaling: {}",
            "attached endpoints"},
           {"  autoscaling: {maxReplica: 2}", "maxReplica"},
           {"  autoscaling: {maxHeld: 0}", "maxHeld"},
           {"  autoscaling: {holdTimeoutS: 0}", "holdTimeoutS"},
       }) {
    auto parsed = ParseManifests(head + b.spec + "\n", "m.yaml");
    ASSERT_FALSE(parsed.ok()) << b.spec;
    EXPECT_THAT(parsed.status().message(), HasSubstr(b.message)) << b.spec;
  }
}

TEST(ManifestTest, ObjectNames) {
  for (const char* ok : {"a", "chat", "llama-3.1-8b", "0x", "a.b"}) {
    EXPECT_TRUE(ValidObjectName(ok)) << ok;
  }
  for (const char* bad : {"", "Chat", "-a", "a-", "a_b", ".a", "a b"}) {
    EXPECT_FALSE(ValidObjectName(bad)) << bad;
  }
  EXPECT_TRUE(ValidObjectName(std::string(63, 'a')));
  EXPECT_FALSE(ValidObjectName(std::string(64, 'a')));
}

TEST(ManifestTest, HostPort) {
  HostPort hp;
  ASSERT_TRUE(ParseHostPort("10.0.0.1:8000", &hp));
  EXPECT_EQ(hp, (HostPort{"10.0.0.1", 8000}));
  EXPECT_FALSE(ParseHostPort("host", &hp));
  EXPECT_FALSE(ParseHostPort(":80", &hp));
  EXPECT_FALSE(ParseHostPort("h:70000", &hp));
}

TEST(QuantityTest, FormatParsesBack) {
  for (int64_t milli : {0, 1, 500, 1000, 1500, 96000}) {
    EXPECT_EQ(ParseCpuMilli(FormatCpuMilli(milli)), milli) << milli;
  }
  for (int64_t mib : {0, 1, 100, 1024, 1536, 10240, 1024 * 1024}) {
    EXPECT_EQ(ParseMemoryMib(FormatMemoryMib(mib)), mib) << mib;
  }
  EXPECT_EQ(FormatCpuMilli(2000), "2");
  EXPECT_EQ(FormatCpuMilli(250), "250m");
  EXPECT_EQ(FormatMemoryMib(10240), "10Gi");
  EXPECT_EQ(FormatMemoryMib(1536), "1536Mi");
}

TEST(ManifestTest, Spread) {
  auto d = ParseManifests(
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: a}\n",
      "m.yaml");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)[0].deployment.spread, "node");
  // The default is left out of the canonical JSON (stored manifests keep
  // theirs).
  EXPECT_FALSE(ToJson((*d)[0])["spec"].contains("spread"));
  auto none = ParseManifests(
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: a}\n"
      "spec: {spread: none}\n",
      "m.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(ToJson((*none)[0])["spec"]["spread"], "none");
  auto bad = ParseManifests(
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: a}\n"
      "spec: {spread: rack}\n",
      "m.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("spec.spread: must be node, gpu or none, got 'rack'"));
}

}  // namespace
}  // namespace gpusched::config
