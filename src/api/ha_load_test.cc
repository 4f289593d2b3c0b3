// Load across instances (runtime/instance_load.h, docs/ha.md): two
// controllers on one etcd, each with a data plane of its own, decide what
// one controller with all of the load decides; a request held on the
// follower scales from zero; the instances' shares of a tenant's limits
// add up to the limit. Real etcd (store/etcd_testing.h; skipped where it is
// not installed), fake data planes and a launcher that starts nothing.
// Waits on states with generous deadlines.
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "config/manifest.h"
#include "gtest/gtest.h"
#include "runtime/controller.h"
#include "runtime/instance_load.h"
#include "store/etcd_election.h"
#include "store/etcd_testing.h"
#include "store/sqlite_store.h"

namespace gpusched::runtime {
namespace {

// A data plane whose load the test sets.
class FakePlane : public DataPlane {
 public:
  absl::Status ServeDeployment(const config::DeploymentSpec&,
                               const std::vector<std::string>&) override {
    return absl::OkStatus();
  }
  void RemoveDeployment(const std::string&) override {}
  absl::Status ServeTenant(const config::TenantSpec&) override {
    return absl::OkStatus();
  }
  void RemoveTenant(const std::string&) override {}
  void SetReplicas(const std::string&,
                   const std::vector<net::Endpoint>&) override {}
  void UpdateEngineLoad(const net::Endpoint&,
                        const serving::EngineLoad&) override {}
  ServingLoad Load(const std::string& name) override {
    absl::MutexLock l(&mu_);
    auto it = loads_.find(name);
    return it == loads_.end() ? ServingLoad{} : it->second;
  }
  int64_t InFlightOn(const net::Endpoint&) override { return 0; }
  std::vector<double> TtftSince(const std::string&, Micros) override {
    return {};
  }
  std::vector<control::VersionSample> SamplesSince(const std::string&,
                                                   Micros) override {
    return {};
  }
  absl::Status ServeRoute(const config::ModelRouteSpec&,
                          const std::vector<int>&) override {
    return absl::OkStatus();
  }
  void RemoveRoute(const std::string&) override {}
  std::map<std::string, TenantUsage> TenantUsages() override {
    absl::MutexLock l(&mu_);
    return usage_;
  }
  void SetTenantShares(
      const std::map<std::string, serving::TenantShare>& shares) override {
    absl::MutexLock l(&mu_);
    shares_ = shares;
  }
  void Tick() override {}
  void SetDemandSink(DemandSink sink) override {
    absl::MutexLock l(&mu_);
    sink_ = std::move(sink);
  }

  void SetLoad(const std::string& name, ServingLoad load) {
    absl::MutexLock l(&mu_);
    loads_[name] = load;
  }
  void AddUsage(const std::string& tenant, int64_t requests) {
    absl::MutexLock l(&mu_);
    usage_[tenant].requests += requests;
    usage_[tenant].tokens += requests * 100;
  }
  std::map<std::string, serving::TenantShare> shares() {
    absl::MutexLock l(&mu_);
    return shares_;
  }
  // A request was held at zero replicas (what the gateway says).
  void Held(const std::string& deployment, Micros now) {
    DemandSink sink;
    {
      absl::MutexLock l(&mu_);
      sink = sink_;
    }
    ASSERT_TRUE(sink);
    sink(deployment, now);
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, ServingLoad> loads_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, TenantUsage> usage_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, serving::TenantShare> shares_ ABSL_GUARDED_BY(mu_);
  DemandSink sink_ ABSL_GUARDED_BY(mu_);
};

// Starts nothing that runs: every replica stays starting.
class NullLauncher : public backends::Launcher {
 public:
  absl::StatusOr<backends::ProcessId> Start(
      const backends::ProcessSpec&) override {
    return ++next_;
  }
  std::vector<backends::ExitEvent> Poll() override { return {}; }
  absl::Status Stop(backends::ProcessId, Micros, Micros) override {
    return absl::OkStatus();
  }
  absl::Status Kill(backends::ProcessId) override { return absl::OkStatus(); }
  Micros Tick(Micros) override { return kNever; }
  bool IsAlive(backends::ProcessId) const override { return true; }
  int size() const override { return 0; }

 private:
  backends::ProcessId next_ = 100000;
};

constexpr char kManifests[] = R"(apiVersion: gpusched.io/v1
kind: Tenant
metadata: {name: team}
spec:
  limits: {requestsPerMinute: 600, maxConcurrency: 10, maxQueued: 7}
---
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: chat}
spec:
  model: chat
  engine: {template: reference}
  resources: {fraction: {milli: 100, memory: 1Gi}}
  replicas: 1
  autoscaling:
    minReplicas: 1
    maxReplicas: 20
    targetOngoingRequests: 2
    lookBackPeriodS: 1
    upscaleDelayS: 0
    maxConcurrentStarts: 20
---
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: cold}
spec:
  model: cold
  engine: {template: reference}
  resources: {fraction: {milli: 100, memory: 1Gi}}
  replicas: 0
  autoscaling: {minReplicas: 0, maxReplicas: 2, upscaleDelayS: 0}
)";

ControllerOptions Options(const std::string& dir) {
  ControllerOptions o;
  o.log_dir = ::testing::TempDir() + "/ha_load_test_" + dir;
  o.self_path = "/nonexistent/gpusched";
  o.tick = 20 * kMicrosPerMilli;
  o.load_period = 100 * kMicrosPerMilli;
  o.status_period = 100 * kMicrosPerMilli;
  o.metrics_period = 0;
  return o;
}

ControllerCluster Cluster() {
  ControllerCluster c;
  inventory::NodeSpec node;
  node.name = "node-0";
  node.cpu_milli = 640000;
  node.memory_mib = 1024 * 1024;
  node.gpu_model = "H100-SXM-80GB";
  node.gpu_count = 8;
  node.gpu_memory_mib = 80 * 1024;
  c.nodes = {node};
  c.source = "declared";
  return c;
}

// Polls `done` every 20 ms for up to 60 s.
bool WaitFor(const std::function<bool()>& done) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// One instance on an etcd store.
struct Instance {
  std::unique_ptr<store::EtcdStore> store;
  std::unique_ptr<store::EtcdElection> election;
  FakePlane plane;
  std::unique_ptr<Controller> controller;

  void Open(const std::string& prefix, const std::string& id) {
    store::EtcdTestServer* etcd = store::EtcdTestServer::Shared();
    auto opened = etcd->OpenStore(prefix, id);
    ASSERT_TRUE(opened.ok()) << opened.status();
    store = *std::move(opened);
    store::ElectionOptions eo;
    eo.self.id = id;
    election = std::make_unique<store::EtcdElection>(store.get(), eo);
    ControllerOptions o = Options(id);
    o.election = election.get();
    o.launcher_factory = [] {
      return absl::StatusOr<std::unique_ptr<backends::Launcher>>(
          std::make_unique<NullLauncher>());
    };
    auto c = Controller::Create(o, Cluster(), store.get(), &plane,
                                std::make_unique<NullLauncher>());
    ASSERT_TRUE(c.ok()) << c.status();
    controller = *std::move(c);
    Controller* ctl = controller.get();
    store::EtcdElection* e = election.get();
    election->SetChangeCallback([ctl] { ctl->OnElectionChange(); });
    store->SetChangeCallback([ctl, e] {
      e->Wake();
      ctl->OnStoreChange();
    });
    ASSERT_TRUE(controller->Start().ok());
    ASSERT_TRUE(election->Start().ok());
  }
  ~Instance() {
    if (controller) controller->Stop();
    if (election) election->Stop(/*resign=*/true);
    if (store) store->SetChangeCallback(nullptr);
    controller.reset();
  }
};

class HaLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::EtcdTestServer* etcd = store::EtcdTestServer::Shared();
    if (!etcd->Unavailable().empty()) GTEST_SKIP() << etcd->Unavailable();
    ASSERT_EQ(etcd->StartError(), "");
    const std::string prefix = store::EtcdTestServer::UniquePrefix();
    a_.Open(prefix, "a");
    ASSERT_TRUE(WaitFor([&] { return a_.controller->Leading(); }));
    b_.Open(prefix, "b");
    auto m = config::ParseManifests(kManifests, "test.yaml");
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(a_.controller->Apply(*m).ok());
    ASSERT_TRUE(WaitFor([&] {
      return b_.controller->HasDeployment("chat") &&
             b_.controller->HasDeployment("cold") &&
             b_.controller->HasTenant("team");
    }));
    ASSERT_FALSE(b_.controller->Leading());
  }
  Instance a_, b_;
};

// What one instance decides with all of the load.
int SingleInstanceDecision(ServingLoad load) {
  auto opened = store::SqliteStore::Open(":memory:");
  EXPECT_TRUE(opened.ok());
  FakePlane plane;
  auto c = Controller::Create(Options("single"), Cluster(), opened->get(),
                              &plane, std::make_unique<NullLauncher>());
  EXPECT_TRUE(c.ok());
  EXPECT_TRUE((*c)->Start().ok());
  auto m = config::ParseManifests(kManifests, "test.yaml");
  EXPECT_TRUE((*c)->Apply(*m).ok());
  plane.SetLoad("chat", load);
  // Settled: the same count for a second (the look-back window).
  int last = -1;
  auto since = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitFor([&] {
    const int now = (*c)->DesiredReplicas("chat").value_or(-1);
    if (now != last) {
      last = now;
      since = std::chrono::steady_clock::now();
    }
    return now > 1 &&
           std::chrono::steady_clock::now() - since > std::chrono::seconds(2);
  }));
  (*c)->Stop();
  return last;
}

TEST_F(HaLoadTest, TwoInstancesDecideWhatOneDecidesWithAllTheLoad) {
  const int single = SingleInstanceDecision({.queued = 7, .in_flight = 11});
  // ceil((7 + 11) / targetOngoingRequests 2).
  EXPECT_EQ(single, 9);
  a_.plane.SetLoad("chat", {.queued = 3, .in_flight = 5});
  b_.plane.SetLoad("chat", {.queued = 4, .in_flight = 6});
  EXPECT_TRUE(WaitFor([&] {
    return a_.controller->DesiredReplicas("chat") == single;
  })) << "the leader decided "
      << a_.controller->DesiredReplicas("chat").value_or(-1)
      << ", one instance with all of the load " << single;
}

TEST_F(HaLoadTest, ARequestHeldOnTheFollowerScalesFromZero) {
  ASSERT_EQ(a_.controller->DesiredReplicas("cold"), 0);
  const Micros now = SteadyClock::Get().Now();
  b_.plane.SetLoad("cold",
                   {.queued = 1, .in_flight = 0, .held = 1, .held_since = now});
  b_.plane.Held("cold", now);
  EXPECT_TRUE(WaitFor([&] {
    return a_.controller->DesiredReplicas("cold") == 1;
  })) << a_.controller->DesiredReplicas("cold").value_or(-1);
}

TEST_F(HaLoadTest, SharesOfATenantsLimitsAddUpToTheLimit) {
  // Three times as much demand on a as on b.
  std::atomic<bool> stop{false};
  std::thread load([&] {
    while (!stop.load()) {
      a_.plane.AddUsage("team", 3);
      b_.plane.AddUsage("team", 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  bool settled = WaitFor([&] {
    const auto sa = a_.plane.shares(), sb = b_.plane.shares();
    if (!sa.contains("team") || !sb.contains("team")) return false;
    const serving::TenantShare x = sa.at("team"), y = sb.at("team");
    return std::abs(x.rate + y.rate - 1) < 0.05 && x.rate > 0.6 &&
           y.rate < 0.4 && x.max_concurrency == 5 && y.max_concurrency == 5 &&
           x.max_queued + y.max_queued == 7;
  });
  stop.store(true);
  load.join();
  const auto sa = a_.plane.shares(), sb = b_.plane.shares();
  ASSERT_TRUE(settled) << "a: "
                       << (sa.contains("team") ? sa.at("team").rate : -1)
                       << " b: "
                       << (sb.contains("team") ? sb.at("team").rate : -1);
}

}  // namespace
}  // namespace gpusched::runtime
