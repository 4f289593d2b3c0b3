// The controller test fixture: the live controller with a SQLite store, the
// gateway as its data plane, and engines in this process (InProcessLauncher),
// shared by controller_test.cc and controller_capacity_test.cc. Waits on
// states with generous deadlines; never on how fast the machine is.
#ifndef GPUSCHED_API_CONTROLLER_TESTING_H_
#define GPUSCHED_API_CONTROLLER_TESTING_H_

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
#include "runtime/controller.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpusched::api::controller_testing {

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

}  // namespace gpusched::api::controller_testing

#endif  // GPUSCHED_API_CONTROLLER_TESTING_H_
