#include "inventory/declared.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::inventory {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<config::InventoryConfig> TryParse(const std::string& nodes) {
  return config::ParseInventoryYaml(
      absl::StrCat("apiVersion: gpusched.io/v1\nkind: Inventory\nspec:\n"
                   "  nodes:\n",
                   nodes),
      "inv.yaml");
}

config::InventoryConfig Parse(const std::string& nodes) {
  absl::StatusOr<config::InventoryConfig> cfg = TryParse(nodes);
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  return cfg.ok() ? *std::move(cfg) : config::InventoryConfig{};
}

TEST(DeclaredTest, ResolvesModelsThroughTheCatalog) {
  const config::InventoryConfig cfg = Parse(R"(
    - name: h
      count: 2
      cpu: "96"
      memory: 768Gi
      labels: {pool: big}
      gpus: {model: NVIDIA H100 80GB HBM3, count: 8, nvlink: all}
    - name: l4
      cpu: 16
      memory: 64Gi
      gpus: {model: l4, count: 2, memory: 20Gi}
    - name: a100-nomig
      cpu: 16
      memory: 64Gi
      simulated: false
      gpus: {model: A100-40GB, count: 1, mig: false}
    - name: cpu
      cpu: 4
      memory: 8Gi
)");
  absl::StatusOr<std::vector<NodeSpec>> nodes = DeclaredNodes(cfg);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 5u);
  const NodeSpec& h = (*nodes)[0];
  EXPECT_EQ(h.name, "h-0");
  EXPECT_EQ((*nodes)[1].name, "h-1");
  EXPECT_EQ(h.gpu_model, "H100-SXM-80GB");  // alias resolved
  EXPECT_EQ(h.gpu_count, 8);
  EXPECT_EQ(h.gpu_memory_mib, 81559);
  EXPECT_EQ(h.mig_slots, 8);
  EXPECT_EQ(h.nvlink_group, std::vector<int>(8, 0));
  EXPECT_EQ(h.cpu_milli, 96000);
  EXPECT_EQ(h.memory_mib, 786432);
  EXPECT_TRUE(h.simulated);
  ASSERT_EQ(h.labels.size(), 1u);
  EXPECT_EQ(h.labels[0].first, "pool");

  const NodeSpec& l4 = (*nodes)[2];
  EXPECT_EQ(l4.gpu_model, "L4-24GB");
  EXPECT_EQ(l4.gpu_memory_mib, 20 * 1024);  // file override
  EXPECT_EQ(l4.mig_slots, 0);
  EXPECT_TRUE(l4.nvlink_group.empty());

  const NodeSpec& a100 = (*nodes)[3];
  EXPECT_EQ(a100.mig_slots, 0);  // mig: false
  EXPECT_FALSE(a100.simulated);

  const NodeSpec& cpu = (*nodes)[4];
  EXPECT_TRUE(cpu.gpu_model.empty());
  EXPECT_EQ(cpu.gpu_count, 0);

  ClusterState state;
  ASSERT_TRUE(AddDeclaredNodes(cfg, state).ok());
  EXPECT_EQ(state.num_nodes(), 5);
  EXPECT_EQ(state.total_gpu_milli(), (8 + 8 + 2 + 1) * 1000);
}

TEST(DeclaredTest, ListsEveryUnknownModelOnce) {
  const config::InventoryConfig cfg = Parse(R"(
    - {name: a, count: 3, cpu: 1, memory: 1Gi, gpus: {model: A100, count: 1}}
    - {name: b, cpu: 1, memory: 1Gi, gpus: {model: T4, count: 1, mig: true}}
    - {name: c, cpu: 1, memory: 1Gi, gpus: {model: RTX-9090, count: 1}}
)");
  absl::StatusOr<std::vector<NodeSpec>> nodes = DeclaredNodes(cfg);
  ASSERT_FALSE(nodes.ok());
  const std::string known = absl::StrJoin(GpuCatalog::Builtin().Names(), ", ");
  EXPECT_EQ(nodes.status().message(),
            absl::StrCat(
                "inv.yaml:6: unknown GPU model 'A100'; known models: ", known,
                "\ninv.yaml:7: gpus.mig: T4-16GB does not support "
                "MIG\ninv.yaml:8: unknown GPU model 'RTX-9090'; known "
                "models: ",
                known));
}

TEST(DeclaredTest, ClusterStateRejectsDuplicateAcrossCalls) {
  const config::InventoryConfig cfg =
      Parse("    - {name: a, cpu: 1, memory: 1Gi}\n");
  ClusterState state;
  ASSERT_TRUE(AddDeclaredNodes(cfg, state).ok());
  EXPECT_THAT(AddDeclaredNodes(cfg, state).message(),
              HasSubstr("declared twice"));
}

TEST(DeclaredTest, TheConfigsGpuBoundIsPlacements) {
  // The serve config takes gpus.count up to 16 (config cannot see
  // ClusterState): the largest node it takes is one placement takes, and
  // one more is refused by the config itself.
  auto node = [](int gpus) {
    return absl::StrCat(
        "    - {name: big, cpu: 1, memory: 1Gi, gpus: {model: h100, count: ",
        gpus, "}}\n");
  };
  const config::InventoryConfig cfg =
      Parse(node(ClusterState::kMaxGpusPerNode));
  ClusterState state;
  ASSERT_TRUE(AddDeclaredNodes(cfg, state).ok());
  EXPECT_EQ(state.state(0).gpus.size(),
            static_cast<size_t>(ClusterState::kMaxGpusPerNode));
  absl::StatusOr<config::InventoryConfig> over =
      TryParse(node(ClusterState::kMaxGpusPerNode + 1));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(),
            "inv.yaml:5: gpus.count must be in 1..16, got 17");
}

}  // namespace
}  // namespace gpusched::inventory
