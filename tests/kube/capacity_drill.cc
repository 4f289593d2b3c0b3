// kube_capacity_drill: capacity on demand through the Kubernetes launcher,
// by the autoscalers' contract, against the stand-in API server and its
// minimal autoscaler (tests/kube_capacity_test.sh starts them). It drives
// backends::KubeLauncher directly, as the controller does (Sync, Tick, the
// reports), and checks what a user would see with kubectl:
//   1. pools: the configured one and a Karpenter NodePool (spot, its limit);
//   2. a replica on a pool whose nodes are all gone: an unbound Pod with
//      real nvidia.com/gpu limits, a nodeSelector for the pool and product,
//      PodScheduled False/Unschedulable -> the autoscaler adds a node ->
//      kUp -> Bind -> the Pod runs there, pinned (NVIDIA_VISIBLE_DEVICES);
//   3. SetEvictable -> safe-to-evict / do-not-disrupt annotations;
//   4. a second replica with room on that node: no node is added; bound to
//      other GPUs than planned -> created again pinned there, and runs;
//   5. a gang: AddNodes(2) -> a ProvisioningRequest with its PodTemplate,
//      the Pods consume it -> Provisioned, two nodes -> both bound and run;
//      the pool is then full (AddNodes refused);
//   6. a scale-down taint (karpenter.sh/disrupted) on a busy node ->
//      kPoweringDown and not usable; ReleaseNode refused while Pods are
//      there; after they stop, the autoscaler taints the empty node
//      ToBeDeletedByClusterAutoscaler (kPoweringDown), then deletes it
//      (kPoweredDown);
//   7. a gang the autoscaler cannot fill: the ProvisioningRequest Failed ->
//      kFailed with its reason.
// Prints one line per check; exits 1 on the first failure.
//
//   kube_capacity_drill --kubeconfig FILE
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "backends/kubernetes/kube_client.h"
#include "backends/kubernetes/kube_launcher.h"
#include "backends/kubernetes/kube_nodes.h"
#include "nlohmann/json.hpp"

namespace gpusched::backends {
namespace {

using nlohmann::json;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

void Ok(const std::string& what) {
  std::printf("ok   %s\n", what.c_str());
  std::fflush(stdout);
}

void Check(bool cond, const std::string& what) {
  if (!cond) Die(what);
  Ok(what);
}

Micros NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Drill {
 public:
  explicit Drill(const std::string& kubeconfig) {
    absl::StatusOr<KubeCredentials> creds =
        KubeconfigCredentials(kubeconfig, "");
    if (!creds.ok()) Die(std::string(creds.status().message()));
    auto client = [&] {
      auto c = KubeClient::Create(*creds, {});
      if (!c.ok()) Die(std::string(c.status().message()));
      return *std::move(c);
    };
    test_ = client();
    KubeLauncherOptions o;
    o.image = "gpusched-test:1";
    o.tolerations = {"nvidia.com/gpu", "gpusched.io/dedicated"};
    o.provisioning_check = 100 * kMicrosPerMilli;
    KubePoolSpec h100;
    h100.name = "h100-pool";
    h100.labels = {{"cloud.google.com/gke-nodepool", "h100-pool"}};
    h100.gpu_product = "NVIDIA-H100-80GB-HBM3";
    h100.gpus_per_node = 4;
    h100.max_nodes = 3;
    KubePoolSpec tiny = h100;  // gpusched is told 2; the autoscaler has 1
    tiny.name = "tiny-pool";
    tiny.labels = {{"cloud.google.com/gke-nodepool", "tiny-pool"}};
    tiny.max_nodes = 2;
    o.pools = {h100, tiny};
    json nodes = Get("/api/v1/nodes");
    absl::StatusOr<std::vector<KubeNode>> parsed =
        ParseKubeNodeList(nodes, o.tolerations);
    if (!parsed.ok()) Die(std::string(parsed.status().message()));
    launcher_ = std::make_unique<KubeLauncher>(o, client(), client(), client(),
                                               *parsed);
  }

  json Get(const std::string& path) {
    absl::StatusOr<KubeResponse> r = test_->Request("GET", path);
    if (!r.ok()) Die(absl::StrCat("GET ", path, ": ", r.status().message()));
    return json::parse(r->body, nullptr, false);
  }
  void Post(const std::string& path, const json& body) {
    absl::StatusOr<KubeResponse> r = test_->Request("POST", path, body.dump());
    if (!r.ok() || r->status >= 300) Die(absl::StrCat("POST ", path));
  }

  // One pass of the controller's loop: Sync, Tick, and the reports kept.
  void Pass() {
    launcher_->Sync();
    (void)launcher_->Tick(NowMicros());
    for (const PoolNodeReport& r : launcher_->PoolNodeReports()) {
      std::printf("     pool node %s (%s): %s %s\n",
                  r.node.empty() ? "-" : r.node.c_str(), r.pool.c_str(),
                  PoolNodeStateName(r.state), r.reason.c_str());
      pool_nodes_.push_back(r);
    }
    for (const NodeReport& r : launcher_->NodeReports()) nodes_[r.node] = r;
    for (const GpuAssignment& a : launcher_->Assignments()) {
      assigned_[a.id] = a;
    }
    for (const ExitEvent& e : launcher_->Poll()) exited_[e.id] = e;
  }

  // Passes until `done` holds, for at most `seconds`.
  void Until(const std::string& what, const std::function<bool()>& done,
             int seconds = 30) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      Pass();
      if (done()) {
        Ok(what);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    Die(absl::StrCat(what, " (not within ", seconds, " s)"));
  }

  // The first pool node report after `from` with `state` (and pool).
  std::string NodeIn(size_t from, const std::string& pool, PoolNodeState state,
                     std::string* reason = nullptr) {
    for (size_t i = from; i < pool_nodes_.size(); ++i) {
      const PoolNodeReport& r = pool_nodes_[i];
      if (r.pool == pool && r.state == state) {
        if (reason != nullptr) *reason = r.reason;
        return r.node.empty() ? "-" : r.node;
      }
    }
    return "";
  }
  size_t mark() const { return pool_nodes_.size(); }

  json PodOf(ProcessId id) {
    json list =
        Get("/api/v1/namespaces/gpusched/"
            "pods?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dgpusched");
    const std::string name = names_[id];
    for (const json& p : list["items"]) {
      const json& ann = p["metadata"]["annotations"];
      if (ann.value("gpusched.io/replica", "") == name &&
          !p["metadata"].contains("deletionTimestamp")) {
        return p;
      }
    }
    return nullptr;
  }
  static std::string Env(const json& pod, const std::string& name) {
    for (const json& e : pod["spec"]["containers"][0]["env"]) {
      if (e.value("name", "") == name) return e.value("value", "");
    }
    return "";
  }

  ProcessId StartOnPool(const std::string& name, const std::string& pool,
                        std::vector<int> gpus) {
    ProcessSpec spec;
    spec.name = name;
    spec.engine = "reference";
    spec.argv = {"sleep", "300"};
    spec.placement.pool = pool;
    spec.placement.deployment = "chat";
    spec.placement.gpus = std::move(gpus);
    spec.placement.memory_mib = 256;
    absl::StatusOr<ProcessId> id = launcher_->Start(spec);
    if (!id.ok())
      Die(absl::StrCat("Start ", name, ": ", id.status().message()));
    names_[*id] = name;
    return *id;
  }

  void Bind(ProcessId id, const std::string& node, std::vector<int> gpus) {
    ProcessPlacement p;
    p.node = node;
    p.deployment = "chat";
    p.gpus = std::move(gpus);
    p.memory_mib = 256;
    absl::Status st = launcher_->Bind(id, p);
    Check(st.ok(), absl::StrCat("Bind ", names_[id], " to ", node, " ",
                                st.ok() ? "" : st.message()));
  }

  void Run();

  std::unique_ptr<KubeClient> test_;
  std::unique_ptr<KubeLauncher> launcher_;
  std::vector<PoolNodeReport> pool_nodes_;
  std::map<std::string, NodeReport> nodes_;
  std::map<ProcessId, GpuAssignment> assigned_;
  std::map<ProcessId, ExitEvent> exited_;
  std::map<ProcessId, std::string> names_;
};

void Drill::Run() {
  KubeLauncher& l = *launcher_;
  // 1. Pools.
  Pass();
  Until("Karpenter's NodePools are read", [&] {
    for (const PoolReport& p : l.Pools()) {
      if (p.pool == "l4-spot") return true;
    }
    return false;
  });
  for (const PoolReport& p : l.Pools()) {
    if (p.pool == "h100-pool") {
      Check(p.gpus_per_node == 4 && p.max_nodes == 3 &&
                p.gpu_model == "NVIDIA-H100-80GB-HBM3" && !p.spot,
            "pool h100-pool from config: 4 GPUs per node, at most 3 nodes");
    }
    if (p.pool == "l4-spot") {
      Check(p.spot && p.gpus_per_node == 1 && p.max_nodes == 4,
            "pool l4-spot from its Karpenter NodePool: spot, 1 GPU, 4 nodes "
            "(limits nvidia.com/gpu 4)");
    }
  }

  // 2. A replica on a pool that has no node.
  const auto t0 = std::chrono::steady_clock::now();
  size_t m = mark();
  const ProcessId r1 = StartOnPool("chat-0", "h100-pool", {0});
  json pod = PodOf(r1);
  Check(pod.is_object() && !pod["spec"].contains("nodeName"),
        "chat-0: its Pod is created unbound");
  Check(pod["spec"]["schedulerName"] == "gpusched",
        "chat-0: schedulerName gpusched");
  Check(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] ==
            "1",
        "chat-0: limits nvidia.com/gpu 1");
  Check(pod["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] ==
                "h100-pool" &&
            pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] ==
                "NVIDIA-H100-80GB-HBM3",
        "chat-0: nodeSelector for the pool and the GPU product");
  bool unschedulable = false;
  for (const json& c : pod["status"]["conditions"]) {
    unschedulable = unschedulable ||
                    (c["type"] == "PodScheduled" && c["status"] == "False" &&
                     c["reason"] == "Unschedulable");
  }
  Check(unschedulable, "chat-0: PodScheduled False, reason Unschedulable");
  std::string n1;
  Until("the autoscaler adds a node of h100-pool (kUp)", [&] {
    n1 = NodeIn(m, "h100-pool", PoolNodeState::kUp);
    return !n1.empty();
  });
  Until("the new node is reported usable",
        [&] { return nodes_.contains(n1) && nodes_[n1].usable; });
  Bind(r1, n1, {0});
  Until("chat-0 runs on the new node", [&] { return assigned_.contains(r1); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  std::printf(
      "     figure: Start on an empty pool -> Pod running: %.2f s "
      "(stand-in provisioning delay included)\n",
      seconds);
  pod = PodOf(r1);
  Check(pod["spec"]["nodeName"] == n1 &&
            Env(pod, "NVIDIA_VISIBLE_DEVICES") == "0",
        "chat-0: bound to " + n1 + ", NVIDIA_VISIBLE_DEVICES=0");
  Check(assigned_[r1].node == n1 && !assigned_[r1].address.empty(),
        "chat-0: gpusched learns its node and Pod IP");

  // 3. SetEvictable.
  auto annotations = [&](ProcessId id) {
    return PodOf(id)["metadata"]["annotations"];
  };
  json ann = annotations(r1);
  Check(ann["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false" &&
            ann["karpenter.sh/do-not-disrupt"] == "true",
        "a serving replica is not evictable (safe-to-evict false, "
        "do-not-disrupt true)");
  Check(l.SetEvictable(r1, true).ok(), "SetEvictable(true)");
  ann = annotations(r1);
  Check(ann["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "true" &&
            !ann.contains("karpenter.sh/do-not-disrupt"),
        "a drained replica is evictable (safe-to-evict true, no "
        "do-not-disrupt)");
  Check(l.SetEvictable(r1, false).ok(), "SetEvictable(false)");
  ann = annotations(r1);
  Check(ann["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false" &&
            ann["karpenter.sh/do-not-disrupt"] == "true",
        "and back");

  // 4. Room on that node: no node is added; other GPUs than planned.
  m = mark();
  const ProcessId r2 = StartOnPool("chat-1", "h100-pool", {0});
  Bind(r2, n1, {1});
  Until("chat-1 runs on " + n1, [&] { return assigned_.contains(r2); });
  pod = PodOf(r2);
  Check(pod["spec"]["nodeName"] == n1 &&
            Env(pod, "NVIDIA_VISIBLE_DEVICES") == "1",
        "chat-1: created again pinned to GPU 1 (NVIDIA_VISIBLE_DEVICES=1)");
  Check(NodeIn(m, "h100-pool", PoolNodeState::kUp).empty(),
        "no node was added for a Pod that fits a node that is up");

  // 5. A gang through a ProvisioningRequest.
  m = mark();
  absl::StatusOr<std::vector<std::string>> added =
      l.AddNodes("h100-pool", 2, "gang-1");
  Check(added.ok() && added->empty(),
        "AddNodes(h100-pool, 2): a ProvisioningRequest (no node named)");
  const ProcessId g1 = StartOnPool("train-0", "h100-pool", {0, 1, 2, 3});
  const ProcessId g2 = StartOnPool("train-1", "h100-pool", {0, 1, 2, 3});
  const std::string provreq = "gpusched-h100-pool-gang-1";
  for (ProcessId g : {g1, g2}) {
    Check(annotations(g)["autoscaling.x-k8s.io/consume-provisioning-request"] ==
              provreq,
          names_[g] + " consumes ProvisioningRequest " + provreq);
  }
  json pr =
      Get("/apis/autoscaling.x-k8s.io/v1/namespaces/gpusched/"
          "provisioningrequests/" +
          provreq);
  Check(pr["spec"]["provisioningClassName"] ==
                "best-effort-atomic-scale-up.autoscaling.x-k8s.io" &&
            pr["spec"]["podSets"][0]["count"] == 2,
        "the ProvisioningRequest asks for 2 nodes, atomically");
  Check(Get("/api/v1/namespaces/gpusched/podtemplates/" +
            provreq)["template"]["spec"]["containers"][0]["resources"]["limits"]
                    ["nvidia.com/gpu"] == "4",
        "its PodTemplate: a whole node's 4 GPUs");
  std::vector<std::string> gang_nodes;
  Until("two nodes come up for the gang", [&] {
    gang_nodes.clear();
    for (size_t i = m; i < pool_nodes_.size(); ++i) {
      if (pool_nodes_[i].state == PoolNodeState::kUp &&
          pool_nodes_[i].pool == "h100-pool") {
        gang_nodes.push_back(pool_nodes_[i].node);
      }
    }
    return gang_nodes.size() == 2;
  });
  Until("the ProvisioningRequest is Provisioned", [&] {
    pr =
        Get("/apis/autoscaling.x-k8s.io/v1/namespaces/gpusched/"
            "provisioningrequests/" +
            provreq);
    for (const json& c : pr["status"].value("conditions", json::array())) {
      if (c["type"] == "Provisioned" && c["status"] == "True") return true;
    }
    return false;
  });
  Bind(g1, gang_nodes[0], {0, 1, 2, 3});
  Bind(g2, gang_nodes[1], {0, 1, 2, 3});
  Until("both members of the gang run",
        [&] { return assigned_.contains(g1) && assigned_.contains(g2); });
  Until("the ProvisioningRequest and its PodTemplate are deleted once used",
        [&] {
          return Get("/apis/autoscaling.x-k8s.io/v1/namespaces/gpusched/"
                     "provisioningrequests/" +
                     provreq)
                         .value("code", 0) == 404 &&
                 Get("/api/v1/namespaces/gpusched/podtemplates/" + provreq)
                         .value("code", 0) == 404;
        });
  absl::StatusOr<std::vector<std::string>> more =
      l.AddNodes("h100-pool", 1, "one-more");
  Check(absl::IsResourceExhausted(more.status()),
        "the pool has its 3 nodes: AddNodes refused (" +
            std::string(more.status().message()) + ")");

  // 6. Scale-down taints.
  m = mark();
  Post("/testing/nodes/" + n1 + "/taints",
       json::array(
           {{{"key", "karpenter.sh/disrupted"}, {"effect", "NoSchedule"}}}));
  std::string reason;
  Until("karpenter.sh/disrupted on " + n1 + ": kPoweringDown", [&] {
    return NodeIn(m, "h100-pool", PoolNodeState::kPoweringDown, &reason) == n1;
  });
  Until(n1 + " is not usable, so its replicas move first", [&] {
    return !nodes_[n1].usable &&
           nodes_[n1].reason.find("karpenter.sh/disrupted") !=
               std::string::npos;
  });
  absl::Status release = l.ReleaseNode(n1);
  Check(absl::IsFailedPrecondition(release),
        "ReleaseNode while its replicas are there is refused (" +
            std::string(release.message()) + ")");
  for (ProcessId id : {r1, r2}) {
    Check(l.Stop(id, kMicrosPerSecond, NowMicros()).ok(), "Stop " + names_[id]);
  }
  Until("both replicas on " + n1 + " ended",
        [&] { return exited_.contains(r1) && exited_.contains(r2); });
  Check(l.ReleaseNode(n1).ok(), "ReleaseNode " + n1 + " once empty");
  Post("/testing/nodes/" + n1 + "/taints", json::array());
  m = mark();
  Until("the autoscaler taints the empty " + n1 +
            " ToBeDeletedByClusterAutoscaler: kPoweringDown",
        [&] {
          return NodeIn(m, "h100-pool", PoolNodeState::kPoweringDown,
                        &reason) == n1 &&
                 reason.find("ToBeDeletedByClusterAutoscaler") !=
                     std::string::npos;
        });
  Until("then removes it: kPoweredDown", [&] {
    return NodeIn(m, "h100-pool", PoolNodeState::kPoweredDown) == n1;
  });

  // 7. A gang the autoscaler cannot fill.
  m = mark();
  Check(l.AddNodes("tiny-pool", 2, "gang-2").ok(),
        "AddNodes(tiny-pool, 2): asked");
  Until("the autoscaler cannot: kFailed with its reason", [&] {
    return !NodeIn(m, "tiny-pool", PoolNodeState::kFailed, &reason).empty();
  });
  Check(reason.find("cannot grow") != std::string::npos,
        "the reason is the autoscaler's: " + reason);

  for (ProcessId id : {g1, g2}) (void)l.Stop(id, kMicrosPerSecond, NowMicros());
  Until("the gang's Pods are gone",
        [&] { return exited_.contains(g1) && exited_.contains(g2); });
  const KubeLauncher::Stats stats = l.stats();
  std::printf("     figure: %lld API requests by the launcher in the drill\n",
              static_cast<long long>(stats.api_requests));
}

}  // namespace
}  // namespace gpusched::backends

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) != "--kubeconfig") {
    std::fprintf(stderr, "usage: kube_capacity_drill --kubeconfig FILE\n");
    return 2;
  }
  gpusched::backends::Drill drill(argv[2]);
  drill.Run();
  std::printf("kube_capacity_drill: all checks passed\n");
  return 0;
}
