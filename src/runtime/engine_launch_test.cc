#include "runtime/engine_launch.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inventory/mig.h"

namespace gpusched::runtime {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

EngineTemplate Template() {
  return CommandTemplate({"{self}", "engine", "--port", "{port}", "--model",
                          "{model}", "--name", "{name}", "--tp",
                          "{tensor_parallel}", "--mem", "{gpu_memory_fraction}",
                          "--replica", "{replica}"});
}

inventory::NodeSpec Node() {
  inventory::NodeSpec n;
  n.name = "n0";
  n.gpu_count = 4;
  n.gpu_model = "H100-SXM-80GB";
  n.gpu_memory_mib = 81920;
  return n;
}

inventory::GpuShare Share(int gpu, int milli) {
  inventory::GpuShare g;
  g.gpu = gpu;
  g.milli = milli;
  return g;
}

EngineLaunchInput Input(const EngineTemplate& t, const inventory::NodeSpec& n) {
  EngineLaunchInput in;
  in.engine = &t;
  in.replica = "chat-0";
  in.deployment = "chat";
  in.model = "llama";
  in.node = &n;
  in.self_path = "/bin/gpusched";
  in.log_dir = "/tmp/logs";
  return in;
}

std::string After(const std::vector<std::string>& argv, const std::string& f) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == f) return argv[i + 1];
  }
  return "";
}

TEST(EngineLaunchTest, WholeGpusAreIndexesAndTensorParallel) {
  const EngineTemplate t = Template();
  const inventory::NodeSpec n = Node();
  EngineLaunchInput in = Input(t, n);
  in.resources.kind = "whole";
  in.resources.gpus = 2;
  in.allocation.node = 0;
  in.allocation.gpus = {Share(1, 1000), Share(3, 1000)};
  auto l = PlanEngineLaunch(in);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(l->gpu_ids, ElementsAre("1", "3"));
  EXPECT_EQ(l->process.env.at("CUDA_VISIBLE_DEVICES"), "1,3");
  EXPECT_EQ(After(l->process.argv, "--tp"), "2");
  EXPECT_EQ(After(l->process.argv, "--port"), std::to_string(l->port));
  EXPECT_EQ(After(l->process.argv, "--model"), "llama");
  EXPECT_EQ(After(l->process.argv, "--name"), "chat");
  EXPECT_EQ(After(l->process.argv, "--replica"), "chat-0");
  EXPECT_EQ(l->process.argv.front(), "/bin/gpusched");
  EXPECT_EQ(l->process.name, "chat-0");
  EXPECT_EQ(l->process.log_dir, "/tmp/logs");
  EXPECT_GT(l->port, 0);
  EXPECT_EQ(l->metrics_port, 0);
}

TEST(EngineLaunchTest, DiscoveredGpusAreUuidsAndMigSlicesMigUuids) {
  const EngineTemplate t = Template();
  const inventory::NodeSpec n = Node();
  std::vector<backends::DiscoveredGpu> gpus(2);
  gpus[0].uuid = "GPU-aaaa";
  gpus[1].uuid = "GPU-bbbb";
  backends::DiscoveredMigInstance mig;
  mig.uuid = "MIG-cccc";
  mig.profile = "3g.40gb";
  mig.start = 4;
  gpus[1].mig_instances.push_back(mig);
  EngineLaunchInput in = Input(t, n);
  in.nvml_gpus = &gpus;
  in.resources.kind = "whole";
  in.resources.gpus = 1;
  in.allocation.node = 0;
  in.allocation.gpus = {Share(0, 1000)};
  auto l = PlanEngineLaunch(in);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(l->gpu_ids, ElementsAre("GPU-aaaa"));

  in.resources.kind = "mig";
  inventory::GpuShare share;
  share.gpu = 1;
  share.mig_profile = "3g.40gb";
  share.mig_start = 4;
  in.allocation.gpus = {share};
  l = PlanEngineLaunch(in);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(l->gpu_ids, ElementsAre("MIG-cccc"));
  EXPECT_EQ(l->process.env.at("CUDA_VISIBLE_DEVICES"), "MIG-cccc");

  // No instance at that slot: a clear error saying how to make one.
  in.allocation.gpus[0].mig_start = 0;
  l = PlanEngineLaunch(in);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(l.status().message(), HasSubstr("nvidia-smi mig -cgi"));
}

TEST(EngineLaunchTest, MigSlicesWithoutNvmlSlotsTakeTheKthInstance) {
  // NVML gave no slots (unprivileged): two 1g instances on GPU 1, laid out
  // canonically by LocalNodeSpec; the k-th slot of the layout is the k-th
  // instance NVML lists.
  const EngineTemplate t = Template();
  std::vector<backends::DiscoveredGpu> gpus(2);
  for (int i = 0; i < 2; ++i) {
    gpus[i].index = i;
    gpus[i].uuid = absl::StrCat("GPU-", i);
    gpus[i].name = "NVIDIA H100 80GB HBM3";
    gpus[i].model = "H100-SXM-80GB";
    gpus[i].memory_total_mib = 81559;
  }
  gpus[1].mig_enabled = true;
  for (const char* uuid : {"MIG-first", "MIG-second"}) {
    backends::DiscoveredMigInstance m;
    m.uuid = uuid;
    m.profile = "1g.10gb";
    gpus[1].mig_instances.push_back(m);
  }
  backends::LocalNodeOptions o;
  o.name = "host";
  o.cpu_milli = 8000;
  o.memory_mib = 16384;
  absl::StatusOr<inventory::NodeSpec> n = backends::LocalNodeSpec(gpus, o);
  ASSERT_TRUE(n.ok()) << n.status();
  const auto slots = inventory::StaticMigSlices(*n, "1g.10gb");
  ASSERT_EQ(slots.size(), 2u);
  EngineLaunchInput in = Input(t, *n);
  in.nvml_gpus = &gpus;
  in.resources.kind = "mig";
  in.allocation.node = 0;
  for (int k = 0; k < 2; ++k) {
    inventory::GpuShare share;
    share.gpu = slots[k].first;
    share.mig_profile = "1g.10gb";
    share.mig_start = slots[k].second;
    in.allocation.gpus = {share};
    auto l = PlanEngineLaunch(in);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_THAT(l->gpu_ids, ElementsAre(k == 0 ? "MIG-first" : "MIG-second"));
  }
}

TEST(EngineLaunchTest, FractionsGetTheirMemoryShareAndMpsLimits) {
  const EngineTemplate t = Template();
  const inventory::NodeSpec n = Node();
  EngineLaunchInput in = Input(t, n);
  in.resources.kind = "fraction";
  in.resources.milli = 250;
  in.resources.gpu_memory_mib = 20480;
  in.allocation.node = 0;
  in.allocation.gpus = {Share(2, 250)};
  auto l = PlanEngineLaunch(in);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(After(l->process.argv, "--mem"), "0.250");
  EXPECT_EQ(l->process.env.count("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), 0u);

  in.mps = true;
  l = PlanEngineLaunch(in);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->process.env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_THAT(l->process.env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
              HasSubstr("20480M"));
}

TEST(EngineLaunchTest, NoGpuSetsNoDevices) {
  const EngineTemplate t = Template();
  EngineLaunchInput in = Input(t, Node());
  in.node = nullptr;
  auto l = PlanEngineLaunch(in);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->gpu_ids.empty());
  EXPECT_EQ(l->process.env.count("CUDA_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(After(l->process.argv, "--tp"), "1");
}

TEST(EngineLaunchTest, ASeparateMetricsPortWhenTheTemplateAsks) {
  EngineTemplate t = Template();
  t.metrics_on_separate_port = true;
  auto l = PlanEngineLaunch(Input(t, Node()));
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_GT(l->metrics_port, 0);
  EXPECT_NE(l->metrics_port, l->port);
}

}  // namespace
}  // namespace gpusched::runtime
