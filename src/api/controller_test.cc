// The live controller with all of its threads at once: the loop, the
// gateway as its data plane, reference engines serving in this process (a
// launcher that starts engine::EngineServer where the controller would
// fork one) and control calls from several threads while replicas start,
// crash, scale and drain. Waits on states with generous deadlines; never on how
// fast the machine is. The TSan build runs it (label "threads").
#include "runtime/controller.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "auth/access_control.h"
#include "config/manifest.h"
#include "engine/engine_server.h"
#include "gateway/gateway.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inventory/mig.h"
#include "net/upstream.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpusched::api {
namespace {

using nlohmann::json;

// Engines in this process: Start() serves the replica's model on the port
// the controller chose; Crash() ends one as if its process died. With
// `pool` set (before the controller is created) it is a CapacityManager as
// Kubernetes is: AddNodes names no node, a Start with placement.pool is a
// replica that waits for a node (no engine) until Bind starts it there, and
// the test reports the pool's nodes.
class InProcessLauncher : public backends::Launcher,
                          public backends::CapacityManager {
 public:
  ~InProcessLauncher() override {
    absl::MutexLock lock(&mu_);
    for (auto& [id, e] : engines_) e.server->Shutdown(std::chrono::seconds(1));
  }

  absl::StatusOr<backends::ProcessId> Start(
      const backends::ProcessSpec& spec) override {
    if (!spec.placement.pool.empty() && spec.placement.node.empty()) {
      absl::MutexLock lock(&mu_);
      const backends::ProcessId id = ++next_id_;
      waiting_[id] = spec;
      return id;
    }
    return StartEngine(spec, 0);
  }
  absl::StatusOr<backends::ProcessId> StartEngine(
      const backends::ProcessSpec& spec, backends::ProcessId given) {
    engine::EngineOptions o;
    o.hidden = 16;
    net::HttpServerOptions http;
    for (size_t i = 0; i + 1 < spec.argv.size(); ++i) {
      if (spec.argv[i] == "--port") http.port = std::stoi(spec.argv[i + 1]);
      if (spec.argv[i] == "--model") o.model = spec.argv[i + 1];
    }
    auto server = engine::EngineServer::Start(o, http);
    if (!server.ok()) return server.status();
    absl::MutexLock lock(&mu_);
    const backends::ProcessId id = given != 0 ? given : ++next_id_;
    engines_[id] = {spec.name, *std::move(server)};
    ++started_;
    start_times_.push_back(std::chrono::steady_clock::now());
    return id;
  }
  std::vector<backends::ExitEvent> Poll() override {
    absl::MutexLock lock(&mu_);
    return std::exchange(exits_, {});
  }
  absl::Status Stop(backends::ProcessId id, Micros, Micros) override {
    return End(id, /*asked=*/true);
  }
  absl::Status Kill(backends::ProcessId id) override { return End(id, true); }
  Micros Tick(Micros) override { return kNever; }
  bool IsAlive(backends::ProcessId id) const override {
    absl::MutexLock lock(&mu_);
    return engines_.contains(id);
  }
  int size() const override {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(engines_.size());
  }

  // Ends the engine of replica `name` without being asked (a crash).
  bool Crash(const std::string& name) {
    backends::ProcessId id = 0;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [i, e] : engines_) {
        if (e.name == name) id = i;
      }
    }
    return id != 0 && End(id, /*asked=*/false).ok();
  }
  int started() const {
    absl::MutexLock lock(&mu_);
    return started_;
  }
  // Says, as a cluster manager does, which GPUs an engine holds.
  void Assign(backends::GpuAssignment a) {
    absl::MutexLock lock(&mu_);
    assignments_.push_back(std::move(a));
  }
  std::vector<backends::GpuAssignment> Assignments() override {
    absl::MutexLock lock(&mu_);
    return std::exchange(assignments_, {});
  }
  // Says, as Kubernetes does with a Pod's Ready condition, whether an
  // engine is ready (when reports_readiness is set before the controller is
  // created).
  bool reports_readiness = false;
  bool ReportsReadiness() const override { return reports_readiness; }
  void Readiness(backends::ReadinessReport r) {
    absl::MutexLock lock(&mu_);
    readiness_.push_back(std::move(r));
  }
  std::vector<backends::ReadinessReport> ReadinessReports() override {
    absl::MutexLock lock(&mu_);
    return std::exchange(readiness_, {});
  }
  // The pid of replica `name`'s engine; 0 when none.
  backends::ProcessId PidOf(const std::string& name) const {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, e] : engines_) {
      if (e.name == name) return id;
    }
    return 0;
  }
  // Says, as a cluster manager does, what a node holds for others.
  void Report(backends::NodeReport r) {
    absl::MutexLock lock(&mu_);
    reports_.push_back(std::move(r));
  }
  std::vector<backends::NodeReport> NodeReports() override {
    absl::MutexLock lock(&mu_);
    return std::exchange(reports_, {});
  }
  std::vector<std::chrono::steady_clock::time_point> start_times() const {
    absl::MutexLock lock(&mu_);
    return start_times_;
  }

  std::optional<backends::PoolReport> pool;
  backends::CapacityManager* capacity() override {
    return pool ? this : nullptr;
  }
  std::vector<backends::PoolReport> Pools() override {
    if (!pool) return {};
    return {*pool};
  }
  std::vector<backends::PoolNodeReport> PoolNodeReports() override {
    absl::MutexLock lock(&mu_);
    return std::exchange(pool_reports_, {});
  }
  absl::StatusOr<std::vector<std::string>> AddNodes(
      const std::string&, int, const std::string&) override {
    return std::vector<std::string>{};  // the waiting replicas are the ask
  }
  absl::Status ReleaseNode(const std::string& node) override {
    absl::MutexLock lock(&mu_);
    released_.push_back(node);
    return absl::OkStatus();
  }
  absl::Status Bind(backends::ProcessId id,
                    const backends::ProcessPlacement& placement) override {
    backends::ProcessSpec spec;
    {
      absl::MutexLock lock(&mu_);
      auto it = waiting_.find(id);
      if (it == waiting_.end()) return absl::NotFoundError("not waiting");
      spec = std::move(it->second);
      waiting_.erase(it);
      bound_[spec.name] = placement.node;
    }
    absl::StatusOr<backends::ProcessId> started = StartEngine(spec, id);
    return started.status();
  }
  void ReportPoolNode(backends::PoolNodeReport r) {
    absl::MutexLock lock(&mu_);
    pool_reports_.push_back(std::move(r));
  }
  // Replicas waiting for a node; the pools they wait for.
  std::vector<std::string> waiting() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out;
    for (const auto& [id, spec] : waiting_) out.push_back(spec.placement.pool);
    return out;
  }
  std::string bound(const std::string& replica) const {
    absl::MutexLock lock(&mu_);
    auto it = bound_.find(replica);
    return it == bound_.end() ? "" : it->second;
  }
  std::vector<std::string> released() const {
    absl::MutexLock lock(&mu_);
    return released_;
  }

 private:
  struct Engine {
    std::string name;
    std::unique_ptr<engine::EngineServer> server;
  };
  absl::Status End(backends::ProcessId id, bool asked) {
    std::unique_ptr<engine::EngineServer> server;
    {
      absl::MutexLock lock(&mu_);
      if (waiting_.erase(id) > 0) {  // a replica that waited for a node
        backends::ExitEvent e;
        e.id = id;
        e.stop_requested = true;
        exits_.push_back(e);
        return absl::OkStatus();
      }
      auto it = engines_.find(id);
      if (it == engines_.end()) return absl::NotFoundError("no such engine");
      server = std::move(it->second.server);
      backends::ExitEvent e;
      e.id = id;
      e.name = it->second.name;
      e.signaled = !asked;
      e.signal = asked ? 0 : 9;
      e.stop_requested = asked;
      engines_.erase(it);
      exits_.push_back(e);
    }
    server->Shutdown(std::chrono::milliseconds(200));
    return absl::OkStatus();
  }

  mutable absl::Mutex mu_;
  std::map<backends::ProcessId, Engine> engines_ ABSL_GUARDED_BY(mu_);
  std::vector<backends::ExitEvent> exits_ ABSL_GUARDED_BY(mu_);
  std::vector<backends::GpuAssignment> assignments_ ABSL_GUARDED_BY(mu_);
  std::vector<backends::NodeReport> reports_ ABSL_GUARDED_BY(mu_);
  std::vector<backends::ReadinessReport> readiness_ ABSL_GUARDED_BY(mu_);
  std::map<backends::ProcessId, backends::ProcessSpec> waiting_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> bound_ ABSL_GUARDED_BY(mu_);
  std::vector<backends::PoolNodeReport> pool_reports_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> released_ ABSL_GUARDED_BY(mu_);
  backends::ProcessId next_id_ ABSL_GUARDED_BY(mu_) = 0;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::chrono::steady_clock::time_point> start_times_
      ABSL_GUARDED_BY(mu_);
};

constexpr char kManifests[] = R"(apiVersion: gpusched.io/v1
kind: Tenant
metadata: {name: team}
spec: {models: [chat]}
---
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: chat}
spec:
  model: chat
  engine: {template: reference}
  resources: {fraction: {milli: 250, memory: 4Gi}}
  replicas: {min: 1, max: 4}
)";

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = store::SqliteStore::Open(":memory:");
    ASSERT_TRUE(opened.ok());
    store_ = *std::move(opened);
    auto g = gateway::Gateway::Create(
        gateway::GatewayConfig{}, [this](std::string_view k) {
          return auth::KeyOnly(store_->AuthenticateKey(k));
        });
    ASSERT_TRUE(g.ok()) << g.status();
    gateway_ = *std::move(g);

    runtime::ControllerOptions o;
    o.log_dir = ::testing::TempDir() + "/controller_test_logs";
    o.self_path = "/nonexistent/gpusched";  // never run: engines are in-process
    o.tick = 10 * kMicrosPerMilli;
    o.health_period = 200 * kMicrosPerMilli;
    o.drain_grace = 2 * kMicrosPerSecond;
    o.backoff.initial = 50 * kMicrosPerMilli;
    Configure(&o);
    runtime::ControllerCluster cluster;
    inventory::NodeSpec node;
    node.name = "node-0";
    node.cpu_milli = 64000;
    node.memory_mib = 256 * 1024;
    node.gpu_model = "H100-SXM-80GB";
    node.gpu_count = 2;
    node.gpu_memory_mib = 80 * 1024;
    ConfigureNode(&node);
    node_ = node;
    cluster.nodes = {node};
    cluster.source = "declared";
    auto launcher = std::make_unique<InProcessLauncher>();
    launcher->reports_readiness = ManagerReadiness();
    ConfigureLauncher(launcher.get());
    launcher_ = launcher.get();
    auto c = runtime::Controller::Create(o, cluster, store_.get(),
                                         gateway_.get(), std::move(launcher));
    ASSERT_TRUE(c.ok()) << c.status();
    controller_ = *std::move(c);
    absl::Status st = controller_->Start();
    ASSERT_TRUE(st.ok()) << st;
  }
  // Lets a test fixture change the options, and the node.
  virtual void Configure(runtime::ControllerOptions* o) {}
  virtual void ConfigureNode(inventory::NodeSpec* node) {}
  virtual bool ManagerReadiness() { return false; }
  virtual void ConfigureLauncher(InProcessLauncher* launcher) {}
  void TearDown() override {
    if (controller_) controller_->Stop();
    controller_.reset();
    gateway_.reset();
  }

  void Apply(const std::string& yaml) {
    auto m = config::ParseManifests(yaml, "test.yaml");
    ASSERT_TRUE(m.ok()) << m.status();
    auto r = controller_->Apply(*m);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  // A deployment `name` of the reference engine serving model `name`, each
  // replica a share of one GPU.
  void ApplyFraction(const std::string& name, int milli,
                     const std::string& memory, int replicas) {
    Apply(absl::StrCat("apiVersion: gpusched.io/v1\nkind: Deployment\n",
                       "metadata: {name: ", name, "}\nspec:\n  model: ", name,
                       "\n  engine: {template: reference}\n",
                       "  resources: {fraction: {milli: ", milli, ", memory: ",
                       memory, "}}\n  replicas: ", replicas, "\n"));
  }
  // The number of ready replicas of `name`, from the control view.
  int Ready(const std::string& name) {
    const json d = controller_->DeploymentsJson(name);
    if (!d.is_array() || d.empty()) return -1;
    return d[0]["status"].value("readyReplicas", -1);
  }
  // Waits (generously) until `pred` holds.
  template <typename Pred>
  bool WaitFor(Pred pred,
               std::chrono::seconds limit = std::chrono::seconds(60)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return pred();
  }

  std::unique_ptr<store::Store> store_;
  std::unique_ptr<gateway::Gateway> gateway_;
  inventory::NodeSpec node_;  // the one node, as given to the controller
  InProcessLauncher* launcher_ = nullptr;
  std::unique_ptr<runtime::Controller> controller_;
};

TEST_F(ControllerTest, ReplicasStartCrashScaleAndDrainWhileCallsComeIn) {
  Apply(kManifests);
  ASSERT_TRUE(controller_->Scale("chat", 2).ok());
  ASSERT_TRUE(WaitFor([&] { return Ready("chat") == 2; }))
      << controller_->DeploymentsJson("chat").dump();

  // Readers on other threads for the whole test: the views, the metrics
  // snapshot, events, and the data plane's load.
  std::atomic<bool> done = false;
  std::atomic<int> reads = 0;
  std::vector<std::thread> readers;
  struct Join {
    std::atomic<bool>& done;
    std::vector<std::thread>& threads;
    ~Join() {
      done = true;
      for (auto& t : threads) t.join();
    }
  } join{done, readers};
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      while (!done) {
        switch (t) {
          case 0:
            (void)controller_->ReplicasJson();
            (void)controller_->GpusJson();
            break;
          case 1:
            (void)controller_->DeploymentsJson();
            (void)controller_->MetricsSnapshot();
            break;
          default: {
            store::EventFilter f;
            f.limit = 20;
            (void)controller_->Events(f);
            (void)gateway_->Load("chat");
          }
        }
        ++reads;
      }
    });
  }

  // A crash: the replica is restarted.
  const int before = launcher_->started();
  ASSERT_TRUE(launcher_->Crash("chat-0") || launcher_->Crash("chat-1"));
  ASSERT_TRUE(WaitFor(
      [&] { return launcher_->started() > before && Ready("chat") == 2; }));

  // Up, then down: the extra replicas drain and stop.
  absl::Status scaled = controller_->Scale("chat", 4);
  ASSERT_TRUE(scaled.ok()) << scaled;
  ASSERT_TRUE(WaitFor([&] { return Ready("chat") == 4; }));
  scaled = controller_->Scale("chat", 1);
  ASSERT_TRUE(scaled.ok()) << scaled;
  ASSERT_TRUE(WaitFor([&] {
    return Ready("chat") == 1 && launcher_->size() == 1;
  })) << controller_->ReplicasJson().dump();

  // Deleting the deployment stops its last engine.
  ASSERT_TRUE(
      controller_->Delete(config::Manifest::Kind::kDeployment, "chat").ok());
  ASSERT_TRUE(WaitFor([&] { return launcher_->size() == 0; }));
  EXPECT_GT(reads.load(), 0);

  store::EventFilter f;
  f.deployment = "chat";
  f.limit = 1000;
  auto events = controller_->Events(f);
  ASSERT_TRUE(events.ok());
  int ready = 0, failed = 0;
  for (const store::Event& e : *events) {
    ready += e.kind == "replica.ready";
    failed += e.kind == "replica.failed" || e.kind == "replica.exited";
  }
  EXPECT_GE(ready, 5);   // 2, the restart, 2 more
  EXPECT_GE(failed, 1);  // the crash
}

TEST_F(ControllerTest, AllocationsFollowGpusTheClusterManagerSwapped) {
  // Two shares too large to share a GPU, one per GPU; the cluster manager
  // then says each holds the other's GPU (Slurm picks a shard's GPU itself).
  ApplyFraction("big", 600, "30Gi", 2);
  ASSERT_TRUE(WaitFor([&] { return Ready("big") == 2; }));
  const auto gpus_by_pid = [&] {
    std::map<int64_t, int> out;
    const json d = controller_->DeploymentsJson("big");
    for (const json& r : d[0]["status"]["replicaStatus"]) {
      if (r["gpus"].size() == 1) out[r["pid"]] = r["gpus"][0];
    }
    return out;
  };
  const std::map<int64_t, int> placed = gpus_by_pid();
  ASSERT_EQ(placed.size(), 2u);
  ASSERT_NE(placed.begin()->second, placed.rbegin()->second);
  std::map<int64_t, int> swapped;
  for (const auto& [pid, gpu] : placed) {
    swapped[pid] = 1 - gpu;
    launcher_->Assign({pid, "node-0", {1 - gpu}, {}, ""});
  }
  EXPECT_TRUE(WaitFor([&] { return gpus_by_pid() == swapped; }));
  store::EventFilter f;
  f.kinds = {"replica.gpus_assigned", "replica.gpus_mismatch"};
  auto events = controller_->Events(f);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  for (const store::Event& e : *events) {
    EXPECT_EQ(e.kind, "replica.gpus_assigned") << e.message;
  }
  // The accounting holds both shares where they are now.
  const json gpus = controller_->GpusJson();
  int used = 0;
  for (const json& g : gpus.contains("items") ? gpus["items"] : gpus) {
    used += g.value("allocatedMilli", 0);
  }
  EXPECT_EQ(used, 1200) << gpus.dump();
}

// The node has, after its two whole GPUs, one in MIG mode with the cluster
// manager's three 1g.10gb instances (GPU 2).
class MigControllerTest : public ControllerTest {
 protected:
  void ConfigureNode(inventory::NodeSpec* node) override {
    ASSERT_TRUE(inventory::AddStaticMigGpus(
                    *node,
                    *inventory::GpuCatalog::Builtin().Find("H100-SXM-80GB"),
                    {{"1g.10gb", 3}})
                    .ok());
  }
};

TEST_F(MigControllerTest, SlicesKeepOffForeignInstancesAndFollowTheManagers) {
  const auto slices = inventory::StaticMigSlices(node_, "1g.10gb");
  ASSERT_EQ(slices.size(), 3u);
  // Another user holds the first instance.
  launcher_->Report({.node = "node-0",
                     .usable = true,
                     .state = "MIXED",
                     .reason = "",
                     .foreign_gpus = {},
                     .foreign_mig = {slices[0]}});
  Apply(R"(apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: slim}
spec:
  model: slim
  engine: {template: reference}
  resources: {mig: 1g.10gb}
  replicas: 1
)");
  ASSERT_TRUE(WaitFor([&] { return Ready("slim") == 1; }));
  const auto slice_of = [&] {
    const json d = controller_->DeploymentsJson("slim");
    const json& r = d[0]["status"]["replicaStatus"][0];
    return std::make_tuple(r["pid"].get<int64_t>(),
                           r["gpuShare"][0]["gpu"].get<int>(),
                           r["gpuShare"][0].value("migStart", -1));
  };
  auto [pid, gpu, start] = slice_of();
  EXPECT_EQ(std::pair(gpu, start), slices[1]);  // the first free one
  // The manager gave it the third instance: the allocation follows.
  launcher_->Assign({pid, "node-0", {slices[2].first}, {slices[2].second}, ""});
  ASSERT_TRUE(WaitFor([&] {
    auto [p, g, s] = slice_of();
    return std::pair(g, s) == slices[2];
  })) << controller_->DeploymentsJson("slim").dump();
  // The GPU view says who holds each instance.
  const json gpus = controller_->GpusJson();
  json mig;
  for (const json& g : gpus) {
    if (g["index"] == 2) mig = g["migInstances"];
  }
  ASSERT_EQ(mig.size(), 3u) << gpus.dump();
  EXPECT_TRUE(mig[0]["foreign"].get<bool>());
  EXPECT_EQ(mig[1]["replica"], "");
  EXPECT_EQ(mig[2]["replica"], "slim-0") << mig.dump();
  // Whole GPUs keep off the MIG GPU: two fit, a third does not.
  Apply(R"(apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: big}
spec:
  model: big
  engine: {template: reference}
  resources: {whole: 3}
  replicas: 1
)");
  ASSERT_TRUE(WaitFor([&] {
    const json d = controller_->DeploymentsJson("big");
    return d.is_array() && !d.empty() &&
           d[0]["status"].value("message", "").find("GpuFit") !=
               std::string::npos;
  })) << controller_->DeploymentsJson("big").dump();
  store::EventFilter f;
  f.kinds = {"node.mig_foreign", "replica.gpus_assigned"};
  auto events = controller_->Events(f);
  ASSERT_TRUE(events.ok());
  std::set<std::string> kinds;
  for (const store::Event& e : *events) kinds.insert(e.kind);
  EXPECT_EQ(kinds, (std::set<std::string>{"node.mig_foreign",
                                          "replica.gpus_assigned"}));
}

// A launcher whose cluster manager says when a process is ready (a Pod's
// Ready condition).
class ManagerReadinessTest : public ControllerTest {
 protected:
  bool ManagerReadiness() override { return true; }
};

TEST_F(ManagerReadinessTest, AReplicaServesOnlyWhileTheManagerSaysReady) {
  ApplyFraction("chat", 250, "4Gi", 1);
  // The engine answers gpusched's probe, but the manager has not said ready.
  ASSERT_TRUE(WaitFor([&] { return launcher_->PidOf("chat-0") != 0; }));
  const backends::ProcessId pid = launcher_->PidOf("chat-0");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(Ready("chat"), 0);
  launcher_->Readiness({.id = pid, .ready = true, .reason = ""});
  ASSERT_TRUE(WaitFor([&] { return Ready("chat") == 1; }));
  // Not ready to the manager any more: out of rotation, not restarted.
  launcher_->Readiness(
      {.id = pid, .ready = false, .reason = "Pod gpusched/x is not Ready"});
  ASSERT_TRUE(WaitFor([&] { return Ready("chat") == 0; }));
  EXPECT_EQ(launcher_->PidOf("chat-0"), pid);
  launcher_->Readiness({.id = pid, .ready = true, .reason = ""});
  ASSERT_TRUE(WaitFor([&] { return Ready("chat") == 1; }));
  store::EventFilter f;
  f.kinds = {"replica.manager_unready", "replica.manager_ready"};
  auto events = controller_->Events(f);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);  // the first Ready is no news
  std::set<std::string> kinds;
  for (const store::Event& e : *events) kinds.insert(e.kind);
  EXPECT_EQ(kinds, (std::set<std::string>{"replica.manager_unready",
                                          "replica.manager_ready"}));
}

TEST_F(ControllerTest, ApplyAndDeleteRaceTheLoop) {
  // Applies, scales and deletes from several threads at once; the loop
  // must end in the last state asked for with no engine left behind.
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        auto m = config::ParseManifests(kManifests, "test.yaml");
        ASSERT_TRUE(m.ok());
        (void)controller_->Apply(*m);
        (void)controller_->Scale("chat", 1 + (i + t) % 3);
        (void)controller_->ReplicasJson();
        if (i % 2 == 1) {
          (void)controller_->Delete(config::Manifest::Kind::kDeployment,
                                    "chat");
        }
        // Let the loop start some of what was asked before it changes.
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
      }
    });
  }
  for (auto& t : writers) t.join();
  // Whatever the interleaving, the last word holds.
  Apply(kManifests);
  ASSERT_TRUE(controller_->Scale("chat", 3).ok());
  ASSERT_TRUE(WaitFor([&] {
    return Ready("chat") == 3 && launcher_->size() == 3;
  })) << controller_->ReplicasJson().dump();
  ASSERT_TRUE(
      controller_->Delete(config::Manifest::Kind::kDeployment, "chat").ok());
  EXPECT_TRUE(WaitFor([&] { return launcher_->size() == 0; }))
      << launcher_->size() << " engines left";
  EXPECT_GT(launcher_->started(), 3);
}

TEST_F(ControllerTest, AnswersWhileItWorksThroughTheLargestBacklog) {
  // The largest backlog the bounds allow (replicas: 1000, the manifest
  // bound) of 100-milli fractions on 2 GPUs: 20 fit and start engines, the
  // other 980 are placed, fail and retry. The control views must keep
  // answering meanwhile. The limit is generous (a wedge, not a speed, is
  // what fails it); bench/control_backlog.sh measures the percentiles.
  ApplyFraction("big", 100, "1Gi", 1000);
  using Clock = std::chrono::steady_clock;
  Clock::duration worst{};
  int calls = 0;
  const auto end = Clock::now() + std::chrono::seconds(3);
  // At least 4 calls, however slow a loaded sanitizer build makes each one
  // (a count of calls in a fixed time would assert the machine's speed).
  while (Clock::now() < end || launcher_->started() < 20 || calls < 4) {
    const auto t0 = Clock::now();
    const json d = controller_->DeploymentsJson("big");
    (void)controller_->ReplicasJson();
    worst = std::max(worst, Clock::now() - t0);
    ++calls;
    ASSERT_EQ(d.size(), 1u);
    ASSERT_LT(worst, std::chrono::seconds(10)) << "the control views stalled";
    if (Clock::now() > end + std::chrono::seconds(120)) break;
  }
  EXPECT_EQ(launcher_->started(), 20);
  EXPECT_GT(calls, 3);
  std::printf("backlog: %d view calls, the slowest %.1f ms\n", calls,
              std::chrono::duration<double, std::milli>(worst).count());
  ASSERT_TRUE(
      controller_->Delete(config::Manifest::Kind::kDeployment, "big").ok());
  EXPECT_TRUE(WaitFor([&] { return launcher_->size() == 0; }));
}

class PacedControllerTest : public ControllerTest {
 protected:
  static constexpr Micros kInterval = 300 * kMicrosPerMilli;
  void Configure(runtime::ControllerOptions* o) override {
    o->launch_interval = kInterval;
  }
};

TEST_F(PacedControllerTest, LaunchBatchesWaitTheLaunchInterval) {
  // 6 replicas, 2 launches per pass: three batches, each at least
  // launch_interval after the one before (a lower bound, which a slow
  // machine only makes longer).
  ApplyFraction("paced", 100, "1Gi", 6);
  ASSERT_TRUE(WaitFor([&] { return Ready("paced") == 6; }))
      << launcher_->started() << " started, " << Ready("paced") << " ready";
  const auto times = launcher_->start_times();
  ASSERT_EQ(times.size(), 6u);
  for (size_t i = 2; i < times.size(); i += 2) {
    const auto gap = times[i] - times[i - 2];
    EXPECT_GE(gap, std::chrono::microseconds(kInterval) * 9 / 10)
        << "batch " << i / 2 << " started too soon after the one before";
  }
}

}  // namespace
}  // namespace gpusched::api

namespace gpusched::api {
namespace {

// Capacity on demand where the manager names no node in advance
// (Kubernetes): node-0 has 1 GPU, the pool "gpu-pool" at most 1 node of 2.
class ControllerCapacityTest : public ControllerTest {
 protected:
  void Configure(runtime::ControllerOptions* o) override {
    o->capacity.scale_up_delay_s = 0;
    o->capacity.scale_down_delay_s = 0.5;
    o->capacity.interval_s = 0.05;
  }
  void ConfigureNode(inventory::NodeSpec* node) override {
    node->gpu_count = 1;
  }
  void ConfigureLauncher(InProcessLauncher* launcher) override {
    backends::PoolReport p;
    p.pool = "gpu-pool";
    p.gpu_model = "H100-SXM-80GB";
    p.gpus_per_node = 2;
    p.max_nodes = 1;
    launcher->pool = p;
  }
  // Deployment `big`: `replicas` of 2 GPUs, which node-0 cannot hold.
  void ApplyBig(int replicas) {
    Apply(absl::StrCat(
        "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: "
        "big}\nspec:\n  model: big\n  engine: {template: reference}\n",
        "  resources: {whole: 2}\n  replicas: ", replicas, "\n"));
  }
  // A pool node as the manager reports it, with its NodeSpec.
  static backends::PoolNodeReport PoolNode(const std::string& name,
                                           backends::PoolNodeState state) {
    backends::PoolNodeReport r;
    r.node = name;
    r.pool = "gpu-pool";
    r.state = state;
    inventory::NodeSpec spec;
    spec.name = name;
    spec.cpu_milli = 64000;
    spec.memory_mib = 256 * 1024;
    spec.gpu_model = "H100-SXM-80GB";
    spec.gpu_count = 2;
    spec.gpu_memory_mib = 80 * 1024;
    r.spec = spec;
    return r;
  }
  // `big` at 1 replica, which waits for a node of the pool; pool-1 comes
  // up and the replica runs there.
  void BigRunsOnAPoolNode() {
    ApplyBig(1);
    ASSERT_TRUE(WaitFor([&] { return launcher_->waiting().size() == 1; }));
    launcher_->ReportPoolNode(PoolNode("pool-1", backends::PoolNodeState::kUp));
    launcher_->Report({.node = "pool-1", .usable = true, .state = "Ready"});
    ASSERT_TRUE(WaitFor([&] { return Ready("big") == 1; }));
  }
  // The controller's node `name` (NodesJson), empty when it has none.
  json Node(const std::string& name) {
    for (const json& n : controller_->NodesJson()) {
      if (n.value("name", "") == name) return n;
    }
    return json::object();
  }
  std::vector<std::string> Messages(const std::string& kind) {
    store::EventFilter f;
    f.kinds = {kind};
    f.limit = 100;
    std::vector<std::string> out;
    auto events = controller_->Events(f);
    if (events.ok()) {
      for (const store::Event& e : *events) out.push_back(e.message);
    }
    return out;
  }
  bool HasMessage(const std::string& kind, const std::string& text) {
    for (const std::string& m : Messages(kind)) {
      if (m.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

TEST_F(ControllerCapacityTest, LearnsANodeAtRunTimeBindsThereAndForgetsIt) {
  ApplyBig(1);
  // No node has 2 GPUs: the replica waits for one of the pool, unbound.
  ASSERT_TRUE(WaitFor([&] {
    return launcher_->waiting() == std::vector<std::string>{"gpu-pool"};
  })) << controller_->DeploymentsJson("big").dump();
  EXPECT_TRUE(HasMessage("capacity.requested", "pool gpu-pool"));
  EXPECT_EQ(Ready("big"), 0);
  EXPECT_EQ(launcher_->size(), 0);  // no engine runs for it

  // Reports the controller refuses: not a node name, a spec of another
  // node.
  struct Bad {
    std::string node, spec_name, why;
  };
  for (const Bad& b : {Bad{"Bad_Name", "Bad_Name", "is not a node name"},
                       Bad{"pool-x", "other", "describes node 'other'"}}) {
    backends::PoolNodeReport r = PoolNode(b.node, backends::PoolNodeState::kUp);
    r.spec->name = b.spec_name;
    launcher_->ReportPoolNode(r);
    EXPECT_TRUE(WaitFor([&] {
      return HasMessage("capacity.failed",
                        absl::StrCat("node ", b.node, " of pool gpu-pool")) &&
             HasMessage("capacity.failed", b.why);
    })) << b.node;
    EXPECT_TRUE(Node(b.node).empty()) << b.node;
  }

  // The node the autoscaler added, registered but not Ready yet: learned,
  // its GPUs take no replica.
  launcher_->ReportPoolNode(
      PoolNode("pool-1", backends::PoolNodeState::kPoweringUp));
  launcher_->Report({.node = "pool-1", .usable = true, .state = "NotReady"});
  ASSERT_TRUE(WaitFor([&] {
    return Node("pool-1").value("capacityState", "") == "powering_up";
  }));
  EXPECT_EQ(launcher_->bound("big-0"), "");
  // Up: the replica is bound there, and the delay since the ask measured.
  launcher_->ReportPoolNode(PoolNode("pool-1", backends::PoolNodeState::kUp));
  launcher_->Report({.node = "pool-1", .usable = true, .state = "Ready"});
  ASSERT_TRUE(WaitFor([&] { return Ready("big") == 1; }))
      << controller_->DeploymentsJson("big").dump();
  EXPECT_EQ(launcher_->bound("big-0"), "pool-1");
  EXPECT_TRUE(launcher_->waiting().empty());
  const json n = Node("pool-1");
  ASSERT_FALSE(n.empty());
  EXPECT_EQ(n["gpus"], 2);
  EXPECT_EQ(n["allocatedGpuMilli"], 2000);
  EXPECT_EQ(n["capacityState"], "up");
  EXPECT_TRUE(
      HasMessage("node.provisioned", "node pool-1 of pool gpu-pool is up, "));
  EXPECT_TRUE(HasMessage("node.provisioned", "after it was asked for"));
  EXPECT_EQ(controller_->PoolsJson()[0]["measuredDelays"], 1);

  // The pool's one node is there: a second is not learned.
  launcher_->ReportPoolNode(PoolNode("pool-2", backends::PoolNodeState::kUp));
  EXPECT_TRUE(WaitFor([&] {
    return HasMessage("capacity.failed", "pool gpu-pool has 1 of its 1 nodes");
  }));
  EXPECT_TRUE(Node("pool-2").empty());

  // Idle: given back; once the autoscaler removed it, it is powered down
  // and holds nothing.
  ApplyBig(0);
  ASSERT_TRUE(WaitFor([&] {
    return launcher_->released() == std::vector<std::string>{"pool-1"};
  })) << controller_->PoolsJson().dump();
  launcher_->ReportPoolNode(
      PoolNode("pool-1", backends::PoolNodeState::kPoweredDown));
  launcher_->Report({.node = "pool-1",
                     .usable = false,
                     .state = "deleted",
                     .reason = "the Node object was deleted"});
  ASSERT_TRUE(WaitFor([&] {
    return Node("pool-1").value("capacityState", "") == "powered_down";
  })) << Node("pool-1").dump();
  EXPECT_EQ(Node("pool-1")["allocatedGpuMilli"], 0);
  EXPECT_TRUE(HasMessage("node.powered_down", "node pool-1"));
}

TEST_F(ControllerCapacityTest, NoNodeIsAskedForAMigSliceOnAPoolOfUnnamedNodes) {
  // A node the pool adds comes without a MIG layout: the slice's replica
  // waits, and only the whole-GPU replica is asked for.
  Apply(
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: "
      "slice}\nspec:\n  model: slice\n  engine: {template: reference}\n"
      "  resources: {mig: 1g.10gb}\n  replicas: 1\n");
  ASSERT_TRUE(WaitFor(
      [&] { return HasMessage("replica.unschedulable", "slice-0: "); }));
  ApplyBig(1);
  ASSERT_TRUE(WaitFor([&] { return launcher_->waiting().size() == 1; }));
  const std::vector<std::string> asked = Messages("capacity.requested");
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_THAT(asked[0], ::testing::HasSubstr("(big-0)"));
}

// A node that came up and then failed is a node lost, not a failed
// resume: the event says so, and the pool is not skipped, so the replica's
// replacement asks it again.
TEST_F(ControllerCapacityTest, ANodeThatFailsAfterComingUpIsALossNotASkip) {
  ASSERT_NO_FATAL_FAILURE(BigRunsOnAPoolNode());
  ASSERT_EQ(Messages("capacity.requested").size(), 1u);

  backends::PoolNodeReport failed =
      PoolNode("pool-1", backends::PoolNodeState::kFailed);
  failed.reason = "kubelet stopped posting node status";
  launcher_->ReportPoolNode(failed);
  launcher_->Report({.node = "pool-1",
                     .usable = false,
                     .state = "NotReady",
                     .reason = "kubelet stopped posting node status"});
  ASSERT_TRUE(WaitFor([&] {
    return HasMessage("capacity.failed",
                      "node pool-1 of pool gpu-pool failed after it came up: "
                      "kubelet stopped posting node status; its replicas of "
                      "big are replaced");
  })) << ::testing::PrintToString(Messages("capacity.failed"));
  EXPECT_FALSE(HasMessage("capacity.failed", "did not come up"));
  // Not skipped: the replacement asks the pool again.
  EXPECT_TRUE(WaitFor([&] {
    return Messages("capacity.requested").size() == 2;
  })) << ::testing::PrintToString(Messages("capacity.requested"));
}

// The same pool as spot: a node taken back is a spot preemption.
class ControllerSpotCapacityTest : public ControllerCapacityTest {
 protected:
  void ConfigureLauncher(InProcessLauncher* launcher) override {
    ControllerCapacityTest::ConfigureLauncher(launcher);
    launcher->pool->spot = true;
  }
};

TEST_F(ControllerSpotCapacityTest, ASpotNodeGoneUnaskedIsAPreemption) {
  ASSERT_NO_FATAL_FAILURE(BigRunsOnAPoolNode());
  launcher_->ReportPoolNode(
      PoolNode("pool-1", backends::PoolNodeState::kPoweredDown));
  launcher_->Report({.node = "pool-1",
                     .usable = false,
                     .state = "deleted",
                     .reason = "the Node object was deleted"});
  ASSERT_TRUE(WaitFor([&] {
    return HasMessage("spot.preempted",
                      "spot node pool-1 of pool gpu-pool was taken back; its "
                      "replicas of big are replaced");
  })) << ::testing::PrintToString(Messages("spot.preempted"));
  EXPECT_TRUE(HasMessage("node.powered_down", "node pool-1"));
  EXPECT_TRUE(Messages("capacity.failed").empty());
}

TEST_F(ControllerCapacityTest, AWaitingReplicaScaledAwayEndsItsAsk) {
  ApplyBig(1);
  ASSERT_TRUE(WaitFor([&] { return launcher_->waiting().size() == 1; }));
  ApplyBig(0);
  EXPECT_TRUE(WaitFor([&] { return launcher_->waiting().empty(); }));
}

}  // namespace
}  // namespace gpusched::api
