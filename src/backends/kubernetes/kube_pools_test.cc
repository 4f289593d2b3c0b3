#include "backends/kubernetes/kube_pools.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "backends/kubernetes/kube_client.h"
#include "backends/kubernetes/kube_launcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/http_server.h"

namespace gpusched::backends {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::Pair;

// Nodes as managed services label them: GKE (a spot A100 node pool), EKS
// (an on-demand H100 node group), Karpenter (one node of NodePool gpu-l4),
// a static node with no pool label, and a GKE node being scaled down.
constexpr char kNodes[] = R"({"kind": "NodeList", "items": [
  {"metadata": {"name": "gke-a100-1", "labels": {
     "cloud.google.com/gke-nodepool": "a100-spot",
     "cloud.google.com/gke-spot": "true",
     "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
   "status": {"allocatable": {"cpu": "94", "memory": "1300Gi", "nvidia.com/gpu": "8"},
              "conditions": [{"type": "Ready", "status": "True"}]}},
  {"metadata": {"name": "gke-a100-2", "labels": {
     "cloud.google.com/gke-nodepool": "a100-spot",
     "cloud.google.com/gke-spot": "true",
     "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
   "spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler",
                        "value": "1733460000", "effect": "NoSchedule"}]},
   "status": {"allocatable": {"cpu": "94", "memory": "1300Gi", "nvidia.com/gpu": "8"},
              "conditions": [{"type": "Ready", "status": "True"}]}},
  {"metadata": {"name": "ip-10-0-1-5", "labels": {
     "eks.amazonaws.com/nodegroup": "h100-od",
     "eks.amazonaws.com/capacityType": "ON_DEMAND",
     "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
   "status": {"allocatable": {"cpu": "190", "memory": "2000Gi", "nvidia.com/gpu": "8"},
              "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}},
  {"metadata": {"name": "karp-l4-x", "labels": {
     "karpenter.sh/nodepool": "gpu-l4", "karpenter.sh/capacity-type": "spot",
     "nvidia.com/gpu.product": "NVIDIA-L4"}},
   "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
   "status": {"allocatable": {"cpu": "7", "memory": "28Gi", "nvidia.com/gpu": "1"},
              "conditions": [{"type": "Ready", "status": "True"}]}},
  {"metadata": {"name": "static-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
   "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4"},
              "conditions": [{"type": "Ready", "status": "True"}]}}
]})";

// A Karpenter NodePool (karpenter.sh/v1) as the API server returns it.
constexpr char kNodePools[] =
    R"({"apiVersion": "karpenter.sh/v1", "kind": "NodePoolList", "items": [
  {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
   "metadata": {"name": "gpu-l4", "resourceVersion": "812"},
   "spec": {
     "template": {
       "metadata": {"labels": {"team": "serving"}},
       "spec": {
         "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
         "requirements": [
           {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
           {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["1"]},
           {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]}],
         "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}},
     "limits": {"cpu": "1000", "nvidia.com/gpu": "6"},
     "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"}}}]})";

std::vector<KubeNode> Nodes() {
  auto nodes = ParseKubeNodeList(json::parse(kNodes));
  EXPECT_TRUE(nodes.ok()) << nodes.status();
  return nodes.ok() ? *nodes : std::vector<KubeNode>{};
}

TEST(KubePoolsTest, NodeLabelsNameThePoolAndSpot) {
  const std::vector<KubeNode> nodes = Nodes();
  ASSERT_EQ(nodes.size(), 5u);
  struct Case {
    int node;
    std::string key, value;
    bool spot;
    std::string taint;
  };
  const Case cases[] = {
      {0, "cloud.google.com/gke-nodepool", "a100-spot", true, ""},
      {1, "cloud.google.com/gke-nodepool", "a100-spot", true,
       "ToBeDeletedByClusterAutoscaler"},
      {2, "eks.amazonaws.com/nodegroup", "h100-od", false, ""},
      {3, "karpenter.sh/nodepool", "gpu-l4", true, "karpenter.sh/disrupted"},
      {4, "", "", false, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(nodes[c.node].name);
    EXPECT_EQ(KubeNodePoolLabel(nodes[c.node]), std::pair(c.key, c.value));
    EXPECT_EQ(KubeNodeIsSpot(nodes[c.node]), c.spot);
    EXPECT_EQ(KubeScaleDownTaint(nodes[c.node]), c.taint);
  }
}

TEST(KubePoolsTest, PoolNodeStatesFollowReadinessAndScaleDownTaints) {
  const std::vector<KubeNode> nodes = Nodes();
  ASSERT_EQ(nodes.size(), 5u);
  const PoolNodeState want[] = {
      PoolNodeState::kUp, PoolNodeState::kPoweringDown,
      PoolNodeState::kPoweringUp, PoolNodeState::kPoweringDown,
      PoolNodeState::kUp};
  for (int i = 0; i < 5; ++i) {
    std::string reason;
    EXPECT_EQ(KubePoolNodeState(nodes[i], &reason), want[i]) << nodes[i].name;
    if (want[i] == PoolNodeState::kPoweringDown) {
      EXPECT_THAT(reason, ::testing::HasSubstr("the autoscaler is removing"));
    }
  }
}

TEST(KubePoolsTest, KarpenterNodePoolGivesSelectorSpotGpusAndMaxNodes) {
  auto pools = ParseKarpenterNodePoolList(json::parse(kNodePools));
  ASSERT_TRUE(pools.ok()) << pools.status();
  ASSERT_EQ(pools->size(), 1u);
  const PoolReport& p = (*pools)[0];
  EXPECT_EQ(p.pool, "gpu-l4");
  EXPECT_TRUE(p.spot);
  EXPECT_EQ(p.gpu_model, "NVIDIA-L4");
  EXPECT_EQ(p.gpus_per_node, 1);
  EXPECT_EQ(p.max_nodes, 6);  // limits nvidia.com/gpu 6, 1 per node
  EXPECT_THAT(p.selector,
              ElementsAre(Pair("karpenter.sh/nodepool", "gpu-l4"),
                          Pair("team", "serving"),
                          Pair("nvidia.com/gpu.product", "NVIDIA-L4")));
}

TEST(KubePoolsTest, KarpenterNodePoolErrorsNameTheField) {
  const struct {
    const char* text;
    const char* want;
  } cases[] = {
      {R"({"metadata": {}})", "metadata.name"},
      {R"({"metadata": {"name": "p"}, "spec": {"template": {"spec": {"requirements": 3}}}})",
       "requirements is not a list"},
      {R"({"metadata": {"name": "p"}, "spec": {"template": {"spec": {"requirements": [
          {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["x"]}]}}}})",
       "instance-gpu-count 'x' is not a GPU count"},
      {R"({"metadata": {"name": "p"}, "spec": {"limits": {"nvidia.com/gpu": "lots"},
          "template": {"spec": {"requirements": [
          {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["8"]}]}}}})",
       "spec.limits['nvidia.com/gpu'] is not a whole number"},
  };
  for (const auto& c : cases) {
    auto p = ParseKarpenterNodePool(json::parse(c.text));
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_THAT(std::string(p.status().message()),
                ::testing::HasSubstr(c.want));
  }
}

TEST(KubePoolsTest, ConfigNodePoolsAndNodesMergeByName) {
  KubePoolSpec h100;  // scaled to zero: no node shows it
  h100.name = "h100-zero";
  h100.labels = {{"cloud.google.com/gke-nodepool", "h100-zero"}};
  h100.gpu_product = "NVIDIA-H100-80GB-HBM3";
  h100.gpus_per_node = 8;
  h100.max_nodes = 4;
  KubePoolSpec a100;  // configured with a maximum; the nodes give the rest
  a100.name = "a100-spot";
  a100.labels = {{"cloud.google.com/gke-nodepool", "a100-spot"}};
  a100.max_nodes = 10;
  auto nodepools = ParseKarpenterNodePoolList(json::parse(kNodePools));
  ASSERT_TRUE(nodepools.ok());
  const std::vector<PoolReport> pools =
      KubePools({h100, a100}, *nodepools, Nodes());
  ASSERT_EQ(pools.size(), 4u);
  // Sorted by name.
  EXPECT_EQ(pools[0].pool, "a100-spot");
  EXPECT_EQ(pools[0].gpu_model, "NVIDIA-A100-SXM4-80GB");
  EXPECT_EQ(pools[0].gpus_per_node, 8);
  EXPECT_EQ(pools[0].cpu_milli, 94000);
  EXPECT_TRUE(pools[0].spot);
  EXPECT_EQ(pools[0].max_nodes, 10);
  EXPECT_EQ(pools[1].pool, "gpu-l4");  // the NodePool's, with its node
  EXPECT_EQ(pools[1].max_nodes, 6);
  EXPECT_EQ(pools[1].memory_mib, 28 * 1024);
  EXPECT_EQ(pools[2].pool, "h100-od");  // only its node: cannot grow
  EXPECT_EQ(pools[2].max_nodes, 1);
  EXPECT_FALSE(pools[2].spot);
  EXPECT_EQ(pools[3].pool, "h100-zero");
  EXPECT_EQ(pools[3].gpus_per_node, 8);
  EXPECT_EQ(pools[3].max_nodes, 4);
  EXPECT_EQ(KubePoolOfNode(Nodes()[0], pools), "a100-spot");
  EXPECT_EQ(KubePoolOfNode(Nodes()[4], pools), "");
}

// A client that points nowhere: the launcher makes no request here.
std::unique_ptr<KubeClient> Nowhere() {
  KubeCredentials c;
  c.host = "127.0.0.1";
  c.port = 9;
  c.tls = false;
  return *KubeClient::Create(c, {.timeout = 200 * kMicrosPerMilli});
}

PoolReport H100Pool() {
  PoolReport p;
  p.pool = "h100";
  p.gpu_model = "NVIDIA-H100-80GB-HBM3";
  p.gpus_per_node = 8;
  p.max_nodes = 4;
  p.selector = {{"cloud.google.com/gke-nodepool", "h100"}};
  return p;
}

TEST(KubeCapacityObjectsTest, APoolPodAsksTheAutoscalerForItsGpusAndProduct) {
  ProcessSpec spec;
  spec.name = "chat-0";
  spec.engine = "reference";
  spec.argv = {"gpusched", "engine"};
  spec.placement.pool = "h100";
  spec.placement.deployment = "chat";
  spec.placement.gpus = {0, 1};
  spec.placement.memory_mib = 2048;
  KubeLauncherOptions o;
  o.image = "img:1";
  KubeLauncher l(o, Nowhere(), Nowhere(), Nowhere(), {});
  json pod = l.PoolPodObject(spec, "gpusched-chat-0-x1", H100Pool(), "");
  EXPECT_EQ(pod["spec"]["schedulerName"], "gpusched");
  EXPECT_FALSE(pod["spec"].contains("nodeName"));
  EXPECT_EQ(pod["spec"]["nodeSelector"], json::parse(R"({
      "cloud.google.com/gke-nodepool": "h100",
      "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})"));
  EXPECT_EQ(pod["spec"]["containers"][0]["resources"], json::parse(R"({
      "requests": {"memory": "2048Mi", "nvidia.com/gpu": "2"},
      "limits": {"nvidia.com/gpu": "2"}})"));
  const json& ann = pod["metadata"]["annotations"];
  EXPECT_EQ(ann["cluster-autoscaler.kubernetes.io/safe-to-evict"], "false");
  EXPECT_EQ(ann["karpenter.sh/do-not-disrupt"], "true");
  EXPECT_EQ(ann["gpusched.io/pool"], "h100");
  EXPECT_FALSE(ann.contains(kKubeConsumeProvisioningRequest));
  // Pinned as a bound Pod is: the GPUs it was planned on.
  bool pinned = false;
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == "NVIDIA_VISIBLE_DEVICES") pinned = e["value"] == "0,1";
  }
  EXPECT_TRUE(pinned);

  // A member of a gang consumes its ProvisioningRequest.
  pod = l.PoolPodObject(spec, "gpusched-chat-0-x2", H100Pool(), "gang-a");
  EXPECT_EQ(pod["metadata"]["annotations"][kKubeConsumeProvisioningRequest],
            "gang-a");
  EXPECT_EQ(pod["metadata"]["annotations"][kKubeProvisioningClassAnnotation],
            "best-effort-atomic-scale-up.autoscaling.x-k8s.io");

  // A fraction asks for the one GPU it shares.
  spec.placement.gpus = {3};
  spec.placement.fraction = true;
  spec.placement.gpu_share = 0.5;
  pod = l.PoolPodObject(spec, "p", H100Pool(), "");
  EXPECT_EQ(
      pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
      "1");
}

TEST(KubeCapacityObjectsTest, AGangIsAProvisioningRequestWithItsPodTemplate) {
  KubeLauncherOptions o;
  o.image = "img:1";
  o.namespace_name = "serving";
  KubeLauncher l(o, Nowhere(), Nowhere(), Nowhere(), {});
  EXPECT_EQ(l.ProvisioningRequestObject("gpusched-h100-r7", 3), json::parse(R"({
      "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
      "metadata": {"name": "gpusched-h100-r7", "namespace": "serving",
                   "labels": {"app.kubernetes.io/managed-by": "gpusched",
                              "gpusched.io/instance": "gpusched"}},
      "spec": {"provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
               "podSets": [{"count": 3, "podTemplateRef": {"name": "gpusched-h100-r7"}}]}})"));
  const json t = l.PodTemplateObject(H100Pool(), "gpusched-h100-r7");
  EXPECT_EQ(t["apiVersion"], "v1");
  EXPECT_EQ(t["kind"], "PodTemplate");
  EXPECT_EQ(t["metadata"]["namespace"], "serving");
  // One Pod per node: the whole node's GPUs, on the pool's nodes.
  const json& spec = t["template"]["spec"];
  EXPECT_EQ(spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
            "8");
  EXPECT_EQ(spec["nodeSelector"]["cloud.google.com/gke-nodepool"], "h100");
  EXPECT_EQ(spec["nodeSelector"]["nvidia.com/gpu.product"],
            "NVIDIA-H100-80GB-HBM3");
}

// An API server that records every request and answers 201/200 with the
// body it was sent (404 for Karpenter's NodePools: none on this cluster).
class RecordingApi {
 public:
  struct Call {
    std::string method, target, type;
    json body;
  };
  RecordingApi() {
    server_ = *net::HttpServer::Start(
        {}, [this](net::HttpRequest req, std::shared_ptr<net::Responder> r) {
          net::HttpResponse res;
          res.version(11);
          res.set(net::http::field::content_type, "application/json");
          const std::string method(req.method_string());
          const std::string target(req.target());
          {
            absl::MutexLock l(&mu_);
            calls_.push_back(
                {method, target,
                 std::string(req[net::http::field::content_type]),
                 json::parse(req.body().empty() ? "null" : req.body(), nullptr,
                             false)});
          }
          const bool missing = target.find("karpenter.sh") != std::string::npos;
          res.result(missing ? 404 : method == "POST" ? 201 : 200);
          res.body() = missing ? json{{"kind", "Status"},
                                      {"code", 404},
                                      {"reason", "NotFound"}}
                                     .dump()
                               : req.body();
          r->Send(std::move(res));
        });
  }
  ~RecordingApi() { server_->Shutdown(std::chrono::milliseconds(100)); }
  std::unique_ptr<KubeClient> Client() const {
    KubeCredentials c;
    c.host = "127.0.0.1";
    c.port = server_->port();
    c.tls = false;
    return *KubeClient::Create(c, {});
  }
  std::vector<Call> Take() {
    absl::MutexLock l(&mu_);
    return std::exchange(calls_, {});
  }

 private:
  std::unique_ptr<net::HttpServer> server_;
  absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
};

TEST(KubeCapacityRequestsTest, WhatTheLauncherSendsForAPoolAGangAndEviction) {
  RecordingApi api;
  KubeLauncherOptions o;
  o.image = "img:1";
  KubePoolSpec h100;
  h100.name = "h100";
  h100.labels = {{"cloud.google.com/gke-nodepool", "h100"}};
  h100.gpu_product = "NVIDIA-H100-80GB-HBM3";
  h100.gpus_per_node = 8;
  h100.max_nodes = 2;
  o.pools = {h100};
  KubeLauncher l(o, api.Client(), Nowhere(), Nowhere(), {});
  ProcessSpec spec;
  spec.name = "chat-0";
  spec.engine = "reference";
  spec.argv = {"gpusched", "engine"};
  spec.placement.pool = "h100";
  spec.placement.deployment = "chat";
  spec.placement.gpus = {0};
  absl::StatusOr<ProcessId> id = l.Start(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<RecordingApi::Call> calls = api.Take();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].method, "POST");
  EXPECT_EQ(calls[0].target, "/api/v1/namespaces/gpusched/pods");
  const std::string pod = calls[0].body["metadata"]["name"];
  EXPECT_EQ(
      calls[0].body["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"],
      "h100");
  // The scheduler's word: unschedulable, through the status subresource.
  EXPECT_EQ(calls[1].method, "PATCH");
  EXPECT_EQ(calls[1].target,
            "/api/v1/namespaces/gpusched/pods/" + pod + "/status");
  EXPECT_EQ(calls[1].type, "application/strategic-merge-patch+json");
  json cond = calls[1].body["status"]["conditions"][0];
  EXPECT_THAT(std::string(cond["message"]), ::testing::HasSubstr("pool h100"));
  cond.erase("message");
  cond.erase("lastTransitionTime");
  EXPECT_EQ(cond, json::parse(R"({"type": "PodScheduled", "status": "False",
                                  "reason": "Unschedulable"})"));

  // SetEvictable: a merge patch of the two annotations.
  ASSERT_TRUE(l.SetEvictable(*id, true).ok());
  ASSERT_TRUE(l.SetEvictable(*id, false).ok());
  calls = api.Take();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].target, "/api/v1/namespaces/gpusched/pods/" + pod);
  EXPECT_EQ(calls[0].type, "application/merge-patch+json");
  EXPECT_EQ(calls[0].body, json::parse(R"({"metadata": {"annotations": {
      "cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
      "karpenter.sh/do-not-disrupt": null}}})"));
  EXPECT_EQ(calls[1].body, json::parse(R"({"metadata": {"annotations": {
      "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
      "karpenter.sh/do-not-disrupt": "true"}}})"));

  // One node: the Pod is the ask. Two: a PodTemplate and a
  // ProvisioningRequest, and the waiting Pod consumes it. Three: too many.
  ASSERT_TRUE(l.AddNodes("h100", 1, "r1").ok());
  EXPECT_TRUE(api.Take().empty());
  ASSERT_TRUE(l.AddNodes("h100", 2, "r2").ok());
  calls = api.Take();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].target, "/api/v1/namespaces/gpusched/podtemplates");
  EXPECT_EQ(calls[1].target,
            "/apis/autoscaling.x-k8s.io/v1/namespaces/gpusched/"
            "provisioningrequests");
  EXPECT_EQ(calls[1].body, l.ProvisioningRequestObject("gpusched-h100-r2", 2));
  EXPECT_EQ(calls[2].body, json::parse(R"({"metadata": {"annotations": {
      "autoscaling.x-k8s.io/consume-provisioning-request": "gpusched-h100-r2",
      "autoscaling.x-k8s.io/provisioning-class-name":
          "best-effort-atomic-scale-up.autoscaling.x-k8s.io"}}})"));
  EXPECT_TRUE(absl::IsResourceExhausted(l.AddNodes("h100", 3, "r3").status()));
  EXPECT_TRUE(absl::IsNotFound(l.AddNodes("a100", 1, "r4").status()));

  // Bound to the GPU it was created pinned to: one binding.
  ProcessPlacement at;
  at.node = "gke-h100-1";
  at.deployment = "chat";
  at.gpus = {0};
  ASSERT_TRUE(l.Bind(*id, at).ok());
  calls = api.Take();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].target,
            "/api/v1/namespaces/gpusched/pods/" + pod + "/binding");
  EXPECT_EQ(calls[0].body["target"]["name"], "gke-h100-1");
  EXPECT_TRUE(absl::IsFailedPrecondition(l.Bind(*id, at)));
  EXPECT_TRUE(absl::IsFailedPrecondition(l.ReleaseNode("gke-h100-1")));
  EXPECT_TRUE(l.ReleaseNode("gke-h100-2").ok());
  EXPECT_TRUE(api.Take().empty());  // giving a node back sends nothing
}

}  // namespace
}  // namespace gpusched::backends
