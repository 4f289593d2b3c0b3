#include "config/inventory_config.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "config/quantity.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr char kHeader[] = R"(apiVersion: gpusched.io/v1
kind: Inventory
)";

absl::StatusOr<InventoryConfig> Parse(const std::string& body) {
  return ParseInventoryYaml(std::string(kHeader) + body, "inv.yaml");
}

std::vector<std::string> Lines(const absl::Status& st) {
  return absl::StrSplit(std::string(st.message()), '\n');
}

TEST(InventoryConfigTest, FullNode) {
  absl::StatusOr<InventoryConfig> cfg = Parse(R"(metadata:
  name: lab
spec:
  nodes:
    - name: gpu
      count: 2
      cpu: "96"
      memory: 768Gi
      labels: {zone: a, rack: "7"}
      gpus:
        model: H100-SXM-80GB
        count: 8
        nvlink: groups-of-4
    - name: cpu-only
      cpu_milli: 32000
      memory_mib: 262144
      simulated: false
)");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->name, "lab");
  EXPECT_EQ(cfg->source, "inv.yaml");
  ASSERT_EQ(cfg->nodes.size(), 3u);
  const NodeConfig& n0 = cfg->nodes[0];
  EXPECT_EQ(n0.name, "gpu-0");
  EXPECT_EQ(cfg->nodes[1].name, "gpu-1");
  EXPECT_EQ(n0.line, 7);
  EXPECT_EQ(n0.cpu_milli, 96000);
  EXPECT_EQ(n0.memory_mib, 768 * 1024);
  EXPECT_THAT(n0.labels, ElementsAre(Pair("zone", "a"), Pair("rack", "7")));
  EXPECT_TRUE(n0.simulated);
  ASSERT_TRUE(n0.gpus.has_value());
  EXPECT_EQ(n0.gpus->model, "H100-SXM-80GB");
  EXPECT_EQ(n0.gpus->count, 8);
  EXPECT_EQ(n0.gpus->line, 13);
  EXPECT_EQ(n0.gpus->memory_mib, 0);
  EXPECT_FALSE(n0.gpus->mig.has_value());
  EXPECT_EQ(n0.gpus->nvlink_group, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  const NodeConfig& n2 = cfg->nodes[2];
  EXPECT_EQ(n2.name, "cpu-only");  // no count: the name as written
  EXPECT_EQ(n2.cpu_milli, 32000);
  EXPECT_EQ(n2.memory_mib, 262144);
  EXPECT_FALSE(n2.simulated);
  EXPECT_FALSE(n2.gpus.has_value());
}

TEST(InventoryConfigTest, NvLinkForms) {
  struct Case {
    const char* nvlink;
    std::vector<int> group;
  };
  const Case cases[] = {
      {"none", {}},
      {"all", {0, 0, 0, 0}},
      {"ALL", {0, 0, 0, 0}},
      {"groups-of-2", {0, 0, 1, 1}},
      {"[[0, 1], [3]]", {0, 0, 2, 1}},  // GPU 2 unlisted: alone
      {"[[3, 2, 1, 0]]", {0, 0, 0, 0}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<InventoryConfig> cfg = Parse(absl::StrCat(R"(spec:
  nodes:
    - name: n
      cpu: 8
      memory: 64Gi
      gpus: {model: L4, count: 4, nvlink: )",
                                                             c.nvlink, "}\n"));
    ASSERT_TRUE(cfg.ok()) << c.nvlink << ": " << cfg.status();
    EXPECT_EQ(cfg->nodes[0].gpus->nvlink_group, c.group) << c.nvlink;
  }
}

TEST(InventoryConfigTest, GpuOptions) {
  absl::StatusOr<InventoryConfig> cfg = Parse(R"(spec:
  nodes:
    - name: n
      cpu: 500m
      memory: 1.5Gi
      gpus: {model: a100-80gb, count: 1, memory: 79Gi, mig: false}
)");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->nodes[0].cpu_milli, 500);
  EXPECT_EQ(cfg->nodes[0].memory_mib, 1536);
  EXPECT_EQ(cfg->nodes[0].gpus->model, "a100-80gb");  // resolved later
  EXPECT_EQ(cfg->nodes[0].gpus->memory_mib, 79 * 1024);
  EXPECT_EQ(cfg->nodes[0].gpus->mig, false);
}

TEST(InventoryConfigTest, Quantities) {
  EXPECT_EQ(ParseCpuMilli("96"), 96000);
  EXPECT_EQ(ParseCpuMilli("0.5"), 500);
  EXPECT_EQ(ParseCpuMilli("2.25"), 2250);
  EXPECT_EQ(ParseCpuMilli("250m"), 250);
  EXPECT_EQ(ParseCpuMilli(" 4 "), 4000);
  EXPECT_EQ(ParseCpuMilli("-1"), std::nullopt);
  EXPECT_EQ(ParseCpuMilli("m"), std::nullopt);
  EXPECT_EQ(ParseCpuMilli("1.5m"), std::nullopt);
  EXPECT_EQ(ParseCpuMilli("four"), std::nullopt);
  EXPECT_EQ(ParseCpuMilli(""), std::nullopt);

  EXPECT_EQ(ParseMemoryMib("768Gi"), 786432);
  EXPECT_EQ(ParseMemoryMib("512Mi"), 512);
  EXPECT_EQ(ParseMemoryMib("1Ti"), 1024 * 1024);
  EXPECT_EQ(ParseMemoryMib("2048Ki"), 2);
  EXPECT_EQ(ParseMemoryMib("1G"), 953);  // 10^9 bytes, rounded down
  EXPECT_EQ(ParseMemoryMib("1048576"), 1);
  EXPECT_EQ(ParseMemoryMib("0.5Gi"), 512);
  EXPECT_EQ(ParseMemoryMib("1Gb"), std::nullopt);
  EXPECT_EQ(ParseMemoryMib("Gi"), std::nullopt);
  EXPECT_EQ(ParseMemoryMib("-1Gi"), std::nullopt);
  EXPECT_EQ(ParseMemoryMib("1..5Gi"), std::nullopt);
}

// Every problem is reported, each with its line.
TEST(InventoryConfigTest, ReportsAllProblemsWithLines) {
  absl::StatusOr<InventoryConfig> cfg = ParseInventoryYaml(
      R"(apiVersion: gpusched.io/v2
kind: Inventory
spec:
  nodes:
    - name: a
      cpu: lots
      memory: 1Gi
      gpu: {model: T4, count: 1}
    - name: b
      cpu: "8"
      gpus:
        model: T4
        count: 0
        nvlink: groups-of-3
    - name: a
      cpu: 1
      cpu_milli: 1000
      memory: 1Gi
      simulated: maybe
    - cpu: 1
      memory: 1Gi
      gpus: {count: 2, nvlink: [[0, 5], [0]]}
)",
      "bad.yaml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      Lines(cfg.status()),
      ElementsAre(
          "bad.yaml:1: apiVersion must be gpusched.io/v1, got "
          "'gpusched.io/v2'",
          "bad.yaml:6: cpu: 'lots' is not a quantity (e.g. \"96\")",
          "bad.yaml:8: unknown field 'gpu' in node (known: name, count, cpu, "
          "cpu_milli, memory, memory_mib, labels, simulated, gpus)",
          "bad.yaml:9: node 'b': missing memory (e.g. 768Gi) or memory_mib",
          "bad.yaml:13: gpus.count must be in 1..16, got 0",
          "bad.yaml:17: node 'a': set cpu or cpu_milli, not both",
          "bad.yaml:19: simulated must be true or false, got 'maybe'",
          "bad.yaml:20: node: missing name",
          "bad.yaml:22: node: gpus: missing model",
          "bad.yaml:22: nvlink GPU index must be in 0..1, got 5",
          "bad.yaml:22: nvlink: GPU 0 is in two domains"));
}

TEST(InventoryConfigTest, DuplicateNamesAfterExpansion) {
  absl::StatusOr<InventoryConfig> cfg = Parse(R"(spec:
  nodes:
    - {name: n, count: 2, cpu: 1, memory: 1Gi}
    - {name: n-1, cpu: 1, memory: 1Gi}
)");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().message(),
            "inv.yaml:6: node 'n-1' is declared twice (first at line 5)");
}

TEST(InventoryConfigTest, StructuralErrors) {
  struct Case {
    const char* text;
    const char* error;
  };
  const Case cases[] = {
      {"", "x.yaml: empty file; expected an Inventory manifest"},
      {"- 1\n- 2\n", "x.yaml:1: expected a manifest map, got a list"},
      {"kind: Inventory\nspec: {nodes: []}\n",
       "x.yaml:1: missing apiVersion (gpusched.io/v1)"},
      {"apiVersion: gpusched.io/v1\nkind: Deployment\nspec: {nodes: [x]}\n",
       "x.yaml:2: kind must be Inventory, got 'Deployment'"},
      {"apiVersion: gpusched.io/v1\nkind: Inventory\n",
       "x.yaml:1: missing spec"},
      {"apiVersion: gpusched.io/v1\nkind: Inventory\nspec: {nodes: []}\n",
       "x.yaml:3: spec.nodes must be a non-empty list, got an empty list"},
      {"apiVersion: gpusched.io/v1\nkind: Inventory\nspec:\n  nodes: [1]\n",
       "x.yaml:4: a node must be a map, got '1'"},
      {"apiVersion: gpusched.io/v1\nkind: Inventory\nspec: {nodes: [}\n",
       "x.yaml:3: YAML syntax error"},
      {"apiVersion: gpusched.io/v1\nkind: Inventory\nspec:\n  nodes:\n"
       "  - {name: 'a b', cpu: 1, memory: 1Gi}\n",
       "x.yaml:5: name 'a b' must be letters, digits"},
      {"apiVersion: gpusched.io/v1\nkind: Inventory\nspec:\n  nodes:\n"
       "  - {name: n, cpu: 1, memory: 1Gi, gpus: {model: T4, count: 3, "
       "nvlink: groups-of-2}}\n",
       "x.yaml:5: nvlink: groups-of-2 does not divide 3 GPUs"},
      {"apiVersion: gpusched.io/v1\nkind: Inventory\nspec:\n  nodes:\n"
       "  - {name: n, cpu: 1, memory: 1Gi, gpus: {model: T4, count: 3, "
       "nvlink: some}}\n",
       "x.yaml:5: nvlink must be none, all, groups-of-N or a list"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<InventoryConfig> cfg = ParseInventoryYaml(c.text, "x.yaml");
    ASSERT_FALSE(cfg.ok()) << c.text;
    EXPECT_THAT(cfg.status().message(), HasSubstr(c.error)) << c.text;
  }
}

TEST(InventoryConfigTest, LoadsTheShippedExample) {
  absl::StatusOr<InventoryConfig> cfg =
      LoadInventoryFile(GPUSCHED_SOURCE_DIR "/examples/inventory.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ASSERT_EQ(cfg->nodes.size(), 1u);
  EXPECT_EQ(cfg->nodes[0].name, "sim-node-0");
  EXPECT_TRUE(cfg->nodes[0].simulated);
  EXPECT_EQ(cfg->nodes[0].gpus->count, 4);
  EXPECT_EQ(cfg->nodes[0].gpus->nvlink_group, (std::vector<int>{0, 0, 0, 0}));
}

TEST(InventoryConfigTest, MissingFile) {
  absl::StatusOr<InventoryConfig> cfg = LoadInventoryFile("/nonexistent.yaml");
  EXPECT_EQ(cfg.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cfg.status().message(), "/nonexistent.yaml: cannot open file");
}

}  // namespace
}  // namespace gpusched::config
