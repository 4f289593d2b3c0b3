// The live controller with all of its threads at once: the loop, the
// gateway as its data plane, reference engines serving in this process (a
// launcher that starts engine::EngineServer where the controller would
// fork one) and control calls from several threads while replicas start,
// crash, scale and drain. Waits on states with generous deadlines; never on how
// fast the machine is. The TSan build runs it (label "threads").
#include "runtime/controller.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/controller_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::api {
namespace {

using controller_testing::ControllerTest;
using controller_testing::InProcessLauncher;
using nlohmann::json;

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
