#include "backends/slurm/slurm_pools.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::backends {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A powered-down CLOUD node as `scontrol show node -d --oneliner` (Slurm
// 22.05.8) printed it on the test cluster (tests/slurm/cluster.sh with
// SLURM_CLOUD_NODES) after its resume had failed once; NAME, FEATURES,
// STATE and REASON are replaced per case.
constexpr char kCloudNode[] =
    "NodeName=NAME CoresPerSocket=1  CPUAlloc=0 CPUEfctv=8 CPUTot=8 "
    "CPULoad=N/A AvailableFeatures=FEATURES ActiveFeatures=FEATURES "
    "Gres=gpu:h100:2 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) "
    "NodeAddr=10.213.52.103 NodeHostName=NAME  RealMemory=16000 AllocMem=0 "
    "FreeMem=N/A Sockets=8 Boards=1 State=STATE ThreadsPerCore=1 TmpDisk=0 "
    "Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu,cloud  BootTime=None "
    "SlurmdStartTime=None LastBusyTime=Unknown "
    "CfgTRES=cpu=8,mem=16000M,billing=8 AllocTRES= CapWatts=n/a "
    "CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s REASON\n";

// A static node of the same cluster.
constexpr char kStaticNode[] =
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=8 "
    "CPUTot=8 CPULoad=2.58 AvailableFeatures=(null) ActiveFeatures=(null) "
    "Gres=gpu:h100:2 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) "
    "NodeAddr=10.213.52.11 NodeHostName=n1 Version=22.05.8 RealMemory=16000 "
    "AllocMem=0 FreeMem=14355 Sockets=8 Boards=1 State=IDLE "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=gpu  BootTime=2026-12-06T04:56:41 CfgTRES=cpu=8\n";

std::string Cloud(const std::string& name, const std::string& features,
                  const std::string& state, const std::string& reason = "") {
  return absl::StrReplaceAll(
      kCloudNode, {{"NAME", name},
                   {"FEATURES", features},
                   {"STATE", state},
                   {"REASON", reason.empty() ? "" : "Reason=" + reason}});
}

std::vector<SlurmNode> Parse(const std::string& text) {
  absl::StatusOr<std::vector<SlurmNode>> n = ParseSlurmNodes(text);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : std::vector<SlurmNode>{};
}

// State= word sequences of a CLOUD node, their capacity state, and whether
// the node reader lets placement use them. The first group was printed by
// Slurm 22.05.8 on the test cluster (with sinfo's word beside it); the
// second is made of the same flag words for states the drill does not reach.
TEST(SlurmPoolStateTest, EveryStateWord) {
  struct Case {
    std::string state;
    std::string sinfo;  // what `sinfo -N -o %t` prints
    PoolNodeState want;
    bool usable;
  };
  const std::vector<Case> cases = {
      // Printed on the test cluster.
      {"IDLE+CLOUD+POWERED_DOWN", "idle~", PoolNodeState::kPoweredDown, false},
      {"IDLE+CLOUD+POWER_UP+POWERED_DOWN", "idle~", PoolNodeState::kPoweringUp,
       false},
      {"IDLE+CLOUD+NOT_RESPONDING+POWERING_UP", "idle#",
       PoolNodeState::kPoweringUp, false},
      {"IDLE+CLOUD", "idle", PoolNodeState::kUp, true},
      {"MIXED+CLOUD", "mix", PoolNodeState::kUp, true},
      {"MIXED+CLOUD+DRAIN+POWER_DOWN", "drng!", PoolNodeState::kPoweringDown,
       false},
      {"IDLE+CLOUD+POWERING_DOWN", "idle%", PoolNodeState::kPoweringDown,
       false},
      {"IDLE+CLOUD+POWER_UP+POWERING_DOWN", "idle%",
       PoolNodeState::kPoweringDown, false},
      {"DOWN+CLOUD+POWERED_DOWN+NOT_RESPONDING", "down~",
       PoolNodeState::kFailed, false},
      // Made of the same words.
      {"MIXED+CLOUD+NOT_RESPONDING+POWERING_UP", "mix#",
       PoolNodeState::kPoweringUp, false},
      {"ALLOCATED+CLOUD", "alloc", PoolNodeState::kUp, true},
      {"IDLE+CLOUD+DRAIN", "drain", PoolNodeState::kUp, false},
      {"IDLE+CLOUD+POWER_DOWN", "idle!", PoolNodeState::kPoweringDown, false},
      {"DOWN+CLOUD+NOT_RESPONDING", "down*", PoolNodeState::kFailed, false},
      {"IDLE+CLOUD+FAIL", "fail", PoolNodeState::kFailed, false},
      {"DOWN+CLOUD+POWERING_UP", "down#", PoolNodeState::kPoweringUp, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.state + " (sinfo " + c.sinfo + ")");
    EXPECT_EQ(SlurmPoolState(c.state, "").state, c.want)
        << PoolNodeStateName(SlurmPoolState(c.state, "").state);
    std::vector<SlurmNode> n = Parse(Cloud("c1", "pool=h100", c.state));
    ASSERT_EQ(n.size(), 1u);
    EXPECT_EQ(n[0].usable, c.usable);
    EXPECT_TRUE(SlurmPoolNode(n[0]));
  }
}

TEST(SlurmPoolStateTest, AFailedNodeCarriesSlurmsReason) {
  std::vector<SlurmNode> n =
      Parse(Cloud("c3", "pool=broken", "DOWN+CLOUD+POWERED_DOWN+NOT_RESPONDING",
                  "ResumeTimeout reached [root@2026-12-06T04:59:52]"));
  ASSERT_EQ(n.size(), 1u);
  SlurmPoolNodeState s = SlurmPoolState(n[0].state, n[0].reason);
  EXPECT_EQ(s.state, PoolNodeState::kFailed);
  EXPECT_EQ(s.reason, "ResumeTimeout reached [root@2026-12-06T04:59:52]");
  // Without a reason, the state words say what happened.
  EXPECT_EQ(SlurmPoolState("DOWN+CLOUD", "").reason, "Slurm says DOWN+CLOUD");
  EXPECT_EQ(SlurmPoolState("IDLE+CLOUD", "").reason, "");
}

TEST(SlurmPoolsTest, PoolsFromFeaturesAndPartitions) {
  const std::string text =
      std::string(kStaticNode) +
      Cloud("c1", "pool=h100,spot", "IDLE+CLOUD+POWERED_DOWN") +
      Cloud("c2", "pool=h100,spot", "IDLE+CLOUD") +
      // No pool= feature: its partition that holds pool nodes only.
      Cloud("c3", "(null)", "IDLE+CLOUD+POWERED_DOWN");
  absl::StatusOr<std::vector<PoolReport>> pools = SlurmPools(Parse(text));
  ASSERT_TRUE(pools.ok()) << pools.status();
  ASSERT_EQ(pools->size(), 2u);
  const PoolReport& cloud = (*pools)[0];
  EXPECT_EQ(cloud.pool, "cloud");
  EXPECT_THAT(cloud.nodes, ElementsAre("c3"));
  EXPECT_FALSE(cloud.spot);
  const PoolReport& h100 = (*pools)[1];
  EXPECT_EQ(h100.pool, "h100");
  EXPECT_EQ(h100.gpu_model, "h100");
  EXPECT_EQ(h100.gpus_per_node, 2);
  EXPECT_EQ(h100.cpu_milli, 8000);
  EXPECT_EQ(h100.memory_mib, 16000);
  EXPECT_TRUE(h100.spot);
  EXPECT_EQ(h100.max_nodes, 2);
  EXPECT_THAT(h100.nodes, ElementsAre("c1", "c2"));
}

TEST(SlurmPoolsTest, NoPoolNodesNoPools) {
  absl::StatusOr<std::vector<PoolReport>> pools =
      SlurmPools(Parse(kStaticNode));
  ASSERT_TRUE(pools.ok()) << pools.status();
  EXPECT_THAT(*pools, IsEmpty());
  EXPECT_FALSE(SlurmPoolNode(Parse(kStaticNode)[0]));
}

TEST(SlurmPoolsTest, AStaticNodeWithAPoolFeatureIsAPoolNode) {
  const std::string text = absl::StrReplaceAll(
      kStaticNode,
      {{"AvailableFeatures=(null)", "AvailableFeatures=pool=onprem"}});
  absl::StatusOr<std::vector<PoolReport>> pools = SlurmPools(Parse(text));
  ASSERT_TRUE(pools.ok()) << pools.status();
  ASSERT_EQ(pools->size(), 1u);
  EXPECT_EQ((*pools)[0].pool, "onprem");
  EXPECT_THAT((*pools)[0].nodes, ElementsAre("n1"));
}

TEST(SlurmPoolsTest, RejectsPoolsWhoseNodesDifferAndBadNames) {
  struct Case {
    std::string text;
    std::string want;
  };
  const std::string c1 = Cloud("c1", "pool=h100", "IDLE+CLOUD+POWERED_DOWN");
  const std::vector<Case> cases = {
      {c1 + absl::StrReplaceAll(
                Cloud("c2", "pool=h100", "IDLE+CLOUD+POWERED_DOWN"),
                {{"Gres=gpu:h100:2", "Gres=gpu:h100:4"}}),
       "Slurm pool 'h100': node 'c2' has GPUs gpu:h100:4 against gpu:h100:2"},
      {c1 + absl::StrReplaceAll(
                Cloud("c2", "pool=h100", "IDLE+CLOUD+POWERED_DOWN"),
                {{"RealMemory=16000", "RealMemory=32000"}}),
       "node 'c2' has 8 CPUs and 32000 MiB against 8 and 16000"},
      {c1 + Cloud("c2", "pool=h100,spot", "IDLE+CLOUD+POWERED_DOWN"),
       "node 'c2' has a spot feature that node 'c1' has not"},
      {Cloud("c1", "pool=a/b", "IDLE+CLOUD"),
       "Slurm node 'c1': pool name 'a/b'"},
      {Cloud("c1", "pool=", "IDLE+CLOUD"), "Slurm node 'c1': pool name ''"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<PoolReport>> pools = SlurmPools(Parse(c.text));
    ASSERT_FALSE(pools.ok()) << c.want;
    EXPECT_EQ(pools.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(pools.status().message(), HasSubstr(c.want));
  }
}

TEST(SlurmPoolsTest, FeaturesAreParsedAndBounded) {
  std::vector<SlurmNode> n =
      Parse(Cloud("c1", "pool=h100,spot,ib", "IDLE+CLOUD"));
  ASSERT_EQ(n.size(), 1u);
  EXPECT_THAT(n[0].features, ElementsAre("pool=h100", "spot", "ib"));
  EXPECT_THAT(Parse(kStaticNode)[0].features, IsEmpty());
  std::string many = "pool=x";
  for (int i = 0; i < kMaxSlurmFeatures; ++i) absl::StrAppend(&many, ",f", i);
  absl::StatusOr<std::vector<SlurmNode>> bad =
      ParseSlurmNodes(Cloud("c1", many, "IDLE+CLOUD"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("Slurm node 'c1': more than 64 features"));
}

}  // namespace
}  // namespace gpusched::backends
