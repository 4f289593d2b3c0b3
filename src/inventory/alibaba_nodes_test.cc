#include "inventory/alibaba_nodes.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::inventory {
namespace {

using ::testing::ElementsAre;

absl::StatusOr<std::vector<NodeSpec>> FromText(const char* text) {
  absl::StatusOr<CsvTable> table = CsvTable::Parse(text, "nodes.csv");
  if (!table.ok()) return table.status();
  return AlibabaNodesFromCsv(*table);
}

TEST(AlibabaNodesTest, KeepsTraceCodesAndAddsKnownMemory) {
  absl::StatusOr<std::vector<NodeSpec>> nodes = FromText(
      "sn,cpu_milli,memory_mib,gpu,model\n"
      "n0,32000,262144,0,\n"
      "n1,96000,786432,8,V100M32\n"
      "n2,128000,786432,8,G3\n"
      "n3,64000,262144,2,T4\n"
      "n4,32000,131072,0,nan\n");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 5u);
  const NodeSpec& cpu = (*nodes)[0];
  EXPECT_EQ(cpu.name, "n0");
  EXPECT_EQ(cpu.cpu_milli, 32000);
  EXPECT_EQ(cpu.memory_mib, 262144);
  EXPECT_EQ(cpu.gpu_count, 0);
  EXPECT_TRUE(cpu.gpu_model.empty());
  EXPECT_EQ((*nodes)[1].gpu_model, "V100M32");
  EXPECT_EQ((*nodes)[1].gpu_memory_mib, 32768);
  EXPECT_EQ((*nodes)[1].gpu_count, 8);
  EXPECT_EQ((*nodes)[2].gpu_model, "G3");
  EXPECT_EQ((*nodes)[2].gpu_memory_mib, 0);  // undisclosed model
  EXPECT_EQ((*nodes)[3].gpu_memory_mib, 15360);
  EXPECT_TRUE((*nodes)[4].gpu_model.empty());
  for (const NodeSpec& n : *nodes) {
    EXPECT_TRUE(n.simulated);
    EXPECT_EQ(n.mig_slots, 0);
    EXPECT_TRUE(n.nvlink_group.empty());
  }
}

TEST(AlibabaNodesTest, ReportsEveryBadRow) {
  absl::StatusOr<std::vector<NodeSpec>> nodes = FromText(
      "sn,cpu_milli,memory_mib,gpu,model\n"
      "n0,lots,262144,0,\n"
      "n1,96000,786432,8,\n"
      "n2,96000,-1,0,\n"
      ",1,1,0,\n");
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.status().message(),
            "nodes.csv:2: column 'cpu_milli': expected an integer, got 'lots'\n"
            "nodes.csv:3: column 'model': node has 8 GPUs but no model\n"
            "nodes.csv:4: column 'memory_mib': negative value -1\n"
            "nodes.csv:5: column 'sn': empty");
}

TEST(AlibabaNodesTest, MissingColumns) {
  absl::StatusOr<std::vector<NodeSpec>> nodes =
      FromText("sn,cpu_milli,gpu\nn0,1,0\n");
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.status().message(),
            "nodes.csv:1: missing column(s) memory_mib, model in the header");
}

// The shipped trace: 1523 nodes, models as the README lists them.
TEST(AlibabaNodesTest, ReadsTheShippedTrace) {
  const std::string path = std::string(GPUSCHED_SOURCE_DIR) +
                           "/../shared/data/alibaba-gpu-v2023/"
                           "openb_node_list_all_node.csv";
  absl::StatusOr<std::vector<NodeSpec>> nodes = ReadAlibabaNodes(path);
  if (!nodes.ok() && absl::IsNotFound(nodes.status())) {
    GTEST_SKIP() << "trace not present: " << nodes.status();
  }
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(nodes->size(), 1523u);
  std::map<std::string, int> by_model;
  for (const NodeSpec& n : *nodes) ++by_model[n.gpu_model];
  EXPECT_THAT(by_model,
              ElementsAre(std::pair<const std::string, int>("", 310),
                          std::pair<const std::string, int>("A10", 2),
                          std::pair<const std::string, int>("G2", 549),
                          std::pair<const std::string, int>("G3", 39),
                          std::pair<const std::string, int>("P100", 134),
                          std::pair<const std::string, int>("T4", 404),
                          std::pair<const std::string, int>("V100M16", 55),
                          std::pair<const std::string, int>("V100M32", 30)));
}

}  // namespace
}  // namespace gpusched::inventory
