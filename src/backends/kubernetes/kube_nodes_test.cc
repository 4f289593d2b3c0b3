#include "backends/kubernetes/kube_nodes.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inventory/mig.h"

namespace gpusched::backends {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

// A NodeList as the API server returns it: gpu-a is an H100 node with the
// labels GPU Feature Discovery sets and two GPUs partitioned by MIG (mixed
// strategy); gpu-b is cordoned, tainted and not ready; cpu-c has no GPU.
json Nodes() {
  return json::parse(R"({
  "kind": "NodeList", "apiVersion": "v1",
  "metadata": {"resourceVersion": "4711"},
  "items": [
    {"metadata": {"name": "gpu-a", "uid": "u-a", "resourceVersion": "4700",
       "labels": {"kubernetes.io/hostname": "gpu-a",
                  "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                  "nvidia.com/gpu.memory": "81559",
                  "nvidia.com/gpu.count": "8",
                  "nvidia.com/mig.strategy": "mixed"}},
     "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                         {"key": "spot", "value": "true",
                          "effect": "PreferNoSchedule"}]},
     "status": {
       "capacity": {"cpu": "96", "memory": "1056000000Ki",
                    "nvidia.com/gpu": "6"},
       "allocatable": {"cpu": "95500m", "memory": "1031250Mi",
                       "nvidia.com/gpu": "6", "nvidia.com/mig-1g.10gb": "14",
                       "pods": "110"},
       "conditions": [
         {"type": "MemoryPressure", "status": "False"},
         {"type": "DiskPressure", "status": "False"},
         {"type": "Ready", "status": "True", "reason": "KubeletReady"}],
       "addresses": [{"type": "Hostname", "address": "gpu-a"},
                     {"type": "InternalIP", "address": "10.0.0.11"}]}},
    {"metadata": {"name": "gpu-b",
       "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
     "spec": {"unschedulable": true,
              "taints": [{"key": "gpu", "value": "broken",
                          "effect": "NoExecute"}]},
     "status": {
       "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 4},
       "conditions": [
         {"type": "DiskPressure", "status": "True"},
         {"type": "Ready", "status": "Unknown",
          "reason": "NodeStatusUnknown",
          "message": "Kubelet stopped posting node status."}],
       "addresses": [{"type": "Hostname", "address": "gpu-b.local"}]}},
    {"metadata": {"name": "cpu-c"},
     "status": {"allocatable": {"cpu": "8", "memory": "32Gi"},
                "conditions": [{"type": "Ready", "status": "True"}]}}
  ]})");
}

TEST(KubeNodesTest, ReadsAllocatableGfdLabelsConditionsAndTaints) {
  auto nodes = ParseKubeNodeList(Nodes(), {"nvidia.com/gpu"});
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 3u);
  const KubeNode& a = (*nodes)[0];
  EXPECT_EQ(a.name, "gpu-a");
  EXPECT_EQ(a.resource_version, "4700");
  EXPECT_EQ(a.address, "10.0.0.11");  // InternalIP over Hostname
  EXPECT_TRUE(a.ready);
  EXPECT_TRUE(a.usable) << a.problems.size();  // its taint is tolerated
  EXPECT_EQ(a.cpu_milli, 95500);
  EXPECT_EQ(a.memory_mib, 1031250);
  EXPECT_EQ(a.gpus, 6);
  EXPECT_THAT(a.mig, ElementsAre(Pair("1g.10gb", 14)));
  EXPECT_EQ(a.gpu_product, "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(a.gpu_memory_mib, 81559);
  EXPECT_EQ(a.gpu_count_label, 8);
  EXPECT_EQ(a.mig_strategy, "mixed");

  const KubeNode& b = (*nodes)[1];
  EXPECT_FALSE(b.usable);
  EXPECT_FALSE(b.ready);
  EXPECT_TRUE(b.unschedulable);
  EXPECT_EQ(b.address, "gpu-b.local");
  EXPECT_EQ(b.gpus, 4);  // a number is accepted as well as a string
  EXPECT_THAT(b.problems,
              ElementsAre("cordoned (spec.unschedulable)",
                          "taint gpu=broken:NoExecute", "DiskPressure",
                          "not responding (NodeStatusUnknown: Kubelet stopped "
                          "posting node status.)"));
  EXPECT_EQ((*nodes)[2].gpus, 0);
  EXPECT_EQ((*nodes)[2].address, "cpu-c");

  // Without the toleration, the device plugin's taint keeps gpu-a out.
  auto strict = ParseKubeNodeList(Nodes());
  ASSERT_TRUE(strict.ok());
  EXPECT_FALSE((*strict)[0].usable);
  EXPECT_THAT((*strict)[0].problems,
              ElementsAre("taint nvidia.com/gpu:NoSchedule"));
}

TEST(KubeNodesTest, MalformedFieldsNameTheNodeAndTheField) {
  json n = Nodes()["items"][0];
  n["status"]["allocatable"]["nvidia.com/gpu"] = "two";
  EXPECT_THAT(std::string(ParseKubeNode(n).status().message()),
              HasSubstr("'gpu-a': nvidia.com/gpu is not a whole number"));
  n = Nodes()["items"][0];
  n["status"]["allocatable"]["cpu"] = "lots";
  EXPECT_THAT(std::string(ParseKubeNode(n).status().message()),
              HasSubstr("'gpu-a': allocatable cpu"));
  n = Nodes()["items"][0];
  n["metadata"]["labels"]["nvidia.com/gpu.memory"] = "80GB";
  EXPECT_THAT(std::string(ParseKubeNode(n).status().message()),
              HasSubstr("nvidia.com/gpu.memory '80GB'"));
  n = Nodes()["items"][0];
  n["spec"]["taints"] = json::array();
  for (int i = 0; i <= kMaxKubeEntries; ++i) {
    n["spec"]["taints"].push_back({{"key", "k"}, {"effect", "NoSchedule"}});
  }
  EXPECT_THAT(std::string(ParseKubeNode(n).status().message()),
              HasSubstr("taints has 257 entries, more than 256"));
  EXPECT_FALSE(ParseKubeNode(json::object()).ok());  // no name
  EXPECT_FALSE(ParseKubeNode(json::array()).ok());
  EXPECT_FALSE(ParseKubeNodeList(json{{"items", "x"}}).ok());
  EXPECT_THAT(*ParseKubeNodeList(json{{"items", json::array()}}), IsEmpty());
}

json Pod(const std::string& name, const std::string& node, const json& limits,
         const std::string& phase = "Running") {
  return {
      {"metadata",
       {{"name", name}, {"namespace", "ml"}, {"labels", {{"app", name}}}}},
      {"spec",
       {{"nodeName", node},
        {"containers", json::array({{{"name", "main"},
                                     {"resources", {{"limits", limits}}}}})}}},
      {"status", {{"phase", phase}, {"podIP", "10.1.0.5"}}}};
}

TEST(KubePodsTest, CountsGpusOverContainersAndInitContainers) {
  json p = Pod("train", "gpu-a", {{"nvidia.com/gpu", "2"}, {"cpu", "4"}});
  p["spec"]["containers"].push_back(
      {{"name", "side"},
       {"resources", {{"requests", {{"nvidia.com/mig-1g.10gb", 1}}}}}});
  p["spec"]["initContainers"] =
      json::array({{{"name", "warm"},
                    {"resources", {{"limits", {{"nvidia.com/gpu", "3"}}}}}}});
  p["status"]["conditions"] =
      json::array({{{"type", "Ready"}, {"status", "True"}}});
  p["metadata"]["deletionTimestamp"] = "2026-12-03T07:00:00Z";
  auto pod = ParseKubePod(p);
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->namespace_name, "ml");
  EXPECT_EQ(pod->node, "gpu-a");
  EXPECT_EQ(pod->gpus, 3);  // the init container needs more than 2
  EXPECT_THAT(pod->mig, ElementsAre(Pair("1g.10gb", 1)));  // from requests
  EXPECT_TRUE(pod->ready);
  EXPECT_TRUE(pod->terminating);
  EXPECT_EQ(pod->pod_ip, "10.1.0.5");
  EXPECT_EQ(KubeLabel(*pod, "app"), "train");
  EXPECT_EQ(KubeLabel(*pod, "none"), "");

  p = Pod("x", "gpu-a", {{"nvidia.com/gpu", "-1"}});
  EXPECT_THAT(std::string(ParseKubePod(p).status().message()),
              HasSubstr("'ml/x': nvidia.com/gpu is not a whole number"));
  p = Pod("x", "gpu-a", {{"nvidia.com/gpu", "2000"}});
  EXPECT_FALSE(ParseKubePod(p).ok());
}

TEST(KubePodsTest, OtherPodsGpusAreForeignPerNode) {
  json list = {{"kind", "PodList"}, {"items", json::array()}};
  list["items"].push_back(Pod("a", "gpu-a", {{"nvidia.com/gpu", "2"}}));
  list["items"].push_back(Pod("b", "gpu-a", {{"nvidia.com/gpu", 1}}));
  list["items"].push_back(
      Pod("done", "gpu-a", {{"nvidia.com/gpu", "4"}}, "Succeeded"));
  list["items"].push_back(Pod("pending", "", {{"nvidia.com/gpu", "4"}}));
  list["items"].push_back(
      Pod("m", "gpu-b", {{"nvidia.com/mig-1g.10gb", "2"}}, "Pending"));
  json ours = Pod("chat-1", "gpu-a", {{"nvidia.com/gpu", "1"}});
  ours["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "gpusched";
  list["items"].push_back(ours);
  auto pods = ParseKubePodList(list);
  ASSERT_TRUE(pods.ok()) << pods.status();
  ASSERT_EQ(pods->size(), 6u);
  EXPECT_FALSE(KubePodHoldsResources((*pods)[2]));  // Succeeded
  EXPECT_FALSE(KubePodHoldsResources((*pods)[3]));  // not bound
  auto use =
      KubeForeignGpuUse(*pods, "app.kubernetes.io/managed-by", "gpusched");
  ASSERT_EQ(use.size(), 2u);
  EXPECT_EQ(use["gpu-a"].gpus, 3);  // a and b, not ours, not the finished
  EXPECT_THAT(use["gpu-a"].mig, IsEmpty());
  EXPECT_EQ(use["gpu-b"].gpus, 0);
  EXPECT_THAT(use["gpu-b"].mig, ElementsAre(Pair("1g.10gb", 2)));
}

TEST(KubeNodeSpecsTest, MapsGfdProductsOntoTheCatalog) {
  auto nodes = ParseKubeNodeList(Nodes(), {"nvidia.com/gpu"});
  ASSERT_TRUE(nodes.ok());
  auto specs = KubeNodeSpecs(*nodes, {});
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  const inventory::NodeSpec& a = (*specs)[0];
  EXPECT_EQ(a.name, "gpu-a");
  EXPECT_EQ(a.gpu_model, "H100-SXM-80GB");
  // 6 whole GPUs, then the 14 1g.10gb MIG devices laid onto 2 more (the
  // 8 that nvidia.com/gpu.count says).
  EXPECT_EQ(a.gpu_count, 8);
  EXPECT_EQ(a.gpu_memory_mib, 81559);
  EXPECT_EQ(a.mig_slots, 8);
  ASSERT_EQ(a.mig_instances.size(), 8u);
  EXPECT_THAT(a.mig_instances[5], IsEmpty());
  EXPECT_EQ(a.mig_instances[6].size(), 7u);
  EXPECT_EQ(a.mig_instances[7].size(), 7u);
  EXPECT_EQ(inventory::StaticMigSlices(a, "1g.10gb").size(), 14u);
  inventory::ClusterState cs;
  EXPECT_TRUE(cs.AddNode(a).ok());
  EXPECT_EQ(a.cpu_milli, 95500);
  EXPECT_EQ(a.address, "10.0.0.11");
  EXPECT_FALSE(a.simulated);
  EXPECT_EQ((*specs)[1].gpu_model, "A100-80GB");
  EXPECT_EQ((*specs)[2].gpu_count, 0);

  // An unknown product names the node and the setting that fixes it, and a
  // mapping fixes it.
  (*nodes)[0].gpu_product = "NVIDIA-Mystery-GPU";
  auto bad = KubeNodeSpecs(*nodes, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("node 'gpu-a': GPU product 'NVIDIA-Mystery-GPU'"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("productMap"));
  auto mapped = KubeNodeSpecs(*nodes, {{"nvidia-mystery-gpu", "h100"}});
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ((*mapped)[0].gpu_model, "H100-SXM-80GB");

  // More GPUs than placement takes on one node.
  (*nodes)[1].gpus = 17;
  auto many = KubeNodeSpecs(*nodes, {});
  ASSERT_FALSE(many.ok());
  EXPECT_THAT(std::string(many.status().message()),
              HasSubstr("17 nvidia.com/gpu; gpusched places onto at most 16"));
  (*nodes)[1].gpus = 4;

  // MIG devices of a profile the model lacks.
  auto lacks = KubeNodeSpecs(*nodes, {{"nvidia-mystery-gpu", "H200-141GB"}});
  ASSERT_FALSE(lacks.ok());
  EXPECT_THAT(std::string(lacks.status().message()),
              HasSubstr("node 'gpu-a': its MIG devices: no MIG profile "
                        "'1g.10gb' on H200-141GB"));
}

TEST(KubeNodeSpecsTest, SingleStrategyNodesAreAllMigDevices) {
  // The single strategy: nvidia.com/gpu are 1g.5gb devices of A100s, and
  // the product label says so.
  auto node = ParseKubeNode(json::parse(R"({
    "metadata": {"name": "mig-s", "labels": {
       "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
       "nvidia.com/gpu.memory": "4864", "nvidia.com/mig.strategy": "single"}},
    "status": {"allocatable": {"cpu": "32", "memory": "128Gi",
                               "nvidia.com/gpu": "14"},
               "conditions": [{"type": "Ready", "status": "True"}]}})"));
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(KubeSingleStrategyProfile(*node), "1g.5gb");
  auto specs = KubeNodeSpecs({*node}, {});
  ASSERT_TRUE(specs.ok()) << specs.status();
  const inventory::NodeSpec& s = (*specs)[0];
  EXPECT_EQ(s.gpu_model, "A100-40GB");
  EXPECT_EQ(s.gpu_count, 2);           // 7 x 1g.5gb each
  EXPECT_EQ(s.gpu_memory_mib, 40960);  // the GPU's, not the slice's label
  EXPECT_EQ(inventory::StaticMigSlices(s, "1g.5gb").size(), 14u);
  node->mig_strategy = "mixed";
  EXPECT_EQ(KubeSingleStrategyProfile(*node), "");
}

}  // namespace
}  // namespace gpusched::backends
