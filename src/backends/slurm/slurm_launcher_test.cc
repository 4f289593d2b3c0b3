#include "backends/slurm/slurm_launcher.h"

#include <deque>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "backends/command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inventory/mig.h"

namespace gpusched::backends {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Slurm as a table: sbatch answers the next job id, scontrol prints what
// the test set, every call is recorded.
class FakeSlurm : public SlurmClient {
 public:
  absl::StatusOr<std::string> Run(const std::vector<std::string>& argv,
                                  const std::string& input) override {
    calls.push_back(absl::StrJoin(argv, " "));
    if (argv[0] == "sbatch") {
      scripts.push_back(input);
      return absl::StrCat(next_id++, "\n");
    }
    if (argv[0] == "scontrol" && argv[2] == "job") {
      if (!up) return absl::UnavailableError("slurmctld unreachable");
      return jobs;
    }
    if (argv[0] == "scontrol" && argv[2] == "node") return nodes;
    if (argv[0] == "scancel") return std::string();
    if (argv[0] == "scontrol" && argv[1] == "update") {
      if (fail_updates) return absl::UnavailableError("slurmctld unreachable");
      return std::string();
    }
    return absl::UnimplementedError(argv[0]);
  }
  std::vector<std::string> calls;
  std::vector<std::string> scripts;
  std::string jobs = "No jobs in the system\n";
  std::string nodes;
  int next_id = 100;
  bool up = true;
  bool fail_updates = false;
};

constexpr char kNodeLines[] =
    "NodeName=node1 CPUTot=16 CPUAlloc=2 RealMemory=64000 AllocMem=2000 "
    "State=MIXED Gres=gpu:h100:4 GresUsed=gpu:h100:3(IDX:0-2)\n"
    "NodeName=node2 CPUTot=16 CPUAlloc=0 RealMemory=64000 AllocMem=0 "
    "State=IDLE+DRAIN Gres=gpu:h100:4 GresUsed=gpu:h100:0(IDX:N/A) "
    "Reason=maintenance [root@t]\n";

// The nodes as gpusched reads them at start, and placement's view of them.
std::vector<backends::SlurmNode> Nodes(const char* text = kNodeLines) {
  absl::StatusOr<std::vector<backends::SlurmNode>> n =
      backends::ParseSlurmNodes(text);
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : std::vector<backends::SlurmNode>{};
}
std::vector<inventory::NodeSpec> Specs(
    const std::vector<backends::SlurmNode>& nodes) {
  absl::StatusOr<std::vector<inventory::NodeSpec>> s =
      backends::SlurmNodeSpecs(nodes, {});
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::vector<inventory::NodeSpec>{};
}

class SlurmLauncherTest : public ::testing::Test {
 protected:
  SlurmLauncherTest() {
    auto fake = std::make_unique<FakeSlurm>();
    slurm_ = fake.get();
    slurm_->nodes = kNodeLines;
    SlurmLauncherOptions o;
    o.partition = "gpu";
    o.account = "ml";
    launcher_ = std::make_unique<SlurmLauncher>(o, std::move(fake), Nodes(),
                                                Specs(Nodes()), &clock_);
  }
  ProcessSpec Spec(std::string name, std::vector<int> gpus) {
    ProcessSpec s;
    s.name = std::move(name);
    s.argv = {"/opt/gpusched", "engine", "--model", "it's"};
    s.env = {{"A", "1"}, {"CUDA_VISIBLE_DEVICES", "3"}};
    s.placement.node = "node1";
    s.placement.deployment = "chat";
    s.placement.gpus = std::move(gpus);
    s.placement.cpu_milli = 1500;
    s.placement.memory_mib = 2048;
    return s;
  }
  // Time for the next query, and the query.
  void Advance() {
    clock_.Advance(2 * kMicrosPerSecond);
    launcher_->Sync();
  }

  ManualClock clock_{1'000'000};
  FakeSlurm* slurm_;
  std::unique_ptr<SlurmLauncher> launcher_;
};

TEST_F(SlurmLauncherTest, SubmitsABatchJobOnTheChosenNodeWithItsGpus) {
  auto id = launcher_->Start(Spec("chat-1", {1, 2}));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 100);
  ASSERT_EQ(slurm_->calls.size(), 1u);
  const std::string& c = slurm_->calls[0];
  for (const char* want :
       {"sbatch --parsable", "--job-name=gpusched.chat-1",
        "--comment=gpusched:chat/chat-1", "--nodelist=node1",
        "--cpus-per-task=2", "--mem=2048M", "--gres=gpu:h100:2", "--no-requeue",
        "--partition=gpu", "--account=ml"}) {
    EXPECT_THAT(c, HasSubstr(want));
  }
  // The script: the environment but Slurm's CUDA_VISIBLE_DEVICES, then the
  // argv, each word quoted.
  EXPECT_EQ(slurm_->scripts[0],
            "#!/bin/sh\n# gpusched replica chat-1 (chat)\nexport A='1'\n"
            "exec '/opt/gpusched' 'engine' '--model' 'it'\\''s'\n");
  EXPECT_TRUE(launcher_->IsAlive(*id));
  EXPECT_EQ(launcher_->size(), 1);
}

TEST_F(SlurmLauncherTest, RefusesWhatItCannotRun) {
  ProcessSpec s = Spec("x", {0});
  s.placement.node = "";
  EXPECT_EQ(launcher_->Start(s).status().code(),
            absl::StatusCode::kFailedPrecondition);
  s.placement.node = "node9";
  EXPECT_EQ(launcher_->Start(s).status().code(), absl::StatusCode::kNotFound);
  s.placement.node = "node1";
  s.env["BAD-NAME"] = "1";
  EXPECT_EQ(launcher_->Start(s).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(slurm_->calls, IsEmpty());
}

TEST(SlurmShardsTest, RoundsTheShareDownToAtLeastOneShard) {
  EXPECT_EQ(SlurmLauncher::Shards(0.25, 100), 25);
  EXPECT_EQ(SlurmLauncher::Shards(1.0 / 3, 100), 33);  // 3 x 33 fit in 100
  EXPECT_EQ(SlurmLauncher::Shards(0.001, 100), 1);
  EXPECT_EQ(SlurmLauncher::Shards(1.0, 8), 8);
  EXPECT_EQ(SlurmLauncher::Shards(0.7, 1), 1);
}

TEST_F(SlurmLauncherTest, RunsAFractionOnShardsAndFollowsTheGpuSlurmChose) {
  // node1 declares 100 shards per GPU; node2 none.
  std::vector<backends::SlurmNode> nodes = Nodes();
  nodes[0].shards = 400;
  auto fake = std::make_unique<FakeSlurm>();
  FakeSlurm* slurm = fake.get();
  slurm->nodes =
      "NodeName=node1 CPUTot=16 CPUAlloc=2 RealMemory=64000 AllocMem=2000 "
      "State=MIXED Gres=gpu:h100:4,shard:h100:400 "
      "GresUsed=gpu:h100:0(IDX:N/A),shard:h100:1(IDX:0,3)\n";
  SlurmLauncher launcher({}, std::move(fake), nodes, Specs(nodes), &clock_);
  ProcessSpec s = Spec("chat-1", {2});
  s.placement.fraction = true;
  s.placement.gpu_share = 0.25;
  ASSERT_TRUE(launcher.Start(s).ok());
  EXPECT_THAT(slurm->calls[0], HasSubstr("--gres=shard:25 "));
  EXPECT_THAT(slurm->calls[0], Not(HasSubstr("gres=gpu")));
  // Slurm put it on GPU 0; bob's shard job holds GPU 3 (and a shard of 0,
  // which gpusched treats as taken too).
  slurm->jobs =
      "JobId=100 JobName=gpusched.chat-1 UserId=root(0) JobState=RUNNING "
      "Reason=None ExitCode=0:0 NodeList=node1 BatchHost=node1 "
      "GRES=shard:25(IDX:0)\n"
      "JobId=8 JobName=wrap UserId=bob(1001) JobState=RUNNING Reason=None "
      "ExitCode=0:0 NodeList=node1 BatchHost=node1 GRES=shard:h100:60(IDX:3)\n";
  clock_.Advance(2 * kMicrosPerSecond);
  launcher.Sync();
  std::vector<GpuAssignment> a = launcher.Assignments();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_THAT(a[0].gpus, ElementsAre(0));
  std::vector<NodeReport> r = launcher.NodeReports();
  ASSERT_FALSE(r.empty());
  EXPECT_THAT(r[0].foreign_gpus, ElementsAre(3));

  // A share on a node without shards, and a MIG slice on a node without
  // MIG devices: refused by name.
  s.placement.node = "node2";
  absl::Status st = launcher.Start(s).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("node2 declares no gres/shard"));
  s.placement.node = "node1";
  s.placement.mig_profile = "1g.10gb";
  s.placement.mig_start = 0;
  st = launcher.Start(s).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("no MIG devices of profile 1g.10gb"));
  EXPECT_EQ(slurm->calls.size(), 3u);  // one sbatch, two queries
}

TEST_F(SlurmLauncherTest, RunsMigSlicesOnTheNodesMigGresAndReadsBackTheDevice) {
  // node1: 2 whole H100s (Slurm's indexes 0-1), then 3 x 1g.10gb (2-4) and
  // 1 x 3g.40gb (5), as Slurm numbers a node's gpu GRES in Gres= order.
  constexpr char kMigNode[] =
      "NodeName=node1 CPUTot=16 CPUAlloc=0 RealMemory=64000 AllocMem=0 "
      "State=MIXED Gres=gpu:h100:2,gpu:h100_1g.10gb:3,gpu:h100_3g.40gb:1 "
      "GresUsed=gpu:h100:0(IDX:N/A),gpu:h100_1g.10gb:1(IDX:2),"
      "gpu:h100_3g.40gb:0(IDX:N/A)\n";
  std::vector<backends::SlurmNode> nodes = Nodes(kMigNode);
  std::vector<inventory::NodeSpec> specs = Specs(nodes);
  ASSERT_EQ(specs.size(), 1u);
  ASSERT_EQ(specs[0].gpu_count, 3);  // 2 whole + 1 in MIG mode
  const auto ones = inventory::StaticMigSlices(specs[0], "1g.10gb");
  ASSERT_EQ(ones.size(), 3u);
  auto fake = std::make_unique<FakeSlurm>();
  FakeSlurm* slurm = fake.get();
  slurm->nodes = kMigNode;
  SlurmLauncher launcher({}, std::move(fake), nodes, specs, &clock_);
  ProcessSpec s = Spec("mig-1", {ones[1].first});
  s.placement.fraction = true;
  s.placement.mig_profile = "1g.10gb";
  s.placement.mig_start = ones[1].second;
  ASSERT_TRUE(launcher.Start(s).ok());
  EXPECT_THAT(slurm->calls[0], HasSubstr("--gres=gpu:h100_1g.10gb:1 "));
  EXPECT_THAT(slurm->calls[0], Not(HasSubstr("shard")));
  // Slurm gave it device 4: the third 1g device, so the third instance.
  // Device 2 is another user's.
  slurm->jobs =
      "JobId=100 JobName=gpusched.mig-1 UserId=root(0) JobState=RUNNING "
      "Reason=None ExitCode=0:0 NodeList=node1 BatchHost=node1 "
      "GRES=gpu:h100_1g.10gb:1(IDX:4)\n"
      "JobId=9 JobName=wrap UserId=bob(1001) JobState=RUNNING Reason=None "
      "ExitCode=0:0 NodeList=node1 BatchHost=node1 "
      "GRES=gpu:h100_1g.10gb:1(IDX:2)\n";
  clock_.Advance(2 * kMicrosPerSecond);
  launcher.Sync();
  std::vector<GpuAssignment> a = launcher.Assignments();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_THAT(a[0].gpus, ElementsAre(ones[2].first));
  EXPECT_THAT(a[0].mig_starts, ElementsAre(ones[2].second));
  std::vector<NodeReport> r = launcher.NodeReports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_THAT(r[0].foreign_gpus, IsEmpty());
  EXPECT_THAT(r[0].foreign_mig, ElementsAre(ones[0]));
  // A restarted gpusched finds the job with its instance.
  std::vector<Leftover> left = launcher.Leftovers();
  EXPECT_THAT(left, IsEmpty());  // it is this launcher's own job
  auto fake2 = std::make_unique<FakeSlurm>();
  fake2->nodes = kMigNode;
  fake2->jobs = slurm->jobs;
  SlurmLauncher again({}, std::move(fake2), nodes, specs, &clock_);
  left = again.Leftovers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_THAT(left[0].gpus, ElementsAre(ones[2].first));
  EXPECT_THAT(left[0].mig_starts, ElementsAre(ones[2].second));
}

TEST_F(SlurmLauncherTest, ReportsAssignmentExitsAndNodes) {
  ASSERT_TRUE(launcher_->Start(Spec("chat-1", {1, 2})).ok());
  slurm_->jobs =
      "JobId=100 JobName=gpusched.chat-1 UserId=root(0) JobState=RUNNING "
      "Reason=None ExitCode=0:0 NodeList=node1 BatchHost=node1 "
      "GRES=gpu:h100:2(IDX:0-1)\n"
      "JobId=7 JobName=wrap UserId=alice(1000) JobState=RUNNING Reason=None "
      "ExitCode=0:0 NodeList=node1 BatchHost=node1 GRES=gpu:h100:1(IDX:2)\n";
  Advance();
  EXPECT_THAT(launcher_->Poll(), IsEmpty());
  std::vector<GpuAssignment> a = launcher_->Assignments();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].id, 100);
  EXPECT_EQ(a[0].node, "node1");
  EXPECT_THAT(a[0].gpus, ElementsAre(0, 1));         // Slurm's choice, not 1-2
  EXPECT_THAT(launcher_->Assignments(), IsEmpty());  // once
  std::vector<NodeReport> nodes = launcher_->NodeReports();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_TRUE(nodes[0].usable);
  EXPECT_THAT(nodes[0].foreign_gpus, ElementsAre(2));  // alice's job
  EXPECT_FALSE(nodes[1].usable);
  EXPECT_EQ(nodes[1].reason, "maintenance [root@t]");
  Advance();
  launcher_->Poll();
  EXPECT_THAT(launcher_->NodeReports(), IsEmpty());  // nothing changed

  // Cancelled outside gpusched.
  slurm_->jobs =
      "JobId=100 JobName=gpusched.chat-1 UserId=root(0) JobState=CANCELLED "
      "Reason=None ExitCode=0:15 NodeList=node1 BatchHost=node1\n";
  Advance();
  std::vector<ExitEvent> exits = launcher_->Poll();
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].id, 100);
  EXPECT_EQ(exits[0].name, "chat-1");
  EXPECT_TRUE(exits[0].signaled);
  EXPECT_EQ(exits[0].signal, 15);
  EXPECT_FALSE(exits[0].stop_requested);
  EXPECT_THAT(exits[0].reason,
              HasSubstr("Slurm job 100 (gpusched.chat-1) CANCELLED on node1"));
  EXPECT_FALSE(launcher_->IsAlive(100));
  EXPECT_EQ(launcher_->size(), 0);
}

TEST_F(SlurmLauncherTest, QueriesAtMostOncePerIntervalAndTrustsNoSilence) {
  ASSERT_TRUE(launcher_->Start(Spec("chat-1", {0})).ok());
  slurm_->up = false;
  Advance();
  EXPECT_THAT(launcher_->Poll(), IsEmpty());  // unreachable: still alive
  EXPECT_TRUE(launcher_->IsAlive(100));
  EXPECT_THAT(launcher_->last_error(), HasSubstr("unreachable"));
  std::vector<ManagerReport> down = launcher_->ManagerReports();
  ASSERT_EQ(down.size(), 1u);
  EXPECT_FALSE(down[0].reachable);
  EXPECT_THAT(down[0].message, HasSubstr("slurmctld unreachable"));
  Advance();  // still down: no second report
  EXPECT_THAT(launcher_->ManagerReports(), IsEmpty());
  slurm_->up = true;
  const size_t calls = slurm_->calls.size();
  launcher_->Sync();  // within the interval: no query
  EXPECT_EQ(slurm_->calls.size(), calls);
  // Gone from Slurm altogether (purged): an exit.
  Advance();
  std::vector<ExitEvent> exits = launcher_->Poll();
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_THAT(exits[0].reason, HasSubstr("no longer known"));
  std::vector<ManagerReport> up = launcher_->ManagerReports();
  ASSERT_EQ(up.size(), 1u);
  EXPECT_TRUE(up[0].reachable);
  EXPECT_EQ(launcher_->last_error(), "");
}

TEST_F(SlurmLauncherTest, StopSignalsThenCancelsAfterTheGrace) {
  ASSERT_TRUE(launcher_->Start(Spec("chat-1", {0})).ok());
  const Micros now = clock_.Now();
  ASSERT_TRUE(launcher_->Stop(100, 5 * kMicrosPerSecond, now).ok());
  EXPECT_EQ(slurm_->calls.back(), "scancel --quiet --full --signal=TERM 100");
  launcher_->Tick(now + kMicrosPerSecond);
  EXPECT_EQ(slurm_->calls.back(), "scancel --quiet --full --signal=TERM 100");
  launcher_->Tick(now + 5 * kMicrosPerSecond);
  EXPECT_EQ(slurm_->calls.back(), "scancel --quiet 100");
  EXPECT_EQ(launcher_->Stop(42, 0, now).code(), absl::StatusCode::kNotFound);
  slurm_->jobs =
      "JobId=100 JobName=gpusched.chat-1 UserId=root(0) JobState=COMPLETED "
      "Reason=None ExitCode=0:0 NodeList=node1 BatchHost=node1\n";
  Advance();
  std::vector<ExitEvent> exits = launcher_->Poll();
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_TRUE(exits[0].stop_requested);
  EXPECT_FALSE(exits[0].signaled);
}

TEST_F(SlurmLauncherTest, FindsAndAdoptsOnlyItsOwnLeftovers) {
  slurm_->jobs =
      "JobId=5 JobName=gpusched.old-1 UserId=root(0) JobState=RUNNING "
      "Reason=None ExitCode=0:0 NodeList=node1 BatchHost=node1 "
      "GRES=gpu:h100:1(IDX:3) Comment=gpusched:chat/old-1:4100.0.abc\n"
      "JobId=6 JobName=gpusched.old-2 UserId=root(0) JobState=COMPLETED "
      "Reason=None ExitCode=0:0 NodeList=node1 BatchHost=node1\n"
      "JobId=7 JobName=train UserId=alice(1000) JobState=RUNNING Reason=None "
      "ExitCode=0:0 NodeList=node1 BatchHost=node1\n"
      "JobId=8 JobName=gpusched.old-3 UserId=root(0) JobState=PENDING "
      "Reason=Resources ExitCode=0:0 NodeList=(null) BatchHost=(null)\n";
  std::vector<Leftover> left = launcher_->Leftovers();
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].id, 5);
  EXPECT_EQ(left[0].name, "old-1");
  EXPECT_EQ(left[0].deployment, "chat");
  EXPECT_EQ(left[0].tag, "4100.0.abc");
  EXPECT_TRUE(left[0].running);
  EXPECT_EQ(left[0].node, "node1");
  EXPECT_THAT(left[0].gpus, ElementsAre(3));
  EXPECT_EQ(left[1].id, 8);
  EXPECT_FALSE(left[1].running);
  ASSERT_TRUE(launcher_->Adopt(left[0], "chat-0", "chat", "4100.0.abc").ok());
  EXPECT_EQ(slurm_->calls.back(),
            "scontrol update JobId=5 JobName=gpusched.chat-0 "
            "Comment=gpusched:chat/chat-0:4100.0.abc");
  EXPECT_TRUE(launcher_->IsAlive(5));
  EXPECT_THAT(launcher_->Assignments(), IsEmpty());  // it holds its GPUs
  ASSERT_TRUE(launcher_->Kill(8).code() == absl::StatusCode::kNotFound);
  // Adopted, it is no leftover any more.
  EXPECT_EQ(launcher_->Leftovers().size(), 1u);
}

TEST(RunCommandTest, FeedsStdinCollectsOutputAndTimesOut) {
  auto r = RunCommand({"sh", "-c", "cat; echo err >&2; exit 3"}, "hello\n",
                      10 * kMicrosPerSecond);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "hello\n");
  EXPECT_EQ(r->err, "err\n");
  auto ok = RunCommandOk({"sh", "-c", "echo no >&2; exit 1"}, "",
                         10 * kMicrosPerSecond);
  EXPECT_THAT(ok.status().message(), HasSubstr("exit 1: no"));
  auto slow = RunCommand({"sleep", "30"}, "", 200 * kMicrosPerMilli);
  EXPECT_EQ(slow.status().code(), absl::StatusCode::kDeadlineExceeded);
  auto missing = RunCommand({"/nonexistent/x"}, "", kMicrosPerSecond);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
}

// Slurm's power saving: a static node and three CLOUD nodes in two pools
// (their State= words as Slurm 22.05 prints them, tests/slurm/cluster.sh).
std::string CloudNodes(const std::string& c1, const std::string& c2,
                       const std::string& c3,
                       const std::string& c3_reason = "") {
  auto line = [](const std::string& name, const std::string& pool,
                 const std::string& type, const std::string& state,
                 const std::string& reason) {
    return absl::StrCat("NodeName=", name,
                        " CPUTot=8 CPUAlloc=0 RealMemory=16000 AllocMem=0 "
                        "AvailableFeatures=pool=",
                        pool, " State=", state, " Gres=gpu:", type,
                        ":2 GresUsed=gpu:", type,
                        ":0(IDX:N/A) Partitions=gpu,cloud",
                        reason.empty() ? "" : " Reason=", reason, "\n");
  };
  return absl::StrCat(
      "NodeName=n1 CPUTot=8 CPUAlloc=0 RealMemory=16000 AllocMem=0 "
      "State=IDLE Gres=gpu:h100:2 GresUsed=gpu:h100:0(IDX:N/A) "
      "Partitions=gpu\n",
      line("c1", "h100", "h100", c1, ""), line("c2", "h100", "h100", c2, ""),
      line("c3", "broken", "l4", c3, c3_reason));
}

class SlurmCapacityTest : public ::testing::Test {
 protected:
  SlurmCapacityTest() {
    auto fake = std::make_unique<FakeSlurm>();
    slurm_ = fake.get();
    const std::string at_start =
        CloudNodes("IDLE+CLOUD+POWERED_DOWN", "IDLE+CLOUD+POWERED_DOWN",
                   "IDLE+CLOUD+POWERED_DOWN");
    slurm_->nodes = at_start;
    std::vector<SlurmNode> nodes = Nodes(at_start.c_str());
    launcher_ = std::make_unique<SlurmLauncher>(
        SlurmLauncherOptions{}, std::move(fake), nodes, Specs(nodes), &clock_);
  }
  void Advance(const std::string& nodes) {
    slurm_->nodes = nodes;
    clock_.Advance(2 * kMicrosPerSecond);
    launcher_->Sync();
  }
  // "node pool state reason" per report.
  std::vector<std::string> Reports() {
    std::vector<std::string> out;
    for (const PoolNodeReport& r : launcher_->PoolNodeReports()) {
      out.push_back(absl::StrCat(r.node, " ", r.pool, " ",
                                 PoolNodeStateName(r.state),
                                 r.reason.empty() ? "" : " ", r.reason));
    }
    return out;
  }
  std::vector<std::string> Updates() {
    std::vector<std::string> out;
    for (const std::string& c : slurm_->calls) {
      if (absl::StartsWith(c, "scontrol update")) out.push_back(c);
    }
    return out;
  }

  ManualClock clock_{1'000'000};
  FakeSlurm* slurm_;
  std::unique_ptr<SlurmLauncher> launcher_;
};

TEST_F(SlurmCapacityTest, PoolsAndEveryPoolNodeAtFirst) {
  ASSERT_EQ(launcher_->capacity(), launcher_.get());
  std::vector<PoolReport> pools = launcher_->Pools();
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[0].pool, "broken");
  EXPECT_EQ(pools[0].gpu_model, "l4");
  EXPECT_EQ(pools[1].pool, "h100");
  EXPECT_THAT(pools[1].nodes, ElementsAre("c1", "c2"));
  EXPECT_THAT(Reports(),
              ElementsAre("c1 h100 powered_down", "c2 h100 powered_down",
                          "c3 broken powered_down"));
  // Nothing changed, nothing reported.
  Advance(slurm_->nodes);
  EXPECT_THAT(Reports(), IsEmpty());
}

TEST_F(SlurmCapacityTest, PoweredDownNodesAreNeverPlaceable) {
  Advance(slurm_->nodes);
  for (const NodeReport& r : launcher_->NodeReports()) {
    SCOPED_TRACE(r.node);
    EXPECT_EQ(r.usable, r.node == "n1") << r.state;
  }
}

TEST_F(SlurmCapacityTest, AddNodesPowersUpAndFollowsTheNodeUntilUp) {
  (void)Reports();
  auto added = launcher_->AddNodes("h100", 1, "req-1");
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_THAT(*added, ElementsAre("c1"));
  EXPECT_THAT(Updates(),
              ElementsAre("scontrol update NodeName=c1 State=POWER_UP"));
  EXPECT_THAT(Reports(),
              ElementsAre("c1 h100 powering_up power up asked (req-1)"));
  // The same request again: the same node, no second command.
  added = launcher_->AddNodes("h100", 1, "req-1");
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_THAT(*added, ElementsAre("c1"));
  EXPECT_EQ(Updates().size(), 1u);
  // Slurm: powering up, then registered.
  Advance(CloudNodes("IDLE+CLOUD+NOT_RESPONDING+POWERING_UP",
                     "IDLE+CLOUD+POWERED_DOWN", "IDLE+CLOUD+POWERED_DOWN"));
  EXPECT_THAT(Reports(), ElementsAre("c1 h100 powering_up"));
  bool usable = true;
  for (const NodeReport& r : launcher_->NodeReports()) {
    if (r.node == "c1") usable = r.usable;
  }
  EXPECT_FALSE(usable);
  Advance(CloudNodes("IDLE+CLOUD", "IDLE+CLOUD+POWERED_DOWN",
                     "IDLE+CLOUD+POWERED_DOWN"));
  EXPECT_THAT(Reports(), ElementsAre("c1 h100 up"));
  for (const NodeReport& r : launcher_->NodeReports()) {
    if (r.node == "c1") usable = r.usable;
  }
  EXPECT_TRUE(usable);
  // Another request takes the next powered-down node; more than are left
  // gets what is left; none left is an error that says so.
  added = launcher_->AddNodes("h100", 2, "req-2");
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_THAT(*added, ElementsAre("c2"));
  added = launcher_->AddNodes("h100", 1, "req-3");
  ASSERT_FALSE(added.ok());
  EXPECT_EQ(added.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(added.status().message(),
              HasSubstr("pool h100 has no powered-down node"));
}

TEST_F(SlurmCapacityTest, ANodeThatNeverRegistersFailsWithSlurmsReason) {
  (void)Reports();
  ASSERT_TRUE(launcher_->AddNodes("broken", 1, "b-1").ok());
  (void)Reports();
  Advance(CloudNodes("IDLE+CLOUD+POWERED_DOWN", "IDLE+CLOUD+POWERED_DOWN",
                     "DOWN+CLOUD+POWERED_DOWN+NOT_RESPONDING",
                     "ResumeTimeout reached [root@2026-12-06T04:59:52]"));
  EXPECT_THAT(Reports(), ElementsAre("c3 broken failed ResumeTimeout reached "
                                     "[root@2026-12-06T04:59:52]"));
  // A failed node is not powered up again by a new request.
  auto again = launcher_->AddNodes("broken", 1, "b-2");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kResourceExhausted);
  // Giving it back powers it down (Slurm then lists it idle~ again).
  ASSERT_TRUE(launcher_->ReleaseNode("c3").ok());
  EXPECT_EQ(Updates().back(),
            "scontrol update NodeName=c3 State=POWER_DOWN_ASAP");
}

TEST_F(SlurmCapacityTest, ReleaseNode) {
  (void)Reports();
  ASSERT_TRUE(launcher_->AddNodes("h100", 1, "r").ok());
  // Still powering up: Slurm would bring it back after a power down.
  absl::Status s = launcher_->ReleaseNode("c1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("c1 is powering up"));
  Advance(CloudNodes("MIXED+CLOUD", "IDLE+CLOUD+POWERED_DOWN",
                     "IDLE+CLOUD+POWERED_DOWN"));
  (void)Reports();
  ASSERT_TRUE(launcher_->ReleaseNode("c1").ok());
  EXPECT_EQ(Updates().back(),
            "scontrol update NodeName=c1 State=POWER_DOWN_ASAP");
  EXPECT_THAT(Reports(), ElementsAre("c1 h100 powering_down power down asked"));
  // Going already, or gone: nothing more to run.
  const size_t n = slurm_->calls.size();
  EXPECT_TRUE(launcher_->ReleaseNode("c1").ok());
  EXPECT_TRUE(launcher_->ReleaseNode("c2").ok());
  EXPECT_EQ(slurm_->calls.size(), n);
  Advance(CloudNodes("MIXED+CLOUD+DRAIN+POWER_DOWN", "IDLE+CLOUD+POWERED_DOWN",
                     "IDLE+CLOUD+POWERED_DOWN"));
  EXPECT_THAT(Reports(), ElementsAre("c1 h100 powering_down"));
  Advance(CloudNodes("IDLE+CLOUD+POWERED_DOWN", "IDLE+CLOUD+POWERED_DOWN",
                     "IDLE+CLOUD+POWERED_DOWN"));
  EXPECT_THAT(Reports(), ElementsAre("c1 h100 powered_down"));
  // Not a pool node, not a node.
  s = launcher_->ReleaseNode("n1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("n1 is not a pool node"));
  EXPECT_EQ(launcher_->ReleaseNode("zz").code(), absl::StatusCode::kNotFound);
}

TEST_F(SlurmCapacityTest, BadRequestsAreRefusedWithTheField) {
  struct Case {
    std::string pool;
    int count;
    std::string request;
    absl::StatusCode code;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"nope", 1, "r", absl::StatusCode::kNotFound,
       "no Slurm pool 'nope' (pools: broken, h100)"},
      {"h100", 0, "r", absl::StatusCode::kInvalidArgument,
       "count 0 is not within 1..2"},
      {"h100", 3, "r", absl::StatusCode::kInvalidArgument,
       "count 3 is not within 1..2"},
      {"h100", 1, "", absl::StatusCode::kInvalidArgument,
       "capacity request id"},
      {"h100", 1, "a b", absl::StatusCode::kInvalidArgument,
       "capacity request id"},
      {"h100", 1, std::string(129, 'x'), absl::StatusCode::kInvalidArgument,
       "capacity request id"},
  };
  for (const Case& c : cases) {
    auto r = launcher_->AddNodes(c.pool, c.count, c.request);
    ASSERT_FALSE(r.ok()) << c.want;
    EXPECT_EQ(r.status().code(), c.code);
    EXPECT_THAT(r.status().message(), HasSubstr(c.want));
  }
  EXPECT_THAT(Updates(), IsEmpty());
}

TEST_F(SlurmCapacityTest, AFailedCommandAsksForNothing) {
  slurm_->fail_updates = true;
  auto r = launcher_->AddNodes("h100", 1, "r");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("scontrol update NodeName=c1 State=POWER_UP: "));
  slurm_->fail_updates = false;
  // The request was not recorded: asking again runs it.
  r = launcher_->AddNodes("h100", 1, "r");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(*r, ElementsAre("c1"));
}

TEST(SlurmCapacityNoPoolsTest, AClusterWithoutPoolNodesHasNoCapacity) {
  std::vector<SlurmNode> nodes = Nodes();
  ManualClock clock{0};
  SlurmLauncher l(SlurmLauncherOptions{}, std::make_unique<FakeSlurm>(), nodes,
                  Specs(nodes), &clock);
  EXPECT_EQ(l.capacity(), nullptr);
  EXPECT_EQ(l.pool_error(), "");
}

TEST(SlurmCapacityNoPoolsTest, PoolsThatDoNotFormSayWhy) {
  std::string text = CloudNodes("IDLE+CLOUD+POWERED_DOWN",
                                "IDLE+CLOUD+POWERED_DOWN", "IDLE+CLOUD");
  text = absl::StrReplaceAll(text, {{"pool=broken", "pool=h100"}});
  std::vector<SlurmNode> nodes = Nodes(text.c_str());
  ManualClock clock{0};
  SlurmLauncher l(SlurmLauncherOptions{}, std::make_unique<FakeSlurm>(), nodes,
                  Specs(nodes), &clock);
  EXPECT_EQ(l.capacity(), nullptr);
  EXPECT_THAT(l.pool_error(), HasSubstr("Slurm pool 'h100': node 'c3'"));
}

}  // namespace
}  // namespace gpusched::backends
