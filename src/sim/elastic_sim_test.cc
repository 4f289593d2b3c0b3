// Autoscaling, cold starts, swapping and preemption in `gpusched sim
// serve`: scripted multi-model scenarios checked through the run and its
// report.
#include <cmath>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "config/serve_sim_config.h"
#include "gtest/gtest.h"
#include "sim/cold_start.h"
#include "sim/serve_report.h"
#include "sim/serve_sim.h"

namespace gpusched::sim {
namespace {

using json = nlohmann::json;

std::string TestData(const std::string& rel) {
  return std::string(GPUSCHED_SOURCE_DIR) + "/testdata/" + rel;
}

TEST(ColdStartTest, ParamsFromModelNames) {
  EXPECT_DOUBLE_EQ(ModelParamsB("llama-2-7b"), 7);
  EXPECT_DOUBLE_EQ(ModelParamsB("llama-2-13b"), 13);
  EXPECT_DOUBLE_EQ(ModelParamsB("opt-6.7b"), 6.7);
  EXPECT_DOUBLE_EQ(ModelParamsB("Mixtral-8x7B"), 56);
  EXPECT_DOUBLE_EQ(ModelParamsB("qwen-72b-chat"), 72);
  EXPECT_DOUBLE_EQ(ModelParamsB("bert-base"), kProfileParamsB);
  EXPECT_DOUBLE_EQ(ModelParamsB("gpt2"), kProfileParamsB);
}

TEST(ColdStartTest, ProfileSamplesScaleWithSizeAndTp) {
  config::ColdStartSpec spec;
  spec.profile = TestData("model-load/serverlessllm_opt-6.7b_load_times.csv");
  spec.format = "safetensors";
  spec.engine_init_s = 0.5;
  auto m = ColdStartModel::Create(spec, 1);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->load_times().size(), 30u);
  const double lo =
      *std::min_element(m->load_times().begin(), m->load_times().end());
  const double hi =
      *std::max_element(m->load_times().begin(), m->load_times().end());
  EXPECT_GT(lo, 3.0);  // safetensors loads take seconds
  for (int i = 0; i < 50; ++i) {
    const double t = m->Sample("opt-6.7b", 1);
    EXPECT_GE(t, lo + 0.5);
    EXPECT_LE(t, hi + 0.5);
    // 13.4B on 2 GPUs loads like 6.7B on one.
    const double t2 = m->Sample("model-13.4b", 2);
    EXPECT_GE(t2, lo + 0.5);
    EXPECT_LE(t2, hi + 0.5);
  }
  // The same seed draws the same times.
  auto a = ColdStartModel::Create(spec, 9);
  auto b = ColdStartModel::Create(spec, 9);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(a->Sample("llama-2-7b", 1), b->Sample("llama-2-7b", 1));
  }
}

TEST(ColdStartTest, DefaultWithoutProfileAndErrors) {
  config::ColdStartSpec spec;  // no profile: 4.95 s per 6.7B
  auto m = ColdStartModel::Create(spec, 1);
  ASSERT_TRUE(m.ok());
  EXPECT_NEAR(m->Sample("llama-2-13b", 1), 4.95 * 13 / 6.7, 1e-9);
  spec.profile = TestData("model-load/serverlessllm_opt-6.7b_load_times.csv");
  spec.format = "gguf";
  auto bad = ColdStartModel::Create(spec, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'gguf'"), std::string::npos)
      << bad.status();
  spec.profile = "/nonexistent/load.csv";
  EXPECT_FALSE(ColdStartModel::Create(spec, 1).ok());
}

// Writes an Aegaeon-format trace: (seconds, model) rows.
std::string WriteTrace(const std::string& name,
                       const std::vector<std::pair<double, std::string>>& rows,
                       int input = 200, int output = 50) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream f(path);
  f << "Request Time,Model Name,Input Length,Output Length\n";
  for (const auto& [t, model] : rows) {
    const int h = static_cast<int>(t / 3600);
    const int m = static_cast<int>((t - h * 3600) / 60);
    const double s = t - h * 3600 - m * 60;
    f << absl::StrFormat("%02d:%02d:%06.3f,%s,%d,%d\n", h, m, s, model, input,
                         output);
  }
  return path;
}

struct Result {
  ServeSimRun run;
  json report;
};

Result Simulate(const std::string& yaml) {
  auto cfg = config::ParseServeSimYaml(yaml, "test.yaml", "");
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  auto run = RunServeSim(*cfg);
  EXPECT_TRUE(run.ok()) << run.status();
  Result r{*std::move(run), {}};
  r.report = ServeReportJson(r.run, false);
  return r;
}

int64_t Completed(const ServeSimRun& run, const std::string& deployment) {
  int64_t n = 0;
  for (const RequestOutcome& o : run.requests) {
    n += run.deployment_names[o.deployment] == deployment && o.completed();
  }
  return n;
}

TEST(ElasticSimTest, ScalesZeroToNToZeroWithHeldRequests) {
  // 30 s of steady load at 8 req/s on a deployment at zero replicas.
  std::vector<std::pair<double, std::string>> rows;
  for (int i = 0; i < 240; ++i) rows.emplace_back(5 + i * 0.125, "chat");
  const std::string trace = WriteTrace("zero.csv", rows, 500, 200);
  const Result r = Simulate(absl::StrCat(R"(
load_sample_s: 1
deployments:
  - name: chat
    model: llama-2-7b
    gpu: A100-80GB
    max_ongoing_requests: 4
    autoscaling:
      min_replicas: 0
      max_replicas: 4
      target_ongoing_requests: 2
      look_back_period_s: 2
      upscale_delay_s: 1
      downscale_delay_s: 3
      idle_timeout_s: 5
      cold_start_s: 2
workload:
  trace: {format: aegaeon, path: )",
                                         trace, "}\n"));
  const ServeSimRun& run = r.run;
  ASSERT_EQ(run.requests.size(), 240u);
  EXPECT_EQ(Completed(run, "chat"), 240);  // nothing rejected nor lost
  // The first request was held for the 2 s cold start.
  const RequestOutcome& first = run.requests[0];
  EXPECT_TRUE(first.held);
  EXPECT_NEAR(ToSeconds(first.dispatched - first.arrival), 2.0, 1e-3);
  const json& cap = r.report["deployments"]["chat"]["capacity"];
  EXPECT_GE(cap["replicas_max"].get<int>(), 2) << cap.dump();
  EXPECT_LE(cap["replicas_max"].get<int>(), 4);
  EXPECT_EQ(cap["scale_decisions"]["held_requests"], 1) << cap.dump();
  EXPECT_GE(cap["scale_decisions"]["target_ongoing_requests"].get<int>(), 1);
  EXPECT_EQ(cap["scale_decisions"]["idle_timeout"], 1);
  EXPECT_EQ(cap["cold_starts"].get<int>(),
            cap["replicas_max"].get<int>() + 0 * 1);  // one per start
  // Replicas over time: 0 before the load, > 1 under it, 0 at the end.
  const json& samples = r.report["load_over_time"]["samples"];
  ASSERT_GT(samples.size(), 40u);
  EXPECT_EQ(samples[2]["replicas"][0], 0);
  int peak = 0;
  for (const json& s : samples)
    peak = std::max(peak, s["replicas"][0].get<int>());
  EXPECT_GE(peak, 2);
  EXPECT_EQ(samples.back()["replicas"][0], 0);
  // GPU time is held only while replicas exist: far less than the span.
  const double span =
      cap.contains("span_s")
          ? 0
          : r.report["overall"]["capacity"]["span_s"].get<double>();
  EXPECT_LT(cap["gpu_hours"].get<double>() * 3600, 4 * span);
  EXPECT_GT(cap["gpu_hours"].get<double>() * 3600, 30);
}

// Two scale-to-zero models (a, b) on one GPU; 3 s cold starts.
std::string TwoModelsOnOneGpu(const std::string& trace, int swap_min_idle_s) {
  return absl::StrCat("cluster: {gpus: 1, swap_min_idle_s: ", swap_min_idle_s,
                      R"(}
deployments:
  - name: a
    model: llama-2-7b
    gpu: A100-80GB
    autoscaling: {min_replicas: 0, max_replicas: 1, idle_timeout_s: 1000, cold_start_s: 3}
  - name: b
    model: llama-2-7b
    gpu: A100-80GB
    autoscaling: {min_replicas: 0, max_replicas: 1, idle_timeout_s: 1000, cold_start_s: 3}
workload:
  trace: {format: aegaeon, path: )",
                      trace, "}\n");
}

TEST(ElasticSimTest, SwapsOutAnIdleModelWhenNothingFits) {
  // One GPU, two models: b's first request finds a's idle replica in the
  // way; a is swapped out (it would otherwise stay for 1000 s).
  std::vector<std::pair<double, std::string>> rows;
  for (int i = 0; i < 10; ++i) rows.emplace_back(1 + i, "a");
  for (int i = 0; i < 10; ++i) rows.emplace_back(30 + i, "b");
  rows.emplace_back(60, "a");  // and back
  const std::string trace = WriteTrace("swap.csv", rows);
  const Result r = Simulate(TwoModelsOnOneGpu(trace, 0));
  EXPECT_EQ(Completed(r.run, "a"), 11);
  EXPECT_EQ(Completed(r.run, "b"), 10);
  const json& a = r.report["deployments"]["a"]["capacity"];
  const json& b = r.report["deployments"]["b"]["capacity"];
  EXPECT_EQ(a["evictions"], 1) << a.dump();
  EXPECT_EQ(b["evictions"], 1) << b.dump();  // when a came back at 60 s
  EXPECT_EQ(a["cold_starts"], 2);
  EXPECT_EQ(b["cold_starts"], 1);
  // b's first request waited for its cold start only (a was idle); the
  // requests behind it less.
  for (const RequestOutcome& o : r.run.requests) {
    if (!o.held) continue;
    const double hold = ToSeconds(o.dispatched - o.arrival);
    if (o.arrival == FromSeconds(30)) {
      EXPECT_NEAR(hold, 3, 1e-3);
    }
    EXPECT_LE(hold, 3 + 1e-3);
  }
  // Never more than the one GPU.
  EXPECT_EQ(r.report["overall"]["capacity"]["preemptions"], 0);
}

TEST(ElasticSimTest, RecentlyUsedReplicasAreNotSwappedOut) {
  // As above, with swap_min_idle_s 100: a, last used about 11 s in, may
  // only go 100 s later, so b's first request waits for that, then for
  // its cold start.
  std::vector<std::pair<double, std::string>> rows;
  for (int i = 0; i < 10; ++i) rows.emplace_back(1 + i, "a");
  rows.emplace_back(30, "b");
  const std::string trace = WriteTrace("minidle.csv", rows);
  const Result r = Simulate(TwoModelsOnOneGpu(trace, 100));
  EXPECT_EQ(Completed(r.run, "b"), 1);
  EXPECT_EQ(r.report["deployments"]["a"]["capacity"]["evictions"], 1);
  const RequestOutcome& b = r.run.requests.back();
  const double hold = ToSeconds(b.dispatched - b.arrival);
  EXPECT_GT(hold, 80);  // a's last request ended ~11 s in: free at ~111 s
  EXPECT_LT(hold, 90);
}

std::string PreemptionConfig(const std::string& trace, bool preemptible) {
  return absl::StrCat(R"(
cluster: {gpus: 2}
priority_classes:
  - {name: critical}
  - {name: standard}
  - {name: batch, preemptible: )",
                      preemptible ? "true" : "false", R"(}
deployments:
  - name: offline
    priority_class: batch
    model: llama-2-7b
    gpu: A100-80GB
    replicas: 2
    max_ongoing_requests: 8
  - name: urgent
    priority_class: critical
    model: llama-2-7b
    gpu: A100-80GB
    autoscaling: {min_replicas: 0, max_replicas: 1, idle_timeout_s: 5, cold_start_s: 2}
workload:
  trace: {format: aegaeon, path: )",
                      trace, "}\n");
}

TEST(ElasticSimTest, CriticalDeploymentPreemptsBatchWhichDrains) {
  std::vector<std::pair<double, std::string>> rows;
  for (int i = 0; i < 120; ++i) rows.emplace_back(i * 0.5, "offline");
  for (int i = 0; i < 10; ++i) rows.emplace_back(20 + i, "urgent");
  std::sort(rows.begin(), rows.end());
  const std::string trace = WriteTrace("preempt.csv", rows, 300, 400);
  const Result r = Simulate(PreemptionConfig(trace, true));
  // Every batch request completed: the victim drained (its in-flight
  // requests finished) and the rest went to the other replica.
  EXPECT_EQ(Completed(r.run, "offline"), 120);
  EXPECT_EQ(Completed(r.run, "urgent"), 10);
  const json& off = r.report["deployments"]["offline"]["capacity"];
  EXPECT_EQ(off["preemptions"], 1) << off.dump();
  // It came back once urgent went idle.
  EXPECT_EQ(off["cold_starts"], 1) << off.dump();
  EXPECT_EQ(r.report["deployments"]["urgent"]["capacity"]["cold_starts"], 1);
  // The first urgent request waited for the drain plus the cold start.
  const RequestOutcome* first = nullptr;
  for (const RequestOutcome& o : r.run.requests) {
    if (r.run.deployment_names[o.deployment] == "urgent") {
      first = &o;
      break;
    }
  }
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(first->held);
  EXPECT_GE(ToSeconds(first->dispatched - first->arrival), 2.0);
}

TEST(ElasticSimTest, NonPreemptibleClassIsNeverDisplaced) {
  std::vector<std::pair<double, std::string>> rows;
  for (int i = 0; i < 40; ++i) rows.emplace_back(i * 0.5, "offline");
  rows.emplace_back(5, "urgent");
  std::sort(rows.begin(), rows.end());
  const std::string trace = WriteTrace("nopreempt.csv", rows, 300, 100);
  const Result r = Simulate(PreemptionConfig(trace, false));
  EXPECT_EQ(Completed(r.run, "offline"), 40);
  EXPECT_EQ(Completed(r.run, "urgent"), 0);  // still held: nothing fits
  EXPECT_EQ(r.report["overall"]["capacity"]["preemptions"], 0);
  EXPECT_EQ(r.report["overall"]["capacity"]["evictions"], 0);
}

TEST(ElasticSimTest, InitialReplicasMustFitTheCluster) {
  const std::string trace = WriteTrace("fit.csv", {{1, "a"}});
  auto cfg = config::ParseServeSimYaml(absl::StrCat(R"(
cluster: {gpus: 1}
deployments:
  - {name: a, model: llama-2-7b, gpu: A100-80GB, replicas: 2}
workload:
  trace: {format: aegaeon, path: )",
                                                    trace, "}\n"),
                                       "fit.yaml", "");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto run = RunServeSim(*cfg);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("cluster.gpus is 1"), std::string::npos)
      << run.status();
}

// The fleet places on nodes: fractions share a GPU, a multi-GPU replica's
// GPUs are on one node.
TEST(ElasticSimTest, FractionsShareAGpuAndTensorParallelStaysOnOneNode) {
  const std::string trace = WriteTrace("pack.csv", {{1, "a"}, {1, "b"}});
  const std::string two_halves = absl::StrCat(R"(
cluster: {gpus: 1}
deployments:
  - {name: a, model: llama-2-7b, gpu: A100-80GB, gpu_fraction: 0.5}
  - {name: b, model: llama-2-7b, gpu: A100-80GB, gpu_fraction: 0.5}
workload:
  trace: {format: aegaeon, path: )",
                                              trace, "}\n");
  const Result r = Simulate(two_halves);
  EXPECT_EQ(Completed(r.run, "a"), 1);
  EXPECT_EQ(Completed(r.run, "b"), 1);
  EXPECT_NEAR(r.run.capacity[0].gpu_seconds,
              0.5 * r.run.capacity[0].replica_seconds, 1e-9);
  // Three halves do not fit one GPU.
  auto cfg = config::ParseServeSimYaml(
      absl::StrReplaceAll(two_halves, {{"gpu_fraction: 0.5}\n  - {name: b",
                                        "gpu_fraction: 0.5, replicas: 2}\n  "
                                        "- {name: b"}}),
      "halves.yaml", "");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_FALSE(RunServeSim(*cfg).ok());
  // Two GPUs in nodes of one: a replica of two GPUs fits nowhere; in one
  // node of two it does.
  const std::string only_a = WriteTrace("pack_a.csv", {{1, "a"}});
  for (int per_node : {1, 2}) {
    auto tp = config::ParseServeSimYaml(
        absl::StrCat("cluster: {gpus: 2, gpus_per_node: ", per_node, R"(}
deployments:
  - {name: a, model: llama-2-13b, gpu: H800, tensor_parallel: 2}
workload:
  trace: {format: aegaeon, path: )",
                     only_a, "}\n"),
        "tp.yaml", "");
    ASSERT_TRUE(tp.ok()) << tp.status();
    auto run = RunServeSim(*tp);
    EXPECT_EQ(run.ok(), per_node == 2) << per_node << ": " << run.status();
    if (!run.ok()) {
      EXPECT_NE(run.status().message().find("0 of its 1 initial replicas fit"),
                std::string::npos)
          << run.status();
    }
  }
}

// Weights locality (control/place.h), as live: a replica started again
// goes to the node where its model was loaded before, although the
// policy's tie-break would pick another, and loads faster there
// (cold_start.local_load_factor).
TEST(ElasticSimTest, RestartsWhereTheWeightsAreLocal) {
  const std::string trace =
      WriteTrace("local.csv", {{1, "other"}, {1.5, "chat"}, {40, "chat"}});
  const Result r = Simulate(absl::StrCat(R"(
cluster: {gpus: 2, gpus_per_node: 1}
cold_start: {default_s: 6.7, local_load_factor: 0.25}
deployments:
  - name: other
    model: llama-2-13b
    gpu: A100-80GB
    autoscaling: {min_replicas: 0, max_replicas: 1, idle_timeout_s: 2}
  - name: chat
    model: llama-2-7b
    gpu: A100-80GB
    autoscaling: {min_replicas: 0, max_replicas: 1, idle_timeout_s: 2}
workload:
  trace: {format: aegaeon, path: )",
                                         trace, "}\n"));
  EXPECT_EQ(Completed(r.run, "chat"), 2);
  const DeploymentCapacity& chat = r.run.capacity[1];
  ASSERT_EQ(chat.cold_start_s.size(), 2u);
  EXPECT_NEAR(chat.cold_start_s[0], 7.0, 1e-9);  // 6.7 s per 6.7B, x 7/6.7
  EXPECT_NEAR(chat.cold_start_s[1], 0.25 * 7.0, 1e-9);
  int local = 0;
  for (const auto& e : r.run.events) {
    if (e.kind == "replica.started" &&
        e.message.find("weights local") != std::string::npos) {
      EXPECT_EQ(e.deployment, "chat") << e.message;
      ++local;
    }
  }
  EXPECT_EQ(local, 1);
  // Without a faster local load the placement still prefers the node.
  const Result same = Simulate(absl::StrCat(R"(
cluster: {gpus: 2, gpus_per_node: 1}
deployments:
  - {name: other, model: llama-2-13b, gpu: A100-80GB, autoscaling: {min_replicas: 0, max_replicas: 1, idle_timeout_s: 2}}
  - {name: chat, model: llama-2-7b, gpu: A100-80GB, autoscaling: {min_replicas: 0, max_replicas: 1, idle_timeout_s: 2}}
workload:
  trace: {format: aegaeon, path: )",
                                            trace, "}\n"));
  ASSERT_EQ(same.run.capacity[1].cold_start_s.size(), 2u);
  EXPECT_EQ(same.run.capacity[1].cold_start_s[0],
            same.run.capacity[1].cold_start_s[1]);
}

// Tenant quotas in preemption and GPU limits, as live (control/room.h): a
// deployment whose owner is under its quota reclaims a GPU from one of the
// same class whose owner is over its own; without the quota it waits.
std::string QuotaConfig(const std::string& trace, const std::string& quota_a) {
  return absl::StrCat(R"(
cluster: {gpus: 2}
tenants:
  - {name: a, quota: )",
                      quota_a, R"(}
  - {name: b}
deployments:
  - {name: big, owner: b, model: llama-2-7b, gpu: A100-80GB, replicas: 2}
  - name: mine
    owner: a
    model: llama-2-7b
    gpu: A100-80GB
    autoscaling: {min_replicas: 0, max_replicas: 1, cold_start_s: 1}
workload:
  trace: {format: aegaeon, path: )",
                      trace, "}\n");
}

TEST(ElasticSimTest, TenantQuotaReclaimsAndLimitBounds) {
  std::vector<std::pair<double, std::string>> rows;
  for (int i = 0; i < 20; ++i) rows.emplace_back(i * 0.5, "big");
  rows.emplace_back(5, "mine");
  std::sort(rows.begin(), rows.end());
  const std::string trace = WriteTrace("quota.csv", rows, 200, 50);
  const Result with = Simulate(QuotaConfig(trace, "{gpus: 1}"));
  EXPECT_EQ(Completed(with.run, "mine"), 1);
  EXPECT_EQ(Completed(with.run, "big"), 20);
  EXPECT_EQ(with.report["deployments"]["big"]["capacity"]["preemptions"], 1);
  const Result without = Simulate(QuotaConfig(trace, "{gpus: 0}"));
  EXPECT_EQ(Completed(without.run, "mine"), 0);  // same class: no room
  EXPECT_EQ(without.report["overall"]["capacity"]["preemptions"], 0);
  // A limit of 1 GPU: the second initial replica of big does not fit.
  auto cfg = config::ParseServeSimYaml(
      absl::StrReplaceAll(QuotaConfig(trace, "{gpus: 0}"),
                          {{"{name: b}", "{name: b, quota: {limit: 1}}"}}),
      "limit.yaml", "");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto run = RunServeSim(*cfg);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("1 of its 2 initial replicas fit"),
            std::string::npos)
      << run.status();
}

TEST(ElasticSimTest, CountExpandsDeploymentsAndSyntheticTenants) {
  auto cfg = config::ParseServeSimYaml(R"(
deployments:
  - name: m-{i}
    count: 3
    model: llama-2-7b
    gpu: A100-80GB
    autoscaling: {min_replicas: 0, max_replicas: 2}
workload:
  synthetic:
    duration_s: 10
    tenants:
      - {name: "t-{i}", model: "m-{i}", count: 3, rate: 1}
)",
                                       "count.yaml", "");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ASSERT_EQ(cfg->deployments.size(), 3u);
  EXPECT_EQ(cfg->deployments[2].name, "m-2");
  ASSERT_EQ(cfg->workload.synthetic_tenants.size(), 3u);
  EXPECT_EQ(cfg->workload.synthetic_tenants[1].name, "t-1");
  EXPECT_EQ(cfg->workload.synthetic_tenants[1].model, "m-1");
}

}  // namespace
}  // namespace gpusched::sim
