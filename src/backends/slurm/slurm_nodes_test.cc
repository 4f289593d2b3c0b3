#include "backends/slurm/slurm_nodes.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inventory/mig.h"

namespace gpusched::backends {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Printed by `scontrol show node -d --oneliner` (Slurm 22.05.8) on the test
// cluster of tests/slurm/cluster.sh: node2 runs a job on GPUs 0-1, node1 was
// refused at registration (its Reason holds free text and "<").
constexpr char kNodes[] =
    "NodeName=node1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=16 "
    "CPUTot=16 CPULoad=0.11 AvailableFeatures=(null) ActiveFeatures=(null) "
    "Gres=gpu:h100:4 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A) "
    "NodeAddr=10.213.40.11 NodeHostName=node1 Version=22.05.8 OS=Linux "
    "6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 AllocMem=0 "
    "FreeMem=23235 Sockets=16 Boards=1 State=UNKNOWN+DRAIN+INVALID_REG "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=gpu  BootTime=2026-12-02T13:23:45 "
    "SlurmdStartTime=2026-12-02T16:45:45 LastBusyTime=Unknown "
    "CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES= CapWatts=n/a "
    "CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s Reason=Low socket*core*thread count, Low CPUs, Low "
    "RealMemory (reported:24105 < 100.00% of configured:64000) "
    "[root@2026-12-02T16:45:45]\n"
    "NodeName=node2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 CPUEfctv=16 "
    "CPUTot=16 CPULoad=0.16 AvailableFeatures=(null) ActiveFeatures=(null) "
    "Gres=gpu:h100:4 GresDrain=N/A GresUsed=gpu:h100:2(IDX:0-1) "
    "NodeAddr=10.213.198.12 NodeHostName=node2 Version=22.05.8 OS=Linux "
    "6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=64000 "
    "AllocMem=1000 FreeMem=23290 Sockets=16 Boards=1 State=MIXED "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=gpu  BootTime=2026-12-02T13:23:45 "
    "SlurmdStartTime=2026-12-02T16:47:06 LastBusyTime=2026-12-02T16:47:06 "
    "CfgTRES=cpu=16,mem=62.50G,billing=16 AllocTRES=cpu=1,mem=1000M "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
    "ExtSensorsWatts=0 ExtSensorsTemp=n/s\n";

// `scontrol show job -d --oneliner`: one of gpusched's jobs, then another
// user's whose comment tries to pass for a state.
constexpr char kJobs[] =
    "JobId=1 JobName=gs.chat.r1 UserId=root(0) GroupId=root(0) "
    "MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) "
    "JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:0 DerivedExitCode=0:0\n";

TEST(SlurmRecordTest, ValuesKeepTheirSpacesAndReasonTakesTheRest) {
  SlurmRecord r = ParseSlurmRecord(
      "NodeName=n1 OS=Linux 6.1 #1 SMP State=IDLE Reason=x=y z [root@t]",
      "Reason");
  EXPECT_EQ(SlurmField(r, "OS"), "Linux 6.1 #1 SMP");
  EXPECT_EQ(SlurmField(r, "State"), "IDLE");
  EXPECT_EQ(SlurmField(r, "Reason"), "x=y z [root@t]");
  EXPECT_EQ(SlurmField(r, "Missing"), "");
}

TEST(SlurmRecordTest, TheFirstOccurrenceWins) {
  SlurmRecord r =
      ParseSlurmRecord("JobId=7 JobState=RUNNING Comment=a JobState=COMPLETED");
  EXPECT_EQ(SlurmField(r, "JobState"), "RUNNING");
}

TEST(SlurmIndexListTest, RangesAndLists) {
  EXPECT_THAT(*ParseSlurmIndexList("0-1,3"), ElementsAre(0, 1, 3));
  EXPECT_THAT(*ParseSlurmIndexList("2"), ElementsAre(2));
  EXPECT_THAT(*ParseSlurmIndexList("N/A"), IsEmpty());
  EXPECT_FALSE(ParseSlurmIndexList("3-1").ok());
  EXPECT_FALSE(ParseSlurmIndexList("0-99999999").ok());
  EXPECT_FALSE(ParseSlurmIndexList("a").ok());
}

TEST(SlurmGresTest, EntriesWithTypesCountsAndIndexes) {
  auto g = ParseSlurmGres("gpu:h100:2(IDX:0-1),gpu:4(S:0,2),shard:40,mps");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 4u);
  EXPECT_EQ((*g)[0].name, "gpu");
  EXPECT_EQ((*g)[0].type, "h100");
  EXPECT_EQ((*g)[0].count, 2);
  EXPECT_THAT((*g)[0].indexes, ElementsAre(0, 1));
  EXPECT_EQ((*g)[1].type, "");
  EXPECT_EQ((*g)[1].count, 4);
  EXPECT_THAT((*g)[1].indexes, IsEmpty());
  EXPECT_EQ((*g)[2].name, "shard");
  EXPECT_EQ((*g)[2].count, 40);
  EXPECT_EQ((*g)[3].count, 1);
  EXPECT_THAT(*ParseSlurmGres("(null)"), IsEmpty());
  EXPECT_FALSE(ParseSlurmGres("gpu:h100:2(IDX:0").ok());
  EXPECT_FALSE(ParseSlurmGres("gpu:a:b:c").ok());
  EXPECT_FALSE(ParseSlurmGres("gpu:h100:-1").ok());
}

TEST(SlurmNodesTest, ParsesWhatScontrolPrints) {
  auto nodes = ParseSlurmNodes(kNodes);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 2u);
  const SlurmNode& n1 = (*nodes)[0];
  EXPECT_EQ(n1.name, "node1");
  EXPECT_EQ(n1.address, "10.213.40.11");
  EXPECT_FALSE(n1.usable);  // UNKNOWN+DRAIN+INVALID_REG
  EXPECT_THAT(n1.reason, HasSubstr("configured:64000) [root@"));
  EXPECT_THAT(n1.gpus_used, IsEmpty());
  const SlurmNode& n2 = (*nodes)[1];
  EXPECT_TRUE(n2.usable);
  EXPECT_EQ(n2.state, "MIXED");
  EXPECT_EQ(n2.cpus, 16);
  EXPECT_EQ(n2.cpus_allocated, 1);
  EXPECT_EQ(n2.memory_mib, 64000);
  EXPECT_EQ(n2.memory_allocated_mib, 1000);
  EXPECT_EQ(n2.gpu_type, "h100");
  EXPECT_EQ(n2.gpus, 4);
  EXPECT_THAT(n2.gpus_used, ElementsAre(0, 1));
  EXPECT_THAT(n2.partitions, ElementsAre("gpu"));
}

TEST(SlurmNodesTest, States) {
  struct Case {
    const char* state;
    bool usable;
  };
  for (const Case& c :
       {Case{"IDLE", true}, Case{"MIXED", true}, Case{"ALLOCATED", true},
        Case{"IDLE+DRAIN", false}, Case{"MIXED+DRAIN", false},
        Case{"DOWN", false}, Case{"DOWN+NOT_RESPONDING", false},
        Case{"IDLE*", false}, Case{"IDLE+POWERED_DOWN", false},
        Case{"IDLE+COMPLETING", true}, Case{"FUTURE", false}}) {
    auto nodes = ParseSlurmNodes(
        absl::StrCat("NodeName=n CPUTot=1 CPUAlloc=0 RealMemory=1 AllocMem=0 "
                     "State=",
                     c.state));
    ASSERT_TRUE(nodes.ok()) << nodes.status();
    EXPECT_EQ((*nodes)[0].usable, c.usable) << c.state;
  }
}

TEST(SlurmNodesTest, MalformedFieldsNameTheNode) {
  auto bad = ParseSlurmNodes(
      "NodeName=n7 CPUTot=x CPUAlloc=0 RealMemory=1 AllocMem=0 State=IDLE");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("'n7'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("CPUTot"));
  auto two = ParseSlurmNodes(
      "NodeName=n8 CPUTot=8 CPUAlloc=0 RealMemory=1 AllocMem=0 State=IDLE "
      "Gres=gpu:h100:2,gpu:l40s:2");
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(two.status().message(), HasSubstr("two GRES types"));
}

TEST(SlurmJobsTest, ParsesJobsAndIgnoresOtherLines) {
  const std::string text = absl::StrCat(
      "JobId=1 JobName=gs.chat.r1 UserId=root(0) GroupId=root(0) "
      "JobState=RUNNING Reason=None ExitCode=0:0 Partition=gpu NodeList=node2 "
      "BatchHost=node2 NumNodes=1 JOB_GRES=gpu:h100:2   Nodes=node2 "
      "CPU_IDs=0 Mem=1000 GRES=gpu:h100:2(IDX:0-1) Comment=gpusched:chat/r1 "
      "StdOut=/tmp/j-1.out\n",
      "JobId=9 JobName=wrap UserId=nobody(65534) JobState=CANCELLED "
      "Reason=None ExitCode=0:15 NodeList=(null) BatchHost=(null) "
      "Comment=(null)\n",
      "No jobs in the system\n");
  auto jobs = ParseSlurmJobs(text);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  const SlurmJob& a = (*jobs)[0];
  EXPECT_EQ(a.id, 1);
  EXPECT_EQ(a.name, "gs.chat.r1");
  EXPECT_EQ(a.user, "root");
  EXPECT_EQ(a.state, "RUNNING");
  EXPECT_EQ(a.node, "node2");
  EXPECT_EQ(a.comment, "gpusched:chat/r1");
  EXPECT_THAT(a.gpus, ElementsAre(0, 1));
  const SlurmJob& b = (*jobs)[1];
  EXPECT_EQ(b.user, "nobody");
  EXPECT_EQ(b.node, "");
  EXPECT_EQ(b.comment, "");
  EXPECT_EQ(b.exit_signal, 15);
  EXPECT_TRUE(SlurmJobFinished(b.state));
  EXPECT_FALSE(SlurmJobFinished(a.state));
  EXPECT_FALSE(SlurmJobFinished("PENDING"));
  EXPECT_THAT(*ParseSlurmJobs("No jobs in the system\n"), IsEmpty());
  EXPECT_THAT(*ParseSlurmJobs(kJobs), testing::SizeIs(1));
  EXPECT_FALSE(ParseSlurmJobs("JobId=x JobName=a").ok());
}

// gres/shard (Slurm 22.05.8, tests/slurm/cluster.sh with 100 shards per
// GPU): a shard job on GPU 0, a whole-GPU job on 1-3. GresUsed's shard count
// is not the shards held; its IDX is right.
TEST(SlurmShardTest, NodesCountShardsAndJobsHoldTheirGpu) {
  auto nodes = ParseSlurmNodes(
      "NodeName=node1 CPUAlloc=2 CPUTot=16 Gres=gpu:h100:4,shard:h100:400 "
      "GresDrain=N/A GresUsed=gpu:h100:3(IDX:1-3),shard:h100:1(IDX:0) "
      "NodeAddr=10.0.0.1 RealMemory=64000 AllocMem=2000 State=MIXED\n");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ((*nodes)[0].gpus, 4);
  EXPECT_EQ((*nodes)[0].shards, 400);
  EXPECT_THAT((*nodes)[0].gpus_used, ElementsAre(0, 1, 2, 3));
  auto jobs = ParseSlurmJobs(
      "JobId=5 JobName=gs.r1 UserId=root(0) JobState=RUNNING Reason=None "
      "ExitCode=0:0 NodeList=node1 BatchHost=node1 Nodes=node1 CPU_IDs=0 "
      "Mem=1000 GRES=shard:25(IDX:0) TresPerNode=gres:shard:25\n");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT((*jobs)[0].gpus, ElementsAre(0));
  EXPECT_EQ((*jobs)[0].shards, 25);
}

TEST(SlurmNodeSpecsTest, MapsGresTypesOntoTheCatalog) {
  auto nodes = ParseSlurmNodes(absl::StrCat(
      kNodes,
      "NodeName=node3 CPUTot=8 CPUAlloc=0 RealMemory=32000 AllocMem=0 "
      "State=IDLE Gres=gpu:a100:2 GresUsed=gpu:a100:1(IDX:0)\n"
      "NodeName=cpu1 CPUTot=4 CPUAlloc=0 RealMemory=8000 AllocMem=0 "
      "State=IDLE Gres=(null)\n"));
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  auto unknown = SlurmNodeSpecs(*nodes, {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("'node3'"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("'a100'"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("slurm.gresMap"));
  auto specs = SlurmNodeSpecs(*nodes, {{"A100", "A100-SXM4-80GB"}});
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 4u);
  EXPECT_EQ((*specs)[1].name, "node2");
  EXPECT_EQ((*specs)[1].gpu_model,
            inventory::GpuCatalog::Builtin().Find("h100")->name);
  EXPECT_EQ((*specs)[1].gpu_count, 4);
  EXPECT_EQ((*specs)[1].cpu_milli, 16000);
  EXPECT_EQ((*specs)[1].memory_mib, 64000);
  EXPECT_FALSE((*specs)[1].simulated);
  EXPECT_EQ((*specs)[2].gpu_model,
            inventory::GpuCatalog::Builtin().Find("A100-SXM4-80GB")->name);
  EXPECT_EQ((*specs)[3].gpu_count, 0);
}

TEST(SlurmNodeSpecsTest, MoreGpusThanPlacementTakesNameTheNode) {
  // Found by fuzz_slurm: 42 GPUs parsed, then placement refused the node.
  auto nodes = ParseSlurmNodes(
      "NodeName=big CPUTot=8 CPUAlloc=0 RealMemory=32000 AllocMem=0 "
      "State=IDLE Gres=gpu:h100:17\n");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  auto specs = SlurmNodeSpecs(*nodes, {});
  ASSERT_FALSE(specs.ok());
  EXPECT_THAT(specs.status().message(),
              HasSubstr("Slurm node 'big': 17 whole GPUs in its GRES"));
  EXPECT_THAT(specs.status().message(), HasSubstr("at most 16 GPUs per node"));
  (*nodes)[0].gpus = 16;
  (*nodes)[0].gpu_blocks[0].count = 16;
  specs = SlurmNodeSpecs(*nodes, {});
  ASSERT_TRUE(specs.ok()) << specs.status();
  inventory::ClusterState cs;
  EXPECT_TRUE(cs.AddNode((*specs)[0]).ok());
}

TEST(SlurmMigTest, TypesThatNameAProfile) {
  EXPECT_EQ(SlurmMigProfile("1g.10gb"), "1g.10gb");
  EXPECT_EQ(SlurmMigProfile("h100_3g.40gb"), "3g.40gb");
  EXPECT_EQ(SlurmMigProfile("nvidia_h100_80gb_hbm3_1g.10gb+me"), "1g.10gb+me");
  EXPECT_EQ(SlurmMigProfile("A100_1G.5GB"), "1g.5gb");
  for (const char* whole : {"h100", "", "a100-80gb", "1g", "g.10gb", "1g.gb",
                            "1g.10", "x_1g.10gbx"}) {
    EXPECT_EQ(SlurmMigProfile(whole), "") << whole;
  }
}

// As Slurm 22.05.8 prints a node with 2 whole H100s and MIG GRES
// (tests/slurm/cluster.sh with a mig field): one index space, a block per
// type in Gres= order; two of the MIG devices and a whole GPU in use.
constexpr char kMigNode[] =
    "NodeName=n1 CPUTot=8 CPUAlloc=3 RealMemory=32000 AllocMem=300 "
    "State=MIXED Gres=gpu:h100:2,gpu:1g.10gb:3,gpu:3g.40gb:1 GresDrain=N/A "
    "GresUsed=gpu:h100:1(IDX:0),gpu:1g.10gb:2(IDX:2-3),gpu:3g.40gb:0(IDX:N/A) "
    "NodeAddr=10.0.0.1\n";

TEST(SlurmMigTest, NodesKeepOneIndexSpaceAndMigDevicesBecomeAStaticLayout) {
  auto nodes = ParseSlurmNodes(kMigNode);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  const SlurmNode& n = (*nodes)[0];
  EXPECT_EQ(n.gpus, 2);
  EXPECT_EQ(n.gpu_type, "h100");
  ASSERT_EQ(n.gpu_blocks.size(), 3u);
  EXPECT_EQ(n.gpu_blocks[1].type, "1g.10gb");
  EXPECT_EQ(n.gpu_blocks[1].mig_profile, "1g.10gb");
  EXPECT_EQ(n.gpu_blocks[1].first, 2);
  EXPECT_EQ(n.gpu_blocks[2].first, 5);
  EXPECT_THAT(n.gpus_used, ElementsAre(0, 2, 3));
  auto specs = SlurmNodeSpecs(*nodes, {});
  ASSERT_TRUE(specs.ok()) << specs.status();
  const inventory::NodeSpec& spec = (*specs)[0];
  EXPECT_EQ(spec.gpu_model, "H100-SXM-80GB");
  EXPECT_EQ(spec.gpu_count, 3);  // 3 x 1g + 3g fit one GPU
  ASSERT_EQ(spec.mig_instances.size(), 3u);
  EXPECT_THAT(spec.mig_instances[1], IsEmpty());
  EXPECT_EQ(spec.mig_instances[2].size(), 4u);
  inventory::ClusterState cs;
  ASSERT_TRUE(cs.AddNode(spec).ok());  // a layout the driver accepts
  // Slurm's indexes onto the layout, and back.
  const auto ones = inventory::StaticMigSlices(spec, "1g.10gb");
  auto whole = LocateSlurmGpu(n, spec, 1);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->gpu, 1);
  EXPECT_EQ(whole->mig_start, -1);
  for (int k = 0; k < 3; ++k) {
    auto spot = LocateSlurmGpu(n, spec, 2 + k);
    ASSERT_TRUE(spot.has_value());
    EXPECT_EQ(std::pair(spot->gpu, spot->mig_start), ones[k]);
    EXPECT_EQ(spot->mig_profile, "1g.10gb");
  }
  auto three = LocateSlurmGpu(n, spec, 5);
  ASSERT_TRUE(three.has_value());
  EXPECT_EQ(three->mig_profile, "3g.40gb");
  EXPECT_FALSE(LocateSlurmGpu(n, spec, 6).has_value());
  EXPECT_EQ(SlurmMigType(n, "1g.10gb"), "1g.10gb");
  EXPECT_EQ(SlurmMigType(n, "2g.20gb"), "");
}

TEST(SlurmMigTest, AMigOnlyNodeTakesItsModelFromTheTypeOrTheMap) {
  constexpr char kText[] =
      "NodeName=a CPUTot=8 CPUAlloc=0 RealMemory=32000 AllocMem=0 State=IDLE "
      "Gres=gpu:h100_1g.10gb:7 GresUsed=gpu:h100_1g.10gb:0(IDX:N/A)\n"
      "NodeName=b CPUTot=8 CPUAlloc=0 RealMemory=32000 AllocMem=0 State=IDLE "
      "Gres=gpu:2g.20gb:3 GresUsed=gpu:2g.20gb:0(IDX:N/A)\n";
  auto nodes = ParseSlurmNodes(kText);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ((*nodes)[0].gpus, 0);
  auto unmapped = SlurmNodeSpecs(*nodes, {});
  ASSERT_FALSE(unmapped.ok());
  EXPECT_THAT(unmapped.status().message(),
              HasSubstr("Slurm node 'b': MIG GRES type '2g.20gb' names no GPU "
                        "model"));
  EXPECT_THAT(unmapped.status().message(), HasSubstr("slurm.gresMap"));
  auto specs = SlurmNodeSpecs(*nodes, {{"2g.20gb", "H100-SXM-80GB"}});
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0].gpu_model, "H100-SXM-80GB");
  EXPECT_EQ((*specs)[0].gpu_count, 1);  // 7 x 1g on one GPU
  EXPECT_EQ((*specs)[1].gpu_count, 1);  // 3 x 2g on one GPU
  // A profile the model lacks, and MIG devices of another model than the
  // whole GPUs: errors that name the node.
  auto lacks = SlurmNodeSpecs(
      *ParseSlurmNodes(
          "NodeName=c CPUTot=8 CPUAlloc=0 RealMemory=32000 AllocMem=0 "
          "State=IDLE Gres=gpu:h100:1,gpu:1g.5gb:2\n"),
      {});
  ASSERT_FALSE(lacks.ok());
  EXPECT_THAT(lacks.status().message(),
              HasSubstr("Slurm node 'c': its MIG devices: no MIG profile "
                        "'1g.5gb' on H100-SXM-80GB"));
  auto two = SlurmNodeSpecs(
      *ParseSlurmNodes(
          "NodeName=d CPUTot=8 CPUAlloc=0 RealMemory=32000 AllocMem=0 "
          "State=IDLE Gres=gpu:h100:1,gpu:a100_1g.5gb:2\n"),
      {{"a100", "A100-SXM4-40GB"}});
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(two.status().message(), HasSubstr("one GPU model per node"));
}

// A GPU model without MIG (an L4) is a node of whole GPUs, not an error
// about MIG devices it does not have.
TEST(SlurmNodeSpecsTest, GpusWithoutMigSupport) {
  absl::StatusOr<std::vector<SlurmNode>> nodes = ParseSlurmNodes(
      "NodeName=c3 CPUTot=8 CPUAlloc=0 RealMemory=16000 AllocMem=0 "
      "State=IDLE Gres=gpu:l4:2 GresUsed=gpu:l4:0(IDX:N/A)\n");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  absl::StatusOr<std::vector<inventory::NodeSpec>> specs =
      SlurmNodeSpecs(*nodes, {});
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 1u);
  EXPECT_EQ((*specs)[0].gpu_model, "L4-24GB");
  EXPECT_EQ((*specs)[0].gpu_count, 2);
  EXPECT_THAT((*specs)[0].mig_instances, IsEmpty());
}

}  // namespace
}  // namespace gpusched::backends
